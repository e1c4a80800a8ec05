"""EventStreamWriter: routing-key ordered, batched, de-duplicated writes to a stream.

How a write travels:

* The routing key hashes to a point of [0, 1); the writer's segment map (key ranges of the current
  segments) picks the segment. Events without a routing key get a random point.
* Each segment has a queue. Events wait there until ``batch_size_bytes`` have gathered or the oldest
  has waited ``linger_ms``; then they leave as one block (one request, one S3 PUT at most). Up to
  ``max_inflight_blocks`` blocks per segment are in flight at once: each names the event number of
  the block before it, and the server commits a block only after that one, so blocks commit in the
  order written however their requests race, and the upload of one overlaps the commit of another.
* A block carries the writer id and the event numbers of its events within that segment. A retry of
  a block whose answer was lost is recognised by the server and not appended twice.
* When a segment turns out to be sealed (the stream scaled), nothing of the failed block was
  appended. The writer asks the controller for the successors, replaces the sealed segment's range in
  its map with theirs, and re-queues the block and everything behind it, in order, to the successors.
  Events for that range that arrive meanwhile queue behind them, so per-key order holds across any
  number of scalings, and nothing is appended to a successor before its predecessor was sealed.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from rillet.connection import Connection
from rillet.errors import OutOfOrder, RilletError, SegmentNotFound, SegmentSealed, ServiceUnavailable
from rillet.framing import MAX_BLOCK_SIZE, MAX_EVENT_SIZE, frame
from rillet.keyspace import hash_routing_key
from rillet.models import SegmentRange
from rillet.serializers import Serializer

T = TypeVar("T")


@dataclass(frozen=True)
class EventWriterConfig:
    """Batching and retry bounds of a writer.

    The defaults favour cost: a block of up to 4 MiB (the most one request carries) is one S3 PUT and
    a few small DynamoDB writes, and waiting up to a second lets a 1 MB/s writer fill 1 MB blocks,
    which keeps ingest under $0.01 per GB (see docs/benchmarks.md). Lower ``linger_ms`` for latency.
    """

    batch_size_bytes: int = MAX_EVENT_SIZE
    linger_ms: int = 1000
    retry_timeout_s: float = 300.0
    max_concurrency: int = 16
    max_inflight_blocks: int = 3  # per segment: a block's upload overlaps the commit of the one before

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size_bytes <= MAX_BLOCK_SIZE:
            raise ValueError(f"batch_size_bytes must be between 1 and {MAX_BLOCK_SIZE}")
        if self.linger_ms < 0 or self.retry_timeout_s <= 0 or self.max_concurrency < 1 or self.max_inflight_blocks < 1:
            raise ValueError("linger_ms >= 0, retry_timeout_s > 0, max_concurrency >= 1 and max_inflight_blocks >= 1")


@dataclass(frozen=True)
class WriteAck:
    """Where an acknowledged event landed: its segment and the offset of its frame."""

    segment_id: int
    offset: int


@dataclass
class _Pending:
    framed: bytes
    point: float
    future: Future
    queued_at: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class _InFlight:
    """A block sent (or being sent): its events, its first event number and the writer id it used."""

    items: list[_Pending]
    first: int
    writer_id: str


@dataclass
class _SegmentQueue:
    segment: SegmentRange
    writer_id: str
    next_event_number: int = 0
    pending: deque = field(default_factory=deque)
    pending_bytes: int = 0
    inflight: list[_InFlight] = field(default_factory=list)
    held: list[_InFlight] = field(default_factory=list)  # blocks refused because the segment is sealed
    sealed: bool = False  # found sealed: waiting for the successors, holds its events meanwhile
    resolving: bool = False
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


class EventStreamWriter(Generic[T]):
    """Writes events to one stream; ``write_event`` returns a Future acknowledged when durable."""

    def __init__(self, connection: Connection, scope: str, stream: str, serializer: Serializer[T],
                 config: EventWriterConfig | None = None, segments: list[SegmentRange] | None = None) -> None:
        self.connection = connection
        self.scope, self.stream = scope, stream
        self.serializer = serializer
        self.config = config or EventWriterConfig()
        self.writer_id = uuid.uuid4().hex
        self._generation = 0
        self._cond = threading.Condition()
        self._map = SegmentMap(segments if segments is not None else connection.controller.current_segments(scope, stream))
        self._queues: dict[int, _SegmentQueue] = {}
        self._acked_end: dict[int, int] = {}  # segment id -> offset after this writer's last acknowledged event
        self._noted_time = False
        self._outstanding = 0
        self._flushing = 0
        self._closed = False
        self._pool = ThreadPoolExecutor(self.config.max_concurrency, thread_name_prefix=f"rillet-writer-{stream}")
        self._linger = threading.Thread(target=self._linger_loop, name="rillet-writer-linger", daemon=True)
        self._linger.start()

    # -- public API ------------------------------------------------------------------------------

    def write_event(self, event: T, routing_key: str | None = None) -> Future:
        """Queue an event; the Future resolves to a :class:`WriteAck` once the event is durable."""
        framed = frame(self.serializer.serialize(event))
        point = hash_routing_key(routing_key) if routing_key is not None else random.random()
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RilletError("the writer is closed")
            self._outstanding += 1
            self._enqueue(_Pending(framed, point, future))
        return future

    def note_time(self, timestamp_ms: int) -> None:
        """Tell the controller that every event written so far is no later than ``timestamp_ms`` and every
        later one no earlier (watermarks). Flushes first, so the position is that of acknowledged events."""
        self.flush()
        with self._cond:
            position = [{"segment_id": s.segment_id, "offset": self._acked_end.get(s.segment_id, 0)}
                        for _, _, s in self._map.entries]
        unique = list({p["segment_id"]: p for p in position}.values())
        self.connection.controller.note_time(self.scope, self.stream, self.writer_id, timestamp_ms, unique)
        self._noted_time = True

    def flush(self) -> None:
        """Send everything queued now and wait until every event written so far is acknowledged."""
        with self._cond:
            self._flushing += 1
            try:
                for queue in list(self._queues.values()):
                    self._maybe_send(queue)
                while self._outstanding:
                    self._cond.wait()
            finally:
                self._flushing -= 1

    def close(self) -> None:
        """Flush, then release the writer's threads (and stop holding watermarks back)."""
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._pool.shutdown(wait=True)
        if self._noted_time:
            self.connection.controller.remove_writer(self.scope, self.stream, self.writer_id)

    def __enter__(self) -> EventStreamWriter[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queues (called with the lock held) ------------------------------------------------------

    def _enqueue(self, item: _Pending) -> None:
        segment = self._map.lookup(item.point)
        queue = self._queues.get(segment.segment_id)
        if queue is None:
            queue = self._queues[segment.segment_id] = _SegmentQueue(segment, self._segment_writer_id())
        if queue.closed_by is not None:
            self._outstanding -= 1
            item.future.set_exception(queue.closed_by)
            return
        queue.pending.append(item)
        queue.pending_bytes += len(item.framed)
        self._maybe_send(queue)

    def _segment_writer_id(self) -> str:
        return self.writer_id if self._generation == 0 else f"{self.writer_id}-{self._generation}"

    def _maybe_send(self, queue: _SegmentQueue) -> None:
        """Send due blocks, up to ``max_inflight_blocks`` at once per segment; each names the event
        number before it, so the server commits them in order however the requests race."""
        while (not queue.sealed and queue.pending and len(queue.inflight) < self.config.max_inflight_blocks
               and (queue.pending_bytes >= self.config.batch_size_bytes or self._flushing or self._closed
                    or time.monotonic() - queue.pending[0].queued_at >= self.config.linger_ms / 1000)):
            items: list[_Pending] = []
            size = 0
            while queue.pending and (not items or size + len(queue.pending[0].framed) <= self.config.batch_size_bytes):
                item = queue.pending.popleft()
                items.append(item)
                size += len(item.framed)
            queue.pending_bytes -= size
            block = _InFlight(items, queue.next_event_number, queue.writer_id)
            queue.next_event_number += len(items)
            queue.inflight.append(block)
            self._pool.submit(self._send, queue, block)

    def _linger_loop(self) -> None:
        tick = max(0.005, self.config.linger_ms / 4000)
        with self._cond:
            while not self._closed:
                self._cond.wait(timeout=tick)
                for queue in list(self._queues.values()):
                    self._maybe_send(queue)

    # -- sending (on the pool's threads) ---------------------------------------------------------

    def _send(self, queue: _SegmentQueue, block: _InFlight) -> None:
        payload = b"".join(p.framed for p in block.items)
        deadline = time.monotonic() + self.config.retry_timeout_s
        while True:
            try:
                ack = self.connection.segments.append(self.scope, self.stream, self._target(queue.segment),
                                                      block.writer_id, block.first, len(block.items), payload,
                                                      after=block.first - 1)
                return self._acknowledged(queue, block, ack.offset)
            except SegmentSealed:
                return self._refused(queue, block)
            except SegmentNotFound as e:
                return self._failed(queue, block, self._gone(e), outcome_unknown=False)
            except OutOfOrder as e:
                if self._predecessor_in_flight(queue, block) and time.monotonic() < deadline:
                    continue  # the block before it is still being retried: wait for it once more
                return self._failed(queue, block, e, outcome_unknown=False)
            except RilletError as e:
                if isinstance(e, ServiceUnavailable) or e.retryable:
                    if time.monotonic() < deadline:
                        time.sleep(random.uniform(0.1, 1.0))
                        continue
                    return self._failed(queue, block, e, outcome_unknown=True)
                return self._failed(queue, block, e, outcome_unknown=False)
            except Exception as e:  # noqa: BLE001 - a programming error must not hang flush()
                return self._failed(queue, block, RilletError(f"append failed: {e}"), outcome_unknown=True)

    def _predecessor_in_flight(self, queue: _SegmentQueue, block: _InFlight) -> bool:
        with self._cond:
            return any(b.writer_id == block.writer_id and b.first < block.first for b in queue.inflight)

    def _acknowledged(self, queue: _SegmentQueue, block: _InFlight, offset: int | None) -> None:
        with self._cond:
            queue.inflight.remove(block)
            position = offset
            for item in block.items:
                item.future.set_result(WriteAck(queue.segment.segment_id, position if position is not None else -1))
                if position is not None:
                    position += len(item.framed)
            if position is not None:
                end = self._acked_end.get(queue.segment.segment_id, 0)
                self._acked_end[queue.segment.segment_id] = max(end, position)
            self._outstanding -= len(block.items)
            resolve = self._settled(queue)
        if resolve:
            self._resolve_sealed(queue)

    def _failed(self, queue: _SegmentQueue, block: _InFlight, error: RilletError, outcome_unknown: bool) -> None:
        """The block is not (or maybe not) appended: its events fail, and the blocks sent after it, which
        the server holds back until it arrives, fail too. The queue then starts over under a fresh
        writer id, so that nothing after depends on the lost block (and, when the outcome is unknown,
        so that the server cannot take the next block for a duplicate of it)."""
        with self._cond:
            queue.inflight.remove(block)
            for item in block.items:
                item.future.set_exception(error)
            self._outstanding -= len(block.items)
            if block.writer_id == queue.writer_id:
                self._generation += 1
                queue.writer_id = self._segment_writer_id()
                queue.next_event_number = 0
            resolve = self._settled(queue)
        if resolve:
            self._resolve_sealed(queue)

    def _refused(self, queue: _SegmentQueue, block: _InFlight) -> None:
        """The segment is sealed: nothing of the block was appended; hold it for the successors."""
        with self._cond:
            queue.sealed = True
            queue.inflight.remove(block)
            queue.held.append(block)
            resolve = self._settled(queue)
        if resolve:
            self._resolve_sealed(queue)

    def _settled(self, queue: _SegmentQueue) -> bool:
        """After a block finished (lock held): send more, or start re-routing a sealed segment's events
        once none of its blocks is in flight any more. True when the caller must re-route."""
        if queue.sealed:
            if not queue.inflight and not queue.resolving:
                queue.resolving = True
                return True
        else:
            self._maybe_send(queue)
        self._cond.notify_all()
        return False

    def _target(self, segment: SegmentRange) -> int | str:
        """The data API's name of the segment that receives the events for ``segment``."""
        return segment.segment_id

    def _gone(self, error: RilletError) -> RilletError:
        return error

    def _resolve_sealed(self, queue: _SegmentQueue) -> None:
        """Fetch the sealed segment's successors and re-send its held and pending events to them, in order."""
        try:
            successors = self._with_retries(
                lambda: self.connection.controller.successors(self.scope, self.stream, queue.segment.segment_id))
        except RilletError as e:
            successors, error = [], e
        else:
            error = SegmentSealed(f"stream {self.scope}/{self.stream} is sealed")
        with self._cond:
            held = [item for block in sorted(queue.held, key=lambda b: b.first) for item in block.items]
            held += list(queue.pending)
            queue.held, queue.pending, queue.pending_bytes = [], deque(), 0
            if successors:
                self._map.replace(queue.segment, [s.segment for s in successors])
                del self._queues[queue.segment.segment_id]
            else:  # no successors: the stream itself was sealed (or could not be asked)
                queue.closed_by = error
            for item in held:
                self._enqueue(item)
            self._cond.notify_all()

    def _with_retries(self, call: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + self.config.retry_timeout_s
        while True:
            try:
                return call()
            except RilletError as e:
                if not (e.retryable or isinstance(e, ServiceUnavailable)) or time.monotonic() >= deadline:
                    raise
                time.sleep(random.uniform(0.1, 1.0))
