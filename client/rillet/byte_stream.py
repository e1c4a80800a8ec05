"""Byte streams: a single-segment stream used as an append-only file (Pravega's ByteStream API).

Bytes are written raw, without event framing. As in Pravega's byte writer, ``write`` sends: its
bytes are handed to a sender thread at once and appended in order, one block per request (each
de-duplicated like events by writer id and block number); what is written while a request is in
flight leaves together in the next one. ``flush`` only waits until everything written is durable.
The sender runs on its own, so written bytes reach the stream even if the writer is dropped without
``flush`` or ``close``. ``write_at`` is a conditional append that only succeeds if the stream's length
is the expected offset.
"""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Callable

from rillet.clock import Since
from rillet.connection import Connection
from rillet.errors import InvalidArgument, OffsetMismatch, OutcomeUnknown, RilletError
from rillet.framing import MAX_BLOCK_SIZE
from rillet.models import SegmentRange
from rillet.segments import TailBackoff

DEFAULT_BLOCK = 1024 * 1024


def _single_segment(connection: Connection, scope: str, stream: str) -> SegmentRange:
    return _the_only(scope, stream, connection.controller.current_segments(scope, stream))


def _the_only(scope: str, stream: str, segments: list[SegmentRange]) -> SegmentRange:
    if len(segments) != 1:
        raise InvalidArgument(f"a byte stream needs a single-segment stream; {scope}/{stream} has {len(segments)}")
    return segments[0]


class _Sender:
    """Appends a writer's bytes in order from its own thread, started on demand and ended when idle.

    ``pending`` holds the bytes written and not yet sent (bounded by what the application wrote and
    has not flushed); ``unacked`` the block in flight or of unknown outcome. Blocks are numbered
    contiguously and the segment store de-duplicates on the number. A failure stops the sender and is
    raised by the next ``write`` or ``flush``: a typed refusal (4xx: the block is not stored) every
    time; an unknown outcome (5xx, timeout, reset or throttling past the transport's retries) once, as
    OutcomeUnknown, after which the next call resends the same block under the same number, so it is
    stored exactly once. Each attempt says how long ago its block was first sent (``age_ms``): a resend
    older than the server's writer expiry window is refused with WriterExpired (the block may have been
    stored before; the writer stops for good, as after any refusal).
    """

    def __init__(self, append: Callable[[bytes, int, int | None, int], int], block_size: int) -> None:
        self._append = append
        self._block_size = block_size
        self._changed = threading.Condition()
        self._pending = bytearray()
        # (block, expected offset, when first sent) in flight or unresolved
        self._unacked: tuple[bytes, int | None, float] | None = None
        self._next_block = 0
        self._running = False
        self._error: RilletError | None = None

    def put(self, data: bytes) -> None:
        with self._changed:
            self._raise_failure()
            self._pending += data
            if not self._running:
                self._start()

    def drain(self) -> None:
        """Wait until every byte put is acknowledged; raise the failure that stopped the sender."""
        with self._changed:
            self._raise_failure()
            if not self._running and (self._unacked or self._pending):
                self._start()
            self._changed.wait_for(lambda: not self._running)
            self._raise_failure()

    def send_now(self, block: bytes, expected_offset: int) -> int:
        """Append ``block`` from the caller's thread once nothing is pending (for conditional appends);
        bytes put meanwhile wait behind it. Block numbers must be contiguous, so a block whose outcome
        is unknown stays the one to resend before any other."""
        with self._changed:
            self.drain()
            self._running = True
        first_sent = Since()
        try:
            length = self._append(block, self._next_block, expected_offset, 0)
        except RilletError as e:
            if e.retryable or e.status >= 500:
                with self._changed:
                    self._unacked = (block, expected_offset, first_sent)
            raise
        else:
            self._next_block += 1
            return length
        finally:
            with self._changed:
                self._running = False
                if self._pending:
                    self._start()
                self._changed.notify_all()

    def _start(self) -> None:
        self._running = True
        # Not a daemon: bytes written just before the interpreter exits are still sent.
        threading.Thread(target=self._run, name="rillet-byte-sender").start()

    def _run(self) -> None:
        while True:
            with self._changed:
                if self._unacked is None and self._pending:
                    self._unacked = (bytes(self._pending[:self._block_size]), None, Since())
                    del self._pending[:len(self._unacked[0])]
                if self._unacked is None:
                    self._running = False
                    self._changed.notify_all()
                    return
                (block, expected_offset, first_sent), number = self._unacked, self._next_block
            try:
                self._append(block, number, expected_offset, first_sent.elapsed_ms())
            except RilletError as e:
                with self._changed:
                    if isinstance(e, OffsetMismatch) and expected_offset is not None:
                        self._unacked = None  # a conditional append resent: known not stored after all
                        continue
                    unknown = e.retryable or e.status >= 500
                    self._error = OutcomeUnknown(f"block {number} of the byte stream may or may not be stored "
                                                 f"({e.code}: {e.message}); the next write or flush resends it",
                                                 block=number) if unknown else e
                    self._running = False
                    self._changed.notify_all()
                return
            with self._changed:
                self._unacked = None
                self._next_block += 1

    def _raise_failure(self) -> None:
        error = self._error
        if error is not None:
            if isinstance(error, OutcomeUnknown):
                self._error = None  # raised once; the next call resends the block
            raise error


class ByteStreamWriter(io.RawIOBase):
    def __init__(self, connection: Connection, scope: str, stream: str, block_size: int = DEFAULT_BLOCK) -> None:
        super().__init__()
        self.connection = connection
        self.scope, self.stream = scope, stream
        self.segment = _single_segment(connection, scope, stream)
        self.block_size = min(block_size, MAX_BLOCK_SIZE)
        self.writer_id = uuid.uuid4().hex
        self._sender = _Sender(self._send, self.block_size)

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        """Send ``data`` (returning before it is acknowledged: ``flush`` waits for that).

        Raises the failure of an earlier block, if one stopped the sender; ``data`` is then not taken."""
        self._sender.put(bytes(data))
        return len(data)

    def flush(self) -> None:
        """Wait until every byte written is durable; raise the failure of one that is not."""
        self._sender.drain()

    def write_at(self, data: bytes, expected_offset: int) -> int:
        """Append ``data`` only if the stream's length is ``expected_offset`` (else OffsetMismatch).

        Returns the new length. Bytes written before are made durable first; ``data`` must fit one block.
        """
        if len(data) > MAX_BLOCK_SIZE:
            raise InvalidArgument(f"a conditional append carries at most {MAX_BLOCK_SIZE} bytes")
        return self._sender.send_now(data, expected_offset)

    def _send(self, block: bytes, number: int, expected_offset: int | None, age_ms: int) -> int:
        ack = self.connection.segments.append(self.scope, self.stream, self.segment.segment_id, self.writer_id,
                                              number, 1, block, expected_offset, raw=True, block_age_ms=age_ms)
        return ack.length

    def truncate_data_before(self, offset: int) -> None:
        """Release everything before ``offset``; reads below it fail with Truncated."""
        self.flush()
        self.connection.controller.truncate_stream(self.scope, self.stream, {self.segment.segment_id: offset})

    def head_offset(self) -> int:
        return self._info().start_offset

    def tail_offset(self) -> int:
        return self._info().length

    def close(self) -> None:
        if not self.closed:
            self.flush()
        super().close()

    def __del__(self) -> None:
        """No close here (io's finalizer would wait in flush): the sender holds this writer until its
        bytes are sent, so a dropped writer loses nothing."""

    def close_and_seal(self) -> None:
        self.close()
        self.connection.controller.seal_stream(self.scope, self.stream)

    def _info(self):
        return self.connection.segments.info(self.scope, self.stream, self.segment.segment_id)


class ByteStreamReader(io.RawIOBase):
    """Reads a byte stream from any offset; ``read`` waits for data unless the stream is sealed."""

    def __init__(self, connection: Connection, scope: str, stream: str) -> None:
        super().__init__()
        self.connection = connection
        self.scope, self.stream = scope, stream
        info = connection.controller.stream_info(scope, stream)
        self.segment = _the_only(scope, stream, info.current_segments)
        # Every read names the stream's incarnation: once the name is deleted and created again, this
        # reader's offset means nothing there, and reads answer StreamRecreated rather than its bytes.
        self.incarnation = info.created_at_ms
        self._offset = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._offset

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._offset
        elif whence == io.SEEK_END:
            offset += self.tail_offset()
        if offset < 0:
            raise InvalidArgument("cannot seek before offset 0")
        self._offset = offset
        return offset

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all available when -1); b"" only at the end of a sealed stream."""
        want = MAX_BLOCK_SIZE if size is None or size < 0 else size
        if want == 0:
            return b""
        backoff = TailBackoff()
        while True:
            result = self.connection.segments.read(self.scope, self.stream, self.segment.segment_id, self._offset,
                                                   want, incarnation=self.incarnation)
            if result.data or result.end_of_segment:
                self._offset = result.next_offset
                return result.data
            self._wait_for_bytes_past(self._offset, backoff)

    def _wait_for_bytes_past(self, offset: int, backoff: TailBackoff) -> None:
        """Wait at the tail with backed-off tail checks (an eventually consistent read of the head record),
        not a request the server holds open; the next read says what the news is (bytes, end, truncation)."""
        segments = self.connection.segments
        while True:
            time.sleep(backoff.next_delay())
            tail, = segments.tails(self.scope, self.stream, [self.segment.segment_id], self.incarnation)
            if not tail.found or tail.sealed or tail.length > offset or tail.start_offset > offset:
                return

    def readinto(self, buffer) -> int:
        """Read into a writable buffer; a read-only one is refused before the position moves."""
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise TypeError(f"readinto needs a writable buffer such as a bytearray, not {type(buffer).__name__}")
        data = self.read(len(view))
        view[:len(data)] = data
        return len(data)

    def available(self) -> int:
        """How many bytes can be read now without waiting."""
        return max(0, self.tail_offset() - self._offset)

    def head_offset(self) -> int:
        return self.connection.segments.info(self.scope, self.stream, self.segment.segment_id).start_offset

    def tail_offset(self) -> int:
        return self.connection.segments.info(self.scope, self.stream, self.segment.segment_id).length
