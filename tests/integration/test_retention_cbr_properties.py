"""Consumption-based retention against moto: a property test of invariant 4 and exact lower bounds
across epochs.

The property test drives a fresh 1-3 segment stream per example through random appends, at most one
scale (a split or a merge), random acknowledgements by one or two subscribers (valid cuts built from
positions the test appended to, never moving backwards) and retention cycles at increasing times,
with a size policy without maximum (random minimum) and consumption limits with a huge subscriber
timeout. After every cycle: (a) the head is at or before every subscriber's acknowledged cut,
(b) a truncation in that cycle keeps at least the minimum, (c) the head never moves back. At the
end, with a zero minimum and every subscriber at the tail, the stream is truncated to the tail.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from rillet.errors import SegmentNotFound
from rillet.framing import frame
from rillet.models import RetentionPolicy, ScalingPolicy, SegmentPosition, StreamConfiguration
from rillet.names import segment_name
from rillet.stream_cut import Ordering, compare_positions, validity_problem

EVENT = frame(b"e" * 96)  # 100 bytes per event: every multiple of 100 up to a length is an event boundary
SIZE = len(EVENT)


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture
def controller(deployment):
    # a retention-set record at every cycle, so the cycles' explicit times decide everything
    return Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))


class Model:
    """What the test wrote: segments (key ranges, epoch), events per segment, the scale if any."""

    def __init__(self, controller: Controller, scope: str) -> None:
        self.controller, self.scope = controller, scope
        self.events: dict[int, int] = {}
        self.numbers: dict[int, int] = {}
        self.old = [s.segment_id for s in controller.streams.current_segments(scope, "s")]  # epoch 0
        self.new: list[int] | None = None  # epoch 1, once scaled
        self.sealed: list[int] = []
        self.ranges = {s.segment_id: s for s in controller.streams.current_segments(scope, "s")}

    @property
    def current(self) -> list[int]:
        return self.new if self.new is not None else self.old

    def append(self, sid: int, n: int) -> None:
        for _ in range(n):
            number = self.numbers.get(sid, 0)
            self.controller.segments.append(segment_name(self.scope, "s", sid), "w", number, 1, EVENT)
            self.numbers[sid] = number + 1
            self.events[sid] = self.events.get(sid, 0) + 1

    def scale(self, seal: list[int], ranges: list[tuple[float, float]]) -> None:
        self.controller.streams.scale_stream(self.scope, "s", seal, ranges)
        current = self.controller.streams.current_segments(self.scope, "s")
        self.ranges.update({s.segment_id: s for s in current})
        self.new = [s.segment_id for s in current]
        self.sealed = seal

    def form(self, new: bool) -> list[int]:
        """The segments of a cut: the first epoch's or the second's."""
        return self.new if new else self.old

    def positions(self, offsets: dict[int, int]) -> list[SegmentPosition]:
        return [SegmentPosition(segment=self.ranges[s], offset=o) for s, o in offsets.items()]


def _offsets(cut: list[SegmentPosition]) -> dict[int, int]:
    return {p.segment.segment_id: p.offset for p in cut}


def _retained(controller: Controller, scope: str) -> int:
    return sum(s.end_offset - s.start_offset for s in controller.streams.slices(scope, "s"))


# No shrinking: every step costs moto requests, and the drawn steps are printed on failure anyway.
@settings(max_examples=12, deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_cbr_never_truncates_past_a_subscriber_nor_below_the_minimum_nor_backwards(controller, data):
    draw = data.draw
    scope = "p" + uuid.uuid4().hex[:12]  # a fresh stream per example
    n = draw(st.integers(1, 3), label="segments")
    minimum = draw(st.sampled_from([0, 0, 100, 250, 400]), label="minimum")
    policy = RetentionPolicy.by_size(minimum).with_consumption(subscriber_timeout=10**9)
    controller.streams.create_scope(scope)
    controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(n),
                                                                     retention_policy=policy))
    model = Model(controller, scope)
    head = controller.streams.head(scope, "s")
    subscribers: dict[str, dict[int, int]] = {}
    for g in range(draw(st.integers(1, 2), label="subscribers")):
        group = f"{scope}/g{g}"
        controller.retention.add_subscriber(scope, "s", group, 0, head)
        subscribers[group] = _offsets(head)
    now = 1_000

    def publish(group: str) -> None:
        previous = subscribers[group]
        # once a subscriber's cut names the second epoch's segments, it never goes back to the first's
        new_form = model.new is not None and (any(s in previous for s in model.new if s not in model.old)
                                              or draw(st.booleans(), label="new form"))
        offsets = {}
        for sid in model.form(new_form):
            low = previous.get(sid, 0) // SIZE
            offsets[sid] = draw(st.integers(low, model.events.get(sid, 0)), label=f"offset {sid}") * SIZE
        stored = controller.retention.update_truncation_cut(scope, "s", group, 0, offsets)
        assert _offsets(stored) == offsets
        subscribers[group] = offsets

    def cycle() -> None:
        nonlocal now, head
        now += draw(st.integers(1, 3), label="seconds") * 1000
        before_retained = _retained(controller, scope)
        decision = controller.retention.cycle(scope, "s", now=now)
        new_head = controller.streams.head(scope, "s")
        assert validity_problem([p.segment for p in new_head]) is None
        # (c) the head only moves forward
        assert compare_positions(new_head, head) in (Ordering.AFTER, Ordering.EQUAL), (head, new_head, decision)
        moved = compare_positions(new_head, head) == Ordering.AFTER
        assert moved == (decision.outcome == "truncated"), decision
        # (a) never past an active subscriber's acknowledged cut
        for group, offsets in subscribers.items():
            relation = compare_positions(new_head, model.positions(offsets))
            assert relation in (Ordering.BEFORE, Ordering.EQUAL), (group, offsets, _offsets(new_head), decision)
        # (b) a truncation keeps at least the minimum
        retained = _retained(controller, scope)
        if moved:
            assert retained >= minimum, (retained, minimum, decision)
            assert decision.retained_bytes == retained
            assert retained <= before_retained  # equal when only emptied segments were passed
        else:
            assert retained == before_retained
        head = new_head

    for _ in range(draw(st.integers(4, 12), label="steps")):
        op = draw(st.sampled_from(["append", "append", "publish", "publish", "cycle", "cycle", "scale"]), label="op")
        if op == "append":
            sid = draw(st.sampled_from(model.current), label="segment")
            model.append(sid, draw(st.integers(1, 3), label="events"))
        elif op == "publish":
            publish(draw(st.sampled_from(sorted(subscribers)), label="subscriber"))
        elif op == "cycle":
            cycle()
        elif model.new is None:  # at most one scale: a split, or a merge of two neighbours
            current = [model.ranges[s] for s in model.current]
            if len(current) == 1 or draw(st.booleans(), label="split"):
                s = current[draw(st.integers(0, len(current) - 1), label="split index")]
                mid = (s.low + s.high) / 2
                model.scale([s.segment_id], [(s.low, mid), (mid, s.high)])
            else:
                i = draw(st.integers(0, len(current) - 2), label="merge index")
                a, b = current[i], current[i + 1]
                model.scale([a.segment_id, b.segment_id], [(a.low, b.high)])
    cycle()

    # every subscriber acknowledges the tail: with a zero minimum, the next cycle truncates to it
    tail = controller.streams.tail(scope, "s")
    for group in subscribers:
        controller.retention.update_truncation_cut(scope, "s", group, 0, _offsets(tail))
        subscribers[group] = _offsets(tail)
    cycle()
    if minimum == 0:
        assert compare_positions(head, tail) == Ordering.EQUAL, (_offsets(head), _offsets(tail))


# -- exact lower bounds after scaling ----------------------------------------------------------------


def test_truncation_is_the_exact_lower_bound_of_subscribers_on_different_epochs(controller, unique):
    """Two segments; segment 0 splits into a and b. One subscriber is behind the split, the other past it
    on the split half and behind on the other: the truncation is the lower bound, offset by offset."""
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2),
                                                                      retention_policy=policy))
    model = Model(controller, unique)
    s0, s1 = model.old
    head = controller.streams.head(unique, "s")
    for g in ("behind", "past"):
        controller.retention.add_subscriber(unique, "s", f"{unique}/{g}", 0, head)
    model.append(s0, 3)
    model.append(s1, 4)
    model.scale([s0], [(0.0, 0.25), (0.25, 0.5)])
    a, b = [s for s in model.new if s != s1]
    model.append(a, 2)
    model.append(b, 3)
    model.append(s1, 2)

    def publish(group: str, offsets: dict[int, int]) -> None:
        controller.retention.update_truncation_cut(unique, "s", f"{unique}/{group}", 0, offsets)

    publish("behind", {s0: 200, s1: 500})
    publish("past", {a: 100, b: 0, s1: 300})
    decision = controller.retention.cycle(unique, "s", now=1_000)
    assert decision.outcome == "truncated" and decision.reason.startswith("i:"), decision
    assert _offsets(controller.streams.head(unique, "s")) == {s0: 200, s1: 300}
    assert decision.retained_bytes == (300 - 200) + (600 - 300) + 200 + 300

    # the first subscriber passes the split too: the bound now mixes epochs (a, b of epoch 1, s1 of 0)
    publish("behind", {a: 200, b: 100, s1: 600})
    decision = controller.retention.cycle(unique, "s", now=2_000)
    assert decision.outcome == "truncated", decision
    assert _offsets(controller.streams.head(unique, "s")) == {a: 100, b: 0, s1: 300}
    # segment 0 lies wholly before the head: its data is released
    with pytest.raises(SegmentNotFound):
        controller.segments.info(segment_name(unique, "s", s0))

    # a subscriber at the sealed end of s0 on one half is not behind one at b@0: nothing moves back
    publish("past", {a: 200, b: 300, s1: 600})
    decision = controller.retention.cycle(unique, "s", now=3_000)
    assert _offsets(controller.streams.head(unique, "s")) == {a: 200, b: 100, s1: 600}
    for offsets in ({a: 200, b: 100, s1: 600}, {a: 200, b: 300, s1: 600}):
        assert compare_positions(controller.streams.head(unique, "s"), model.positions(offsets)) in (
            Ordering.BEFORE, Ordering.EQUAL)


def test_truncation_is_the_exact_lower_bound_across_a_merge(controller, unique):
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2),
                                                                      retention_policy=policy))
    model = Model(controller, unique)
    s0, s1 = model.old
    head = controller.streams.head(unique, "s")
    for g in ("slow", "fast"):
        controller.retention.add_subscriber(unique, "s", f"{unique}/{g}", 0, head)
    model.append(s0, 2)
    model.append(s1, 3)
    model.scale([s0, s1], [(0.0, 1.0)])
    (m,) = model.new
    model.append(m, 4)
    # "slow" finished s1 but not s0; "fast" is inside the merged segment
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/slow", 0, {s0: 100, s1: 300})
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/fast", 0, {m: 200})
    controller.retention.cycle(unique, "s", now=1_000)
    assert _offsets(controller.streams.head(unique, "s")) == {s0: 100, s1: 300}
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/slow", 0, {m: 300})
    controller.retention.cycle(unique, "s", now=2_000)
    assert _offsets(controller.streams.head(unique, "s")) == {m: 200}
    assert _retained(controller, unique) == 200


# -- a young retention set ----------------------------------------------------------------------------


def test_first_cycle_truncates_at_a_lower_bound_that_keeps_the_minimum(controller, unique):
    """Case i needs no retention-set record: the subscribers' lower bound itself keeps at least the
    minimum (and less than the maximum), so the very first cycle truncates there (as Pravega does:
    the min/max records are consulted only when the lower bound keeps too little or too much)."""
    policy = RetentionPolicy.by_size(100, 1_000).with_consumption(subscriber_timeout=10**9)
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1),
                                                                      retention_policy=policy))
    model = Model(controller, unique)
    (s0,) = model.old
    controller.retention.add_subscriber(unique, "s", f"{unique}/g", 0, controller.streams.head(unique, "s"))
    model.append(s0, 5)
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {s0: 200})
    decision = controller.retention.cycle(unique, "s", now=1_000)  # the retention set: only this tail (500)
    assert decision.outcome == "truncated" and decision.reason.startswith("i:"), decision
    assert _offsets(controller.streams.head(unique, "s")) == {s0: 200}
    assert decision.retained_bytes == 300

    # a lower bound that keeps less than the minimum still needs a record keeping the minimum
    controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {s0: 450})
    decision = controller.retention.cycle(unique, "s", now=1_001)  # records: 500 (t=1000), 500 (t=1001)
    assert decision.outcome == "kept", decision
    assert _offsets(controller.streams.head(unique, "s")) == {s0: 200}
