"""pravega_client's ``ByteStream``: a single-segment stream read and written as a binary file."""

from __future__ import annotations

from rillet.byte_stream import ByteStreamReader, ByteStreamWriter
from rillet.connection import Connection
from rillet.pravega.errors import raising


class ByteStream:
    """A single-segment stream as a binary file: write (sent at once), flush (wait), read and seek anywhere."""

    def __init__(self, connection: Connection, scope: str, stream: str) -> None:
        self.scope, self.stream = scope, stream
        self.writer = ByteStreamWriter(connection, scope, stream)
        self.reader = ByteStreamReader(connection, scope, stream)

    def write(self, byte_array: bytes) -> int:
        """Send ``byte_array`` (returning before its acknowledgement; ``flush`` waits for it); returns
        the number of bytes taken."""
        with raising(OSError):
            return self.writer.write(bytes(byte_array))

    def flush(self) -> None:
        with raising(OSError):
            self.writer.flush()

    def readinto(self, buf: bytearray) -> int:
        """Read into ``buf`` (waiting for data at the tail); returns the number of bytes read.

        Like pravega_client, only a bytearray is taken (TypeError otherwise, before anything is read)."""
        if not isinstance(buf, bytearray):
            raise TypeError(f"readinto takes a bytearray, not {type(buf).__name__}")
        with raising(OSError):
            return self.reader.readinto(buf)

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (an extension: io.RawIOBase's read)."""
        with raising(OSError):
            return self.reader.read(size)

    def seek(self, position: int, whence: int | None = None) -> int:
        """Move the read position: whence 0 from the start, 1 from the current position, 2 from the end."""
        whence = 0 if whence is None else whence
        if whence not in (0, 1, 2):
            raise ValueError("whence should be one of 0: seek from start, 1: seek from current, or 2: seek from end")
        with raising(ValueError):
            return self.reader.seek(position, whence)

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.reader.tell()

    def current_head_offset(self) -> int:
        with raising(OSError):
            return self.reader.head_offset()

    def current_tail_offset(self) -> int:
        with raising(OSError):
            return self.reader.tail_offset()

    def truncate(self, offset: int) -> None:
        """Release all data before ``offset`` (flushing first)."""
        with raising(OSError):
            self.writer.truncate_data_before(offset)

    def __repr__(self) -> str:
        return f"ByteStream(Stream: {self.scope}/{self.stream})"
