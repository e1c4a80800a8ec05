"""Frames (``rillet.framing``) into Arrow columns, with numpy rather than a Python step per event: the
executor's cost per event, so the part of a read that decides its speed for small events."""

from __future__ import annotations

from typing import NamedTuple


class _Unframed(NamedTuple):
    """The whole frames at the front of a buffer as Arrow columns, and how many bytes they take."""

    positions: object  # int64 numpy array: each frame's segment offset
    events: object  # the payloads (binary or string)
    routing_keys: object  # string, null where the frame kept none
    timestamps: object  # timestamp[us, UTC], null where the frame kept none
    consumed: int


MAX_TIMESTAMP_MS = (2**63 - 1) // 1000  # a later kept time does not fit Spark's microseconds


def _events(buffer: bytearray, event_type, base: int = 0) -> _Unframed:
    """The whole frames at the front of ``buffer`` (which starts at segment offset ``base``). The payloads
    are cut out of the buffer in one numpy pass and handed to Arrow as its value buffer, without a Python
    object per event (small events were read at a fifth of binaryFile's speed through per-event bytes);
    see ``_frames`` for the headers. Frames that kept their key and time (``framing.KEPT``) have them
    parsed with numpy too (``_kept``); a buffer of plain frames, the common case, gets null columns."""
    import numpy as np
    import pyarrow as pa

    from rillet.framing import HEADER_SIZE, KEPT

    positions, words, pos = _frames(buffer, base)
    count = len(positions)
    sizes = words & ~KEPT
    kept = words & KEPT != 0
    data = np.frombuffer(buffer, np.uint8, count=pos)
    time_type = pa.timestamp("us", tz="UTC")  # Spark's TimestampType in Arrow
    if kept.any():
        prefixes, routing_keys, timestamps = _kept(data, positions, sizes, kept, base, time_type)
    else:
        prefixes = None
        routing_keys, timestamps = pa.nulls(count, pa.string()), pa.nulls(count, time_type)
    keep = np.ones(pos, bool)
    if prefixes is None:
        keep[(positions[:, None] + np.arange(HEADER_SIZE)).ravel()] = False
    else:  # the header and what the frame kept
        keep[_spans(positions, HEADER_SIZE + prefixes)] = False
        sizes = sizes - prefixes
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    large = pa.large_string() if event_type == pa.string() else pa.large_binary()
    events = pa.Array.from_buffers(large, count, [None, pa.py_buffer(offsets), pa.py_buffer(data[keep])])
    if event_type == pa.string():
        events.validate(full=True)  # invalid UTF-8 fails the task, as decoding did
    return _Unframed(positions + base, events.cast(event_type), routing_keys, timestamps, pos)


def _spans(starts, lengths):
    """The indices of the spans ``[start, start + length)``, concatenated (int64)."""
    import numpy as np

    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if len(ends) else 0)


def _kept(data, positions, sizes, kept, base: int, time_type):
    """What kept frames keep before their payloads (``framing.read_body``, for all frames at once): the
    length of that prefix per frame (0 for plain frames), the routing keys and the timestamps."""
    import numpy as np
    import pyarrow as pa

    from rillet.framing import HAS_KEY, HAS_TIME, HEADER_SIZE

    def refuse(bad, why: str):
        if bad.any():
            raise ValueError(f"corrupt frame at {base + int(positions[np.argmax(bad)])}: {why}")

    body = positions + HEADER_SIZE
    refuse(kept & (sizes < 1), "a kept frame without its flags byte")
    flags = np.zeros(len(positions), np.uint8)
    flags[kept] = data[body[kept]]
    has_time = kept & (flags & HAS_TIME != 0)
    has_key = kept & (flags & HAS_KEY != 0)
    prefixes = kept.astype(np.int64) + 8 * has_time
    refuse(sizes < prefixes + 2 * has_key, "its kept key and time run past the frame")
    key_sizes = np.zeros(len(positions), np.int64)
    at = body[has_key] + prefixes[has_key]
    key_sizes[has_key] = data[at].astype(np.int64) << 8 | data[at + 1]
    key_starts = body + prefixes + 2
    prefixes += has_key * (2 + key_sizes)
    refuse(sizes < prefixes, "its kept key runs past the frame")

    key_bytes = data[_spans(key_starts[has_key], key_sizes[has_key])]
    key_offsets = np.zeros(len(positions) + 1, np.int32)
    np.cumsum(key_sizes, out=key_offsets[1:])
    routing_keys = pa.Array.from_buffers(pa.string(), len(positions), [
        pa.py_buffer(np.packbits(has_key, bitorder="little")), pa.py_buffer(key_offsets), pa.py_buffer(key_bytes)])
    try:
        routing_keys.validate(full=True)
    except pa.ArrowInvalid:
        for i in np.flatnonzero(has_key):  # name the first frame whose key is not UTF-8
            try:
                bytes(data[key_starts[i]:key_starts[i] + key_sizes[i]]).decode()
            except UnicodeDecodeError:
                raise ValueError(f"corrupt frame at {base + int(positions[i])}: its kept routing key is not "
                                 "UTF-8") from None
        raise

    millis = np.zeros(len(positions), np.int64)
    times = data[(body[has_time] + 1)[:, None] + np.arange(8)]
    millis[has_time] = times.view(">u8").ravel().astype(np.int64)  # past 2**63: negative, refused
    refuse(has_time & ((millis < 0) | (millis > MAX_TIMESTAMP_MS)), "its kept time is beyond Spark's timestamps")
    timestamps = pa.array(millis * 1000, time_type, mask=~has_time)
    return prefixes, routing_keys, timestamps


SAME_BEFORE_RUN = 16


def _frames(buffer: bytearray, base: int = 0):
    """The positions and length words (int64 arrays) of the whole frames at the front of ``buffer``, and
    where they end. Headers are walked one by one in Python, except that once ``SAME_BEFORE_RUN`` frames
    in a row have the same length word the following run of that word is found with numpy (``_run``:
    fixed-size records, the common case for small events, cost no Python step per event; a numpy look
    costs as much as a few dozen Python steps, so short runs stay in Python)."""
    import numpy as np

    from rillet.framing import FRAME_HEADER, HEADER_SIZE, KEPT, MAX_BODY_SIZE, MAX_EVENT_SIZE

    chunks: list[tuple] = []  # (positions, words) in order: lists walked one by one, or numpy runs
    starts, words = [], []
    pos, total, previous, same, unpack = 0, len(buffer), -1, 0, FRAME_HEADER.unpack_from
    while total - pos >= HEADER_SIZE:
        (word,) = unpack(buffer, pos)
        size = word & ~KEPT
        if size > (MAX_BODY_SIZE if word & KEPT else MAX_EVENT_SIZE):
            raise ValueError(f"corrupt frame at {base + pos}: length {size} exceeds the maximum event size")
        stride = HEADER_SIZE + size
        if pos + stride > total:
            break
        if word != previous or same < SAME_BEFORE_RUN:
            starts.append(pos)
            words.append(word)
            same = same + 1 if word == previous else 1
            pos, previous = pos + stride, word
            continue
        run = _run(buffer, pos, stride, word, (total - pos) // stride)
        chunks += [(starts, words), (pos + stride * np.arange(run, dtype=np.int64), np.full(run, word, np.int64))]
        starts, words = [], []
        pos, previous, same = pos + run * stride, -1, 0
    chunks.append((starts, words))
    positions = np.concatenate([np.asarray(p, np.int64) for p, _ in chunks])
    length_words = np.concatenate([np.asarray(w, np.int64) for _, w in chunks])
    return positions, length_words, pos


def _run(buffer: bytearray, pos: int, stride: int, word: int, fit: int) -> int:
    """How many of the ``fit`` frames of ``stride`` bytes from ``pos`` have length word ``word``: their
    headers are a strided view of the buffer (no copy), looked at in windows that double while they
    match, so a short run costs a short look (a look at everything up to the buffer's end made
    alternating sizes quadratic)."""
    import numpy as np

    run, window = 0, 64
    while run < fit:
        count = min(window, fit - run)
        heads = np.ndarray((count,), ">u4", buffer, pos + run * stride, (stride,))
        differ = np.flatnonzero(heads != word)
        if len(differ):
            return run + int(differ[0])
        run, window = run + count, window * 2
    return run
