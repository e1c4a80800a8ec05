"""Event framing inside segments and the size limits of the data path.

An event is stored as a 4-byte big-endian length followed by its bytes, so any offset a reader
reaches by walking frames is an event boundary, which is what stream cuts rely on. Byte streams
store raw bytes without frames.

Limits come from the Lambda Function URL path: a request or response payload is at most 6 MB and
binary bodies travel base64-encoded (4/3 larger), so one append block or one read answer carries at
most 4 MiB of payload plus a frame header, with room left for headers.
"""

from __future__ import annotations

import struct

from rillet.errors import InvalidArgument, TooLarge

FRAME_HEADER = struct.Struct(">I")
HEADER_SIZE = FRAME_HEADER.size
MAX_EVENT_SIZE = 4 * 1024 * 1024
MAX_BLOCK_SIZE = MAX_EVENT_SIZE + HEADER_SIZE
MAX_READ_SIZE = MAX_BLOCK_SIZE


def frame(payload: bytes) -> bytes:
    if len(payload) > MAX_EVENT_SIZE:
        raise TooLarge(f"event of {len(payload)} bytes exceeds the maximum event size of {MAX_EVENT_SIZE} bytes")
    return FRAME_HEADER.pack(len(payload)) + payload


def unframe(buffer: bytes | bytearray | memoryview) -> tuple[list[tuple[int, bytes]], int]:
    """Split whole frames off the front of ``buffer``.

    Returns ``(events, consumed)``: each event as (its frame's position in ``buffer``, its bytes), and
    how many bytes the whole frames take; a trailing partial frame is left for the next read.
    """
    view = memoryview(buffer)
    events: list[tuple[int, bytes]] = []
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        (size,) = FRAME_HEADER.unpack_from(view, pos)
        if size > MAX_EVENT_SIZE:
            raise InvalidArgument(f"corrupt frame at {pos}: length {size} exceeds the maximum event size")
        end = pos + HEADER_SIZE + size
        if end > len(view):
            break
        events.append((pos, bytes(view[pos + HEADER_SIZE:end])))
        pos = end
    return events, pos


def count_frames(block: bytes) -> int:
    """The number of events in a block, which must consist of whole frames only (walks the headers
    without copying the events)."""
    count, pos, total = 0, 0, len(block)
    while total - pos >= HEADER_SIZE:
        (size,) = FRAME_HEADER.unpack_from(block, pos)
        if size > MAX_EVENT_SIZE:
            raise InvalidArgument(f"corrupt frame at {pos}: length {size} exceeds the maximum event size")
        pos += HEADER_SIZE + size
        count += 1
    if pos != total:
        raise InvalidArgument("an append block must consist of whole event frames")
    return count
