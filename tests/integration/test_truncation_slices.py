"""Size between stream cuts and truncation, on moto with an in-process Controller.

Events of known sizes are appended in phases, with a random scale (split, merge or mixed) between
phases; the tail cut T_i is taken at the end of phase i. The bytes between T_i and T_j are then
exactly those appended in phases i+1..j, which is what ``slices`` must return, slice by slice.
Truncation at T_k must leave head..tail equal to everything appended after phase k.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest

from controlplane.streams import now_ms
from rillet.errors import IllegalState, InvalidArgument, SegmentNotFound, Truncated
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState
from rillet.names import segment_name
from rillet.stream_cut import segment_is_before

STREAM = "s"


@pytest.fixture
def scope(controller, unique) -> str:
    controller.streams.create_scope(unique)
    return unique


@dataclass
class Appended:
    segment: int
    offset: int
    size: int  # framed
    phase: int


@dataclass
class Run:
    scope: str
    events: list[Appended] = field(default_factory=list)
    tails: list[dict[int, int]] = field(default_factory=list)  # T_i as {segment: offset}
    next_event: dict[int, int] = field(default_factory=dict)

    def bytes_in(self, phases: range) -> int:
        return sum(e.size for e in self.events if e.phase in phases)

    def expected_ranges(self, phases: range) -> dict[int, list[tuple[int, int]]]:
        ranges: dict[int, list[tuple[int, int]]] = {}
        for e in self.events:
            if e.phase in phases:
                ranges.setdefault(e.segment, []).append((e.offset, e.offset + e.size))
        return ranges


def append_phase(controller, run: Run, phase: int, rnd: random.Random) -> None:
    tasks = controller.streams
    for _ in range(rnd.randint(3, 8)):
        segment = rnd.choice(tasks.current_segments(run.scope, STREAM)).segment_id
        data = frame(bytes([97 + phase % 26]) * rnd.randint(0, 300))
        number = run.next_event.get(segment, 0)
        result = controller.segments.append(segment_name(run.scope, STREAM, segment), "w", number, 1, data)
        run.next_event[segment] = number + 1
        run.events.append(Appended(segment, result.offset, len(data), phase))


def random_scale(controller, run: Run, rnd: random.Random) -> None:
    current = controller.streams.current_segments(run.scope, STREAM)
    kind = rnd.choice(["split", "merge", "mixed"]) if len(current) > 1 else "split"
    if kind == "split":
        first, count, parts = rnd.randrange(len(current)), 1, rnd.randint(2, 3)
    elif kind == "merge":
        count = rnd.randint(2, min(3, len(current)))
        first, parts = rnd.randint(0, len(current) - count), 1
    else:
        count = 2
        first, parts = rnd.randint(0, len(current) - count), 3
    sealed = current[first:first + count]
    low, high = sealed[0].low, sealed[-1].high
    bounds = [low] + [low + (high - low) * i / parts for i in range(1, parts)] + [high]
    controller.streams.scale_stream(run.scope, STREAM, [s.segment_id for s in sealed], list(itertools.pairwise(bounds)))


def build(controller, scope: str, seed: int, phases: int = 6) -> Run:
    rnd = random.Random(seed)
    controller.streams.create_stream(scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    run = Run(scope)
    for phase in range(phases):
        append_phase(controller, run, phase, rnd)
        run.tails.append({p.segment.segment_id: p.offset for p in controller.streams.tail(scope, STREAM)})
        if phase < phases - 1:
            random_scale(controller, run, rnd)
    return run


def slice_ranges(slices) -> dict[int, list[tuple[int, int]]]:
    return {s.segment.segment_id: [(s.start_offset, s.end_offset)] for s in slices if s.end_offset > s.start_offset}


def covered(expected: dict[int, list[tuple[int, int]]]) -> dict[int, list[tuple[int, int]]]:
    """Adjacent event ranges of a segment joined: what one slice per segment must be."""
    joined = {}
    for segment, ranges in expected.items():
        ranges = sorted(ranges)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges)), "events of a phase range are contiguous"
        joined[segment] = [(ranges[0][0], ranges[-1][1])]
    return joined


@pytest.mark.parametrize("seed", [4, 11])
def test_bytes_between_cuts_are_the_bytes_appended_between_them(controller, scope, seed):
    run = build(controller, scope, seed)
    tasks = controller.streams
    n = len(run.tails)
    total = run.bytes_in(range(n))
    assert sum(s.end_offset - s.start_offset for s in tasks.slices(scope, STREAM)) == total
    for i in range(n):
        # head..T_i and T_i..tail
        upto = tasks.slices(scope, STREAM, None, run.tails[i])
        assert sum(s.end_offset - s.start_offset for s in upto) == run.bytes_in(range(i + 1)), i
        assert slice_ranges(upto) == covered(run.expected_ranges(range(i + 1)))
        after = tasks.slices(scope, STREAM, run.tails[i], None)
        assert sum(s.end_offset - s.start_offset for s in after) == run.bytes_in(range(i + 1, n)), i
        for j in range(i, n):
            between = tasks.slices(scope, STREAM, run.tails[i], run.tails[j])
            assert sum(s.end_offset - s.start_offset for s in between) == run.bytes_in(range(i + 1, j + 1)), (i, j)
            assert slice_ranges(between) == covered(run.expected_ranges(range(i + 1, j + 1))), (i, j)
            if j > i and run.bytes_in(range(i + 1, j + 1)):
                with pytest.raises(InvalidArgument):
                    tasks.slices(scope, STREAM, run.tails[j], run.tails[i])


def test_truncation_moves_the_head_forward_only_at_valid_cuts(controller, scope):
    run = build(controller, scope, seed=7, phases=5)
    tasks = controller.streams
    n = len(run.tails)
    k = 2
    cut = run.tails[k]
    head_before = tasks.head(scope, STREAM)

    # invalid cuts: a segment missing, a segment of the stream that overlaps, an unknown segment,
    # an offset beyond the segment's length
    some = min(cut)
    with pytest.raises(InvalidArgument):
        tasks.truncate_stream(scope, STREAM, {s: o for s, o in cut.items() if s != some})
    other = next(r.segment_id for r in controller.store.list_segments(scope, STREAM) if r.segment_id not in cut)
    with pytest.raises(InvalidArgument):
        tasks.truncate_stream(scope, STREAM, {**cut, other: 0})
    with pytest.raises(InvalidArgument):
        tasks.truncate_stream(scope, STREAM, {**{s: o for s, o in cut.items() if s != some}, 987654321: 0})
    final = run.tails[-1]
    live = next(s for s in final if final[s] > 0)
    with pytest.raises(InvalidArgument):
        tasks.truncate_stream(scope, STREAM, {**final, live: final[live] + 1})
    assert tasks.head(scope, STREAM) == head_before

    tasks.truncate_stream(scope, STREAM, cut)
    record = controller.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.workflow is None
    assert {p.segment.segment_id: p.offset for p in tasks.head(scope, STREAM)} == cut
    assert sum(s.end_offset - s.start_offset for s in tasks.slices(scope, STREAM)) == run.bytes_in(range(k + 1, n))
    assert [p.segment.segment_id for p in tasks.stream_info(scope, STREAM).head] == sorted(
        cut, key=lambda s: next(p.segment.low for p in tasks.head(scope, STREAM) if p.segment.segment_id == s))

    # the data plane: segments wholly before the cut are gone, the cut's segments start at the cut
    cut_ranges = [p.segment for p in tasks.head(scope, STREAM)]
    gone = []
    for record in controller.store.list_segments(scope, STREAM):
        name = segment_name(scope, STREAM, record.segment_id)
        if segment_is_before(record_range(record), cut_ranges):
            gone.append(record.segment_id)
            with pytest.raises(SegmentNotFound):
                controller.segments.info(name)
            with pytest.raises(SegmentNotFound):
                controller.segments.read(name, 0)
        elif record.segment_id in cut:
            info = controller.segments.info(name)
            assert info.start_offset == cut[record.segment_id]
            if cut[record.segment_id] > 0:
                with pytest.raises(Truncated) as e:
                    controller.segments.read(name, cut[record.segment_id] - 1)
                assert e.value.details["start_offset"] == cut[record.segment_id]
            controller.segments.read(name, cut[record.segment_id])  # reading at the head works
        else:  # after the cut: untouched
            assert controller.segments.info(name).start_offset == 0
    assert gone, "the scales before the cut left segments wholly before it"
    # successors of deleted segments are still known (lagging readers follow them to the head)
    assert all(tasks.successors(scope, STREAM, sid) for sid in gone)

    # backwards, or back and forth: rejected; the same cut again: nothing to do
    for back in (run.tails[k - 1], run.tails[0]):
        with pytest.raises(InvalidArgument):
            tasks.truncate_stream(scope, STREAM, back)
    tasks.truncate_stream(scope, STREAM, cut)
    assert {p.segment.segment_id: p.offset for p in tasks.head(scope, STREAM)} == cut
    later = run.tails[k + 1]
    lowerable = [s for s in cut if cut[s] > 0]
    assert lowerable
    with pytest.raises(InvalidArgument):  # back on one segment
        tasks.truncate_stream(scope, STREAM, {**cut, lowerable[0]: cut[lowerable[0]] - 1})
    raisable = [t for t in cut if t in final and final[t] > cut[t]]
    pairs = [(s, t) for s in lowerable for t in raisable if s != t]
    if pairs:  # forward on one segment, back on another
        s, t = pairs[0]
        with pytest.raises(InvalidArgument):
            tasks.truncate_stream(scope, STREAM, {**cut, s: cut[s] - 1, t: final[t]})
    assert {p.segment.segment_id: p.offset for p in tasks.head(scope, STREAM)} == cut

    # forward again
    tasks.truncate_stream(scope, STREAM, later)
    assert sum(s.end_offset - s.start_offset for s in tasks.slices(scope, STREAM)) == run.bytes_in(range(k + 2, n))
    assert pending_for(controller, scope) == []


def test_truncation_barrier_and_sealed_streams(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    controller.segments.append(segment_name(scope, STREAM, 0), "w", 0, 1, frame(b"abc"))
    tasks.seal_stream(scope, STREAM)
    # a sealed stream cannot be truncated any more (SEALED is final)
    with pytest.raises(IllegalState):
        tasks.truncate_stream(scope, STREAM, {0: 7})


def test_a_different_truncation_while_one_is_in_flight_is_not_silently_dropped(controller, scope, monkeypatch):
    """A truncation interrupted after its first step leaves the stream TRUNCATING. A request for
    another cut must then either be refused (as a different scale request is, with IllegalState) or
    truncate at the cut it names; it must not answer success while leaving the head elsewhere."""
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    name = segment_name(scope, STREAM, 0)
    for i in range(3):
        controller.segments.append(name, "w", i, 1, frame(b"x" * 10))

    class Interrupted(Exception):
        pass

    def interrupted(record):
        raise Interrupted

    with monkeypatch.context() as m:
        m.setattr(tasks, "finish_truncate_stream", interrupted)
        with pytest.raises(Interrupted):
            tasks.truncate_stream(scope, STREAM, {0: 14})
    assert controller.store.get_stream(scope, STREAM).state == StreamState.TRUNCATING.value
    try:
        tasks.truncate_stream(scope, STREAM, {0: 28})
    except IllegalState:
        return  # refused: the caller knows its cut was not applied
    assert {p.segment.segment_id: p.offset for p in tasks.head(scope, STREAM)} == {0: 28}, \
        "truncate_stream answered success but the stream was truncated at the earlier in-flight cut"


def record_range(record):
    from rillet.models import SegmentRange

    return SegmentRange(segment_id=record.segment_id, low=record.low, high=record.high)


def pending_for(controller, scope: str) -> list:
    return [i for i in controller.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == scope]
