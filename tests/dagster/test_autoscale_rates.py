"""``stream_rates`` (what `rillet stream rates` shows) against the auto-scaler's own decisions, and the
last decision a scale run keeps on the stream's current epoch record (isolated tables, default
settings: windows of 2 to 20 minutes, a 10-minute cool-down and mute).

Rates and ages are set on the segments' head records as tests/dagster/test_autoscale_sensor.py does.
"""

from __future__ import annotations

import math
import time

import pytest
from dagster import build_sensor_context

from controlplane.scale_report import DECISION_TEXT_MAX, remember_decision, stream_rates
from dagster_project.autoscale import autoscale_sensor, scale_stream_job
from dataplane.models import META_KEY, SegmentMeta
from dataplane.rates import Rates
from dataplane.scale_signals import ScaleThresholds, first_check_ms, mark_actions
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

# Test speed only (botocore's loader shared: see tests/conftest.py), and the auto-scaler's own defaults.
pytestmark = pytest.mark.usefixtures("fast_botocore_sessions", "default_scale_settings")


def _now() -> int:
    return int(time.time() * 1000)


def _traffic(scope: str, sid: int, events: tuple[float, ...], age_ms: int) -> int:
    """Set the segment's rates as of now and return that instant (rates decay as time passes after it)."""
    name, now = segment_name(scope, "s", sid), _now()
    meta = SegmentMeta.get(name, META_KEY, consistent_read=True)
    rates = Rates(now, tuple(events), (0.0,) * len(events))
    actions = [SegmentMeta.rates.set(rates.to_item()), SegmentMeta.created_ms.set(now - age_ms)]
    if meta.scaling is not None:
        hot = ScaleThresholds.from_item(meta.scaling.as_dict()).hot(rates)
        actions += mark_actions(name, now if hot else first_check_ms(now - age_ms))
    meta.update(actions=actions)
    return now


def _stream(controller, scope: str, policy: ScalingPolicy) -> None:
    controller.streams.create_scope(scope)
    controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=policy))


def test_a_fixed_stream_says_it_does_not_auto_scale(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    _stream(controller, unique, ScalingPolicy.fixed(2))
    written = _traffic(unique, 0, (1000.0, 1000.0, 1000.0, 1000.0), age_ms=3_600_000)
    rates = stream_rates(controller.autoscaler, unique, "s", written)
    assert not rates.auto_scaled and rates.unit is None and rates.last_decision is None
    assert rates.decision_now == "none: the scaling policy is fixed, so the stream never scales by itself"
    assert [s.status for s in rates.segments] == ["fixed", "fixed"]
    first = rates.segments[0].windows
    # the head read decays the rates to its own clock, some time after ``written`` on a loaded machine
    floor = Rates(written, (1000.0,) * 4, (0.0,) * 4).decayed(_now()).events
    assert all(low - 1e-6 <= w.events_per_s <= 1000.0 for low, w in zip(floor, first))
    assert all(w.split_above is None and w.merge_below is None for w in first)


def test_a_young_segment_shows_its_thresholds_and_cool_down_left(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    _stream(controller, unique, ScalingPolicy.by_event_rate(10, 2, 1))
    _traffic(unique, 0, (100.0, 0.0, 0.0, 0.0), age_ms=120_001 + 60_000)  # hot over 2m, 3 minutes old
    now = _now()
    rates = stream_rates(controller.autoscaler, unique, "s", now)
    (segment,) = rates.segments
    assert rates.auto_scaled and rates.unit == "events/s" and rates.cooldown_ms == 600_000
    assert [w.split_above for w in segment.windows] == [50.0, 20.0, 10.0, None]
    assert [w.merge_below for w in segment.windows] == [10.0, 10.0, 10.0, 5.0]
    assert [w.window_passed for w in segment.windows] == [True, False, False, False]
    assert 400_000 < segment.cooldown_left_ms <= 420_000
    assert segment.status == "hot-in-cooldown" and "younger than the cool-down" in segment.why
    # a split waits for the cool-down alone: the stream's minimum, a rule of merges, is not named
    assert rates.decision_now == "none: segment 0 would split but is in its cool-down"
    # what the auto-scaler decides agrees
    assert controller.autoscaler.evaluate(unique, "s", now)[1] is None


def test_a_young_segment_shows_its_rate_over_its_life_not_spread_over_windows_it_has_not_lived(isolated, unique):
    """A segment a minute old that took 50 events a second all along: its decayed sums hold 39 %, 18 %, 10 % and
    5 % of that over the 2- to 20-minute windows; shown as such, 8 to 20 events/s for 50. Each is shown divided by
    the share its age lets it hold, so every window says about 50."""
    _, resource = isolated
    controller = resource.controller()
    _stream(controller, unique, ScalingPolicy.by_event_rate(1000, 2, 1))
    age_s, steady = 60.0, 50.0
    decayed_sums = tuple(steady * -math.expm1(-age_s / w) for w in (120.0, 300.0, 600.0, 1200.0))
    assert max(decayed_sums) < 20  # what was shown
    _traffic(unique, 0, decayed_sums, age_ms=int(age_s * 1000))
    rates = stream_rates(controller.autoscaler, unique, "s", _now())
    (segment,) = rates.segments
    assert [w.window_passed for w in segment.windows] == [False] * 4
    assert all(steady * 0.97 <= w.events_per_s <= steady * 1.01 for w in segment.windows), segment.windows
    assert all(w.policy_rate == w.events_per_s for w in segment.windows)


def test_a_scale_run_keeps_its_decision_and_outcome(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    _stream(controller, unique, ScalingPolicy.by_event_rate(10, 2, 1))
    _traffic(unique, 0, (100.0, 0.0, 0.0, 0.0), age_ms=3_600_000)
    before = stream_rates(controller.autoscaler, unique, "s", _now())
    assert before.segments[0].status == "hot" and before.decision_now.startswith("segment 0 is hot (")
    assert before.last_decision is None

    with build_sensor_context(resources={"rillet": resource}) as context:
        (request,) = [r for r in autoscale_sensor(context) if r.tags.get("rillet/stream") == f"{unique}/s"]
    assert scale_stream_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource}).success

    after = stream_rates(controller.autoscaler, unique, "s", _now())
    assert after.epoch == 1 and len(after.segments) == 2
    last = after.last_decision
    assert last is not None and last.epoch == 0 and last.outcome == "scaled to epoch 1"
    # the run's reason is the one `now` gave before (the rates, decaying meanwhile, may differ in a digit)
    assert last.reason.startswith("segment 0 is hot (") and last.reason.endswith("split in 2")
    assert before.decision_now.endswith("split in 2")
    assert after.mute_left_ms > 590_000 and all(s.cooldown_left_ms > 590_000 for s in after.segments)
    assert after.decision_now.startswith("none: the stream scaled ")

    # a bounded note: a long reason is cut
    assert remember_decision(controller.store, unique, "s", 1, "x" * 5000, "y" * 5000, _now())
    last = stream_rates(controller.autoscaler, unique, "s", _now()).last_decision
    assert len(last.reason) == len(last.outcome) == DECISION_TEXT_MAX
