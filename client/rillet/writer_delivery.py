"""How a writer's blocks are delivered (on its pool's threads): sent until an answer proves their outcome,
then acknowledged, failed, withdrawn or held for a sealed segment's successors, as the rules of
rillet.writer's docstring say. A base of EventStreamWriter: it acts on the writer's queues, lock and
futures (``_queues``, ``_cond``, ``_map``, ``_fail``, ``_enqueue``, ``_maybe_send``), which rillet.writer
defines."""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rillet.clock import Since
from rillet.errors import (
    InvalidArgument,
    OutcomeUnknown,
    OutOfOrder,
    RilletError,
    SegmentNotFound,
    SegmentSealed,
    TooLarge,
    WriterExpired,
)
from rillet.models import SegmentRange
from rillet.writer_config import WriteAck
from rillet.writer_state import _InFlight, _Pending, _SegmentQueue


class _Delivery:
    """The sending half of EventStreamWriter (see the module docstring)."""

    def _send(self, queue: _SegmentQueue, block: _InFlight) -> None:
        try:
            self._send_until_known(queue, block)
        finally:
            with self._cond:
                queue.sending -= 1
                self._cond.notify_all()  # a new writer id may wait for this request's end

    def _send_until_known(self, queue: _SegmentQueue, block: _InFlight) -> None:
        """Send the block until an answer proves its outcome, or until the deadline."""
        payload = b"".join(p.framed for p in block.items)
        first_sent = Since()
        deadline = min(item.queued_at for item in block.items) + self.config.retry_timeout_s
        attempt = 0
        while True:
            attempt += 1
            with self._cond:
                if block.settled:
                    return  # withdrawn, or failed with a block before it
                predecessor_open = self._predecessor_unresolved(queue, block)
            sent_at = time.monotonic()
            try:
                ack = self.connection.segments.append(self.scope, self.stream, self._target(queue.segment),
                                                      block.writer_id, block.first, len(block.items), payload,
                                                      after=block.first - 1,
                                                      block_age_ms=first_sent.elapsed_ms(), deadline=deadline)
            except SegmentSealed:
                return self._refused(queue, block)
            except WriterExpired as e:  # never appended under this id now; an earlier attempt may have been
                return self._failed(queue, block, e)
            except OutOfOrder as e:
                if not predecessor_open and block.first > 0 and e.details.get("last_event_number") == -1:
                    return self._forgotten(queue, block, e)
                if not predecessor_open:  # everything before it was acknowledged when it left
                    return self._failed(queue, block, self._proven(block, e))
                error: RilletError = e  # sent again once the block before it is through
            except RilletError as e:
                if not unproven(e):
                    return self._failed(queue, block, self._proven(block, self._gone(e) if isinstance(e, SegmentNotFound) else e))
                block.maybe_stored = True
                error = e
            except Exception as e:  # noqa: BLE001 - e.g. an unreadable answer: it proves nothing
                block.maybe_stored = True
                return self._failed(queue, block, self._unknown(f"append failed: {e}"))
            else:
                # A round trip of its own: one that waited on the block before it would overstate it.
                round_trip = None if predecessor_open else time.monotonic() - sent_at
                return self._acknowledged(queue, block, ack.offset, round_trip)
            if time.monotonic() >= deadline:
                return self._failed(queue, block, self._unknown(f"no answer proved the outcome within "
                                                               f"{self.config.retry_timeout_s} s (last: {error})"))
            if isinstance(error, OutOfOrder):
                self._await_predecessor(queue, block, deadline)
            else:
                self._pause_unless_settled(block, backoff(attempt))

    def _pause_unless_settled(self, block: _InFlight, seconds: float) -> None:
        """Back off before sending again, but no longer than the block stays unsettled: one failed at its
        deadline ends its sender at once, and with it the wait of the segment's next writer id."""
        until = time.monotonic() + seconds
        with self._cond:
            while not block.settled and time.monotonic() < until:
                self._cond.wait(timeout=until - time.monotonic())

    def _await_predecessor(self, queue: _SegmentQueue, block: _InFlight, deadline: float) -> None:
        """After an OutOfOrder refusal, wait without a request until every earlier block of the writer id
        is resolved (or this one is settled): sending again sooner only spends another invocation on the
        same refusal, and with many blocks in flight those refusals crowd out the block they wait for."""
        with self._cond:
            while not block.settled and self._predecessor_unresolved(queue, block) and time.monotonic() < deadline:
                self._cond.wait(timeout=min(1.0, max(0.0, deadline - time.monotonic())))

    def _predecessor_unresolved(self, queue: _SegmentQueue, block: _InFlight) -> bool:
        return any(b.writer_id == block.writer_id and b.first < block.first for b in queue.inflight)

    def _proven(self, block: _InFlight, error: RilletError) -> RilletError:
        """The error a refusal proves: itself, unless an earlier unproven attempt may yet be applied."""
        if block.maybe_stored and not isinstance(error, (InvalidArgument, TooLarge)):
            return self._unknown(f"an attempt ended without an answer, then the append was refused ({error})")
        return error

    def _unknown(self, why: str) -> OutcomeUnknown:
        return OutcomeUnknown(f"the event may or may not be stored in {self.scope}/{self.stream}: {why}",
                              deadline_s=self.config.retry_timeout_s)

    def _acknowledged(self, queue: _SegmentQueue, block: _InFlight, offset: int | None,
                      round_trip_s: float | None = None) -> None:
        with self._cond:
            if round_trip_s is not None:
                self._observe_round_trip(round_trip_s)
            if block.settled:
                return  # given up as unknown before this answer came: its futures already said so
            block.settled = True
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
            self._buffered -= sum(len(item.framed) for item in block.items)
            self._failing = False
            if not self._outstanding:
                self._next_expiry = None  # an idle writer's batcher sleeps without a timeout
            queue.acked_at = Since()
            resolve = self._settled(queue)
        if resolve:
            self._resolve_sealed(queue)

    def _failed(self, queue: _SegmentQueue, block: _InFlight, error: RilletError) -> None:
        """The block's events fail; the blocks behind it follow the rules of the module docstring:
        withdrawn and re-queued when it is known not to be stored, failed with it when its outcome is
        unknown. The segment's next block starts a new writer id."""
        with self._cond:
            resolve = self._fail_block(queue, block, error)
        if resolve:
            self._resolve_sealed(queue)

    def _fail_block(self, queue: _SegmentQueue, block: _InFlight, error: RilletError) -> bool:
        """``_failed`` with the lock held; True when the caller must re-route a sealed segment."""
        if block.settled:
            return False
        behind = [b for b in queue.inflight if b.writer_id == block.writer_id and b.first > block.first]
        for b in [block, *behind]:
            b.settled = True
            queue.inflight.remove(b)
        self._fail(block.items, error)
        withdrawn = [item for b in behind for item in b.items]
        if isinstance(error, (OutcomeUnknown, WriterExpired)):
            self._fail(withdrawn, self._unknown(f"it was sent behind an event whose outcome is unknown ({error})"))
        else:
            queue.pending = deque(sorted([*withdrawn, *queue.pending], key=lambda item: item.seq))
            queue.pending_bytes += sum(len(item.framed) for item in withdrawn)
        queue.new_writer_id = True
        return self._settled(queue)

    def _forgotten(self, queue: _SegmentQueue, block: _InFlight, refusal: OutOfOrder) -> None:
        """The segment has never seen this writer id, under which it acknowledged the blocks before this
        one: it is not the segment they went to, but one deleted and created again under its name. Sent
        on under a new writer id, the events would land in the new one; instead the key range takes no
        more events (as for a sealed stream): the block fails as refused, and everything behind it."""
        error = self._gone(SegmentNotFound(
            f"segment {queue.segment.segment_id} of {self.scope}/{self.stream} no longer holds this writer's "
            f"acknowledged events: it was deleted (and created again) since the writer began; create a new "
            f"writer ({refusal})"))
        with self._cond:
            queue.closed_by = error
        self._failed(queue, block, self._proven(block, error))
        with self._cond:
            self._fail(list(queue.pending), error)
            queue.pending, queue.pending_bytes = deque(), 0
            self._cond.notify_all()

    def _refused(self, queue: _SegmentQueue, block: _InFlight) -> None:
        """The segment is sealed: nothing of the block was appended; hold it for the successors."""
        with self._cond:
            if block.settled:
                return
            block.settled = True
            queue.sealed = True
            queue.inflight.remove(block)
            queue.held.append(block)
            resolve = self._settled(queue)
        if resolve:
            self._resolve_sealed(queue)

    def _settled(self, queue: _SegmentQueue) -> bool:
        """After a block finished (lock held): send more, or start re-routing a sealed segment's events
        once none of its blocks is unresolved any more. True when the caller must re-route."""
        self._cond.notify_all()
        if queue.sealed:
            if not queue.inflight and not queue.resolving:
                queue.resolving = True
                return True
        else:
            self._maybe_send(queue)
        return False

    def _target(self, segment: SegmentRange) -> int | str:
        """The data API's name of the segment that receives the events for ``segment``."""
        return segment.segment_id

    def _gone(self, error: RilletError) -> RilletError:
        return error

    def _take_held(self, queue: _SegmentQueue) -> list[_Pending]:
        """A sealed queue's held and pending events, in the order they were written (lock held)."""
        items = sorted([*(item for block in queue.held for item in block.items), *queue.pending],
                       key=lambda item: item.seq)
        queue.held, queue.pending, queue.pending_bytes = [], deque(), 0
        return items

    def _resolve_sealed(self, queue: _SegmentQueue) -> None:
        """Fetch the sealed segment's successors and re-send its held and pending events to them, in order."""
        try:
            successors = self._with_retries(
                lambda: self.connection.controller.successors(self.scope, self.stream, queue.segment.segment_id))
        except RilletError as e:
            successors, lookup_error = None, e
        with self._cond:
            items = self._take_held(queue)
            queue.resolving = False
            if successors:
                self._map.replace(queue.segment, [s.segment for s in successors])
                del self._queues[queue.segment.segment_id]
                for item in items:
                    self._enqueue(item)
            elif successors is not None:  # a sealed segment without successors: the stream is sealed
                queue.closed_by = SegmentSealed(f"stream {self.scope}/{self.stream} is sealed")
                self._fail(items, queue.closed_by)
            else:  # the range stays open: the next event for it asks again
                self._fail(items, SegmentSealed(
                    f"segment {queue.segment.segment_id} of {self.scope}/{self.stream} is sealed and its successors "
                    f"could not be looked up ({lookup_error}); the event was not stored"))
            self._cond.notify_all()

    def _with_retries(self, call: Callable[[], Any]) -> Any:
        """Repeat a read while its failures are transient, up to ``retry_timeout_s``."""
        deadline = time.monotonic() + self.config.retry_timeout_s
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
            except RilletError as e:
                if not unproven(e) or time.monotonic() >= deadline:
                    raise
            time.sleep(backoff(attempt))


def unproven(error: RilletError) -> bool:
    """Whether an error answer leaves the outcome open: 5xx (a bare 500 too), throttling, timeouts and
    resets (the transport raises those as ServiceUnavailable), and whatever its type says may pass."""
    return error.retryable or error.status >= 500


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1``: exponential from 20 ms up to 1 s, full jitter."""
    return random.uniform(0, min(1.0, 0.02 * 2 ** attempt))
