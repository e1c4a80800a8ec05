"""Housekeeping jobs: the workflow sweeper and the tiering of inline bytes into S3 chunks.

Sensors only read (one index query per tick) and request a run when there is work; the runs do the
work and record what they did as output metadata, which the Dagster UI shows per run.
"""

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

from dagster_project.resources import RilletDeployment, sensor_interval, work_key
from dataplane.segment_store import now_ms


@op(description="Finish workflows (create, update, seal, delete, ...) that a crash left half done.")
def sweep_workflows(context: OpExecutionContext, rillet: RilletDeployment) -> Output[int]:
    outcomes = rillet.controller().sweeper.sweep()
    lines = [f"| `{o.subject}` | {o.workflow} | {o.outcome} |" for o in outcomes]
    table = "| subject | workflow | outcome |\n|---|---|---|\n" + "\n".join(lines)
    context.log.info("sweeper finished %d workflow(s)", len(outcomes))
    return Output(len(outcomes), metadata={"workflows": len(outcomes), "outcomes": MetadataValue.md(table)})

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
    return RunRequest(run_key=work_key("sweep", keys), tags={"rillet/pending": str(len(keys))})

class TierConfig(Config):
    segments: list[str]

@op(description="Move due inline index entries of segments into S3 chunks.")
def tier_segments(context: OpExecutionContext, config: TierConfig, rillet: RilletDeployment) -> Output[int]:
    store = rillet.controller().segments
    moved = {segment: store.tier(segment) for segment in config.segments}
    table = "| segment | bytes moved |\n|---|---|\n" + "\n".join(f"| `{s}` | {n} |" for s, n in moved.items())
    return Output(sum(moved.values()), metadata={"bytes_moved": sum(moved.values()),
                                                 "segments": MetadataValue.md(table)})

@job(description="Tier the inline bytes of the given segments.")
def tier_segments_job() -> None:
    tier_segments()

@sensor(job=tier_segments_job, minimum_interval_seconds=sensor_interval("tiering", 60),
        default_status=DefaultSensorStatus.RUNNING,
        description="Finds segments whose inline bytes are due to move to S3 (one index query per tick).")
def tiering_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    due = rillet.controller().segments.segments_due_for_tiering()
    if not due:
        return SkipReason("no segment is due for tiering")
    return RunRequest(run_key=work_key(f"tier-{now_ms() // 60_000}", due),
                      run_config={"ops": {"tier_segments": {"config": {"segments": due}}}})
