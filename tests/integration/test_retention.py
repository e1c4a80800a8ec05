"""Retention with explicit numbers: time and size limits, and consumption-based cases i to v (seed 000)."""

import itertools

import pytest

from controlplane.cuts import lower_bound
from controlplane.models import RetentionRecord, stream_pk
from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from rillet.framing import frame
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from rillet.names import segment_name
from rillet.stream_cut import Ordering, compare_positions

EVENT = frame(b"x" * 96)  # 100 bytes per event


@pytest.fixture
def controller(deployment):
    return Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))


def _stream(controller, scope, policy, segments=1):
    controller.streams.create_scope(scope)
    controller.streams.create_stream(scope, "s", StreamConfiguration(
        scaling_policy=ScalingPolicy.fixed(segments), retention_policy=policy))


class Appender:
    def __init__(self, controller, scope):
        self.controller, self.scope, self.numbers = controller, scope, {}

    def __call__(self, segment_id, events=1):
        for _ in range(events):
            n = self.numbers.get(segment_id, 0)
            self.controller.segments.append(segment_name(self.scope, "s", segment_id), "w", n, 1, EVENT)
            self.numbers[segment_id] = n + 1


def _grow(controller, scope, ticks, per_tick=1, segments=(0,), start=0):
    """Append ``per_tick`` events to each segment, then run a cycle, ``ticks`` times (1 s apart)."""
    append = Appender(controller, scope)
    decisions = []
    for t in range(start, start + ticks):
        for sid in segments:
            append(sid, per_tick)
        decisions.append(controller.retention.cycle(scope, "s", now=(t + 1) * 1000))
    return decisions


def _head_offsets(controller, scope):
    return {p.segment.segment_id: p.offset for p in controller.streams.head(scope, "s")}


def _subscribe(controller, scope, offsets, group="g"):
    cut = controller.streams.resolve_cut(scope, "s", offsets)
    controller.retention.add_subscriber(scope, "s", f"{scope}/{group}", 0, cut)


def test_size_policy_without_max_keeps_the_most_recent_cut_above_the_minimum(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_size(250))
    decisions = _grow(controller, unique, ticks=6)
    # Records at 100..600 bytes. At 600 bytes the most recent cut keeping >= 250 is at 300 (keeps 300).
    assert _head_offsets(controller, unique) == {0: 300}
    assert decisions[-1].outcome == "truncated" and decisions[-1].retained_bytes == 300
    assert [d.outcome for d in decisions[:2]] == ["kept", "kept"]  # 100 and 200 bytes: below the minimum


def test_time_policy_truncates_data_older_than_the_minimum(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_time(2_500))
    _grow(controller, unique, ticks=6)
    # At t=6 s the most recent cut recorded at least 2.5 s earlier is the one of t=3 s (300 bytes).
    assert _head_offsets(controller, unique) == {0: 300}


def test_truncation_never_goes_backwards_and_leaves_other_streams_alone(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_size(250))
    _grow(controller, unique, ticks=6)
    again = controller.retention.cycle(unique, "s", now=6_500)
    assert again.outcome == "kept" and _head_offsets(controller, unique) == {0: 300}


def _cbr(controller, unique, minimum, maximum, subscriber_offset, ticks=10):
    policy = RetentionPolicy.by_size(minimum, maximum).with_consumption(subscriber_timeout=10**9)
    _stream(controller, unique, policy)
    _subscribe(controller, unique, {0: 0})
    _grow(controller, unique, ticks=ticks - 1)
    Appender(controller, unique).numbers = {}
    controller.segments.append(segment_name(unique, "s", 0), "w", ticks - 1, 1, EVENT)
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {0: subscriber_offset})
    return controller.retention.cycle(unique, "s", now=ticks * 1000)


def test_cbr_case_i_lower_bound_within_the_limits(controller, unique):
    decision = _cbr(controller, unique, 100, 300, subscriber_offset=800)  # keeps 200 of 1000
    assert decision.reason.startswith("i:") and _head_offsets(controller, unique) == {0: 800}


def test_cbr_case_ii_lower_bound_keeps_less_than_the_minimum(controller, unique):
    decision = _cbr(controller, unique, 150, 300, subscriber_offset=950)  # keeps 50 < 150
    assert decision.reason.startswith("ii:")
    assert _head_offsets(controller, unique) == {0: 800}  # the most recent record keeping >= 150


def test_cbr_case_iii_lower_bound_keeps_more_than_the_maximum(controller, unique):
    decision = _cbr(controller, unique, 100, 300, subscriber_offset=200)  # keeps 800 > 300
    assert decision.reason.startswith("iii:")
    # The oldest record keeping <= 300: 800, since the earlier cycles truncated at 700 and, as in Pravega,
    # dropped that record with the older ones.
    assert _head_offsets(controller, unique) == {0: 800}


def test_cbr_never_truncates_past_the_subscriber_without_a_maximum(controller, unique):
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)
    _stream(controller, unique, policy)
    _subscribe(controller, unique, {0: 0})
    _grow(controller, unique, ticks=5)
    assert _head_offsets(controller, unique) == {0: 0}  # the subscriber has read nothing yet
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {0: 300})
    controller.retention.cycle(unique, "s", now=6_000)
    assert _head_offsets(controller, unique) == {0: 300}


def test_lower_bound_over_cuts_on_different_epochs(controller, unique):
    _stream(controller, unique, None, segments=1)
    append = Appender(controller, unique)
    append(0, 3)
    epoch1 = controller.streams.scale_stream(unique, "s", [0], [(0.0, 0.5), (0.5, 1.0)])
    a, b = [s.segment_id for s in controller.streams.current_segments(unique, "s")]
    append(a, 2)
    append(b, 2)
    records = {r.segment_id: r for r in controller.store.list_segments(unique, "s")}
    old = controller.streams.resolve_cut(unique, "s", {0: 200})
    new = controller.streams.resolve_cut(unique, "s", {a: 100, b: 200})
    bound = lower_bound([old, new], records)
    assert {p.segment.segment_id: p.offset for p in bound} == {0: 200}
    # One subscriber past the split on one half only: the bound is the predecessor at its end there.
    mixed = controller.streams.resolve_cut(unique, "s", {a: 100, b: 0})
    bound = lower_bound([mixed, new], records)
    assert {p.segment.segment_id: p.offset for p in bound} == {a: 100, b: 0}
    assert epoch1 == 1
    assert compare_positions(bound, new) == Ordering.BEFORE


def test_cbr_case_iv_lower_bound_overlapping_the_minimum_cut(controller, unique):
    # Two segments; the subscriber is far ahead on one and behind on the other, so its cut and the
    # minimum-limit cut are not comparable: truncate at the latest retention cut before the lower bound.
    policy = RetentionPolicy.by_size(600).with_consumption(subscriber_timeout=10**9)
    _stream(controller, unique, policy, segments=2)
    _subscribe(controller, unique, {0: 0, 1: 0})
    _grow(controller, unique, ticks=5, segments=(0, 1))  # records at (100,100) .. (500,500)
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {0: 500, 1: 150})
    decision = controller.retention.cycle(unique, "s", now=6_000)
    assert decision.reason.startswith("iv:")
    assert _head_offsets(controller, unique) == {0: 100, 1: 100}


def test_inactive_subscriber_is_ignored_and_fallback_applies(controller, unique):
    policy = RetentionPolicy.by_size(250).with_consumption(subscriber_timeout=2_000, fallback_after=3_000)
    _stream(controller, unique, policy)
    _subscribe(controller, unique, {0: 0})
    sub = controller.retention.subscribers(unique, "s")[0]
    sub.update(actions=[type(sub).updated_ms.set(0)])  # last heard of at t=0
    decisions = _grow(controller, unique, ticks=6)
    # t=1..2 s: the subscriber is active and at 0: nothing. t=3 s: inactive, fallback not due yet.
    assert [d.outcome for d in decisions[:3]] == ["kept", "kept", "kept"]
    assert "no active subscriber" in decisions[2].reason
    assert decisions[-1].outcome == "truncated" and "fallback" in decisions[-1].reason
    assert _head_offsets(controller, unique) == {0: 300}


def test_no_active_subscriber_and_no_fallback_truncates_nothing(controller, unique):
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=1_000)
    _stream(controller, unique, policy)
    _subscribe(controller, unique, {0: 0})
    decisions = _grow(controller, unique, ticks=5, start=100)  # long after the subscriber went silent
    assert all(d.outcome == "kept" for d in decisions)
    assert _head_offsets(controller, unique) == {0: 0}


def test_subscriber_cut_never_moves_backwards_and_must_be_valid(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9), segments=2)
    _subscribe(controller, unique, {0: 0, 1: 0})
    _grow(controller, unique, ticks=3, segments=(0, 1))
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {0: 200, 1: 200})
    from rillet.errors import InvalidArgument
    with pytest.raises(InvalidArgument):
        controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {0: 100, 1: 200})
    with pytest.raises(InvalidArgument):
        controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {0: 300})  # not the key space


def _retention_set(scope):
    return list(RetentionRecord.query(stream_pk(scope, "s"), RetentionRecord.sk.startswith("rs#"), consistent_read=True))


def test_a_set_that_nothing_truncates_stays_within_its_bound_and_covers_its_whole_history(deployment, unique):
    controller = Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1, max_records=5))
    _stream(controller, unique, RetentionPolicy.by_size(2_000))
    append, decisions = Appender(controller, unique), []
    for t in range(1, 26):  # 100 B a second, a cycle each second
        append(0)
        decisions.append(controller.retention.cycle(unique, "s", now=t * 1000))
        if t == 17:  # 1,700 bytes: below the minimum, nothing truncated yet
            assert all(d.outcome == "kept" for d in decisions)
            times = [r.recorded_ms for r in _retention_set(unique)]
            # Evenly spaced records thin evenly: the first and the last stay, the step grows (16 s, 4 gaps).
            assert len(times) == 5 and times[0] == 1_000 and times[-1] == 17_000
            assert max(b - a for a, b in itertools.pairwise(times)) <= 5_000
    # Unthinned, the cut at 500 bytes would keep exactly 2,000; thinned, a record keeping more is taken.
    truncated = [d for d in decisions if d.outcome == "truncated"]
    assert truncated and all(d.retained_bytes >= 2_000 for d in truncated)
    assert 0 < _head_offsets(controller, unique)[0] <= 500
    assert len(_retention_set(unique)) <= 5


def test_dropping_a_retention_record_that_a_racing_cycle_dropped_is_no_error(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_size(10_000))
    _grow(controller, unique, ticks=2)
    stale = _retention_set(unique)[0]
    RetentionRecord.get(stale.pk, stale.sk, consistent_read=True).delete()
    controller.retention._drop(stale)
    assert [r.recorded_ms for r in _retention_set(unique)] == [2_000]


def test_a_reset_that_lost_a_race_neither_replaces_nor_removes_a_later_generations_subscription(controller, unique):
    _stream(controller, unique, RetentionPolicy.by_size(10_000))
    retention, group, head = controller.retention, f"{unique}/g", controller.streams.head(unique, "s")
    retention.add_subscriber(unique, "s", group, 2, head)
    retention.add_subscriber(unique, "s", group, 1, head)  # an older reset, answered late
    assert retention.acknowledged_cut(unique, "s", group).generation == 2
    retention.remove_subscriber(unique, "s", group, 1)  # the older reset dropping the stream
    assert [s.generation for s in retention.subscribers(unique, "s")] == [2]
    retention.remove_subscriber(unique, "s", group, 2)
    assert retention.subscribers(unique, "s") == []
    retention.remove_subscriber(unique, "s", group, 2)  # repeated: already gone, no error
