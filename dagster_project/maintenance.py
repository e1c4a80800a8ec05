"""Housekeeping jobs: the workflow sweeper and the tiering of inline bytes into S3 chunks.

Sensors only read (one index query per tick) and request a run when there is work; the runs do the
work and record what they did as output metadata, which the Dagster UI shows per run. A sweep that
left a workflow unfinished tags its run so, and the sensor asks again under a new run key
(dagster_project/attempts.py); tiering keys its runs by the minute already.
"""

import time

from dagster import (
    Config,
    DefaultSensorStatus,
    MetadataValue,
    OpExecutionContext,
    Output,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from dagster_project.attempts import ATTEMPTS, Attempts, mark_unfinished
from dagster_project.resources import RilletDeployment, sensor_interval, work_key
from dataplane.fanout import per_second
from dataplane.segment_store import now_ms


@op(description="Finish workflows (create, update, seal, delete, ...) that a crash left half done.")
def sweep_workflows(context: OpExecutionContext, rillet: RilletDeployment) -> Output[int]:
    started = time.perf_counter()
    outcomes = rillet.controller().sweeper.sweep()
    seconds = time.perf_counter() - started
    unusual = [o for o in outcomes if o.outcome != "completed"]  # listed first: they need a look
    lines = [f"| `{o.subject}` | {o.workflow} | {o.outcome} |" for o in (unusual + [o for o in outcomes if o not in unusual])]
    table = "| subject | workflow | outcome |\n|---|---|---|\n" + "\n".join(lines[:LISTED])
    if len(lines) > LISTED:
        table += f"\n\nand {len(lines) - LISTED} more"
    context.log.info("sweeper finished %d workflow(s) in %.2f s (%.1f/s)", len(outcomes), seconds,
                     per_second(len(outcomes), seconds))
    mark_unfinished(context, {f"{o.subject} {o.workflow}": o.outcome for o in unusual
                              if o.outcome not in SWEEP_FINAL_OUTCOMES})
    return Output(len(outcomes), metadata={"workflows": len(outcomes), "seconds": round(seconds, 3),
                                           "outcomes": MetadataValue.md(table)})

@job(description="Run the workflow sweeper once.")
def sweep_workflows_job() -> None:
    sweep_workflows()

@sensor(job=sweep_workflows_job, minimum_interval_seconds=sensor_interval("sweeper", 30),
        default_status=DefaultSensorStatus.RUNNING,
        description="Starts the sweeper when a workflow has been pending longer than the grace period.")
def workflow_sweeper_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    controller = rillet.controller()
    pending = controller.store.pending_workflows(now_ms() - controller.sweeper.grace_ms)
    if not pending:
        return SkipReason("no interrupted workflow")
    keys = [f"{p.pk}|{p.sk}|{p.pending_since}" for p in pending]
    attempts = Attempts.of(context, sweep_workflows_job.name)
    request = attempts.request(work_key("sweep", keys), tags={"rillet/pending": str(len(keys))})
    if request is None:
        attempts.report(context, [f"{p.pk}|{p.sk}" for p in pending])
    return request or SkipReason(f"{len(keys)} interrupted workflow(s), set aside after {ATTEMPTS} unfinished sweeps")

SWEEP_FINAL_OUTCOMES = ("completed", "reverted")  # any other outcome leaves the workflow pending
LISTED = 20  # a run's metadata lists this many segments or workflows (the most telling) and counts the rest


class TierConfig(Config):
    segments: list[str]

@op(description="Move due inline index entries of segments into S3 chunks, several segments at once.")
def tier_segments(context: OpExecutionContext, config: TierConfig, rillet: RilletDeployment) -> Output[int]:
    run = rillet.controller().segments.tier_many(config.segments)
    context.log.info(run.summary())
    largest = sorted(run.passes.items(), key=lambda item: -item[1].bytes_moved)[:LISTED]
    table = "| segment | bytes moved | deletes |\n|---|---|---|\n" + "\n".join(
        f"| `{s}` | {p.bytes_moved} | {p.deletes} |" for s, p in largest)
    if len(run.passes) > len(largest):
        table += f"\n\nand {len(run.passes) - len(largest)} more segment(s)"
    seconds = max(run.seconds, 1e-9)
    return Output(run.bytes_moved, metadata={
        "bytes_moved": run.bytes_moved, "deletes": run.deletes, "segments_passed": len(run.passes),
        "seconds": round(run.seconds, 3), "deletes_per_s": round(run.deletes / seconds, 1),
        "bytes_per_s": round(run.bytes_moved / seconds, 1), "segments": MetadataValue.md(table)})

@job(description="Tier the inline bytes of the given segments.")
def tier_segments_job() -> None:
    tier_segments()

@sensor(job=tier_segments_job, minimum_interval_seconds=sensor_interval("tiering", 60),
        default_status=DefaultSensorStatus.RUNNING,
        description="Finds segments whose inline bytes are due to move to S3 (one query per index shard a "
                    "tick, up to 1,000 segments a run).")
def tiering_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    due = rillet.controller().segments.segments_due_for_tiering()
    if not due:
        return SkipReason("no segment is due for tiering")
    return RunRequest(run_key=work_key(f"tier-{now_ms() // 60_000}", due),
                      run_config={"ops": {"tier_segments": {"config": {"segments": due}}}})
