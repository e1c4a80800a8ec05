"""Stream cuts: a consistent position in a stream, one offset per segment across the whole key space.

A cut names each segment with its key range, so two cuts can be compared without asking the
controller: two overlapping segments of different cuts are either the same segment (compare the
offsets) or one was created in a later epoch than the other (the later one lies after it).

A cut also names the incarnation of the stream it was taken on (the stream's ``created_at_ms``): a
name deleted and created again is another stream, whose offsets mean nothing to this cut. Every
request made with it names the incarnation, and one of another incarnation is refused with
StreamRecreated rather than served with the new stream's bytes. None: unknown (a cut kept before
incarnations were), taken to be the current one.

The text form is stable and readable: ``scope/stream@incarnation|id:low:high:offset|...`` (without
``@incarnation`` when it is unknown). Floats are written with ``repr``, which round-trips exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from rillet.errors import InvalidArgument, StreamRecreated
from rillet.keyspace import KeyRange, covers_exactly
from rillet.models import SegmentPosition, SegmentRange
from rillet.names import split_scoped_name


class Ordering(str, Enum):
    BEFORE = "BEFORE"  # strictly before the other cut somewhere, and nowhere after it
    EQUAL = "EQUAL"
    AFTER = "AFTER"
    OVERLAPPING = "OVERLAPPING"  # before it for some keys and after it for others


@dataclass(frozen=True)
class StreamCut:
    scope: str
    stream: str
    positions: tuple[SegmentPosition, ...]
    incarnation: int | None = None

    @classmethod
    def of(cls, scope: str, stream: str, positions: list[SegmentPosition],
           incarnation: int | None = None) -> StreamCut:
        return cls(scope, stream, tuple(sorted(positions, key=lambda p: (p.segment.low, p.segment.segment_id))),
                   incarnation)

    @property
    def offsets(self) -> dict[int, int]:
        return {p.segment.segment_id: p.offset for p in self.positions}

    @property
    def segments(self) -> list[SegmentRange]:
        return [p.segment for p in self.positions]

    def to_text(self) -> str:
        parts = [f"{p.segment.segment_id}:{p.segment.low!r}:{p.segment.high!r}:{p.offset}" for p in self.positions]
        incarnation = "" if self.incarnation is None else f"@{self.incarnation}"
        return "|".join([f"{self.scope}/{self.stream}{incarnation}", *parts])

    @classmethod
    def from_text(cls, text: str) -> StreamCut:
        try:
            head, *parts = text.strip().split("|")
            name, at, incarnation = head.partition("@")
            scope, stream = split_scoped_name(name)
            positions = []
            for part in parts:
                sid, low, high, offset = part.split(":")
                positions.append(SegmentPosition(segment=SegmentRange(segment_id=int(sid), low=float(low),
                                                                      high=float(high)), offset=int(offset)))
            return cls.of(scope, stream, positions, int(incarnation) if at else None)
        except (ValueError, TypeError) as e:
            raise InvalidArgument(f"not a stream cut: {text!r}") from e

    def __str__(self) -> str:
        return self.to_text()

    def validate(self) -> StreamCut:
        """A valid cut covers [0, 1) with non-overlapping segments; raises InvalidArgument otherwise."""
        problem = validity_problem(self.segments)
        if problem:
            raise InvalidArgument(f"invalid stream cut for {self.scope}/{self.stream}: {problem}")
        return self

    def compare(self, other: StreamCut) -> Ordering:
        if (self.scope, self.stream) != (other.scope, other.stream):
            raise InvalidArgument("stream cuts of different streams cannot be compared")
        if None not in (self.incarnation, other.incarnation) and self.incarnation != other.incarnation:
            raise StreamRecreated(f"stream cuts of two incarnations of {self.scope}/{self.stream} cannot be "
                                  f"compared ({self.incarnation}, {other.incarnation})",
                                  expected=self.incarnation, current=other.incarnation)
        return compare_positions(list(self.positions), list(other.positions))


def validity_problem(segments: list[SegmentRange]) -> str | None:
    if not segments:
        return "it names no segment"
    if len({s.segment_id for s in segments}) != len(segments):
        return "a segment appears twice"
    if not covers_exactly([KeyRange(s.low, s.high) for s in segments], 0.0, 1.0):
        return "its segments do not tile the key space [0, 1) without gaps or overlaps"
    return None


def _relation(a: SegmentPosition, b: SegmentPosition) -> int:
    """-1 if position ``a`` is before ``b`` on their common keys, 0 if equal, 1 if after."""
    if a.segment.segment_id == b.segment.segment_id:
        return (a.offset > b.offset) - (a.offset < b.offset)
    return -1 if a.segment.epoch < b.segment.epoch else 1


def compare_positions(a: list[SegmentPosition], b: list[SegmentPosition]) -> Ordering:
    """How cut ``a`` relates to cut ``b`` (both valid cuts of one stream)."""
    before = after = False
    for pa in a:
        for pb in b:
            if pa.segment.low < pb.segment.high and pb.segment.low < pa.segment.high:
                relation = _relation(pa, pb)
                before |= relation < 0
                after |= relation > 0
    if before and after:
        return Ordering.OVERLAPPING
    return Ordering.BEFORE if before else Ordering.AFTER if after else Ordering.EQUAL


def segment_is_before(segment: SegmentRange, cut: list[SegmentRange]) -> bool:
    """True when ``cut`` lies wholly after ``segment`` (later segments cover all its keys)."""
    overlapping = [c for c in cut if c.low < segment.high and segment.low < c.high]
    return bool(overlapping) and all(c.epoch > segment.epoch for c in overlapping)


def segment_is_after(segment: SegmentRange, cut: list[SegmentRange]) -> bool:
    """True when ``segment`` was created after the cut's segments on its keys."""
    overlapping = [c for c in cut if c.low < segment.high and segment.low < c.high]
    return bool(overlapping) and all(c.epoch < segment.epoch for c in overlapping)
