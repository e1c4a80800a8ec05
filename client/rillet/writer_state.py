"""What a writer keeps per event, per block and per segment while events travel (rillet.writer), and its
map of the key space. Mutated only under the writer's lock."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from rillet.clock import Since
from rillet.errors import RilletError
from rillet.models import SegmentRange


class _EventFuture(Future):
    """An event's future that tells its writer when its outcome was looked at (``result()`` or
    ``exception()``, also from a done callback): flush and close report only the failures nobody saw."""

    def __init__(self, looked_at: Callable[[_EventFuture], None]) -> None:
        super().__init__()
        self._looked_at = looked_at
        self.seen = False
        self.counted: tuple[int, bool] | None = None  # failed unseen: (report round, outcome unknown)

    def result(self, timeout: float | None = None) -> Any:
        try:
            return super().result(timeout)
        finally:
            self._looked_at(self)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return super().exception(timeout)
        finally:
            self._looked_at(self)


@dataclass
class _Pending:
    framed: bytes
    point: float
    future: _EventFuture
    seq: int  # the writer-wide order of write_event calls, which every re-send keeps
    queued_at: float  # time.monotonic() when write_event queued it: its latency budget counts from here


@dataclass(eq=False)
class _InFlight:
    """A block sent (or being sent): its events, its first event number and the writer id it used."""

    items: list[_Pending]
    first: int
    writer_id: str
    maybe_stored: bool = False  # an attempt ended without an answer that proves its outcome
    settled: bool = False  # its outcome is decided, or it was withdrawn: its sender stops


@dataclass
class _SegmentQueue:
    segment: SegmentRange
    writer_id: str
    next_event_number: int = 0
    pending: deque = field(default_factory=deque)
    pending_bytes: int = 0
    # Unresolved blocks, oldest first, all under ``writer_id``; at most ``max_inflight_blocks``.
    inflight: list[_InFlight] = field(default_factory=list)
    held: list[_InFlight] = field(default_factory=list)  # blocks refused because the segment is sealed
    sealed: bool = False  # found sealed: waiting for the successors, holds its events meanwhile
    resolving: bool = False
    new_writer_id: bool = False  # a block failed: the next block starts a new writer id (once none is in flight)
    # Requests of the segment's blocks still on their way (a block failed at its deadline may still have
    # one, which can yet be applied): no new writer id while any is, so no later block of a key can be
    # stored before it. Each ends within the transport's timeout, as its sender stops at the deadline.
    sending: int = 0
    acked_at: Since | None = None  # when a block under ``writer_id`` was last acknowledged
    closed_by: RilletError | None = None  # the stream was sealed: this range takes no more events


class SegmentMap:
    """Which segment serves each part of the key space, as the writer currently knows it."""

    def __init__(self, segments: list[SegmentRange]) -> None:
        self.entries: list[tuple[float, float, SegmentRange]] = sorted((s.low, s.high, s) for s in segments)

    def lookup(self, point: float) -> SegmentRange:
        for low, high, segment in self.entries:
            if low <= point < high:
                return segment
        raise RilletError(f"no segment covers key point {point}")

    def replace(self, sealed: SegmentRange, successors: list[SegmentRange]) -> None:
        """Hand the sealed segment's ranges to the successors (each restricted to where they overlap)."""
        entries = []
        for low, high, segment in self.entries:
            if segment.segment_id != sealed.segment_id:
                entries.append((low, high, segment))
                continue
            for successor in successors:
                lo, hi = max(low, successor.low), min(high, successor.high)
                if lo < hi:
                    entries.append((lo, hi, successor))
        self.entries = sorted(entries, key=lambda e: e[0])
