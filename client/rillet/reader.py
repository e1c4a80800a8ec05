"""A single reader over a whole stream, from a start position (the head by default) onwards.

It reads every segment of the stream in an order that keeps per-key order: the segments of the
start cut first, and each successor only after all its predecessors were read to their end. Reader
groups (several readers sharing the work) build on the same pieces.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from rillet.connection import Connection
from rillet.models import SegmentPosition, SegmentRange
from rillet.ordering import SegmentOrder
from rillet.segments import DEFAULT_READ_SIZE, SegmentEventReader
from rillet.serializers import Serializer

T = TypeVar("T")


@dataclass(frozen=True)
class EventPointer:
    """Where one event is: enough to read it again directly."""

    scope: str
    stream: str
    segment_id: int
    offset: int
    length: int  # of the frame (header included)


@dataclass(frozen=True)
class EventRead(Generic[T]):
    event: T
    pointer: EventPointer


class StreamReader(Generic[T]):
    """Reads one stream's events in per-key order; ``read_next_event`` returns None at the tail."""

    def __init__(self, connection: Connection, scope: str, stream: str, serializer: Serializer[T],
                 start: list[SegmentPosition] | None = None, read_size: int = DEFAULT_READ_SIZE) -> None:
        self.connection = connection
        self.scope, self.stream = scope, stream
        self.serializer = serializer
        self.read_size = read_size
        start = start if start is not None else connection.controller.head(scope, stream)
        self._order = SegmentOrder([p.segment for p in start])
        self._readers: dict[int, tuple[SegmentRange, SegmentEventReader]] = {}
        for position in start:
            self._open(position.segment, position.offset)
        self._buffered: list[EventRead[T]] = []
        self._next = 0  # round-robin over segments, so one busy segment does not starve the others

    def _open(self, segment: SegmentRange, offset: int) -> None:
        reader = SegmentEventReader(self.connection.segments, self.scope, self.stream, segment.segment_id,
                                    offset, read_size=self.read_size)
        self._readers[segment.segment_id] = (segment, reader)

    def positions(self) -> list[SegmentPosition]:
        """Where reading would continue: every open segment at the offset after its last event read."""
        return [SegmentPosition(segment=s, offset=r.offset) for s, r in self._readers.values()]

    def read_next_event(self, timeout_ms: int = 0) -> EventRead[T] | None:
        deadline = time.monotonic() + timeout_ms / 1000
        while not self._buffered:
            if not self._readers:
                return None  # every segment is sealed and read: the stream is sealed
            if self._read_round(wait_ms=0):
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if len(self._readers) == 1:  # one segment: let the server long-poll its tail
                self._read_round(wait_ms=int(min(remaining, 2.0) * 1000))
            else:  # several: poll them in turn, pausing between rounds
                time.sleep(min(remaining, 0.2))
        return self._buffered.pop(0)

    def __iter__(self) -> Iterator[EventRead[T]]:
        """Events until the reader reaches the tail of every segment."""
        while (event := self.read_next_event()) is not None:
            yield event

    def _read_round(self, wait_ms: int) -> bool:
        """Read once from the segments in turn until one yields events; True if anything changed."""
        ids = sorted(self._readers)
        for i in range(len(ids)):
            sid = ids[(self._next + i) % len(ids)]
            segment, reader = self._readers[sid]
            events = reader.read_events(wait_ms=wait_ms if len(ids) == 1 else 0)
            for offset, payload in events:
                pointer = EventPointer(self.scope, self.stream, sid, offset, len(payload) + 4)
                self._buffered.append(EventRead(self.serializer.deserialize(payload), pointer))
            if reader.finished:
                self._complete(segment)
                return True
            if events:
                self._next = (self._next + i + 1) % max(1, len(ids))
                return True
        return False

    def _complete(self, segment: SegmentRange) -> None:
        del self._readers[segment.segment_id]
        successors = self.connection.controller.successors(self.scope, self.stream, segment.segment_id)
        ready = self._order.complete(segment.segment_id, [(s.segment, s.predecessors) for s in successors])
        for successor in ready:
            self._open(successor, 0)
