"""The scale workflow on moto with an in-process Controller: validation, the state barrier, successors
and predecessors after splits and merges, sealed sizes, segments at a time, scale status.

Expected segment ids, ranges, successors and predecessors come from :class:`history.ScalingHistory`,
a model that numbers new segments the way the controller must (epoch << 32 | running number, in key
order).
"""

from __future__ import annotations

import threading

import pytest

from controlplane.streams import now_ms
from rillet.errors import IllegalState, InvalidArgument, RilletError, SegmentSealed, WriteConflict
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState
from rillet.names import segment_name

try:
    from history import ScalingHistory
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import ScalingHistory

STREAM = "s"


def fixed(n: int) -> StreamConfiguration:
    return StreamConfiguration(scaling_policy=ScalingPolicy.fixed(n))


@pytest.fixture
def scope(controller, unique) -> str:
    controller.streams.create_scope(unique)
    return unique


def pending_for(controller, scope: str, stream: str) -> list:
    return [i for i in controller.store.pending_workflows(now_ms())
            if getattr(i, "scope", None) == scope and getattr(i, "stream", None) == stream]


def current(controller, scope: str) -> list[tuple[int, float, float]]:
    return [(s.segment_id, s.low, s.high) for s in controller.streams.current_segments(scope, STREAM)]


def model_current(history: ScalingHistory) -> list[tuple[int, float, float]]:
    return [(s, history.segments[s].low, history.segments[s].high) for s in history.current]


def append(controller, scope: str, sid: int, sizes: list[int], writer: str = "w") -> int:
    """Append one event per size (as ``writer``, event numbers from 0); returns the segment's length."""
    name = segment_name(scope, STREAM, sid)
    for number, size in enumerate(sizes):
        result = controller.segments.append(name, writer, number, 1, frame(bytes([65 + sid % 26]) * size))
        assert not result.duplicate
    return controller.segments.info(name).length


def assert_unchanged(controller, scope: str, epoch: int, segments: list) -> None:
    record = controller.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.current_epoch == epoch
    assert record.workflow is None and pending_for(controller, scope, STREAM) == []
    assert current(controller, scope) == segments


# -- validation ------------------------------------------------------------------------------------


def test_scale_requests_are_validated(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, fixed(4))  # [0,.25) [.25,.5) [.5,.75) [.75,1)
    before = current(controller, scope)
    a, b, c, d = (s for s, _, _ in before)
    bad = [
        ([], [(0.0, 0.25)]),  # nothing to seal
        ([99], [(0.0, 0.25)]),  # no such segment
        ([a, 99], [(0.0, 0.5)]),
        ([a], [(0.0, 0.2)]),  # does not reach the sealed range's end
        ([a], [(0.0, 0.1), (0.15, 0.25)]),  # a gap
        ([a], [(0.0, 0.2), (0.1, 0.25)]),  # an overlap
        ([a], [(0.0, 0.25), (0.0, 0.25)]),  # the same range twice
        ([a], [(0.0, 0.3)]),  # beyond the sealed range
        ([a], [(0.0, 0.1), (0.1, 0.1), (0.1, 0.25)]),  # an empty range
        ([a], [(-0.1, 0.25)]),
        ([d], [(0.75, 1.5)]),
        ([a, c], [(0.0, 0.75)]),  # not adjacent: would take over b's keys
        ([a, c], [(0.0, 0.25)]),  # c's range not covered
    ]
    for seal, ranges in bad:
        with pytest.raises(InvalidArgument):
            tasks.scale_stream(scope, STREAM, seal, ranges)
        assert_unchanged(controller, scope, 0, before)

    # non-adjacent segments may be replaced in one scale when each range is covered exactly
    assert tasks.scale_stream(scope, STREAM, [a, c], [(0.0, 0.25), (0.5, 0.625), (0.625, 0.75)]) == 1
    # a segment that is no longer current cannot be sealed again (with another request)
    with pytest.raises(InvalidArgument):
        tasks.scale_stream(scope, STREAM, [a], [(0.0, 0.125), (0.125, 0.25)])
    with pytest.raises(InvalidArgument):
        tasks.scale_stream(scope, STREAM, [a, b], [(0.0, 0.5)])
    assert controller.store.get_stream(scope, STREAM).current_epoch == 1


def test_repeating_a_finished_scale_returns_its_epoch(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, fixed(2))
    assert tasks.scale_stream(scope, STREAM, [0], [(0.0, 0.25), (0.25, 0.5)]) == 1
    after = current(controller, scope)
    # the same request again, with the ranges in another order: same epoch, nothing new
    assert tasks.scale_stream(scope, STREAM, [0], [(0.25, 0.5), (0.0, 0.25)]) == 1
    assert current(controller, scope) == after
    record = controller.store.get_stream(scope, STREAM)
    assert record.current_epoch == 1 and record.segment_count == 4
    assert tasks.scale_status(scope, STREAM, 1) == "DONE"


class Interrupted(Exception):
    pass


def interrupt_scale(controller, scope, monkeypatch, seal, ranges) -> None:
    """Run a scale whose workflow stops right after its first step (the stream is left SCALING)."""
    tasks = controller.streams

    def interrupted(record):
        raise Interrupted

    with monkeypatch.context() as m:
        m.setattr(tasks, "finish_scale_stream", interrupted)
        with pytest.raises(Interrupted):
            tasks.scale_stream(scope, STREAM, seal, ranges)
    record = controller.store.get_stream(scope, STREAM)
    assert record.state == StreamState.SCALING.value and record.current_epoch == 0


def test_a_second_scale_while_one_is_in_flight_is_illegal_state(controller, scope, monkeypatch):
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, fixed(2))
    length = append(controller, scope, 1, [5])
    interrupt_scale(controller, scope, monkeypatch, [0], [(0.0, 0.25), (0.25, 0.5)])
    assert tasks.scale_status(scope, STREAM, 1) == "IN_PROGRESS"
    with pytest.raises(InvalidArgument):
        tasks.scale_status(scope, STREAM, 2)

    for seal, ranges in (([0], [(0.0, 0.5)]), ([1], [(0.5, 0.75), (0.75, 1.0)]), ([0, 1], [(0.0, 1.0)])):
        with pytest.raises(IllegalState):
            tasks.scale_stream(scope, STREAM, seal, ranges)
    with pytest.raises(IllegalState):
        tasks.truncate_stream(scope, STREAM, {0: 0, 1: length})
    with pytest.raises(IllegalState):
        tasks.seal_stream(scope, STREAM)
    assert controller.store.get_stream(scope, STREAM).state == StreamState.SCALING.value

    # what the sweeper runs finishes it
    tasks.finish_scale_stream(controller.store.get_stream(scope, STREAM))
    assert tasks.scale_status(scope, STREAM, 1) == "DONE"
    assert [s for s, _, _ in current(controller, scope)] == [(1 << 32) | 2, (1 << 32) | 3, 1]
    assert pending_for(controller, scope, STREAM) == []


def test_retrying_an_interrupted_scale_finishes_it_and_returns_its_epoch(controller, scope, monkeypatch):
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, fixed(2))
    interrupt_scale(controller, scope, monkeypatch, [0], [(0.0, 0.25), (0.25, 0.5)])
    try:
        epoch = tasks.scale_stream(scope, STREAM, [0], [(0.25, 0.5), (0.0, 0.25)])
    finally:  # whatever the call answered, the workflow must have been finished
        record = controller.store.get_stream(scope, STREAM)
        assert record.state == StreamState.ACTIVE.value and record.current_epoch == 1
        assert pending_for(controller, scope, STREAM) == []
    assert epoch == 1


def test_concurrent_scales_of_the_same_segment_one_wins(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, fixed(2))
    requests = [([0], [(0.0, 0.25), (0.25, 0.5)]), ([0], [(0.0, 0.1), (0.1, 0.2), (0.2, 0.5)])]
    barrier = threading.Barrier(2)
    results: list = [None, None]

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = tasks.scale_stream(scope, STREAM, *requests[i])
        except RilletError as e:
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [i for i, r in enumerate(results) if r == 1]
    assert len(winners) == 1, results
    loser = results[1 - winners[0]]
    assert isinstance(loser, (IllegalState, WriteConflict, InvalidArgument)), loser
    ranges = sorted(requests[winners[0]][1])
    assert [(lo, hi) for _, lo, hi in current(controller, scope)] == [*ranges, (0.5, 1.0)]
    record = controller.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.current_epoch == 1
    assert record.segment_count == 2 + len(ranges)


# -- what a scale records ---------------------------------------------------------------------------


def test_successors_predecessors_sealed_sizes_and_epochs_through_splits_and_merges(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, fixed(2))
    created = controller.store.get_stream(scope, STREAM).created_ms
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    assert current(controller, scope) == model_current(history)
    # (first, count, inner bounds): split into 3, merge 2, a mixed replacement, merge 3, split in 2
    plan = [(0, 1, [0.125, 0.25]), (1, 2, []), (0, 2, [0.0625, 0.375]), (0, 3, []), (1, 1, [0.75])]
    sizes: dict[int, int] = {}
    epochs = {0: list(history.current)}
    for i, (first, count, inner) in enumerate(plan, start=1):
        for n, sid in enumerate(history.current):
            sizes[sid] = append(controller, scope, sid, [3 + n, 100 + 10 * i], writer=f"phase{i}")
        event = history.scale(first, count, inner)
        seal = list(event.sealed)
        ranges = [(history.segments[s].low, history.segments[s].high) for s in event.created]
        assert tasks.scale_stream(scope, STREAM, seal, ranges, now=created + 1000 * i) == i
        epochs[i] = list(history.current)
        assert current(controller, scope) == model_current(history), i
        for sid in seal:
            (record,) = controller.store.get_segments(scope, STREAM, [sid])
            assert (record.sealed_size, record.sealed_epoch) == (sizes[sid], i)
            info = controller.segments.info(segment_name(scope, STREAM, sid))
            assert info.sealed and info.length == sizes[sid]
            with pytest.raises(SegmentSealed):
                controller.segments.append(segment_name(scope, STREAM, sid), "late", 0, 1, frame(b"x"))
        for sid in event.created:
            info = controller.segments.info(segment_name(scope, STREAM, sid))
            assert (info.length, info.sealed) == (0, False)
        assert pending_for(controller, scope, STREAM) == []

    info = tasks.stream_info(scope, STREAM)
    assert info.current_epoch == len(plan) and info.state == StreamState.ACTIVE
    assert [s.segment_id for s in info.current_segments] == history.current
    for sid, segment in history.segments.items():
        got = tasks.successors(scope, STREAM, sid)
        assert [s.segment.segment_id for s in got] == history.successors(sid), sid
        for successor in got:
            assert [p.segment_id for p in successor.predecessors] == history.predecessors(successor.segment.segment_id)
            assert all(p == history.segments[p.segment_id] for p in successor.predecessors)
            assert successor.segment == history.segments[successor.segment.segment_id]
        assert [p.segment_id for p in tasks.predecessors(scope, STREAM, sid)] == history.predecessors(sid), sid
        assert tasks.scale_status(scope, STREAM, segment.epoch) == "DONE"
    # segments_at: each epoch from its creation time until the next one's
    assert [s.segment_id for s in tasks.segments_at(scope, STREAM, 0)] == epochs[0]
    assert [s.segment_id for s in tasks.segments_at(scope, STREAM, created)] == epochs[0]
    for i in range(1, len(plan) + 1):
        assert [s.segment_id for s in tasks.segments_at(scope, STREAM, created + 1000 * i - 1)] == epochs[i - 1]
        assert [s.segment_id for s in tasks.segments_at(scope, STREAM, created + 1000 * i)] == epochs[i]
        assert [s.segment_id for s in tasks.segments_at(scope, STREAM, created + 1000 * i + 999)] == epochs[i]
    with pytest.raises(InvalidArgument):
        tasks.scale_status(scope, STREAM, len(plan) + 1)


def test_segment_for_key_follows_the_scale(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, STREAM, fixed(1))
    keys = [f"k{i}" for i in range(30)]
    assert {tasks.segment_for_key(scope, STREAM, k).segment_id for k in keys} == {0}
    tasks.scale_stream(scope, STREAM, [0], [(0.0, 0.5), (0.5, 1.0)])
    found = {tasks.segment_for_key(scope, STREAM, k).segment_id for k in keys}
    assert found == {(1 << 32) | 1, (1 << 32) | 2}
