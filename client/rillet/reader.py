"""A single reader over a whole stream, from a start position (the head by default) onwards.

It reads every segment of the stream in an order that keeps per-key order: the segments of the
start cut first, and each successor only after all its predecessors were read to their end. Reader
groups (several readers sharing the work) build on the same pieces.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from rillet.connection import Connection
from rillet.framing import EventBatch
from rillet.models import SegmentPosition, SegmentRange
from rillet.ordering import SegmentOrder
from rillet.segments import DEFAULT_READ_SIZE, SegmentEventReader, TailBackoff
from rillet.serializers import Serializer
from rillet.stream_cut import StreamCut

T = TypeVar("T")


@dataclass(frozen=True)
class EventPointer:
    """Where one event is: enough to read it again directly."""

    scope: str
    stream: str
    segment_id: int
    offset: int
    length: int  # of the frame (header included)
    incarnation: int | None = None  # of the stream the event was read from (see rillet.StreamCut)


@dataclass(frozen=True)
class EventRead(Generic[T]):
    """An event, where it is, and what its writer kept with it (``EventWriterConfig.store_key_and_time``;
    None for events written without)."""

    event: T
    pointer: EventPointer
    routing_key: str | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class EventsRead:
    """Consecutive events of one segment, as ``StreamReader.read_events`` returns them: each event's
    bytes (not deserialized) and frame offset, decoded a block at a time with no object per event
    besides its bytes. ``end`` is the offset after the last event; ``routing_keys`` and ``timestamps``
    are None when none of these events kept them (``EventWriterConfig.store_key_and_time``)."""

    scope: str
    stream: str
    segment_id: int
    payloads: list[bytes]
    positions: list[int]
    end: int
    routing_keys: list[str | None] | None = None
    timestamps: list[int | None] | None = None
    incarnation: int | None = None

    def __len__(self) -> int:
        return len(self.payloads)

    @classmethod
    def of(cls, scope: str, stream: str, segment_id: int, batch: EventBatch, start: int, stop: int,
           incarnation: int | None) -> EventsRead:
        """Events ``start`` to ``stop`` of a decoded batch (the batch's own lists when that is all of it)."""
        if start == 0 and stop == len(batch):
            return cls(scope, stream, segment_id, batch.payloads, batch.positions, batch.end, batch.routing_keys,
                       batch.timestamps, incarnation)
        return cls(scope, stream, segment_id, batch.payloads[start:stop], batch.positions[start:stop],
                   batch.positions[stop] if stop < len(batch) else batch.end,
                   batch.routing_keys[start:stop] if batch.routing_keys else None,
                   batch.timestamps[start:stop] if batch.timestamps else None, incarnation)

    def pointer(self, i: int) -> EventPointer:
        """Event ``i``'s pointer, as ``read_next_event`` would have given it."""
        end = self.positions[i + 1] if i + 1 < len(self.positions) else self.end
        return EventPointer(self.scope, self.stream, self.segment_id, self.positions[i], end - self.positions[i],
                            self.incarnation)


class _Pending:
    """A decoded batch of one segment, handed out from ``next`` on."""

    __slots__ = ("batch", "next", "segment_id")

    def __init__(self, segment_id: int, batch: EventBatch) -> None:
        self.segment_id, self.batch, self.next = segment_id, batch, 0


class StreamReader(Generic[T]):
    """Reads one stream's events in per-key order; ``read_next_event`` returns None at the tail.

    Segments with bytes to read are read in turn; the segments at their tail are checked together, in
    one request (``SegmentClient.tails``), at a cadence that backs off while nothing changes
    (``TailBackoff``) and returns to reading the moment a segment shows new bytes.
    """

    def __init__(self, connection: Connection, scope: str, stream: str, serializer: Serializer[T],
                 start: list[SegmentPosition] | StreamCut | None = None, read_size: int = DEFAULT_READ_SIZE,
                 backoff: TailBackoff | None = None) -> None:
        self.connection = connection
        self.scope, self.stream = scope, stream
        self.serializer = serializer
        self.read_size = read_size
        # The stream incarnation every read names (a name deleted and created again is StreamRecreated):
        # the start cut's, or the head's; unknown for a bare list of positions.
        self.incarnation: int | None = None
        if start is None:
            head = connection.controller.head_cut(scope, stream)
            start, self.incarnation = head.positions, head.incarnation
        elif isinstance(start, StreamCut):
            start, self.incarnation = list(start.positions), start.incarnation
        self._order = SegmentOrder([p.segment for p in start])
        self._readers: dict[int, tuple[SegmentRange, SegmentEventReader]] = {}
        self._waiting: set[int] = set()  # segments at their tail: read again only once a tail check shows news
        self._backoff = backoff or TailBackoff()
        self._check_at = 0.0  # when the next tail check is due (time.monotonic())
        for position in start:
            self._open(position.segment, position.offset)
        self._buffered: deque[_Pending] = deque()  # decoded batches not handed out yet, in reading order
        self._next = 0  # round-robin over segments, so one busy segment does not starve the others

    def _open(self, segment: SegmentRange, offset: int) -> None:
        reader = SegmentEventReader(self.connection.segments, self.scope, self.stream, segment.segment_id,
                                    offset, read_size=self.read_size, incarnation=self.incarnation)
        self._readers[segment.segment_id] = (segment, reader)

    def positions(self) -> list[SegmentPosition]:
        """Where reading would continue: every open segment at the offset after its last event read."""
        return [SegmentPosition(segment=s, offset=r.offset) for s, r in self._readers.values()]

    def read_next_event(self, timeout_ms: int = 0) -> EventRead[T] | None:
        """The next event, or None when none arrived within ``timeout_ms`` (0: look once, a tail check
        included). An event committed while the reader waits is seen within the backoff's ``max_s``
        plus a round trip; tail checks are eventually consistent, so one may see it a moment later."""
        if not self._fill(timeout_ms):
            return None
        pending = self._buffered[0]
        batch, i = pending.batch, pending.next
        pending.next += 1
        if pending.next == len(batch):
            self._buffered.popleft()
        end = batch.positions[i + 1] if i + 1 < len(batch) else batch.end
        pointer = EventPointer(self.scope, self.stream, pending.segment_id, batch.positions[i],
                               end - batch.positions[i], self.incarnation)
        return EventRead(self.serializer.deserialize(batch.payloads[i]), pointer,
                         batch.routing_keys[i] if batch.routing_keys else None,
                         batch.timestamps[i] if batch.timestamps else None)

    def read_events(self, max_events: int | None = None, timeout_ms: int = 0) -> EventsRead | None:
        """The next events of one segment at once (at most ``max_events``), in the order
        ``read_next_event`` returns them, or None as it would. For throughput: a block of events is
        decoded in one pass and handed over as bytes (the serializer is not applied)."""
        if not self._fill(timeout_ms):
            return None
        pending = self._buffered[0]
        batch, start = pending.batch, pending.next
        stop = len(batch) if max_events is None else min(len(batch), start + max(1, max_events))
        pending.next = stop
        if stop == len(batch):
            self._buffered.popleft()
        return EventsRead.of(self.scope, self.stream, pending.segment_id, batch, start, stop, self.incarnation)

    def iter_events(self, max_events: int | None = None) -> Iterator[EventsRead]:
        """``read_events`` until the reader reaches the tail of every segment."""
        while (events := self.read_events(max_events)) is not None:
            yield events

    def _fill(self, timeout_ms: int) -> bool:
        """Read until a decoded batch is buffered; False when none arrived within ``timeout_ms``."""
        deadline = time.monotonic() + timeout_ms / 1000
        checked = False
        while not self._buffered:
            if not self._readers:
                return False  # every segment is sealed and read: the stream is sealed
            if self._read_round():
                continue
            now = time.monotonic()
            if now >= self._check_at or (timeout_ms <= 0 and not checked):
                checked = True
                if self._check_tails():
                    continue
                now = time.monotonic()
            if now >= deadline:
                return False
            time.sleep(max(0.0, min(self._check_at, deadline) - now))
        return True

    def __iter__(self) -> Iterator[EventRead[T]]:
        """Events until the reader reaches the tail of every segment."""
        while (event := self.read_next_event()) is not None:
            yield event

    def _read_round(self) -> bool:
        """Read once from the segments not at their tail, in turn, until one yields events; True if
        anything changed."""
        ids = sorted(sid for sid in self._readers if sid not in self._waiting)
        for i in range(len(ids)):
            sid = ids[(self._next + i) % len(ids)]
            segment, reader = self._readers[sid]
            events = reader.read_batch()
            if events:
                self._buffered.append(_Pending(sid, events))
            if reader.finished:
                self._complete(segment)
                return True
            if reader.at_tail:  # its last answer reached the length: a tail check, not a locate, looks for more
                self._waiting.add(sid)
            if events:
                self._next = (self._next + i + 1) % max(1, len(ids))
                self._check_at = self._backoff.reset()
                return True
        return False

    def _check_tails(self) -> bool:
        """One tail check of every segment at its tail; True if any shows news (it is read next)."""
        waiting = sorted(self._waiting)
        tails = self.connection.segments.tails(self.scope, self.stream, waiting, self.incarnation) if waiting else []
        woken = {t.segment_id for t in tails if self._readers[t.segment_id][1].has_news(t)}
        self._waiting -= woken
        if woken:
            self._backoff.reset()
        self._check_at = time.monotonic() + self._backoff.next_delay()
        return bool(woken)

    def _complete(self, segment: SegmentRange) -> None:
        del self._readers[segment.segment_id]
        self._waiting.discard(segment.segment_id)
        successors = self.connection.controller.successors(self.scope, self.stream, segment.segment_id)
        ready = self._order.complete(segment.segment_id, [(s.segment, s.predecessors) for s in successors])
        for successor in ready:
            self._open(successor, 0)
