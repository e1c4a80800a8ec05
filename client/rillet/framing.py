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
MAX_LOCATE_BYTES = 64 * 1024 * 1024  # the most one answer of the locations API covers (its URLs, not its bytes)


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


class EventBatch(NamedTuple):
    """The whole frames at the front of a buffer, decoded in one pass: one ``bytes`` per event and
    its position, no per-event object besides (``frames()`` builds :class:`Frame` objects on demand).

    ``routing_keys`` and ``timestamps`` are None when no frame of the batch kept them (the common
    case), else lists with None for the frames that did not. ``end`` is the offset after the last
    frame, so event ``i`` spans ``positions[i]`` up to ``positions[i + 1]`` (``end`` for the last).
    """

    payloads: list[bytes]
    positions: list[int]
    end: int
    routing_keys: list[str | None] | None = None
    timestamps: list[int | None] | None = None

    def __len__(self) -> int:
        return len(self.payloads)

    def length(self, i: int) -> int:
        """The length of event ``i``'s frame, header included."""
        return (self.positions[i + 1] if i + 1 < len(self.positions) else self.end) - self.positions[i]

    def frames(self) -> list[Frame]:
        """The events as :class:`Frame` objects (the per-event form ``unframe`` returns)."""
        keys = self.routing_keys or [None] * len(self.payloads)
        times = self.timestamps or [None] * len(self.payloads)
        return [Frame(p, self.length(i), payload, keys[i], times[i])
                for i, (p, payload) in enumerate(zip(self.positions, self.payloads))]


def unframe_batch(buffer: bytes | bytearray | memoryview, base: int = 0) -> tuple[EventBatch, int]:
    """Split whole frames off the front of ``buffer`` (at offset ``base`` of its segment) in one pass.

    Returns ``(batch, consumed)``; a trailing partial frame is left for the next read. Plain frames go
    through a tight loop over the length words slicing one ``bytes`` copy of the buffer (a length word
    above ``MAX_EVENT_SIZE`` is a kept frame or a corrupt one: the rest goes through ``_unframe_kept``),
    so 1 KiB events decode at several times the speed of building a :class:`Frame` each.
    """
    data = buffer if isinstance(buffer, bytes) else bytes(buffer)
    payloads: list[bytes] = []
    positions: list[int] = []
    unpack, total, pos = FRAME_HEADER.unpack_from, len(data), 0
    while total - pos >= HEADER_SIZE:
        (word,) = unpack(data, pos)
        end = pos + HEADER_SIZE + word
        if word > MAX_EVENT_SIZE or end > total:
            break
        payloads.append(data[pos + HEADER_SIZE:end])
        positions.append(base + pos)
        pos = end
    else:
        return EventBatch(payloads, positions, base + pos), pos
    if word <= MAX_EVENT_SIZE:  # a trailing partial plain frame
        return EventBatch(payloads, positions, base + pos), pos
    return _unframe_kept(data, base, pos, payloads, positions)


def _unframe_kept(data: bytes, base: int, pos: int, payloads: list[bytes],
                  positions: list[int]) -> tuple[EventBatch, int]:
    """The rest of ``unframe_batch`` from the first kept (or corrupt) frame at ``pos``, one frame at a
    time, with the routing keys and timestamps listed (None for the plain frames before and among)."""
    keys: list[str | None] = [None] * len(payloads)
    times: list[int | None] = [None] * len(payloads)
    view, total = memoryview(data), len(data)
    while total - pos >= HEADER_SIZE:
        (word,) = FRAME_HEADER.unpack_from(data, pos)
        size = word & ~KEPT
        if size > (MAX_BODY_SIZE if word & KEPT else MAX_EVENT_SIZE):
            raise InvalidArgument(f"corrupt frame at {base + pos}: length {size} exceeds the maximum event size")
        start = pos + HEADER_SIZE
        if start + size > total:
            break
        if word & KEPT:
            kept = read_body(view[start:start + size], base + pos)
            payloads.append(kept.payload)
            keys.append(kept.routing_key)
            times.append(kept.timestamp_ms)
        else:
            payloads.append(data[start:start + size])
            keys.append(None)
            times.append(None)
        positions.append(base + pos)
        pos = start + size
    return EventBatch(payloads, positions, base + pos, keys, times), pos


def unframe(buffer: bytes | bytearray | memoryview, base: int = 0) -> tuple[list[Frame], int]:
    """Split whole frames off the front of ``buffer``, which starts at offset ``base`` of its segment.

    Returns ``(events, consumed)``: each event as a :class:`Frame` (positioned in the segment), and how
    many bytes the whole frames take; a trailing partial frame is left for the next read.
    """
    batch, consumed = unframe_batch(buffer, base)
    return batch.frames(), consumed


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
