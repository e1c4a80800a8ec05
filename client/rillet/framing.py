"""Event framing inside segments and the size limits of the data path.

An event is stored as a 4-byte big-endian length word followed by its frame body, so any offset a
reader reaches by walking frames is an event boundary, which is what stream cuts rely on. Byte
streams store raw bytes without frames.

The body is the event's bytes, unless the word's high bit is set (an event is at most 4 MiB, so the
bit was never used and frames written before it existed read as before). Then the body starts with
what the writer chose to keep of the event (``EventWriterConfig.store_key_and_time``), as Kafka keeps
a record's key and timestamp:

* one flags byte: ``1`` a timestamp follows, ``2`` a routing key follows;
* the timestamp: 8 bytes, milliseconds since the epoch, big-endian;
* the routing key: a 2-byte big-endian length, then its UTF-8 bytes (at most 1 KiB);
* the event's bytes.

The length word counts the whole body; walking frames needs only the word (mask the high bit).

Limits come from the Lambda Function URL path: a request or response payload is at most 6 MB and
binary bodies travel base64-encoded (4/3 larger), so one append block or one read answer carries at
most 4 MiB of payload plus a frame header, with room left for headers.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from rillet.errors import InvalidArgument, TooLarge

FRAME_HEADER = struct.Struct(">I")
HEADER_SIZE = FRAME_HEADER.size
MAX_EVENT_SIZE = 4 * 1024 * 1024
MAX_ROUTING_KEY_SIZE = 1024  # UTF-8 bytes of a routing key kept with its event
KEPT = 0x80000000  # the length word's flag: the body starts with a kept key and time
HAS_TIME, HAS_KEY = 1, 2
_TIME, _KEY_SIZE = struct.Struct(">Q"), struct.Struct(">H")
MAX_KEPT_SIZE = 1 + _TIME.size + _KEY_SIZE.size + MAX_ROUTING_KEY_SIZE
MAX_BODY_SIZE = MAX_EVENT_SIZE + MAX_KEPT_SIZE
MAX_BLOCK_SIZE = MAX_BODY_SIZE + HEADER_SIZE
MAX_READ_SIZE = MAX_BLOCK_SIZE


class Frame(NamedTuple):
    """One event read from a segment: its frame's position and length (header included), its bytes,
    and what its writer kept."""

    position: int
    length: int
    payload: bytes
    routing_key: str | None = None
    timestamp_ms: int | None = None


def body_size(word: int) -> int:
    """The body length a frame's length word gives (the word's flag masked off)."""
    return word & ~KEPT


def frame(payload: bytes, routing_key: str | None = None, timestamp_ms: int | None = None,
          keep: bool = False) -> bytes:
    """The frame of one event; with ``keep``, the routing key and the timestamp (either may be None)
    are stored with it."""
    if len(payload) > MAX_EVENT_SIZE:
        raise TooLarge(f"event of {len(payload)} bytes exceeds the maximum event size of {MAX_EVENT_SIZE} bytes")
    if not keep:
        return FRAME_HEADER.pack(len(payload)) + payload
    flags, kept = 0, b""
    if timestamp_ms is not None:
        flags |= HAS_TIME
        kept += _TIME.pack(timestamp_ms)
    if routing_key is not None:
        key = routing_key.encode()
        if len(key) > MAX_ROUTING_KEY_SIZE:
            raise InvalidArgument(f"a routing key kept with its event is at most {MAX_ROUTING_KEY_SIZE} UTF-8 "
                                  f"bytes, not {len(key)}")
        flags |= HAS_KEY
        kept += _KEY_SIZE.pack(len(key)) + key
    body = bytes((flags,)) + kept + payload
    return FRAME_HEADER.pack(KEPT | len(body)) + body


def read_body(body: memoryview, position: int) -> Frame:
    """The event in a kept frame's body (``position`` is the frame's, for the error of a corrupt one)."""
    try:
        flags, at = body[0], 1
        timestamp = routing_key = None
        if flags & HAS_TIME:
            (timestamp,) = _TIME.unpack_from(body, at)
            at += _TIME.size
        if flags & HAS_KEY:
            (size,) = _KEY_SIZE.unpack_from(body, at)
            at += _KEY_SIZE.size
            routing_key = str(body[at:at + size], "utf-8")
            at += size
    except (IndexError, struct.error, UnicodeDecodeError) as e:
        raise InvalidArgument(f"corrupt frame at {position}: its kept key and time do not parse ({e})") from None
    if at > len(body):
        raise InvalidArgument(f"corrupt frame at {position}: its kept key runs past the frame")
    return Frame(position, HEADER_SIZE + len(body), bytes(body[at:]), routing_key, timestamp)


def unframe(buffer: bytes | bytearray | memoryview, base: int = 0) -> tuple[list[Frame], int]:
    """Split whole frames off the front of ``buffer``, which starts at offset ``base`` of its segment.

    Returns ``(events, consumed)``: each event as a :class:`Frame` (positioned in the segment), and how
    many bytes the whole frames take; a trailing partial frame is left for the next read.
    """
    view = memoryview(buffer)
    events: list[Frame] = []
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        (word,) = FRAME_HEADER.unpack_from(view, pos)
        size = word & ~KEPT
        if size > (MAX_BODY_SIZE if word & KEPT else MAX_EVENT_SIZE):
            raise InvalidArgument(f"corrupt frame at {base + pos}: length {size} exceeds the maximum event size")
        end = pos + HEADER_SIZE + size
        if end > len(view):
            break
        body = view[pos + HEADER_SIZE:end]
        events.append(read_body(body, base + pos) if word & KEPT else Frame(base + pos, HEADER_SIZE + size, bytes(body)))
        pos = end
    return events, pos


def count_frames(block: bytes) -> int:
    """The number of events in a block, which must consist of whole frames only (walks the headers
    without copying the events)."""
    count, pos, total = 0, 0, len(block)
    while total - pos >= HEADER_SIZE:
        (word,) = FRAME_HEADER.unpack_from(block, pos)
        size = word & ~KEPT
        if size > (MAX_BODY_SIZE if word & KEPT else MAX_EVENT_SIZE):
            raise InvalidArgument(f"corrupt frame at {pos}: length {size} exceeds the maximum event size")
        pos += HEADER_SIZE + size
        count += 1
    if pos != total:
        raise InvalidArgument("an append block must consist of whole event frames")
    return count
