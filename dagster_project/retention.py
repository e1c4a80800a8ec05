"""Retention, run by Dagster: the streams with a retention policy, spread over 16 buckets.

Each cycle the schedule looks at which buckets hold a stream (one query of at most one item per
bucket) and requests one run of the ``stream_retention`` asset over those buckets, or skips the tick
when none does. The run runs the retention cycle of every stream in them (controlplane/retention.py)
and is one materialization: a table with one row per stream, what was decided and why, its size and
retained bytes and each subscriber's lag and silence, in the CLI's units (``10 GB``, ``7d``). The
asset is not partitioned by bucket: a range of partitions would record the same table once per
bucket, and empty buckets would show as "missing" partitions, which reads as a failure. One bucket
can still be run on its own, from the launchpad (``buckets: [4]``). Its asset check warns about
consumption-based streams without an active subscriber (their data is kept until one comes back or
the fallback applies).
"""

import os

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    Config,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    RunConfig,
    RunRequest,
    ScheduleEvaluationContext,
    SkipReason,
    asset,
    define_asset_job,
    schedule,
)
from pydantic import Field

from controlplane.models import StreamRecord
from controlplane.retention import Decision
from controlplane.streams import RETENTION_BUCKETS
from dagster_project.observability import emit_retention_metrics
from dagster_project.resources import RilletDeployment
from rillet.cli_format import human_bytes, rounded_duration


class RetentionRun(Config):
    buckets: list[int] = Field(
        default_factory=list, max_length=RETENTION_BUCKETS,
        description=f"Retention buckets to run (0-{RETENTION_BUCKETS - 1}); empty: every bucket that holds a stream "
                    "with a retention policy.")


def _cut(decision: Decision) -> str:
    if not decision.cut:
        return ""
    return ", ".join(f"{p.segment.segment_id}@{p.offset}" for p in decision.cut)


def _report(decisions: list[Decision]) -> str:
    rows = ["| stream | outcome | why | size | retained | cut | subscribers (unconsumed, silent for) |",
            "|---|---|---|---|---|---|---|"]
    for d in sorted(decisions, key=lambda d: (d.outcome != "truncated", d.stream)):
        subs = "; ".join(f"{s.group}{'' if s.active else ' (inactive)'}: {human_bytes(s.unconsumed_bytes)}, "
                         f"{rounded_duration(s.silent_for_ms)}" for s in d.subscribers)
        rows.append(f"| `{d.stream}` | {d.outcome} | {d.reason} | {human_bytes(d.size_bytes)} | "
                    f"{human_bytes(d.retained_bytes)} | {_cut(d)} | {subs} |")
    return "\n".join(rows)


@asset(check_specs=[AssetCheckSpec("consumption_streams_have_active_subscribers", asset="stream_retention",
                                   description="Warns about consumption-based streams that no active subscriber reads.")],
       description="Retention of the streams with a retention policy: truncations decided this cycle, sizes, "
                   "subscriber lag. One materialization per run, listing every stream the run looked at.")
def stream_retention(context: AssetExecutionContext, config: RetentionRun, rillet: RilletDeployment) -> MaterializeResult:
    if any(not 0 <= b < RETENTION_BUCKETS for b in config.buckets):
        raise ValueError(f"buckets are 0 to {RETENTION_BUCKETS - 1}, not {config.buckets}")
    buckets = sorted(set(config.buckets)) or occupied_buckets(rillet)
    retention = rillet.controller().retention
    decisions = [d for bucket in buckets for d in retention.run_bucket(bucket)]
    truncated = [d for d in decisions if d.outcome == "truncated"]
    orphaned = [d.stream for d in decisions if d.consumption and not any(s.active for s in d.subscribers)]
    for d in decisions:
        context.log.info("%s: %s (%s)", d.stream, d.outcome, d.reason)
    emit_retention_metrics(decisions)
    released = sum(d.size_bytes - d.retained_bytes for d in decisions)
    return MaterializeResult(
        metadata={
            "buckets": MetadataValue.text(", ".join(map(str, buckets)) or "none"),
            "streams": len(decisions),
            "truncated": len(truncated),
            "retained": MetadataValue.text(human_bytes(sum(d.retained_bytes for d in decisions))),
            "released": MetadataValue.text(human_bytes(released)),
            "bytes_released": released,  # a number, for the asset's plot over time
            "decisions": MetadataValue.md(_report(decisions)),
        },
        check_results=[AssetCheckResult(
            check_name="consumption_streams_have_active_subscribers", passed=not orphaned,
            severity=AssetCheckSeverity.WARN,
            metadata={"streams_without_active_subscriber": MetadataValue.json(orphaned)})],
    )


retention_job = define_asset_job("retention_job", selection=[stream_retention],
                                 description="Run the retention cycle of the streams in some buckets (all by default).")


def occupied_buckets(rillet: RilletDeployment) -> list[int]:
    """The buckets that hold at least one stream with a retention policy (reads one item per bucket)."""
    rillet.controller()  # binds the models to the deployment
    return [bucket for bucket in range(RETENTION_BUCKETS)
            if next(iter(StreamRecord.retention.query(bucket, limit=1)), None) is not None]


@schedule(job=retention_job, cron_schedule=os.environ.get("RILLET_RETENTION_CRON", "*/30 * * * *"),
          default_status=DefaultScheduleStatus.RUNNING,
          description="Every retention cycle (default every 30 minutes), one run over the buckets that hold "
                      "streams with a retention policy; no run when none does.")
def retention_schedule(context: ScheduleEvaluationContext, rillet: RilletDeployment):
    buckets = occupied_buckets(rillet)
    if not buckets:
        return SkipReason("no stream has a retention policy")
    tick = context.scheduled_execution_time.strftime("%Y%m%dT%H%M")
    return RunRequest(run_key=f"retention-{tick}",
                      run_config=RunConfig(ops={"stream_retention": RetentionRun(buckets=buckets)}))
