"""SegmentOrder: a successor is released only once all of its predecessors were read to their end."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rillet.ordering import SegmentOrder

try:
    from history import ScalingHistory, histories
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import ScalingHistory, histories


def successors_of(history: ScalingHistory, sid: int):
    return [(history.segments[s], [history.segments[p] for p in history.predecessors(s)])
            for s in history.successors(sid)]


def ranges(history: ScalingHistory, ids: list[int]):
    return [history.segments[s] for s in ids]


def test_seed_004_merge_successor_waits_for_the_other_predecessor():
    """S1 and S2 merge into S3: S3 is not handed out until S2 is done too."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    s1, s2 = history.current
    history.scale(0, 2, [])
    (s3,) = history.current
    order = SegmentOrder(start=ranges(history, [s1, s2]))
    assert order.complete(s1, successors_of(history, s1)) == []
    assert s3 in order.waiting and order.waiting[s3][1] == {s2}
    assert order.complete(s2, successors_of(history, s2)) == [history.segments[s3]]
    assert order.waiting == {} and s3 in order.released
    # the other order
    order = SegmentOrder(start=ranges(history, [s1, s2]))
    assert order.complete(s2, successors_of(history, s2)) == []
    assert order.complete(s1, successors_of(history, s1)) == [history.segments[s3]]


def test_split_successors_are_released_at_once():
    history = ScalingHistory.start([0.0, 1.0])
    (s0,) = history.current
    history.scale(0, 1, [1 / 3, 2 / 3])
    order = SegmentOrder(start=ranges(history, [s0]))
    assert order.complete(s0, successors_of(history, s0)) == ranges(history, history.current)


def test_a_released_successor_is_not_released_again():
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    s1, s2 = history.current
    history.scale(0, 2, [])
    order = SegmentOrder(start=ranges(history, [s1, s2]))
    order.complete(s1, successors_of(history, s1))
    assert len(order.complete(s2, successors_of(history, s2))) == 1
    assert order.complete(s2, successors_of(history, s2)) == []
    assert order.complete(s1, successors_of(history, s1)) == []


def test_a_predecessor_before_the_start_cut_counts_as_done():
    """C [0,.5) and P [.5,1) become S [0,.75) and T [.75,1); S splits into S1, S2. Reading from the
    start cut {C, S2, T}, P lies before the start: completing C alone releases S."""
    history = ScalingHistory.start([0.0, 0.5, 1.0])
    c, p = history.current
    history.scale(0, 2, [0.75])
    s, t = history.current
    history.scale(0, 1, [0.5])
    _s1, s2 = history.current[:2]
    order = SegmentOrder(start=ranges(history, [c, s2, t]))
    assert order.complete(c, successors_of(history, c)) == [history.segments[s]]
    # from the start cut {C, P} instead, S needs P as well
    order = SegmentOrder(start=ranges(history, [c, p]))
    assert order.complete(c, successors_of(history, c)) == []
    assert order.complete(p, successors_of(history, p)) == ranges(history, [s, t])


@settings(max_examples=150, deadline=None)
@given(histories(max_events=8), st.randoms(use_true_random=False))
def test_every_segment_is_released_once_and_only_after_all_its_predecessors(history, rnd):
    """Completing released segments in any order releases every segment exactly once, never before all
    of its predecessors are complete."""
    start = list(history.epochs[0])
    order = SegmentOrder(start=ranges(history, start))
    released, completed = list(start), set()
    readable = list(start)
    while readable:
        sid = readable.pop(rnd.randrange(len(readable)))
        ready = order.complete(sid, successors_of(history, sid))
        completed.add(sid)
        for segment in ready:
            assert set(history.predecessors(segment.segment_id)) <= completed, segment
            assert segment.segment_id not in released
            released.append(segment.segment_id)
            readable.append(segment.segment_id)
    assert sorted(released) == sorted(history.segments)
    assert order.waiting == {}
