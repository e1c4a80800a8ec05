"""Auto-scaling: a sensor decides for the streams whose segments signalled, and launches scale runs.

Each tick is ``AutoScaler.tick`` (controlplane/autoscale.py): the scale candidates due in the sharded
``scale-candidates`` index (marked by the append path when a rate crosses a threshold, or due when an
idle segment's rates will have decayed under the merge thresholds), their streams' decisions, and the
marks moved or cleared. An idle auto-scaled stream costs a tick no request. The sensor requests one
run per decision with a deterministic run key (stream, epoch, segments, split or merge), so a decision
seen again (its segments are looked at again after a while, in case the run did not apply it) starts
once. The run executes the scale workflow; if the stream moved on meanwhile (another scale, a commit),
the run records that and the decision's segments are looked at again later. Either way the run keeps
the decision, its reason and its outcome on the stream's current epoch record, where `rillet stream
rates` shows them (controlplane/scale_report.py).
"""

from dagster import (
    Config,
    DefaultSensorStatus,
    OpExecutionContext,
    Output,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from controlplane.scale_report import remember_decision
from dagster_project.resources import RilletDeployment, sensor_interval
from dataplane.segment_store import now_ms
from rillet.errors import IllegalState, InvalidArgument, WriteConflict


class ScaleRequest(Config):
    scope: str
    stream: str
    seal: list[int]
    new_ranges: list[list[float]]
    reason: str
    epoch: int | None = None  # the epoch it was decided at (None in runs requested before it was passed)


@op(description="Run the scale workflow for one auto-scaling decision.")
def scale_stream(context: OpExecutionContext, config: ScaleRequest, rillet: RilletDeployment) -> Output[str]:
    streams = rillet.controller().streams
    try:
        epoch = streams.scale_stream(config.scope, config.stream, config.seal,
                                     [(lo, hi) for lo, hi in config.new_ranges])
        outcome = f"scaled to epoch {epoch}"
    except (IllegalState, InvalidArgument, WriteConflict) as e:
        outcome = f"not applied: {e.code}: {e.message}"
    context.log.info("%s/%s: %s (%s)", config.scope, config.stream, outcome, config.reason)
    try:  # for `rillet stream rates`: one small update per run, none per sensor tick
        remember_decision(streams.store, config.scope, config.stream, config.epoch, config.reason, outcome, now_ms())
    except Exception as e:  # noqa: BLE001 - only the note of the decision is lost; the scale stands either way
        context.log.warning("%s/%s: decision not recorded: %r", config.scope, config.stream, e)
    return Output(outcome, metadata={"stream": f"{config.scope}/{config.stream}", "reason": config.reason,
                                     "outcome": outcome})


@job(description="Scale a stream as auto-scaling decided.")
def scale_stream_job() -> None:
    scale_stream()


@sensor(job=scale_stream_job, minimum_interval_seconds=sensor_interval("autoscale", 30),
        default_status=DefaultSensorStatus.RUNNING,
        description="Decides splits and merges for the streams whose segments signalled a scale candidate.")
def autoscale_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    requests = [RunRequest(
        run_key=f"scale-{s.scope}/{s.stream}-{s.epoch}-{s.decision.key}",
        run_config={"ops": {"scale_stream": {"config": {
            "scope": s.scope, "stream": s.stream, "seal": s.decision.seal,
            "new_ranges": [list(r) for r in s.decision.new_ranges], "reason": s.decision.reason,
            "epoch": s.epoch}}}},
        tags={"rillet/stream": f"{s.scope}/{s.stream}"}) for s in rillet.controller().autoscaler.tick(now_ms())]
    return requests or SkipReason("no stream needs scaling")
