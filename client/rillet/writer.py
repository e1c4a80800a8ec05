"""EventStreamWriter: routing-key ordered, batched, de-duplicated writes to a stream.

How a write travels:

* The routing key hashes to a point of [0, 1); the writer's segment map (key ranges of the current
  segments) picks the segment. Events without a routing key get a random point.
* Each segment has a queue, batched to a latency budget (``max_latency_ms``, in the spirit of Kafka's
  ``linger.ms`` and the Kinesis producer library's ``RecordMaxBufferedTime``): a block grows for as
  long as the budget allows once the round trip is taken off it, so that its oldest event is
  acknowledged about when its budget runs out. The round trip is the writer's smoothed measure of its
  appends (an EWMA, TCP's smoothed round trip); until one is measured it is taken to be the whole
  budget, so a new writer's first block leaves at once. A block leaves at once when
  ``batch_size_bytes`` have gathered or a flush is asked, and never holds an event longer than the
  budget less the measured round trip. Every request costs about the same whatever its size (an
  invocation, an S3 PUT or its inline write units, a few DynamoDB requests), so the budget sets the
  price per GB: docs/benchmarks.md gives the frontier. Up to ``max_inflight_blocks`` blocks per
  segment are in flight at once: each names the event number of the block before it (``after``),
  and the server commits a block only after that one, so blocks commit in the order written however
  their requests race, and the upload of one overlaps the commit of another. A due block finding
  that many in flight leaves when an answer comes back, with whatever gathered meanwhile. With no
  budget left after the round trip (a budget at or under it), a partial block leaves only when
  nothing of its segment is in flight, or on an answer: one request per round trip, as Pravega's
  writer sends, rather than a flood of small ones that would only slow the round trip further. A block
  refused because the one before it has not committed yet (OutOfOrder) is sent again as soon as
  every block before it is resolved, and not before: so each block costs at most one such refusal,
  however many are in flight.
* When a segment turns out to be sealed (the stream scaled), nothing of the refused block was
  appended. Once no block of the segment is unresolved, the writer asks the controller for the
  successors (again and again while the answers are transient, up to ``retry_timeout_s``), replaces
  the sealed segment's range in its map with theirs, and re-queues the held blocks' events and
  everything behind them to the successors in the order ``write_event`` was called (a writer-wide
  sequence number; event numbers belong to one writer id and one segment and say nothing across
  them). Events for that range that arrive meanwhile queue behind them, so per-key order holds
  across any number of scalings, and nothing is appended to a successor before its predecessor was
  sealed. Only an answer that the sealed segment has no successors (the stream is sealed) closes
  the range; a lookup given up at the deadline fails the held events (refused, so not stored) and
  the next event for the range asks again.

Outcomes (the idempotent-producer contract of Kafka's producer and Pravega's event writer):

* A block carries the writer id and the event numbers of its events within that segment; the server
  acknowledges a block it already holds at its original offset instead of appending it again.
* So an answer that does not prove what happened (any 5xx including a bare 500, a timeout, a reset
  connection, throttling) leaves the block unresolved, and it is sent again, same writer id, same
  event numbers, until an answer proves its outcome.
* Every attempt says how long ago the block was first sent (``x-rillet-block-age-ms``, this
  the larger of the monotonic and the wall clock's count, see rillet.clock), so that a server which has forgotten the writer id (idle longer than its
  expiry window, days) can tell a fresh block from a resend that may already be stored under it.
* Its events fail only when an answer proves they are not stored (a 4xx such as InvalidArgument,
  TooLarge, SegmentNotFound, or OutOfOrder for an attempt sent when every block before it was
  acknowledged), or once ``retry_timeout_s`` has passed since ``write_event`` took them, with
  :class:`OutcomeUnknown`: they may or may not be stored. A refusal that follows an unproven attempt proves nothing about that
  attempt, which may still be applied; so it fails the events with OutcomeUnknown too, unless it
  depends on the block's content alone (InvalidArgument, TooLarge: every attempt was refused). An
  exception that is no answer at all (a fault in the SDK itself) ends the block at once, as
  OutcomeUnknown, so that ``flush()`` never waits on it.
* WriterExpired (409) answers a resend older than the server's writer expiry window from a writer id
  it no longer remembers: the block will never be appended under that id, but an earlier attempt may
  have been, so its events fail with WriterExpired and their outcome is unknown. Only a block resent
  for longer than that window (``retry_timeout_s`` above days) can meet it.
* OutOfOrder saying the segment has never seen the writer id (``last_event_number`` -1), for a block
  whose predecessors under that id it acknowledged, means the segment was deleted and created again
  under its name: the block, the blocks behind it and the events queued for its key range fail with
  SegmentNotFound (not stored), and the range takes no more events from this writer, which would
  otherwise write on into the new segment under a new writer id.
* A writer id left without an acknowledged block for ``idle_writer_id_s`` (an hour; the server's
  window is days) is not continued: the segment's next block starts a new one, so a rarely-writing
  process never sends under an id the server may have forgotten.

Bounds, and failures seen (the shape of Kafka's producer: ``delivery.timeout.ms``, ``buffer.memory`` and
``max.block.ms``, failures in callbacks and logs):

* ``retry_timeout_s`` bounds the whole wait of an event, counted from ``write_event``: queued behind
  blocks that go unanswered, resent, or held for a sealed segment's successors. An event without an
  outcome by then (give or take ``EXPIRY_TICK_S``) fails wherever it waits (the batcher expires it: a
  sender stuck in a request does not hold it): in a block sent, with OutcomeUnknown; never sent (or
  withdrawn), with NotSent; held for successors, with SegmentSealed (those two are not stored). So
  ``flush()`` and ``close()`` return at most that long after the last ``write_event``. (A bound counted from each block's first send let the events queued behind an
  unanswered block wait it once more when they were sent in turn: twice the bound.)
* ``buffer_bytes`` bounds the events written and not yet resolved: ``write_event`` blocks while they
  fill it, for up to ``max_block_s``, then raises WriterBufferFull (the event is not queued).
* The first failure after an acknowledgement logs a warning on ``rillet.writer``, once until an event
  is acknowledged again. ``flush()`` and ``close()`` (so leaving a ``with`` block) raise
  EventsNotAcknowledged naming how many failed and the first cause, counting only the failures nobody
  looked at through the future (``result()``, ``exception()``, a done callback's look), each once. A
  ``with`` block already leaving on an exception raises that one instead.

What happens to the blocks behind a block that failed (same segment and writer id; they name it with
``after``, so none of them can commit before it does):

* It is known not to be stored: they can never commit under this writer id. They are withdrawn and
  their events return to the queue, in the order written, to be sent again under a new writer id.
  (Not renumbered under the old one: a request of a withdrawn block still on its way, carrying its
  old numbers, could then commit behind the renumbered blocks and store its events twice.)
* Its outcome is unknown (OutcomeUnknown, WriterExpired): they commit if and only if it did
  (requests may still be on their way), so they fail with OutcomeUnknown too.
* Either way the writer id of the segment changes, but only once no block of the segment is
  unresolved: a block sent under a new id could otherwise land before an earlier event whose outcome
  is still open. Acknowledged events therefore keep their order; an event given up as unknown may
  still land after later ones, as nobody was told it was stored.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from rillet.connection import Connection
from rillet.errors import (
    EventsNotAcknowledged,
    InvalidArgument,
    NotSent,
    OutcomeUnknown,
    RilletError,
    SegmentSealed,
    WriterBufferFull,
    WriterExpired,
)
from rillet.framing import frame
from rillet.keyspace import hash_routing_key
from rillet.models import SegmentRange
from rillet.serializers import Serializer
from rillet.writer_config import EventWriterConfig
from rillet.writer_delivery import _Delivery
from rillet.writer_state import SegmentMap, _EventFuture, _InFlight, _Pending, _SegmentQueue

T = TypeVar("T")

ROUND_TRIP_GAIN = 0.125  # weight of a new round trip in the smoothed one (TCP's SRTT gain, RFC 6298)
# Overdue events are looked for at most this often: each look scans every outstanding event, so a
# backlog written at a high rate during an outage costs one scan per tick, not one per event.
EXPIRY_TICK_S = 0.05

_log = logging.getLogger("rillet.writer")


class EventStreamWriter(_Delivery, Generic[T]):
    """Writes events to one stream; ``write_event`` returns a Future acknowledged when durable."""

    raises_unseen_failures = True  # flush and close raise EventsNotAcknowledged (a transaction's commit says instead)

    def __init__(self, connection: Connection, scope: str, stream: str, serializer: Serializer[T],
                 config: EventWriterConfig | None = None, segments: list[SegmentRange] | None = None) -> None:
        self.connection = connection
        self.scope, self.stream = scope, stream
        self.serializer = serializer
        self.config = config or EventWriterConfig()
        self.writer_id = uuid.uuid4().hex
        self._generation = 0  # how many writer ids this writer started after failed blocks
        self._cond = threading.Condition()
        self._map = SegmentMap(segments if segments is not None else connection.controller.current_segments(scope, stream))
        self._queues: dict[int, _SegmentQueue] = {}
        self._acked_end: dict[int, int] = {}  # segment id -> offset after this writer's last acknowledged event
        self._noted_time = False
        self._round_trip_s: float | None = None  # smoothed append round trip, once one was measured
        self._written = 0  # write_event calls so far: the next event's sequence number
        self._outstanding = 0
        self._buffered = 0  # bytes of the outstanding events: write_event blocks beyond buffer_bytes
        self._next_expiry: float | None = None  # when the oldest outstanding event's retry_timeout_s ends
        self._failing = False  # a failure was logged and no event was acknowledged since
        # Failures nobody looked at since flush or close last raised them (the round counts those raises).
        self._unseen_failures = 0
        self._unseen_unknown = 0
        self._first_unseen: RilletError | None = None
        self._report_round = 0
        self._flushing = 0
        self._closed = False
        self._pool = ThreadPoolExecutor(self.config.max_concurrency, thread_name_prefix=f"rillet-writer-{stream}")
        self._batcher = threading.Thread(target=self._batch_loop, name="rillet-writer-batcher", daemon=True)
        self._batcher.start()

    # -- public API ------------------------------------------------------------------------------

    def write_event(self, event: T, routing_key: str | None = None, timestamp_ms: int | None = None) -> Future:
        """Queue an event; the Future resolves to a :class:`WriteAck` once the event is durable.

        It fails only with an error that proves the event is not stored, or with
        :class:`OutcomeUnknown` once ``retry_timeout_s`` passed without proof either way, or with
        :class:`WriterExpired` when a resend outlived the server's writer expiry (outcome unknown too).
        With ``store_key_and_time``, the routing key and ``timestamp_ms`` (default: now, milliseconds
        since the epoch) are kept with the event. Blocks while ``buffer_bytes`` of events await their
        outcome, and raises :class:`WriterBufferFull` (the event not queued) after ``max_block_s``."""
        framed = self._frame(self.serializer.serialize(event), routing_key, timestamp_ms)
        point = hash_routing_key(routing_key) if routing_key is not None else random.random()
        future = _EventFuture(self._looked_at)
        with self._cond:
            self._await_room(len(framed))
            if self._closed:
                raise RilletError("the writer is closed")
            self._outstanding += 1
            self._buffered += len(framed)
            queued_at = time.monotonic()
            if self._next_expiry is None:
                self._next_expiry = queued_at + self.config.retry_timeout_s
                self._cond.notify_all()  # the batcher expires it if nothing resolves it in time
            self._enqueue(_Pending(framed, point, future, self._written, queued_at))
            self._written += 1
        return future

    def _await_room(self, size: int) -> None:
        """Wait (lock held) until the event fits in ``buffer_bytes`` beside the outstanding ones; one
        event always fits in an empty buffer. WriterBufferFull after ``max_block_s``."""
        give_up = time.monotonic() + self.config.max_block_s
        while not self._closed and self._buffered and self._buffered + size > self.config.buffer_bytes:
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                raise WriterBufferFull(
                    f"the writer to {self.scope}/{self.stream} holds {self._buffered} bytes of events awaiting "
                    f"their outcome (buffer_bytes {self.config.buffer_bytes}) and none was resolved within "
                    f"max_block_s ({self.config.max_block_s} s); the event was not written",
                    buffered_bytes=self._buffered, max_block_s=self.config.max_block_s)
            self._cond.wait(timeout=remaining)

    def _frame(self, payload: bytes, routing_key: str | None, timestamp_ms: int | None) -> bytes:
        if not self.config.store_key_and_time:
            if timestamp_ms is not None:
                raise InvalidArgument("timestamp_ms is kept only by a writer with store_key_and_time=True")
            return frame(payload)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        elif not 0 <= timestamp_ms < 2**63:
            raise InvalidArgument(f"timestamp_ms must be milliseconds since the epoch, not {timestamp_ms}")
        return frame(payload, routing_key, timestamp_ms, keep=True)

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
        """Send everything queued now and wait until every event written so far has its outcome: at most
        ``retry_timeout_s`` after the last ``write_event``. Raises :class:`EventsNotAcknowledged` if
        events failed that nobody looked at (through their futures) since it was last raised."""
        with self._cond:
            self._flushing += 1
            try:
                for queue in list(self._queues.values()):
                    self._maybe_send(queue)
                while self._outstanding:
                    self._cond.wait()
            finally:
                self._flushing -= 1
            self._raise_unseen_failures()

    def close(self) -> None:
        """Flush (raising as it does), then release the writer's threads (and stop holding watermarks
        back). A sender still waiting on a request given up at the deadline is not waited for: it ends
        with that request."""
        try:
            self.flush()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._pool.shutdown(wait=False, cancel_futures=True)
            if self._noted_time:
                self.connection.controller.remove_writer(self.scope, self.stream, self.writer_id)

    def __enter__(self) -> EventStreamWriter[T]:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        """Close; the failures close raises give way to an exception the block is already leaving on
        (they were logged)."""
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except EventsNotAcknowledged:
            pass

    def _looked_at(self, future: _EventFuture) -> None:
        """A future's outcome was looked at: a failure counted as unseen no longer is."""
        if future.seen or not future.done():
            return
        with self._cond:
            if future.seen:
                return
            future.seen = True
            if future.counted is not None and future.counted[0] == self._report_round:
                self._unseen_failures -= 1
                self._unseen_unknown -= future.counted[1]
                if not self._unseen_failures:
                    self._first_unseen = None

    def _raise_unseen_failures(self) -> None:
        """Raise the failures nobody looked at, once (lock held)."""
        if not self._unseen_failures or not self.raises_unseen_failures:
            return
        count, unknown, first = self._unseen_failures, self._unseen_unknown, self._first_unseen
        self._unseen_failures = self._unseen_unknown = 0
        self._first_unseen = None
        self._report_round += 1
        raise EventsNotAcknowledged(
            f"{count} event(s) written to {self.scope}/{self.stream} were not acknowledged ({unknown} of them "
            f"may or may not be stored, the others are not stored); the first: {first}",
            failed=count, outcome_unknown=unknown, first=str(first)) from first

    # -- queues (called with the lock held) ------------------------------------------------------

    def _enqueue(self, item: _Pending) -> None:
        segment = self._map.lookup(item.point)
        queue = self._queues.get(segment.segment_id)
        if queue is None:
            queue = self._queues[segment.segment_id] = _SegmentQueue(segment, self.writer_id)
        if queue.closed_by is not None:
            self._fail([item], queue.closed_by)
            return
        queue.pending.append(item)
        queue.pending_bytes += len(item.framed)
        if queue.sealed and not queue.inflight and not queue.resolving:
            queue.resolving = True  # an earlier successors lookup was given up: ask again
            self._pool.submit(self._resolve_sealed, queue)
        self._maybe_send(queue)
        if len(queue.pending) == 1:
            self._cond.notify_all()  # a new block's deadline: the batcher sleeps until the earliest

    def _maybe_send(self, queue: _SegmentQueue) -> None:
        """Send due blocks, up to ``max_inflight_blocks`` at once per segment; each names the event
        number before it, so the server commits them in order however the requests race.

        A full block is due at once, and so is everything on a flush or close. A partial one is due
        once its oldest event has been held for the budget less the round trip (``_due_at``), and,
        with no budget left, nothing of the segment is in flight (``_partial_may_leave``)."""
        while self._may_send(queue) and (
                queue.pending_bytes >= self.config.batch_size_bytes or self._flushing or self._closed
                or (self._partial_may_leave(queue) and time.monotonic() >= self._due_at(queue))):
            if (not queue.inflight and queue.acked_at is not None
                    and queue.acked_at.elapsed_s() > self.config.idle_writer_id_s):
                queue.new_writer_id = True  # the server may forget an idle writer id: do not continue it
            if queue.new_writer_id:  # nothing of the segment is unresolved now
                self._generation += 1
                queue.writer_id, queue.next_event_number = f"{self.writer_id}-{self._generation}", 0
                queue.new_writer_id, queue.acked_at = False, None
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
            queue.sending += 1
            self._pool.submit(self._send, queue, block)

    def _may_send(self, queue: _SegmentQueue) -> bool:
        """Whether a block of the segment may leave now if due: it has events, is neither sealed nor
        closed, has a free in-flight slot, and is not waiting for its blocks to resolve before a new
        writer id."""
        return (bool(queue.pending) and not queue.sealed and queue.closed_by is None
                and len(queue.inflight) < self.config.max_inflight_blocks
                and not (queue.new_writer_id and (queue.inflight or queue.sending)))

    def _partial_may_leave(self, queue: _SegmentQueue) -> bool:
        """A partial block joins blocks in flight only while there is budget to keep: with none (the
        round trip takes it all) it waits for their answer, so a slow server gets fewer, larger requests."""
        return not queue.inflight or self.hold_s() > 0

    def round_trip_s(self) -> float | None:
        """The smoothed round trip of this writer's appends (None until one is measured)."""
        return self._round_trip_s

    def hold_s(self) -> float:
        """How long a partial block may grow: the budget less the smoothed round trip (none measured yet:
        the whole budget is taken for the round trip, so the block leaves at once)."""
        budget_s = self.config.max_latency_ms / 1000
        round_trip_s = budget_s if self._round_trip_s is None else self._round_trip_s
        return max(0.0, budget_s - round_trip_s)

    def _due_at(self, queue: _SegmentQueue) -> float:
        return queue.pending[0].queued_at + self.hold_s()

    def _observe_round_trip(self, seconds: float) -> None:
        """Fold a measured round trip into the smoothed one (lock held)."""
        previous = self._round_trip_s
        self._round_trip_s = seconds if previous is None else previous + ROUND_TRIP_GAIN * (seconds - previous)

    def _batch_loop(self) -> None:
        """Send the partial blocks whose hold ran out (full ones leave as they fill, the rest on flush).
        Sleeps until the earliest such deadline, or until woken by a segment's new block, an answer
        or close: an idle writer never polls."""
        with self._cond:
            while not self._closed:
                if self._next_expiry is not None and time.monotonic() >= self._next_expiry:
                    self._next_expiry = self._expire_overdue()
                deadline = self._next_expiry
                for queue in list(self._queues.values()):
                    self._maybe_send(queue)
                    if self._may_send(queue) and self._partial_may_leave(queue):  # others wait for an answer
                        due = self._due_at(queue)
                        deadline = due if deadline is None else min(deadline, due)
                self._cond.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _expire_overdue(self) -> float | None:
        """Fail with OutcomeUnknown the events ``retry_timeout_s`` old without an outcome, wherever they
        wait: queued, in a block in flight (and the blocks behind it) or held for a sealed segment's
        successors (lock held). Returns when to look again: when the oldest event left is due, at the
        earliest a tick from now."""
        bound = self.config.retry_timeout_s
        now = time.monotonic()
        within = f"within retry_timeout_s ({bound} s) of write_event"
        for queue in list(self._queues.values()):
            overdue = [item for item in queue.pending if item.queued_at + bound <= now]
            if overdue:  # first, so that a block failed below does not make room for them
                # Never sent, or withdrawn from behind a block refused for good: not stored either way.
                queue.pending = deque(item for item in queue.pending if item.queued_at + bound > now)
                queue.pending_bytes -= sum(len(item.framed) for item in overdue)
                self._fail(overdue, NotSent(f"the event to {self.scope}/{self.stream} was not sent {within}, "
                                            f"behind blocks of its segment without an answer; it is not stored"))
            for block in queue.held:
                overdue = [item for item in block.items if item.queued_at + bound <= now]
                block.items = [item for item in block.items if item.queued_at + bound > now]
                self._fail(overdue, SegmentSealed(
                    f"segment {queue.segment.segment_id} of {self.scope}/{self.stream} is sealed and its successors "
                    f"were not found {within}; the event was not stored"))
            queue.held = [block for block in queue.held if block.items]
            for block in list(queue.inflight):
                overdue_block = not block.settled and min(item.queued_at for item in block.items) + bound <= now
                if overdue_block and self._fail_block(queue, block, self._unknown(f"no answer proved the outcome {within}")):
                    self._pool.submit(self._resolve_sealed, queue)
        left = [item.queued_at for queue in self._queues.values()
                for items in (queue.pending, *(b.items for b in queue.inflight), *(b.items for b in queue.held))
                for item in items]
        return max(min(left) + bound, now + EXPIRY_TICK_S) if left else None

    def _fail(self, items: list[_Pending], error: RilletError) -> None:
        """Fail the events' futures (lock held); count the failures for flush and close to raise, and log
        the first of an episode (until an event is acknowledged again)."""
        unknown = isinstance(error, (OutcomeUnknown, WriterExpired))
        for item in items:
            item.future.set_exception(error)
            if not item.future.seen:  # a done callback may have looked at it already
                item.future.counted = (self._report_round, unknown)
                self._unseen_failures += 1
                self._unseen_unknown += unknown
                if self._first_unseen is None:
                    self._first_unseen = error
        self._outstanding -= len(items)
        self._buffered -= sum(len(item.framed) for item in items)
        if not self._outstanding:
            self._next_expiry = None
        if items and not self._failing:
            self._failing = True
            _log.warning("writer %s to %s/%s: %d event(s) failed (%s); no more failures are logged until an "
                         "event is acknowledged again, flush() and close() raise those nobody looked at",
                         self.writer_id, self.scope, self.stream, len(items), error)
        self._cond.notify_all()
