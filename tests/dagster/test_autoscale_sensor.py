"""The auto-scaling sensor and scale_stream_job with Dagster's test APIs (isolated tables, default settings).

The segments' rates and ages are set directly on their head records (the append path keeps them
there), with the scale mark their creation and appends would have given them (the sensor reads only
marked segments), so the deployment's default windows (2 to 20 minutes), cooldown and mute (10 minutes)
apply without waiting. The end-to-end behaviour with real traffic is tests/e2e/test_autoscale_e2e.py.
"""

from __future__ import annotations

import time

import pytest
from dagster import RunRequest, build_sensor_context

from controlplane.autoscale import TickReport
from dagster_project.autoscale import autoscale_sensor, scale_stream_job, skip_reason
from dataplane.models import META_KEY, SegmentMeta
from dataplane.rates import Rates
from dataplane.scale_signals import ScaleThresholds, first_check_ms, mark_actions
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

# Test speed only (botocore's loader shared: see tests/conftest.py), and the auto-scaler's own defaults.
pytestmark = pytest.mark.usefixtures("fast_botocore_sessions", "default_scale_settings")


def _now() -> int:
    return int(time.time() * 1000)


def _traffic(scope: str, sid: int, events: tuple[float, ...], age_ms: int = 3_600_000) -> None:
    """Give a segment decayed event rates (per window) measured now, and an age, with the mark of a
    segment of that age: due at once if the rates are hot (the append that made them so marks it), else
    when its creation's mark falls due (dataplane/scale_signals.py)."""
    name, now = segment_name(scope, "s", sid), _now()
    meta = SegmentMeta.get(name, META_KEY, consistent_read=True)
    rates = Rates(now, tuple(events), (0.0,) * len(events))
    actions = [SegmentMeta.rates.set(rates.to_item()), SegmentMeta.created_ms.set(now - age_ms)]
    if meta.scaling is not None:
        hot = ScaleThresholds.from_item(meta.scaling.as_dict()).hot(rates)
        actions += mark_actions(name, now if hot else first_check_ms(now - age_ms))
    meta.update(actions=actions)


def _mine(requests, scope: str) -> list[RunRequest]:
    """The run requests for this test's stream (the isolated tables are shared by the Dagster tests)."""
    if not isinstance(requests, list):
        return []
    return [r for r in requests if r.tags.get("rillet/stream") == f"{scope}/s"]


def _tick(resource, scope: str) -> list[RunRequest]:
    with build_sensor_context(resources={"rillet": resource}) as context:
        return _mine(autoscale_sensor(context), scope)


def test_sensor_requests_a_split_once_per_decision_and_the_job_applies_it(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(
        scaling_policy=ScalingPolicy.by_event_rate(10, 3, 1)))
    assert _tick(resource, unique) == []  # young and idle

    _traffic(unique, 0, (100.0, 0.0, 0.0, 0.0))  # 2-minute rate 10x the target
    (request,) = _tick(resource, unique)
    assert request.run_key == f"scale-{unique}/s-0-0-split"
    # Decided: its segment is looked at again only after a while (in case the run does not apply it),
    # not on every tick; a decision seen again then gets the same run key, so it starts once.
    assert _tick(resource, unique) == []
    config = request.run_config["ops"]["scale_stream"]["config"]
    assert config["seal"] == [0] and len(config["new_ranges"]) == 3  # min(factor 3, 100 / 10)

    result = scale_stream_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource})
    assert result.success and result.output_for_node("scale_stream") == "scaled to epoch 1"
    segments = controller.streams.current_segments(unique, "s")
    assert [(s.low, s.high) for s in segments] == [tuple(r) for r in config["new_ranges"]]
    # a repeated run of the same request is harmless: the scale is not applied twice
    result = scale_stream_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource})
    assert result.success and result.output_for_node("scale_stream") == "scaled to epoch 1"
    assert controller.store.get_stream(unique, "s").current_epoch == 1

    # the new segments are hot too, but the stream just scaled (mute) and they are young (cooldown)
    for s in segments:
        _traffic(unique, s.segment_id, (100.0, 100.0, 100.0, 0.0), age_ms=0)
    assert _tick(resource, unique) == []

    # a request that no longer fits the stream (its segments were sealed meanwhile) is not applied
    result = scale_stream_job.execute_in_process(run_config=request.run_config | {"ops": {"scale_stream": {
        "config": {**config, "new_ranges": [[0.0, 0.5], [0.5, 1.0]]}}}}, resources={"rillet": resource})
    assert result.success
    assert result.output_for_node("scale_stream").startswith("not applied: ")
    assert controller.store.get_stream(unique, "s").current_epoch == 1


def test_sensor_requests_a_merge_of_cold_neighbours_but_never_below_the_minimum(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(
        scaling_policy=ScalingPolicy.by_event_rate(10, 2, 2)))
    ids = [s.segment_id for s in controller.streams.current_segments(unique, "s")]
    for sid in ids:
        _traffic(unique, sid, (0.0, 0.0, 0.0, 0.0))
    assert _tick(resource, unique) == []  # two cold segments, but the minimum is two

    controller.streams.update_stream(unique, "s", StreamConfiguration(
        scaling_policy=ScalingPolicy.by_event_rate(10, 2, 1)))
    (request,) = _tick(resource, unique)
    assert request.run_key == f"scale-{unique}/s-0-{ids[0]}-{ids[1]}-merge"
    result = scale_stream_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource})
    assert result.success
    assert [(s.low, s.high) for s in controller.streams.current_segments(unique, "s")] == [(0.0, 1.0)]


def test_fixed_streams_are_not_candidates(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    _traffic(unique, 0, (1000.0, 1000.0, 1000.0, 1000.0))
    assert segment_name(unique, "s", 0) not in {name for name, _ in controller.autoscaler.candidates(_now())}
    assert _tick(resource, unique) == []


def test_a_tick_that_decides_nothing_names_the_streams_a_cool_down_holds_back(isolated, unique):
    """A segment hot over the 2-minute window but younger than the 10-minute cool-down is due (the append
    that made it hot marked it) and not split: the tick reports its stream as held back, and the sensor's
    skip reason says so instead of "no stream needs scaling" alone."""
    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(
        scaling_policy=ScalingPolicy.by_event_rate(10, 3, 1)))
    _traffic(unique, 0, (100.0, 0.0, 0.0, 0.0), age_ms=180_000)  # hot, 3 minutes old
    autoscaler = controller.autoscaler
    assert [s for s in autoscaler.tick(_now()) if s.scope == unique] == []
    assert f"{unique}/s" in autoscaler.last_tick.held_back and autoscaler.last_tick.streams >= 1
    reason = skip_reason(autoscaler.last_tick)
    assert f"{unique}/s" in reason and "cool-down" in reason and "rillet stream rates" in reason
    assert skip_reason(TickReport()) == "no stream needs scaling: no segment is due for a look"
    assert skip_reason(TickReport(streams=2)) == "no stream needs scaling now (2 stream(s) looked at)"
