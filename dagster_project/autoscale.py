"""Auto-scaling: a sensor evaluates the auto-scaled streams and launches scale runs.

The sensor reads the sparse ``autoscale`` index and each such stream's segment rates, and requests
one run per needed scale with a deterministic run key (stream, epoch, segments, split or merge), so
a decision seen on several ticks starts once. The run executes the scale workflow; if the stream
moved on meanwhile (another scale, a commit), the run records that and the next tick decides anew.
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

from dagster_project.resources import RilletDeployment, sensor_interval
from dataplane.segment_store import now_ms
from rillet.errors import IllegalState, InvalidArgument, WriteConflict


class ScaleRequest(Config):
    scope: str
    stream: str
    seal: list[int]
    new_ranges: list[list[float]]
    reason: str


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
    return Output(outcome, metadata={"stream": f"{config.scope}/{config.stream}", "reason": config.reason,
                                     "outcome": outcome})


@job(description="Scale a stream as auto-scaling decided.")
def scale_stream_job() -> None:
    scale_stream()


@sensor(job=scale_stream_job, minimum_interval_seconds=sensor_interval("autoscale", 30),
        default_status=DefaultSensorStatus.RUNNING,
        description="Evaluates split and merge decisions for streams scaled by event or byte rate.")
def autoscale_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    autoscaler = rillet.controller().autoscaler
    requests = []
    for scope, stream in autoscaler.candidates():
        epoch, decision = autoscaler.evaluate(scope, stream, now_ms())
        if decision is None:
            continue
        requests.append(RunRequest(
            run_key=f"scale-{scope}/{stream}-{epoch}-{decision.key}",
            run_config={"ops": {"scale_stream": {"config": {
                "scope": scope, "stream": stream, "seal": decision.seal,
                "new_ranges": [list(r) for r in decision.new_ranges], "reason": decision.reason}}}},
            tags={"rillet/stream": f"{scope}/{stream}"}))
    return requests or SkipReason("no stream needs scaling")
