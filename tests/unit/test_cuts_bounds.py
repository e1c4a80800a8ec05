"""controlplane.cuts: lower_bound (subscribers, retention) and upper_bound (writers, watermarks).

Explicit cases across splits and merges with exact expected cuts, then properties over random
scaling histories (tests/history.py): the bound is a valid cut, lies at or before (lower) / at or
after (upper) every input key by key, and equals the key-by-key minimum / maximum when the inputs are
cuts a reader could actually reach (downward-closed sets of scale events).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

try:
    from history import ScalingHistory, histories
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import ScalingHistory, histories
from controlplane.cuts import lower_bound, upper_bound
from controlplane.models import SegmentRecord
from rillet.keyspace import segment_id
from rillet.models import SegmentPosition
from rillet.stream_cut import Ordering, compare_positions, validity_problem

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _records(history: ScalingHistory, sizes: dict[int, int]) -> dict[int, SegmentRecord]:
    current = set(history.current)
    records = {}
    for sid, s in history.segments.items():
        records[sid] = SegmentRecord(segment_id=sid, low=s.low, high=s.high, created_ms=0,
                                     sealed_size=None if sid in current else sizes[sid],
                                     successors=history.successors(sid), predecessors=history.predecessors(sid))
    return records


def _cut(history: ScalingHistory, offsets: dict[int, int]) -> list[SegmentPosition]:
    return [SegmentPosition(segment=history.segments[s], offset=o) for s, o in offsets.items()]


def _offsets(cut: list[SegmentPosition]) -> dict[int, int]:
    return {p.segment.segment_id: p.offset for p in cut}


def _valid(cut: list[SegmentPosition]) -> None:
    assert validity_problem([p.segment for p in cut]) is None, cut


# -- explicit cases ------------------------------------------------------------------------------------
#
# The history used below (epoch: segments):
#   0: A [0, .5)  B [.5, 1)
#   1: A1 [0, .25)  A2 [.25, .5)  B          (A split)
#   2: A1  M [.25, 1)                        (A2 and B merged)
#   3: A1  M1 [.25, .625)  M2 [.625, 1)      (M split)
# Sealed sizes: A 100, B 80, A2 30, M 40.


def _history() -> tuple[ScalingHistory, dict[str, int], dict[int, SegmentRecord]]:
    h = ScalingHistory.start([0.0, 0.5, 1.0])
    h.scale(0, 1, [0.25])
    h.scale(1, 2, [])
    h.scale(1, 1, [0.625])
    ids = dict(zip(["A", "B"], h.epochs[0]))
    ids["A1"], ids["A2"] = h.epochs[1][0], h.epochs[1][1]
    ids["M"] = h.epochs[2][1]
    ids["M1"], ids["M2"] = h.epochs[3][1], h.epochs[3][2]
    assert ids["M"] == segment_id(2, 4) and ids["M2"] == segment_id(3, 6)
    sizes = {ids["A"]: 100, ids["B"]: 80, ids["A2"]: 30, ids["M"]: 40}
    return h, ids, _records(h, sizes)


def test_bounds_of_cuts_before_and_after_a_split():
    h, n, records = _history()
    old = _cut(h, {n["A"]: 60, n["B"]: 10})
    new = _cut(h, {n["A1"]: 5, n["A2"]: 7, n["B"]: 20})
    assert _offsets(lower_bound([old, new], records)) == {n["A"]: 60, n["B"]: 10}
    assert _offsets(upper_bound([old, new], records)) == {n["A1"]: 5, n["A2"]: 7, n["B"]: 20}
    # past the split on the split half, behind on the other half: each half on its own
    mixed = _cut(h, {n["A1"]: 9, n["A2"]: 0, n["B"]: 5})
    assert _offsets(lower_bound([mixed, new], records)) == {n["A1"]: 5, n["A2"]: 0, n["B"]: 5}
    assert _offsets(upper_bound([mixed, new], records)) == {n["A1"]: 9, n["A2"]: 7, n["B"]: 20}
    assert _offsets(lower_bound([mixed, old], records)) == {n["A"]: 60, n["B"]: 5}
    assert _offsets(upper_bound([mixed, old], records)) == {n["A1"]: 9, n["A2"]: 0, n["B"]: 10}


def test_bounds_of_cuts_before_and_after_a_merge():
    h, n, records = _history()
    before = _cut(h, {n["A1"]: 3, n["A2"]: 30, n["B"]: 12})   # A2 read to its end, B not
    after = _cut(h, {n["A1"]: 1, n["M"]: 25})
    assert _offsets(lower_bound([before, after], records)) == {n["A1"]: 1, n["A2"]: 30, n["B"]: 12}
    assert _offsets(upper_bound([before, after], records)) == {n["A1"]: 3, n["M"]: 25}
    # one cut over three epochs (A1 of epoch 1, M1 and M2 of epoch 3) against one of epoch 2
    late = _cut(h, {n["A1"]: 2, n["M1"]: 0, n["M2"]: 4})
    assert _offsets(lower_bound([late, after], records)) == {n["A1"]: 1, n["M"]: 25}
    assert _offsets(upper_bound([late, after], records)) == {n["A1"]: 2, n["M1"]: 0, n["M2"]: 4}
    # three cuts: the lower bound takes each piece from a different one
    first = _cut(h, {n["A"]: 100, n["B"]: 3})
    assert _offsets(lower_bound([first, late, after], records)) == {n["A"]: 100, n["B"]: 3}
    assert _offsets(upper_bound([first, late, after], records)) == {n["A1"]: 2, n["M1"]: 0, n["M2"]: 4}


def test_a_segment_chosen_on_part_of_its_range_is_replaced():
    """A valid cut may name an old segment on some keys and a much later one on others: with
    A [0, .5), B [.5, 1) merged into M [0, 1), then M split into M1 [0, .5), M2 [.5, 1), the cut
    {A, M2} tiles the key space. Against {M}, M is the earliest on [.5, 1) but not on [0, .5): the
    lower bound must go back to M's predecessor there (B at its end); the upper bound must move M
    forward to its successor where it was the latest (M1 at offset 0)."""
    h = ScalingHistory.start([0.0, 0.5, 1.0])
    a, b = h.epochs[0]
    (m,) = h.scale(0, 2, []).created
    m1, m2 = h.scale(0, 1, [0.5]).created
    records = _records(h, {a: 100, b: 80, m: 40})
    odd = _cut(h, {a: 10, m2: 3})
    _valid(odd)
    middle = _cut(h, {m: 15})
    low = lower_bound([odd, middle], records)
    _valid(low)
    assert _offsets(low) == {a: 10, b: 80}
    high = upper_bound([odd, middle], records)
    _valid(high)
    assert _offsets(high) == {m1: 0, m2: 3}
    for cut in (odd, middle):
        assert compare_positions(low, cut) == Ordering.BEFORE
        assert compare_positions(high, cut) == Ordering.AFTER
    # with a third cut that is earliest everywhere, nothing needs replacing
    first = _cut(h, {a: 5, b: 7})
    assert _offsets(lower_bound([odd, middle, first], records)) == {a: 5, b: 7}
    assert _offsets(upper_bound([odd, middle, first], records)) == {m1: 0, m2: 3}


def test_the_bound_of_one_cut_is_that_cut():
    h, n, records = _history()
    for offsets in ({n["A"]: 0, n["B"]: 0}, {n["A1"]: 1, n["A2"]: 2, n["B"]: 3}, {n["A1"]: 1, n["M1"]: 2, n["M2"]: 3},
                    {n["A1"]: 0, n["M"]: 40}):
        cut = _cut(h, offsets)
        assert _offsets(lower_bound([cut], records)) == offsets
        assert _offsets(upper_bound([cut], records)) == offsets
        assert _offsets(lower_bound([cut, cut], records)) == offsets


def test_results_are_sorted_by_key_range():
    h, n, records = _history()
    cut = _cut(h, {n["M2"]: 1, n["M1"]: 2, n["A1"]: 3})
    for bound in (lower_bound([cut], records), upper_bound([cut], records)):
        assert [p.segment.low for p in bound] == sorted(p.segment.low for p in bound)


# -- properties ------------------------------------------------------------------------------------------


@st.composite
def history_sizes_and_cuts(draw):
    """A history, segment sizes (0 included, so a segment can end where it starts), and 1-4 reachable
    cuts with offsets at most each segment's size."""
    history = draw(histories(max_events=5))
    sizes = {sid: draw(st.integers(0, 4)) for sid in history.segments}
    cuts = []
    for _ in range(draw(st.integers(1, 4))):
        applied = draw(st.lists(st.booleans(), min_size=len(history.events), max_size=len(history.events)))
        segments = history.cut_segments(applied)
        cuts.append(_cut(history, {s: draw(st.integers(0, sizes[s])) for s in segments}))
    return history, sizes, cuts


def _key_position(history: ScalingHistory, sizes: dict[int, int], cut: list[SegmentPosition],
                  point: float) -> tuple[int, int]:
    """(index in the key's chain, offset), with "a segment at its end" written as "its successor on this
    key at 0" (the same position for this key), so that positions compare by plain tuple order."""
    chain = history.chain(point)
    (p,) = [p for p in cut if p.segment.low <= point < p.segment.high]
    index, offset = chain.index(p.segment.segment_id), p.offset
    current = set(history.current)
    while chain[index] not in current and offset >= sizes[chain[index]] and index + 1 < len(chain):
        index, offset = index + 1, 0
    return index, offset


@SETTINGS
@given(history_sizes_and_cuts())
def test_bounds_are_valid_and_are_the_key_by_key_minimum_and_maximum(hsc):
    history, sizes, cuts = hsc
    records = _records(history, sizes)
    low, high = lower_bound(cuts, records), upper_bound(cuts, records)
    _valid(low)
    _valid(high)
    for point in history.probe_points():
        positions = [_key_position(history, sizes, c, point) for c in cuts]
        assert _key_position(history, sizes, low, point) == min(positions), point
        assert _key_position(history, sizes, high, point) == max(positions), point
    for cut in cuts:
        # ... and therefore the ordinary comparison agrees (up to "end of a segment" vs "its successor")
        assert compare_positions(low, cut) != Ordering.OVERLAPPING
        assert compare_positions(high, cut) != Ordering.OVERLAPPING
    # every offset is one of the inputs' or a predecessor's end
    ends = {sid: r.sealed_size for sid, r in records.items()}
    given_offsets = {(p.segment.segment_id, p.offset) for c in cuts for p in c}
    for p in low:
        assert (p.segment.segment_id, p.offset) in given_offsets or p.offset == ends[p.segment.segment_id]
    for p in high:
        assert (p.segment.segment_id, p.offset) in given_offsets or p.offset == 0


@SETTINGS
@given(history_sizes_and_cuts())
def test_bounds_are_order_independent_and_idempotent(hsc):
    history, sizes, cuts = hsc
    records = _records(history, sizes)
    low, high = lower_bound(cuts, records), upper_bound(cuts, records)
    assert _offsets(lower_bound(list(reversed(cuts)), records)) == _offsets(low)
    assert _offsets(upper_bound(list(reversed(cuts)), records)) == _offsets(high)
    assert _offsets(lower_bound([low, *cuts], records)) == _offsets(low)
    assert _offsets(upper_bound([high, *cuts], records)) == _offsets(high)
    assert _offsets(lower_bound([low, high], records)) == _offsets(low)
    assert _offsets(upper_bound([low, high], records)) == _offsets(high)
