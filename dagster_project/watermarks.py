"""Watermarks: a sensor that, every 10 seconds, computes the watermark of each stream whose writers'
marks are due (a writer noted time since the last look, or is turning silent).

A tick reads the due marks (one query per shard of the index, whatever the number of watermarked
streams: an idle stream costs it nothing) and computes up to ``INLINE_STREAMS`` streams itself, several
at once; its tick log says which streams got a new watermark. When more are due, it launches
``watermark_job`` runs instead, one per group of index shards (``RUN_GROUPS``), each computing the
due streams of its shards, so a busy deployment's work spreads over run slots and no tick runs long.
A group whose run is still queued or running gets no second one; a group whose run failed is asked
again under a new run key, and set aside after 3 failed runs within an hour (dagster_project/attempts.py).
"""

from dagster import (
    Config,
    DagsterRunStatus,
    DefaultSensorStatus,
    OpExecutionContext,
    Output,
    RunsFilter,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)
from pydantic import Field

from controlplane.watermarks import WatermarkTasks
from dagster_project.attempts import Attempts, mark_unfinished
from dagster_project.resources import RilletDeployment, sensor_interval, work_key
from dataplane.shards import SHARDS

# A tick computes this many due streams itself (each a few round trips, controlplane.parallel.WORKERS at
# once: about a second at AWS latencies); more go to runs.
INLINE_STREAMS = 40
# Seconds a tick spends computing them at most: the streams not reached stay due for the next tick.
TICK_BUDGET_S = 20.0
RUN_GROUPS = 4  # runs a busy tick launches: the shards n with n % RUN_GROUPS == group go to one run
_GROUP_TAG = "rillet/watermark-shards"
_IN_FLIGHT = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
              DagsterRunStatus.STARTED]


class WatermarkRun(Config):
    shards: list[int] = Field(default_factory=lambda: list(range(SHARDS)), max_length=SHARDS,
                              description=f"Shards of the watermark index to compute (0-{SHARDS - 1}).")


@op(description="Compute the watermark of every due stream of some shards of the watermark index.")
def compute_watermarks(context: OpExecutionContext, config: WatermarkRun, rillet: RilletDeployment) -> Output[int]:
    run = rillet.controller().watermarks.run(shards=config.shards)
    context.log.info("appended %d watermark(s) over shards %s", len(run.appended), config.shards)
    mark_unfinished(context, run.failed)
    return Output(len(run.appended), metadata={"watermarks": len(run.appended), "failed": len(run.failed),
                                               "shards": ", ".join(map(str, config.shards))})


@job(description="Compute the due watermarks of some shards of the watermark index (launched by the "
                 "watermark sensor when a tick has more than it computes itself).")
def watermark_job() -> None:
    compute_watermarks()


def _group(scope: str, stream: str) -> int:
    return WatermarkTasks.shard_of(scope, stream) % RUN_GROUPS


def _groups_in_flight(context: SensorEvaluationContext) -> set[str]:
    """The shard groups with a watermark run queued or running (none known when evaluated in a test
    without an instance)."""
    if context.instance_ref is None:
        return set()
    runs = context.instance.get_runs(RunsFilter(job_name=watermark_job.name, statuses=_IN_FLIGHT))
    return {run.tags.get(_GROUP_TAG) for run in runs}


@sensor(job=watermark_job, minimum_interval_seconds=sensor_interval("watermark", 10),
        default_status=DefaultSensorStatus.RUNNING,
        description="Appends the watermark (writers' upper-bound cut, lowest and highest noted time) of each "
                    "stream whose writers' marks moved; one query per index shard a tick, runs when many are due.")
def watermark_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    watermarks = rillet.controller().watermarks
    due = watermarks.due()
    if len(due) <= INLINE_STREAMS:
        run = watermarks.run(streams=due, budget_s=TICK_BUDGET_S)
        for stream, watermark in run.appended:
            context.log.info("%s: watermark [%d, %d]", stream, watermark.lower_ms, watermark.upper_ms)
        for stream, outcome in run.failed.items():  # still due: the next tick tries it again
            context.log.warning("%s: watermark not computed (%s)", stream, outcome)
        return SkipReason(f"{len(due)} stream(s) due, appended {len(run.appended)} watermark(s)" + (
            ": " + ", ".join(stream for stream, _ in run.appended) if run.appended else "") + (
            f"; {len(run.failed)} failed: " + ", ".join(sorted(run.failed)) if run.failed else ""))
    by_group: dict[int, list[str]] = {}
    for scope, stream in due:
        by_group.setdefault(_group(scope, stream), []).append(f"{scope}/{stream}")
    busy = _groups_in_flight(context)
    attempts = Attempts.of(context, watermark_job.name)
    requests, set_aside = [], []
    for group, streams in sorted(by_group.items()):
        if str(group) in busy:
            continue
        request = attempts.request(work_key(f"watermarks-{group}", streams), run_config={"ops": {
            "compute_watermarks": {"config": {"shards": [n for n in range(SHARDS) if n % RUN_GROUPS == group]}}}},
            tags={_GROUP_TAG: str(group)})
        if request is None:
            set_aside += streams
        else:
            requests.append(request)
    attempts.report(context, set_aside)
    return requests or SkipReason(f"{len(due)} stream(s) due, each shard group's run in flight or set aside")
