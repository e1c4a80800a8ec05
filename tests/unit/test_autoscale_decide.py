"""controlplane.autoscale.decide with explicit rates and ages (Pravega's thresholds, seed 003).

Windows are 2, 5, 10 and 20 "minutes" shrunk to 2, 5, 10 and 20 seconds; cooldown and mute are given
explicitly. Rates are built per segment as (w2, w5, w10, w20) tuples, so every case states exactly
which threshold it exercises.
"""

from __future__ import annotations

import pytest

from controlplane.autoscale import AutoScaleSettings, ScaleDecision, decide
from dataplane.segment_store import SegmentInfo
from rillet.keyspace import segment_id
from rillet.models import ScalingPolicy, SegmentRange

W2, W5, W10, W20 = 2_000, 5_000, 10_000, 20_000
SETTINGS = AutoScaleSettings(windows_ms=(W2, W5, W10, W20), cooldown_ms=1_000, mute_ms=30_000)
NOW = 1_000_000
OLD = NOW - 60_000  # older than every window and the cooldown
T = 10  # target rate (events/s, or KB/s for byte-rate policies)
QUIET = (0.0, 0.0, 0.0, 0.0)


def _segments(*specs, epoch: int = 0) -> list[tuple[SegmentRange, SegmentInfo]]:
    """``specs``: (event rates, created_ms[, byte rates]) per segment, tiling [0, 1) evenly in key order."""
    n = len(specs)
    out = []
    for i, spec in enumerate(specs):
        events, created = spec[0], spec[1]
        byte_rates = spec[2] if len(spec) > 2 else QUIET
        low, high = i / n, (i + 1) / n if i + 1 < n else 1.0
        sid = segment_id(epoch, i)
        out.append((SegmentRange(segment_id=sid, low=low, high=high),
                    SegmentInfo(f"sc/st/{sid}", 0, 100, False, created, tuple(events), tuple(byte_rates))))
    return out


def by_events(factor: int = 4, minimum: int = 1) -> ScalingPolicy:
    return ScalingPolicy.by_event_rate(T, factor, minimum)


def _pieces(decision: ScaleDecision) -> int:
    return len(decision.new_ranges)


def _assert_even_split(decision: ScaleDecision, segment: SegmentRange, pieces: int) -> None:
    assert decision.seal == [segment.segment_id]
    assert len(decision.new_ranges) == pieces
    assert decision.new_ranges[0][0] == segment.low and decision.new_ranges[-1][1] == segment.high
    for (_, hi), (lo, _) in zip(decision.new_ranges, decision.new_ranges[1:]):
        assert hi == lo  # contiguous
    width = (segment.high - segment.low) / pieces
    for lo, hi in decision.new_ranges:
        assert hi - lo == pytest.approx(width)


# -- splits ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rates, factor, pieces", [
    ((5 * T + 1, 0, 0, 0), 4, 4),        # 2-window rate above 5 T: rate / T = 5.1 -> capped by the factor 4
    ((5 * T + 1, 0, 0, 0), 8, 5),        # ... int(5.1) = 5 pieces when the factor allows it
    ((0, 2 * T + 1, 0, 0), 8, 2),        # 5-window rate above 2 T: int(2.1) = 2
    ((0, 0, T + 1, 0), 8, 2),            # 10-window rate above T: int(1.1) = 1 -> at least 2
    ((0, 0, 7 * T, 0), 3, 3),            # the factor caps: min(3, 7)
    ((100 * T, 0, 0, 0), 20, 20),        # min(20, 100)
])
def test_hot_segment_splits_into_min_of_factor_and_rate_over_target_but_at_least_two(rates, factor, pieces):
    segments = _segments((rates, OLD), (QUIET, OLD))
    decision = decide(by_events(factor), segments, NOW, 0, SETTINGS)
    assert decision is not None, rates
    _assert_even_split(decision, segments[0][0], pieces)
    assert "hot" in decision.reason
    assert decision.key == f"{segments[0][0].segment_id}-split"


@pytest.mark.parametrize("rates", [
    (5 * T, 0, 0, 0),         # exactly 5 T is not above it
    (0, 2 * T, 0, 0),
    (0, 0, T, 0),
    (4 * T, 1.9 * T, 0.9 * T, 100 * T),  # the 20-window rate never makes a segment hot
])
def test_rates_at_or_below_the_thresholds_do_not_split(rates):
    assert decide(by_events(), _segments((rates, OLD)), NOW, 0, SETTINGS) is None


def test_the_hottest_segment_is_split_first_and_only_one_decision_is_made():
    segments = _segments(((6 * T, 0, 0, 0), OLD), ((9 * T, 0, 0, 0), OLD), ((7 * T, 0, 0, 0), OLD))
    decision = decide(by_events(factor=2), segments, NOW, 0, SETTINGS)
    assert decision.seal == [segments[1][0].segment_id] and _pieces(decision) == 2


@pytest.mark.parametrize("age_ms, rates, splits", [
    (500, (100 * T, 100 * T, 100 * T, 0), False),   # younger than the cooldown: never scaled
    (1_500, (100 * T, 0, 0, 0), False),             # past the cooldown but not past the 2-window
    (2_500, (100 * T, 0, 0, 0), True),              # past the 2-window
    (4_000, (0, 100 * T, 0, 0), False),             # the 5-window rate counts only after 5 s
    (5_500, (0, 100 * T, 0, 0), True),
    (9_000, (0, 0, 100 * T, 0), False),             # the 10-window rate counts only after 10 s
    (10_500, (0, 0, 100 * T, 0), True),
])
def test_young_segments_are_not_split(age_ms, rates, splits):
    decision = decide(by_events(), _segments((rates, NOW - age_ms)), NOW, 0, SETTINGS)
    assert (decision is not None) == splits


def test_a_long_cooldown_keeps_even_an_old_enough_window_from_splitting():
    settings = AutoScaleSettings(windows_ms=SETTINGS.windows_ms, cooldown_ms=15_000, mute_ms=0)
    hot = ((100 * T, 100 * T, 100 * T, 0), NOW - 12_000)  # past every hot window, not past the cooldown
    assert decide(by_events(), _segments(hot), NOW, 0, settings) is None
    assert decide(by_events(), _segments(hot), NOW + 3_001, 0, settings) is not None


def test_mute_after_a_recent_scale():
    segments = _segments(((100 * T, 0, 0, 0), OLD))
    last_scale = NOW - SETTINGS.mute_ms + 1
    assert decide(by_events(), segments, NOW, last_scale, SETTINGS) is None
    assert decide(by_events(), segments, NOW + 1, last_scale, SETTINGS) is not None
    # the mute applies to merges as well
    cold = _segments((QUIET, OLD), (QUIET, OLD), epoch=0)
    assert decide(by_events(), cold, NOW, last_scale, SETTINGS) is None
    assert decide(by_events(), cold, NOW + 1, last_scale, SETTINGS) is not None


def test_a_factor_of_one_never_splits():
    assert decide(by_events(factor=1), _segments(((100 * T, 0, 0, 0), OLD)), NOW, 0, SETTINGS) is None


# -- merges ------------------------------------------------------------------------------------------


def test_two_adjacent_cold_segments_merge():
    segments = _segments(((T + 1, 0, 0, 0), OLD), (QUIET, OLD), (QUIET, OLD))
    decision = decide(by_events(), segments, NOW, 0, SETTINGS)
    a, b = segments[1][0], segments[2][0]
    assert decision.seal == [a.segment_id, b.segment_id]
    assert decision.new_ranges == [(a.low, b.high)]
    assert decision.key == f"{a.segment_id}-{b.segment_id}-merge"


def test_cold_segments_that_are_not_neighbours_do_not_merge():
    warm = (0.5 * T, 0.5 * T, T, 0)  # the 10-window rate is not below T: not cold, not hot
    segments = _segments((QUIET, OLD), (warm, OLD), (QUIET, OLD))
    assert decide(by_events(), segments, NOW, 0, SETTINGS) is None


@pytest.mark.parametrize("rates, cold", [
    ((0.99 * T, 0.99 * T, 0.99 * T, 0.49 * T), True),
    ((T, 0, 0, 0), False),            # the 2-window rate must be below T
    ((0, T, 0, 0), False),
    ((0, 0, T, 0), False),
    ((0, 0, 0, 0.5 * T), False),      # the 20-window rate must be below T / 2
])
def test_cold_thresholds(rates, cold):
    segments = _segments((rates, OLD), (QUIET, OLD))
    decision = decide(by_events(), segments, NOW, 0, SETTINGS)
    assert (decision is not None) == cold


@pytest.mark.parametrize("age_ms, merges", [(19_000, False), (20_500, True)])
def test_cold_segments_younger_than_the_longest_window_do_not_merge(age_ms, merges):
    segments = _segments((QUIET, NOW - age_ms), (QUIET, OLD))
    assert (decide(by_events(), segments, NOW, 0, SETTINGS) is not None) == merges


@pytest.mark.parametrize("count, minimum, merges", [(2, 2, False), (3, 2, True), (3, 3, False), (2, 1, True)])
def test_never_below_the_minimum_number_of_segments(count, minimum, merges):
    segments = _segments(*[(QUIET, OLD)] * count)
    decision = decide(by_events(minimum=minimum), segments, NOW, 0, SETTINGS)
    assert (decision is not None) == merges
    if decision is not None:
        assert count - len(decision.seal) + len(decision.new_ranges) >= minimum


def test_a_split_wins_over_a_merge():
    segments = _segments((QUIET, OLD), (QUIET, OLD), ((100 * T, 0, 0, 0), OLD))
    decision = decide(by_events(), segments, NOW, 0, SETTINGS)
    assert decision.seal == [segments[2][0].segment_id] and _pieces(decision) >= 2


# -- policies ------------------------------------------------------------------------------------------


def test_a_fixed_policy_never_scales():
    hot = _segments(((1000 * T,) * 4, OLD))
    cold = _segments((QUIET, OLD), (QUIET, OLD), (QUIET, OLD))
    assert decide(ScalingPolicy.fixed(1), hot, NOW, 0, SETTINGS) is None
    assert decide(ScalingPolicy.fixed(1), cold, NOW, 0, SETTINGS) is None


def test_byte_rate_policy_uses_kilobytes_per_second():
    policy = ScalingPolicy.by_data_rate(T, 4, 1)  # T KB/s
    hot_events = (1000 * T, 0, 0, 0)
    # bytes/s just above 5 T KB/s: hot (whatever the event rate), split by int(rate/T) = 5 -> factor 4
    hot = _segments((QUIET, OLD, (5 * T * 1024 + 1024, 0, 0, 0)))
    decision = decide(policy, hot, NOW, 0, SETTINGS)
    assert decision is not None and _pieces(decision) == 4
    # 5 T *bytes* per second is far below 5 T KB/s; a high event rate does not matter for a byte policy
    not_hot = _segments((hot_events, OLD, (5 * T + 1, 0, 0, 0)))
    assert decide(policy, not_hot, NOW, 0, SETTINGS) is None
    # and exactly 5 T KB/s is not above the threshold
    assert decide(policy, _segments((QUIET, OLD, (5 * T * 1024, 0, 0, 0))), NOW, 0, SETTINGS) is None
    # cold in KB/s even with a busy event rate: merges
    cold = _segments((hot_events, OLD, (0.9 * T * 1024, 0, 0, 0.4 * T * 1024)), (hot_events, OLD, QUIET))
    assert decide(policy, cold, NOW, 0, SETTINGS) is not None
    # not cold: 2-window byte rate at T KB/s
    warm = _segments((QUIET, OLD, (T * 1024, 0, 0, 0)), (QUIET, OLD, QUIET))
    assert decide(policy, warm, NOW, 0, SETTINGS) is None


def test_event_rate_policy_ignores_byte_rates():
    policy = by_events()
    segments = _segments((QUIET, OLD, (10**9, 10**9, 10**9, 10**9)), (QUIET, OLD, QUIET))
    decision = decide(policy, segments, NOW, 0, SETTINGS)
    assert decision is not None and len(decision.new_ranges) == 1  # a merge, not a split


def test_cooldown_and_mute_default_to_ten_minutes_and_come_from_the_environment(monkeypatch):
    monkeypatch.delenv("RILLET_SCALE_COOLDOWN_MS", raising=False)
    monkeypatch.delenv("RILLET_SCALE_MUTE_MS", raising=False)
    settings = AutoScaleSettings.from_env()
    assert settings.cooldown_ms == 600_000 and settings.mute_ms == 600_000
    monkeypatch.setenv("RILLET_SCALE_COOLDOWN_MS", "2000")
    monkeypatch.setenv("RILLET_SCALE_MUTE_MS", "3000")
    settings = AutoScaleSettings.from_env()
    assert (settings.cooldown_ms, settings.mute_ms) == (2000, 3000)


@pytest.mark.parametrize("rates, named", [
    ((5 * T + 1, 0, 0, 0), "51.0 events/s over 2s > 5x the target 10"),
    ((0, 2 * T + 1, 0, 0), "21.0 events/s over 5s > 2x the target 10"),
    ((0, 0, T + 1, 0), "11.0 events/s over 10s > 1x the target 10"),
])
def test_a_split_says_which_window_and_threshold_made_the_segment_hot(rates, named):
    """Issue 30: the reason names the rule (a rate 5x the target over the shortest window, ...)."""
    decision = decide(by_events(8), _segments((rates, OLD), (QUIET, OLD)), NOW, 0, SETTINGS)
    assert named in decision.reason, decision.reason


def test_a_merge_says_over_which_window_the_segments_were_cold():
    decision = decide(by_events(), _segments(((T + 1, 0, 0, 0), OLD), (QUIET, OLD), (QUIET, OLD)), NOW, 0, SETTINGS)
    assert "under the target 10 events/s over 20s" in decision.reason, decision.reason
