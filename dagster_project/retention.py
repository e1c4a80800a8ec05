"""Retention, run by Dagster: the streams with a retention policy, spread over 16 buckets.

Each cycle the schedule looks at which buckets hold a stream (one query of at most one item per
bucket) and requests one run of the ``stream_retention`` asset per such bucket, or skips the tick
when none does: the buckets' runs go through the run queue side by side, so a cycle takes about one
bucket's time per run slot (16 buckets over 4 slots: 4 bucket times), not the sum of every stream's
cycle. A run runs the retention cycle of every stream of its bucket (controlplane/retention.py,
several streams at once) and is one materialization. Its metadata stays small however many streams
the bucket holds: a table of the streams that need an operator's eye (truncated, subscribers not
honoured or missing, skipped), up to ``LISTED_PER_KIND`` of each, and counts of everything else, in
the CLI's units (``10 GB``, ``7d``). The asset is not partitioned by bucket: empty buckets would
show as "missing" partitions, which reads as a failure. One bucket or several can be run from the
launchpad (``buckets: [4]``). Its asset check warns about consumption-based streams without an
active subscriber (their data is kept until one comes back or the fallback applies).
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
from rillet.units import human_bytes, rounded_duration


class RetentionRun(Config):
    buckets: list[int] = Field(
        default_factory=list, max_length=RETENTION_BUCKETS,
        description=f"Retention buckets to run (0-{RETENTION_BUCKETS - 1}); empty: every bucket that holds a stream "
                    "with a retention policy.")


def _cut(decision: Decision) -> str:
    if not decision.cut:
        return ""
    return ", ".join(f"{p.segment.segment_id}@{p.offset}" for p in decision.cut)


# Rows of each kind a run's table lists (the rest are counted): 3 kinds x 50 rows of a few hundred bytes
# keep a materialization's metadata under about 50 KB whatever the bucket holds.
LISTED_PER_KIND = 50


def _without_active_subscriber(d: Decision) -> bool:
    return d.consumption and not any(s.active for s in d.subscribers)


def _kind(d: Decision) -> str | None:
    """Why a decision is listed: it truncated, its subscribers were not there to honour (the fallback,
    the maximum or the plain policy decided), or the stream was skipped; None: counted only."""
    if d.outcome == "truncated":
        return "truncated"
    if _without_active_subscriber(d):
        return "fallback"
    if d.outcome == "skipped":
        return "skipped"
    return None


def _row(d: Decision) -> str:
    subs = "; ".join(f"{s.group}{'' if s.active else ' (inactive)'}: {human_bytes(s.unconsumed_bytes)}, "
                     f"{rounded_duration(s.silent_for_ms)}" for s in d.subscribers)
    return (f"| `{d.stream}` | {d.outcome} | {d.reason} | {human_bytes(d.size_bytes)} | "
            f"{human_bytes(d.retained_bytes)} | {_cut(d)} | {subs} |")


def _report(decisions: list[Decision]) -> str:
    """The listed decisions (``LISTED_PER_KIND`` of each kind at most) and a count of the rest."""
    rows = ["| stream | outcome | why | size | retained | cut | subscribers (unconsumed, silent for) |",
            "|---|---|---|---|---|---|---|"]
    unlisted: dict[str, int] = {}
    for kind in ("truncated", "fallback", "skipped"):
        of_kind = sorted((d for d in decisions if _kind(d) == kind), key=lambda d: d.stream)
        rows += [_row(d) for d in of_kind[:LISTED_PER_KIND]]
        if len(of_kind) > LISTED_PER_KIND:
            unlisted[kind] = len(of_kind) - LISTED_PER_KIND
    kept = sum(1 for d in decisions if _kind(d) is None)
    counts = [f"{kept} stream(s) kept as they were"] + [f"{n} more {kind}" for kind, n in unlisted.items()]
    return "\n".join(rows) + "\n\n" + "; ".join(counts) + "."


@asset(check_specs=[AssetCheckSpec("consumption_streams_have_active_subscribers", asset="stream_retention",
                                   description="Warns about consumption-based streams that no active subscriber reads.")],
       description="Retention of the streams with a retention policy: truncations decided this cycle, sizes, "
                   "subscriber lag. One materialization per run (a bucket per scheduled run), listing the "
                   "truncations, fallbacks and skipped streams and counting the rest.")
def stream_retention(context: AssetExecutionContext, config: RetentionRun, rillet: RilletDeployment) -> MaterializeResult:
    if any(not 0 <= b < RETENTION_BUCKETS for b in config.buckets):
        raise ValueError(f"buckets are 0 to {RETENTION_BUCKETS - 1}, not {config.buckets}")
    buckets = sorted(set(config.buckets)) or occupied_buckets(rillet)
    retention = rillet.controller().retention
    decisions = [d for bucket in buckets for d in retention.run_bucket(bucket)]
    kinds = [_kind(d) for d in decisions]
    orphaned = sorted(d.stream for d in decisions if _without_active_subscriber(d))
    for d, kind in zip(decisions, kinds, strict=True):
        if kind is not None:  # the run's log, like its table, names only what needs an eye
            context.log.info("%s: %s (%s)", d.stream, d.outcome, d.reason)
    emit_retention_metrics(decisions)
    released = sum(d.size_bytes - d.retained_bytes for d in decisions)
    return MaterializeResult(
        metadata={
            "buckets": MetadataValue.text(", ".join(map(str, buckets)) or "none"),
            "streams": len(decisions),
            "truncated": kinds.count("truncated"),
            "fallbacks": kinds.count("fallback"),
            "skipped": kinds.count("skipped"),
            "kept": kinds.count(None),
            "not_measured": sum(1 for d in decisions if not d.measured),  # could not truncate yet: sizes unread
            "retained": MetadataValue.text(human_bytes(sum(d.retained_bytes for d in decisions))),  # measured ones
            "released": MetadataValue.text(human_bytes(released)),
            "bytes_released": released,  # a number, for the asset's plot over time
            "decisions": MetadataValue.md(_report(decisions)),
        },
        check_results=[AssetCheckResult(
            check_name="consumption_streams_have_active_subscribers", passed=not orphaned,
            severity=AssetCheckSeverity.WARN,
            metadata={"streams_without_active_subscriber": MetadataValue.json(orphaned[:LISTED_PER_KIND]),
                      "count": len(orphaned)})],
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
          description="Every retention cycle (default every 30 minutes), one run per bucket that holds "
                      "streams with a retention policy, queued side by side; no run when none does.")
def retention_schedule(context: ScheduleEvaluationContext, rillet: RilletDeployment):
    buckets = occupied_buckets(rillet)
    if not buckets:
        return SkipReason("no stream has a retention policy")
    tick = context.scheduled_execution_time.strftime("%Y%m%dT%H%M")
    return [RunRequest(run_key=f"retention-{tick}-{bucket}", tags={"rillet/retention-bucket": str(bucket)},
                       run_config=RunConfig(ops={"stream_retention": RetentionRun(buckets=[bucket])}))
            for bucket in buckets]
