"""The watermark sensor, with Dagster's test APIs (isolated tables): it computes on its tick."""

from __future__ import annotations

import pytest
from dagster import SkipReason, build_sensor_context

from dagster_project.watermarks import watermark_sensor
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


def _tick(resource) -> str:
    with build_sensor_context(resources={"rillet": resource}) as context:
        outcome = watermark_sensor(context)
    assert isinstance(outcome, SkipReason)  # a few due streams: computed on the tick, no run
    return outcome.skip_message


def test_the_sensor_appends_a_watermark_when_the_slowest_writer_moves(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    stream = f"{unique}/s"
    assert stream not in _tick(resource)
    controller.segments.append(segment_name(unique, "s", 0), "w", 0, 1, frame(b"e"))
    controller.watermarks.note_time(unique, "s", "fast", 2_000, {0: 5})
    controller.watermarks.note_time(unique, "s", "slow", 1_000, {0: 0})
    assert stream in _tick(resource)
    assert (controller.watermarks.last(unique, "s").lower_ms, controller.watermarks.last(unique, "s").upper_ms) \
        == (1_000, 2_000)
    assert stream not in _tick(resource)  # nothing moved
    controller.watermarks.note_time(unique, "s", "fast", 3_000, {0: 5})
    assert stream not in _tick(resource)  # the slow writer holds it back
    controller.watermarks.note_time(unique, "s", "slow", 1_500, {0: 5})
    assert stream in _tick(resource)
    last = controller.watermarks.last(unique, "s")
    assert (last.lower_ms, last.upper_ms, [p.offset for p in last.cut]) == (1_500, 3_000, [5])
    # the writers leave: nothing more to compute for this stream
    controller.watermarks.remove_writer(unique, "s", "slow")
    controller.watermarks.remove_writer(unique, "s", "fast")
    assert stream not in _tick(resource)


def test_a_stream_whose_watermark_keeps_failing_does_not_stop_the_others(isolated, unique, monkeypatch):
    """One poison stream (its computation raises, as a throttled or corrupt one would) is an outcome of the
    tick: the other stream's watermark is appended, and the poison one stays due for the next tick."""
    _, resource = isolated
    controller = resource.controller()
    controller.streams.create_scope(unique)
    for name in ("good", "poison"):
        controller.streams.create_stream(unique, name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
        controller.segments.append(segment_name(unique, name, 0), "w", 0, 1, frame(b"e"))
        controller.watermarks.note_time(unique, name, "w", 1_000, {0: 5})
    real_compute = type(controller.watermarks).compute
    raised = []

    def compute(self, scope, stream, now=None):
        if stream == "poison":
            raised.append(stream)
            raise RuntimeError("a stream whose watermark cannot be computed")
        return real_compute(self, scope, stream, now)

    monkeypatch.setattr(type(controller.watermarks), "compute", compute)
    message = _tick(resource)
    assert raised, "the poison stream was never computed"
    assert f"{unique}/good" in message and f"1 failed: {unique}/poison" in message, message
    assert controller.watermarks.last(unique, "good").lower_ms == 1_000
    assert (unique, "poison") in controller.watermarks.due()  # asked again by the next tick
    monkeypatch.setattr(type(controller.watermarks), "compute", real_compute)
    assert f"{unique}/poison" in _tick(resource)
