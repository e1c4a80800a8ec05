"""Auto-scaling: a sensor decides for the streams whose segments signalled, and launches scale runs.

Each tick is ``AutoScaler.tick`` (controlplane/autoscale.py): the scale candidates due in the sharded
``scale-candidates`` index (marked by the append path when a rate crosses a threshold, or due when an
idle segment's rates will have decayed under the merge thresholds), their streams' decisions, and the
marks moved or cleared. An idle auto-scaled stream costs a tick no request. The sensor requests one
run per decision, keyed by the decision (stream, epoch, segments, split or merge) and the number of its
runs that did not apply it (dagster_project/attempts.py): a decision seen again while its run is in
flight starts once, and one seen again after its run did not apply it (its segments are looked at again
after a while) starts a new run. The run executes the scale workflow; if the stream moved on or was
busy meanwhile (another scale, a commit, a truncation), the run records that, tags itself unfinished,
and the decision's segments are looked at again later. Either way the run keeps
the decision, its reason and its outcome on the stream's current epoch record, where `rillet stream
rates` shows them (controlplane/scale_report.py).
"""

from dagster import (
    Config,
    DefaultSensorStatus,
    OpExecutionContext,
    Output,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from controlplane.autoscale import TickReport
from controlplane.scale_report import remember_decision
from dagster_project.attempts import ATTEMPTS, Attempts, mark_unfinished
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
        if isinstance(e, IllegalState):  # a workflow in the way: the same decision is asked again after it
            mark_unfinished(context, {f"{config.scope}/{config.stream}": outcome})
        # else the stream moved on (another scale, a commit) or the decision no longer fits it: the next
        # decision is made afresh at its new epoch, and such races count as no failure
    context.log.info("%s/%s: %s (%s)", config.scope, config.stream, outcome, config.reason)
    try:  # for `rillet stream rates`: one small update per run, none per sensor tick
        remember_decision(streams.store, config.scope, config.stream, config.epoch, config.reason, outcome, now_ms())
    except Exception as e:  # noqa: BLE001 - only the note of the decision is lost; the scale stands either way
        context.log.warning("%s/%s: decision not recorded: %r", config.scope, config.stream, e)
    return Output(outcome, metadata={"stream": f"{config.scope}/{config.stream}", "reason": config.reason,
                                     "outcome": outcome})


def skip_reason(tick: TickReport) -> str:
    """Why a tick requested no run: nothing was due, or what held the due streams back."""
    if not tick.streams:
        return "no stream needs scaling: no segment is due for a look"
    why = f"no stream needs scaling now ({tick.streams} stream(s) looked at)"
    if tick.held_back:
        shown = ", ".join(sorted(tick.held_back)[:5]) + (", ..." if len(tick.held_back) > 5 else "")
        why += (f"; {len(tick.held_back)} with a hot segment held back by its cool-down or the mute: "
                f"{shown} (`rillet stream rates <stream>` says for how long)")
    return why


@job(description="Scale a stream as auto-scaling decided.")
def scale_stream_job() -> None:
    scale_stream()


@sensor(job=scale_stream_job, minimum_interval_seconds=sensor_interval("autoscale", 30),
        default_status=DefaultSensorStatus.RUNNING,
        description="Decides splits and merges for the streams whose segments signalled a scale candidate.")
def autoscale_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    autoscaler = rillet.controller().autoscaler
    decided = autoscaler.tick(now_ms())
    if not decided:
        return SkipReason(skip_reason(autoscaler.last_tick))
    attempts = Attempts.of(context, scale_stream_job.name)
    requests, set_aside = [], []
    for s in decided:
        stream = f"{s.scope}/{s.stream}"
        _, failing = attempts.set_aside([stream])
        request = None if failing else attempts.request(
            f"scale-{stream}-{s.epoch}-{s.decision.key}",
            run_config={"ops": {"scale_stream": {"config": {
                "scope": s.scope, "stream": s.stream, "seal": s.decision.seal,
                "new_ranges": [list(r) for r in s.decision.new_ranges], "reason": s.decision.reason,
                "epoch": s.epoch}}}},
            tags={"rillet/stream": stream})
        if request is None:
            set_aside.append(stream)
        else:
            requests.append(request)
    attempts.report(context, set_aside)
    return requests or SkipReason(f"{len(decided)} decision(s), set aside after {ATTEMPTS} failed runs")
