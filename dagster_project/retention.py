"""Retention, run by Dagster: one partition per retention bucket, so no run touches every stream.

The ``stream_retention`` asset's materialization for a bucket runs the retention cycle of every
stream in it (controlplane/retention.py) and records, per stream, what was decided and why, the
stream's size and retained bytes, and each subscriber's unconsumed bytes and silence. Its asset
check warns about consumption-based streams without an active subscriber (their data is kept until
one comes back or the fallback applies). A schedule materializes every bucket each cycle.
"""

import os

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    ScheduleEvaluationContext,
    StaticPartitionsDefinition,
    asset,
    define_asset_job,
    schedule,
)

from controlplane.retention import Decision
from controlplane.streams import RETENTION_BUCKETS
from dagster_project.resources import RilletDeployment

retention_buckets = StaticPartitionsDefinition([str(b) for b in range(RETENTION_BUCKETS)])


def _cut(decision: Decision) -> str:
    if not decision.cut:
        return ""
    return ", ".join(f"{p.segment.segment_id}@{p.offset}" for p in decision.cut)


def _report(decisions: list[Decision]) -> str:
    rows = ["| stream | outcome | why | size | retained | cut | subscribers (unconsumed bytes, silent s) |",
            "|---|---|---|---|---|---|---|"]
    for d in decisions:
        subs = "; ".join(f"{s.group}{'' if s.active else ' (inactive)'}: {s.unconsumed_bytes} B, "
                         f"{s.silent_for_ms // 1000} s" for s in d.subscribers)
        rows.append(f"| `{d.stream}` | {d.outcome} | {d.reason} | {d.size_bytes} | {d.retained_bytes} | "
                    f"{_cut(d)} | {subs} |")
    return "\n".join(rows)


@asset(partitions_def=retention_buckets,
       check_specs=[AssetCheckSpec("consumption_streams_have_active_subscribers", asset="stream_retention",
                                   description="Warns about consumption-based streams that no active subscriber reads.")],
       description="Retention of the streams in one bucket: truncations decided this cycle, sizes, subscriber lag.")
def stream_retention(context: AssetExecutionContext, rillet: RilletDeployment) -> MaterializeResult:
    decisions = rillet.controller().retention.run_bucket(int(context.partition_key))
    truncated = [d for d in decisions if d.outcome == "truncated"]
    orphaned = [d.stream for d in decisions if d.consumption and not any(s.active for s in d.subscribers)]
    for d in decisions:
        context.log.info("%s: %s (%s)", d.stream, d.outcome, d.reason)
    return MaterializeResult(
        metadata={
            "streams": len(decisions),
            "truncated": len(truncated),
            "bytes_retained": sum(d.retained_bytes for d in decisions),
            "bytes_released": sum(d.size_bytes - d.retained_bytes for d in decisions),
            "decisions": MetadataValue.md(_report(decisions)),
        },
        check_results=[AssetCheckResult(
            check_name="consumption_streams_have_active_subscribers", passed=not orphaned,
            severity=AssetCheckSeverity.WARN,
            metadata={"streams_without_active_subscriber": MetadataValue.json(orphaned)})],
    )


retention_job = define_asset_job("retention_job", selection=[stream_retention],
                                 description="Run the retention cycle of one bucket of streams.")


@schedule(job=retention_job, cron_schedule=os.environ.get("RILLET_RETENTION_CRON", "*/30 * * * *"),
          default_status=DefaultScheduleStatus.RUNNING,
          description="Every retention cycle (default every 30 minutes), one run per bucket.")
def retention_schedule(context: ScheduleEvaluationContext):
    tick = context.scheduled_execution_time.strftime("%Y%m%dT%H%M")
    return [RunRequest(run_key=f"retention-{tick}-{bucket}", partition_key=bucket)
            for bucket in retention_buckets.get_partition_keys()]
