"""Byte streams: a single-segment stream used as an append-only file (Pravega's ByteStream API).

Bytes are written raw, without event framing. The writer batches writes into blocks (one request
each, de-duplicated like events by writer id and block number); ``write_at`` is a conditional
append that only succeeds if the stream's length is the expected offset.
"""

from __future__ import annotations

import io
import uuid

from rillet.connection import Connection
from rillet.errors import InvalidArgument
from rillet.framing import MAX_BLOCK_SIZE
from rillet.models import SegmentRange

DEFAULT_BLOCK = 1024 * 1024


def _single_segment(connection: Connection, scope: str, stream: str) -> SegmentRange:
    segments = connection.controller.current_segments(scope, stream)
    if len(segments) != 1:
        raise InvalidArgument(f"a byte stream needs a single-segment stream; {scope}/{stream} has {len(segments)}")
    return segments[0]


class ByteStreamWriter(io.RawIOBase):
    def __init__(self, connection: Connection, scope: str, stream: str, block_size: int = DEFAULT_BLOCK) -> None:
        super().__init__()
        self.connection = connection
        self.scope, self.stream = scope, stream
        self.segment = _single_segment(connection, scope, stream)
        self.block_size = min(block_size, MAX_BLOCK_SIZE)
        self.writer_id = uuid.uuid4().hex
        self._next_block = 0
        self._buffer = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._buffer += data
        while len(self._buffer) >= self.block_size:
            self._send(bytes(self._buffer[:self.block_size]))
            del self._buffer[:self.block_size]
        return len(data)

    def flush(self) -> None:
        while self._buffer:
            chunk = bytes(self._buffer[:self.block_size])
            self._send(chunk)
            del self._buffer[:len(chunk)]

    def write_at(self, data: bytes, expected_offset: int) -> int:
        """Append ``data`` only if the stream's length is ``expected_offset`` (else OffsetMismatch).

        Returns the new length. Buffered bytes are flushed first; ``data`` must fit one block.
        """
        if len(data) > MAX_BLOCK_SIZE:
            raise InvalidArgument(f"a conditional append carries at most {MAX_BLOCK_SIZE} bytes")
        self.flush()
        return self._send(data, expected_offset)

    def _send(self, block: bytes, expected_offset: int | None = None) -> int:
        ack = self.connection.segments.append(self.scope, self.stream, self.segment.segment_id, self.writer_id,
                                              self._next_block, 1, block, expected_offset, raw=True)
        self._next_block += 1
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
        """No flush here: a finalizer may run on any thread, and must not do network I/O. Call close()."""

    def close_and_seal(self) -> None:
        self.close()
        self.connection.controller.seal_stream(self.scope, self.stream)

    def _info(self):
        return self.connection.segments.info(self.scope, self.stream, self.segment.segment_id)


class ByteStreamReader(io.RawIOBase):
    """Reads a byte stream from any offset; ``read`` waits for data unless the stream is sealed."""

    def __init__(self, connection: Connection, scope: str, stream: str, wait_ms: int = 2000) -> None:
        super().__init__()
        self.connection = connection
        self.scope, self.stream = scope, stream
        self.segment = _single_segment(connection, scope, stream)
        self.wait_ms = wait_ms
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
        while True:
            result = self.connection.segments.read(self.scope, self.stream, self.segment.segment_id, self._offset,
                                                   want, self.wait_ms)
            if result.data or result.end_of_segment:
                self._offset = result.next_offset
                return result.data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def available(self) -> int:
        """How many bytes can be read now without waiting."""
        return max(0, self.tail_offset() - self._offset)

    def head_offset(self) -> int:
        return self.connection.segments.info(self.scope, self.stream, self.segment.segment_id).start_offset

    def tail_offset(self) -> int:
        return self.connection.segments.info(self.scope, self.stream, self.segment.segment_id).length
