"""Retention, run by Dagster: the streams with a retention policy, in 16 buckets (partitions).

The ``stream_retention`` asset's materialization runs the retention cycle of every stream in its
buckets (controlplane/retention.py) and records, per stream, what was decided and why, the stream's
size and retained bytes, and each subscriber's unconsumed bytes and silence. Its asset check warns
about consumption-based streams without an active subscriber (their data is kept until one comes
back or the fallback applies).

Each cycle the schedule looks at which buckets hold a stream (one query of at most one item per
bucket) and requests one run over the range of those buckets, or skips the tick when none does: a
run is a process, so one per bucket per cycle flooded a small machine (and launched 16 ECS tasks per
cycle on AWS) whatever there was to do. The buckets still partition the work in the Dagster UI, and
a single bucket can be materialized on its own.
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
    SkipReason,
    StaticPartitionsDefinition,
    asset,
    define_asset_job,
    schedule,
)
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from controlplane.models import StreamRecord
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
       description="Retention of the streams in its buckets: truncations decided this cycle, sizes, subscriber lag.")
def stream_retention(context: AssetExecutionContext, rillet: RilletDeployment) -> MaterializeResult:
    retention = rillet.controller().retention
    decisions = [d for bucket in context.partition_keys for d in retention.run_bucket(int(bucket))]
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
                                 description="Run the retention cycle of the streams in a range of buckets.")


def occupied_buckets(rillet: RilletDeployment) -> list[str]:
    """The buckets that hold at least one stream with a retention policy (reads one item per bucket)."""
    rillet.controller()  # binds the models to the deployment
    return [bucket for bucket in retention_buckets.get_partition_keys()
            if next(iter(StreamRecord.retention.query(int(bucket), limit=1)), None) is not None]


@schedule(job=retention_job, cron_schedule=os.environ.get("RILLET_RETENTION_CRON", "*/30 * * * *"),
          default_status=DefaultScheduleStatus.RUNNING,
          description="Every retention cycle (default every 30 minutes), one run over the buckets that hold "
                      "streams with a retention policy; no run when none does.")
def retention_schedule(context: ScheduleEvaluationContext, rillet: RilletDeployment):
    buckets = occupied_buckets(rillet)
    if not buckets:
        return SkipReason("no stream has a retention policy")
    tick = context.scheduled_execution_time.strftime("%Y%m%dT%H%M")
    # a partition range is contiguous: the empty buckets inside it cost the run one query each
    return RunRequest(run_key=f"retention-{tick}",
                      tags={ASSET_PARTITION_RANGE_START_TAG: buckets[0], ASSET_PARTITION_RANGE_END_TAG: buckets[-1]})
