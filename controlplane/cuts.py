"""Bounds of several stream cuts: the subscribers' lower bound (retention) and the writers' upper
bound (watermarks).

Both work key range by key range: split [0, 1) at every segment boundary of the stream, and take on
each piece the earliest (lower bound) or latest (upper bound) position among the cuts, ordering
positions by the epoch of their segment, then by offset. A segment chosen on only part of its range
is then made whole: for the lower bound, it is replaced by its predecessors at their ends (the same
position as its own offset 0, or earlier); for the upper bound, the earlier segment is replaced by its
successors at offset 0 (the same as its own end, or later). Repeating that until every chosen segment
covers its whole range yields a valid stream cut.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from controlplane.models import SegmentRecord
from rillet.models import SegmentPosition, SegmentRange

_Piece = tuple[float, float]


def _as_range(record: SegmentRecord) -> SegmentRange:
    return SegmentRange(segment_id=record.segment_id, low=record.low, high=record.high)


def _bound(cuts: list[list[SegmentPosition]], records: dict[int, SegmentRecord],
           better: Callable[[tuple, tuple], bool],
           replacement: Callable[[SegmentRange, _Piece], tuple[SegmentRange, int]]) -> list[SegmentPosition]:
    # Every segment boundary of the stream, so that each piece lies inside one segment of every epoch.
    bounds = sorted({b for cut in cuts for p in cut for b in (p.segment.low, p.segment.high)}
                    | {b for r in records.values() for b in (r.low, r.high)})
    pieces = list(itertools.pairwise(bounds))
    chosen: dict[_Piece, tuple[SegmentRange, int]] = {}
    for piece in pieces:
        for cut in cuts:
            for p in cut:
                if p.segment.low <= piece[0] and piece[1] <= p.segment.high:
                    current = chosen.get(piece)
                    if current is None or better((p.segment.epoch, p.offset), (current[0].epoch, current[1])):
                        chosen[piece] = (p.segment, p.offset)
    changed = True
    while changed:
        changed = False
        for segment, _ in list(chosen.values()):
            inside = [q for q in pieces if segment.low <= q[0] and q[1] <= segment.high]
            if all(chosen[q][0].segment_id == segment.segment_id for q in inside):
                continue
            for q in inside:
                if chosen[q][0].segment_id == segment.segment_id:
                    chosen[q] = replacement(segment, q)
            changed = True
            break
    merged: dict[int, SegmentPosition] = {}
    for segment, offset in chosen.values():
        previous = merged.get(segment.segment_id)
        if previous is None or better((segment.epoch, previous.offset), (segment.epoch, offset)):
            merged[segment.segment_id] = SegmentPosition(segment=segment, offset=offset)
    return sorted(merged.values(), key=lambda p: p.segment.low)


def lower_bound(cuts: list[list[SegmentPosition]], records: dict[int, SegmentRecord]) -> list[SegmentPosition]:
    """The latest cut at or before every one of ``cuts``, key by key."""

    def predecessor_at_end(segment: SegmentRange, piece: _Piece) -> tuple[SegmentRange, int]:
        record = next(records[p] for p in records[segment.segment_id].predecessors
                      if records[p].low <= piece[0] and piece[1] <= records[p].high)
        return _as_range(record), record.sealed_size or 0

    return _bound(cuts, records, lambda a, b: a < b, predecessor_at_end)


def upper_bound(cuts: list[list[SegmentPosition]], records: dict[int, SegmentRecord]) -> list[SegmentPosition]:
    """The earliest cut at or after every one of ``cuts``, key by key."""

    def successor_at_start(segment: SegmentRange, piece: _Piece) -> tuple[SegmentRange, int]:
        record = next(records[s] for s in records[segment.segment_id].successors
                      if records[s].low <= piece[0] and piece[1] <= records[s].high)
        return _as_range(record), 0

    return _bound(cuts, records, lambda a, b: a > b, successor_at_start)
