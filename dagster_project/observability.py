"""What the Dagster code location tells the operator: one JSON line per event on stdout.

Each line is both a structured log line and a CloudWatch embedded-metric-format (EMF) document, in the
functions' namespace (``Rillet``, dimension ``service``: lambdas/http.py). The daemon's container logs
stdout to the Dagster log group through the awslogs driver, which does not mark lines as EMF, so the
metrics alarmed on or charted are published by metric filters on these lines
(infra/terraform/monitoring.tf); lines shipped by an agent that does mark them would publish themselves.
Every value is a single number (EMF allows it; powertools writes a list), so a metric filter can read
it as ``$.<Metric>``.

Dimensions stay bounded: ``job`` by the code location's jobs; ``stream`` by the streams with a
consumption-based retention policy; ``group`` by each such stream's subscribers.
"""

from __future__ import annotations

import json
import sys

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from dagster import DefaultSensorStatus, RunFailureSensorContext, run_failure_sensor

from controlplane.retention import Decision, fallback_due_in_ms

NAMESPACE = "Rillet"


def emit(service: str, metrics: dict[str, tuple[float, MetricUnit]], dimensions: dict[str, str],
         **fields: object) -> dict:
    """Write one EMF line to stdout (``fields`` are carried as plain log fields) and return it."""
    emf = EphemeralMetrics(namespace=NAMESPACE, service=service)
    for name, value in dimensions.items():
        emf.add_dimension(name, value)
    for name, (value, unit) in metrics.items():
        emf.add_metric(name=name, unit=unit, value=value)
    for name, value in fields.items():
        emf.add_metadata(name, value)
    line = {k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in emf.serialize_metric_set().items()}
    sys.stdout.write(json.dumps(line, default=str) + "\n")
    sys.stdout.flush()
    return line


@run_failure_sensor(name="run_failure_reporter", default_status=DefaultSensorStatus.RUNNING,
                    description="Reports every failed run as one structured log line and an EMF metric "
                                "(Rillet RunsFailed by job), which a metric filter turns into an alarm.")
def run_failure_reporter(context: RunFailureSensorContext) -> None:
    run = context.dagster_run
    emit("dagster", {"RunsFailed": (1, MetricUnit.Count)}, {"job": run.job_name},
         level="error", event="run_failed", run_id=run.run_id,
         message=context.failure_event.message or "the run failed")


# -- consumption-based retention -------------------------------------------------------------------

def emit_retention_metrics(decisions: list[Decision]) -> list[dict]:
    """Per consumption-based stream: its unconsumed bytes (the tail minus the furthest-behind
    subscriber's acknowledged cut), whether it has no subscriber or no active one, and whether the
    fallback (ignoring the subscribers) applies within a quarter of the subscriber timeout; per
    subscriber: its lag in bytes and the seconds since it last acknowledged. From the decisions the
    retention cycle already made (controlplane/retention.py), nothing read again."""
    lines = []
    for d in decisions:
        if not d.consumption:
            continue
        due_in = fallback_due_in_ms(d.limits, d.subscribers) if d.limits else None
        imminent = due_in is not None and 0 < due_in <= d.limits.subscriber_timeout_ms // 4
        lines.append(emit("retention", {
            "UnconsumedBytes": (max((s.unconsumed_bytes for s in d.subscribers), default=0), MetricUnit.Bytes),
            "NoSubscriber": (int(not d.subscribers), MetricUnit.Count),
            "NoActiveSubscriber": (int(not any(s.active for s in d.subscribers)), MetricUnit.Count),
            "FallbackImminent": (int(imminent), MetricUnit.Count),
        }, {"stream": d.stream}, event="retention_stream", outcome=d.outcome, reason=d.reason,
            fallback_due_in_s=None if due_in is None else due_in // 1000))
        for s in d.subscribers:
            lines.append(emit("retention", {
                "SubscriberLagBytes": (s.unconsumed_bytes, MetricUnit.Bytes),
                "SubscriberSilentSeconds": (s.silent_for_ms // 1000, MetricUnit.Seconds),
            }, {"stream": d.stream, "group": s.group}, event="retention_subscriber", active=s.active))
    return lines
