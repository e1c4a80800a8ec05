"""Property tests of stream cuts over random scaling histories.

A history is a sequence of scale events (splits into 2-3, merges of 2-3 adjacent segments, and mixed
replacements of adjacent segments by new ranges with other boundaries). Its valid cuts are generated
as the segments reached by applying any downward-closed set of its scale events, with offsets. The
oracle for comparison works key point by key point along each key's chain of segments
(:meth:`history.ScalingHistory.position_at`), independently of ``rillet.stream_cut``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

try:
    from history import ScalingHistory, histories, oracle_compare
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import ScalingHistory, histories, oracle_compare
from rillet.errors import InvalidArgument
from rillet.models import SegmentPosition, SegmentRange
from rillet.stream_cut import Ordering, StreamCut, segment_is_after, segment_is_before, validity_problem

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def offsets_for(draw, segments: list[int], low: int = 0, high: int = 1000) -> dict[int, int]:
    return {s: draw(st.integers(low, high)) for s in segments}


@st.composite
def history_and_cut(draw) -> tuple[ScalingHistory, StreamCut]:
    history = draw(histories())
    applied = draw(st.lists(st.booleans(), min_size=len(history.events), max_size=len(history.events)))
    segments = history.cut_segments(applied)
    return history, history.cut(segments, offsets_for(draw, segments))


@st.composite
def history_and_two_cuts(draw) -> tuple[ScalingHistory, StreamCut, StreamCut]:
    history = draw(histories())
    cuts = []
    for _ in range(2):
        applied = draw(st.lists(st.booleans(), min_size=len(history.events), max_size=len(history.events)))
        segments = history.cut_segments(applied)
        # small offsets so that equal offsets on a shared segment are common
        cuts.append(history.cut(segments, offsets_for(draw, segments, 0, 3)))
    return history, cuts[0], cuts[1]


@st.composite
def history_and_chain(draw) -> tuple[ScalingHistory, list[StreamCut]]:
    """Three cuts, each reached from the previous by applying more events and raising offsets."""
    history = draw(histories())
    n = len(history.events)
    applied = [False] * n
    offsets: dict[int, int] = {}
    chain = []
    for _ in range(3):
        more = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        applied = [a or m for a, m in zip(applied, more)]
        segments = history.cut_segments(applied)
        offsets = {s: offsets.get(s, 0) + draw(st.integers(0, 5)) for s in segments}
        chain.append(history.cut(segments, offsets))
    return history, chain


# -- validity and text form ------------------------------------------------------------------------


@SETTINGS
@given(history_and_cut())
def test_generated_cuts_are_valid(hc):
    history, cut = hc
    assert validity_problem(cut.segments) is None
    assert cut.validate() is cut
    # every epoch's segments form a valid cut too
    for epoch in history.epochs:
        history.cut(epoch, {s: 0 for s in epoch}).validate()


@SETTINGS
@given(history_and_cut(), st.data())
def test_dropping_or_adding_a_segment_makes_a_cut_invalid(hc, data):
    history, cut = hc
    positions = list(cut.positions)
    drop = data.draw(st.integers(0, len(positions) - 1))
    dropped = StreamCut.of(cut.scope, cut.stream, positions[:drop] + positions[drop + 1:])
    assert validity_problem(dropped.segments) is not None
    with pytest.raises(InvalidArgument):
        dropped.validate()
    # any other segment of the history overlaps one of the cut (the cut covers the key space)
    others = sorted(set(history.segments) - {p.segment.segment_id for p in positions})
    if others:
        extra = data.draw(st.sampled_from(others))
        added = StreamCut.of(cut.scope, cut.stream,
                             [*positions, SegmentPosition(segment=history.segments[extra], offset=0)])
        assert validity_problem(added.segments) is not None
        with pytest.raises(InvalidArgument):
            added.validate()
    # the same segment twice
    twice = StreamCut.of(cut.scope, cut.stream, [*positions, positions[drop]])
    with pytest.raises(InvalidArgument):
        twice.validate()


@SETTINGS
@given(history_and_cut())
def test_text_round_trip_is_exact(hc):
    _, cut = hc
    text = cut.to_text()
    back = StreamCut.from_text(text)
    assert back == cut
    assert back.to_text() == text
    assert str(cut) == text
    assert back.offsets == cut.offsets


def test_text_round_trip_keeps_awkward_floats():
    low, high = 0.1 + 0.2, 1 / 3 + 1e-12
    cut = StreamCut.of("s.c-1", "st.r-2", [
        SegmentPosition(segment=SegmentRange(segment_id=(7 << 32) | 12, low=0.0, high=low), offset=5),
        SegmentPosition(segment=SegmentRange(segment_id=(3 << 32) | 4, low=low, high=high), offset=0),
        SegmentPosition(segment=SegmentRange(segment_id=(9 << 32) | 40, low=high, high=1.0), offset=2**40)])
    back = StreamCut.from_text(cut.to_text())
    assert back == cut and back.positions[1].segment.low == low and back.positions[1].segment.high == high


@pytest.mark.parametrize("text", ["", "nostream", "sc/st|1:0.0:1.0", "sc/st|x:0.0:1.0:0", "sc/st|1:a:1.0:0",
                                  "sc/st|1:0.0:1.0:0:9"])
def test_garbage_text_is_invalid_argument(text):
    with pytest.raises(InvalidArgument):
        StreamCut.from_text(text)


# -- comparison ------------------------------------------------------------------------------------

_OPPOSITE = {Ordering.BEFORE: Ordering.AFTER, Ordering.AFTER: Ordering.BEFORE,
             Ordering.EQUAL: Ordering.EQUAL, Ordering.OVERLAPPING: Ordering.OVERLAPPING}


@SETTINGS
@given(history_and_two_cuts())
def test_compare_matches_the_per_key_oracle_and_is_antisymmetric(hcc):
    history, a, b = hcc
    ab, ba = a.compare(b), b.compare(a)
    assert ab.value == oracle_compare(history, a, b)
    assert ba == _OPPOSITE[ab]
    assert (ab == Ordering.EQUAL) == (set(a.positions) == set(b.positions))


@SETTINGS
@given(history_and_cut())
def test_compare_is_reflexive(hc):
    _, cut = hc
    assert cut.compare(cut) == Ordering.EQUAL
    assert cut.compare(StreamCut.from_text(cut.to_text())) == Ordering.EQUAL


@SETTINGS
@given(history_and_chain())
def test_advancing_cuts_are_ordered_and_transitive(hc):
    history, (a, b, c) = hc
    for x, y in ((a, b), (b, c), (a, c)):
        expected = Ordering.EQUAL if set(x.positions) == set(y.positions) else Ordering.BEFORE
        assert x.compare(y) == expected
        assert y.compare(x) == _OPPOSITE[expected]
        assert x.compare(y).value == oracle_compare(history, x, y)
    if a.compare(b) == Ordering.BEFORE and b.compare(c) == Ordering.BEFORE:
        assert a.compare(c) == Ordering.BEFORE


@SETTINGS
@given(histories(), st.data())
def test_a_cut_of_a_later_epoch_is_after_one_of_an_earlier_epoch(history, data):
    assume(len(history.epochs) >= 2)
    i = data.draw(st.integers(0, len(history.epochs) - 2))
    j = data.draw(st.integers(i + 1, len(history.epochs) - 1))
    earlier = offsets_for(data.draw, history.epochs[i])
    later = {s: earlier.get(s, 0) + data.draw(st.integers(0, 3)) for s in history.epochs[j]}
    a, b = history.cut(history.epochs[i], earlier), history.cut(history.epochs[j], later)
    assert b.compare(a) == Ordering.AFTER
    assert a.compare(b) == Ordering.BEFORE


@SETTINGS
@given(history_and_cut(), st.data())
def test_raising_an_offset_is_after_and_raising_one_lowering_another_overlaps(hc, data):
    _, cut = hc
    positions = list(cut.positions)
    i = data.draw(st.integers(0, len(positions) - 1))
    raised = list(positions)
    raised[i] = SegmentPosition(segment=positions[i].segment, offset=positions[i].offset + data.draw(st.integers(1, 9)))
    up = StreamCut.of(cut.scope, cut.stream, raised)
    assert up.compare(cut) == Ordering.AFTER
    assert cut.compare(up) == Ordering.BEFORE
    lowerable = [k for k, p in enumerate(positions) if k != i and p.offset > 0]
    if lowerable:
        k = data.draw(st.sampled_from(lowerable))
        mixed = list(raised)
        mixed[k] = SegmentPosition(segment=positions[k].segment, offset=positions[k].offset - 1)
        both = StreamCut.of(cut.scope, cut.stream, mixed)
        assert both.compare(cut) == Ordering.OVERLAPPING
        assert cut.compare(both) == Ordering.OVERLAPPING


@SETTINGS
@given(history_and_cut())
def test_segment_before_and_after_a_cut_match_the_oracle(hc):
    history, cut = hc
    points = history.probe_points()
    for sid, segment in history.segments.items():
        inside = [p for p in points if segment.low <= p < segment.high]
        relation = [history.position_at(cut, p)[0] - history.chain(p).index(sid) for p in inside]
        assert segment_is_before(segment, cut.segments) == all(r > 0 for r in relation), sid
        assert segment_is_after(segment, cut.segments) == all(r < 0 for r in relation), sid


def test_cuts_of_different_streams_do_not_compare():
    segment = SegmentRange(segment_id=0, low=0.0, high=1.0)
    a = StreamCut.of("sc", "a", [SegmentPosition(segment=segment, offset=0)])
    b = StreamCut.of("sc", "b", [SegmentPosition(segment=segment, offset=0)])
    with pytest.raises(InvalidArgument):
        a.compare(b)


def test_seed_example_split_then_merge():
    """S1 splits into S2, S3; they merge into S4. Cuts along the way are ordered."""
    history = ScalingHistory.start([0.0, 1.0])
    history.scale(0, 1, [0.5])
    history.scale(0, 2, [])
    s1, (s2, s3), s4 = history.epochs[0][0], history.epochs[1], history.epochs[2][0]
    assert history.successors(s1) == [s2, s3] and history.predecessors(s4) == [s2, s3]
    c1 = history.cut([s1], {s1: 10})
    c2 = history.cut([s2, s3], {s2: 0, s3: 4})
    c_mixed = history.cut([s2, s3], {s2: 5, s3: 0})
    c3 = history.cut([s4], {s4: 0})
    assert c1.compare(c2) == Ordering.BEFORE
    assert c2.compare(c_mixed) == Ordering.OVERLAPPING
    assert c3.compare(c2) == Ordering.AFTER and c3.compare(c_mixed) == Ordering.AFTER
    assert c3.compare(c1) == Ordering.AFTER
