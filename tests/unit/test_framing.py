"""Event framing (rillet.framing): a 4-byte big-endian length, then the payload."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rillet.errors import InvalidArgument, TooLarge
from rillet.framing import (
    HEADER_SIZE,
    MAX_EVENT_SIZE,
    MAX_ROUTING_KEY_SIZE,
    count_frames,
    frame,
    unframe,
    unframe_batch,
)


def test_frame_layout():
    assert HEADER_SIZE == 4
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


@given(st.lists(st.binary(max_size=300), max_size=30))
def test_round_trip_with_positions(events):
    block = b"".join(frame(e) for e in events)
    decoded, consumed = unframe(block)
    assert consumed == len(block)
    assert [f.payload for f in decoded] == events
    positions, pos = [], 0
    for e in events:
        positions.append(pos)
        pos += HEADER_SIZE + len(e)
    assert [f.position for f in decoded] == positions
    assert count_frames(block) == len(events)


@given(st.lists(st.binary(min_size=1, max_size=100), min_size=1, max_size=10), st.data())
def test_a_trailing_partial_frame_is_left_for_the_next_read(events, data):
    block = b"".join(frame(e) for e in events)
    cut = data.draw(st.integers(0, len(block)))
    decoded, consumed = unframe(block[:cut])
    # Exactly the frames that fit entirely before the cut are returned ...
    whole, pos = [], 0
    for e in events:
        if pos + HEADER_SIZE + len(e) > cut:
            break
        whole.append(e)
        pos += HEADER_SIZE + len(e)
    assert [f.payload for f in decoded] == whole
    assert consumed == pos
    # ... and the rest decodes once the remaining bytes arrive.
    rest, rest_consumed = unframe(block[consumed:])
    assert [f.payload for f in rest] == events[len(whole):]
    assert consumed + rest_consumed == len(block)


@pytest.mark.parametrize("partial", [b"", b"\x00", b"\x00\x00\x00", b"\x00\x00\x00\x05ab"])
def test_only_partial_input_yields_nothing(partial):
    assert unframe(partial) == ([], 0)


def test_works_on_memoryview_and_bytearray():
    block = frame(b"one") + frame(b"two")
    for buffer in (bytearray(block), memoryview(block)):
        assert [f.payload for f in unframe(buffer)[0]] == [b"one", b"two"]


def test_count_frames_rejects_partial_blocks():
    with pytest.raises(InvalidArgument):
        count_frames(frame(b"one") + b"\x00\x00")
    with pytest.raises(InvalidArgument):
        count_frames(frame(b"one")[:-1])


def test_corrupt_length_is_rejected():
    with pytest.raises(InvalidArgument):
        unframe(struct.pack(">I", MAX_EVENT_SIZE + 1) + b"x" * 10)


def test_oversized_event_is_too_large():
    assert len(frame(b"x" * MAX_EVENT_SIZE)) == MAX_EVENT_SIZE + HEADER_SIZE
    with pytest.raises(TooLarge):
        frame(b"x" * (MAX_EVENT_SIZE + 1))


keys = st.none() | st.text(max_size=40)
times = st.none() | st.integers(0, 2**63 - 1)


@given(st.lists(st.tuples(st.binary(max_size=200), keys, times, st.booleans()), max_size=30))
def test_kept_keys_and_times_round_trip_beside_plain_frames(events):
    """Frames with and without a kept key and time mix in one segment: every event comes back as
    written, positioned and sized so that walking frames lands on the next one."""
    block = b"".join(frame(p, k, t, keep=keep) for p, k, t, keep in events)
    decoded, consumed = unframe(block, base=1000)
    assert consumed == len(block) and count_frames(block) == len(events)
    assert [(f.payload, f.routing_key, f.timestamp_ms) for f in decoded] == [
        (p, k, t) if keep else (p, None, None) for p, k, t, keep in events]
    pos = 1000
    for f in decoded:
        assert f.position == pos
        pos += f.length
    assert pos == 1000 + len(block)


@given(st.lists(st.tuples(st.binary(max_size=200), keys, times, st.booleans()), min_size=1, max_size=30), st.data())
def test_a_batch_is_what_walking_frame_by_frame_gives(events, data):
    """``unframe_batch`` (one pass, the batch read) against a frame-by-frame walk of the headers, cut
    anywhere: the same events, positions and lengths, and the key and time lists only where kept."""
    block = b"".join(frame(p, k, t, keep=keep) for p, k, t, keep in events)
    cut = data.draw(st.integers(0, len(block)))
    batch, consumed = unframe_batch(bytearray(block[:cut]), base=7)
    whole, pos = [], 0
    for (p, k, t, keep), size in zip(events, (len(frame(p, k, t, keep=keep)) for p, k, t, keep in events)):
        if pos + size > cut:
            break
        whole.append((pos + 7, size, p, k if keep else None, t if keep else None))
        pos += size
    assert consumed == pos and batch.end == pos + 7 and len(batch) == len(whole)
    assert [(batch.positions[i], batch.length(i), batch.payloads[i]) for i in range(len(batch))] == [
        w[:3] for w in whole]
    assert all(type(p) is bytes for p in batch.payloads)
    if batch.routing_keys is None:
        assert all(k is None and t is None for *_, k, t in whole)
    else:
        assert list(zip(batch.routing_keys, batch.timestamps)) == [w[3:] for w in whole]


def test_a_corrupt_length_after_plain_frames_is_refused_by_the_batch_read():
    block = frame(b"a") + struct.pack(">I", MAX_EVENT_SIZE + 1) + b"x"
    with pytest.raises(InvalidArgument, match="corrupt frame at 5"):
        unframe_batch(block)


def test_a_kept_frame_layout():
    """The length word's high bit marks it; flags, the time, then the key's length and bytes."""
    assert frame(b"ab", "k", 5, keep=True) == (b"\x80\x00\x00\x0e" + b"\x03" + (5).to_bytes(8, "big")
                                                 + b"\x00\x01k" + b"ab")
    assert frame(b"ab", None, None, keep=True) == b"\x80\x00\x00\x03\x00ab"


def test_a_routing_key_kept_is_at_most_one_kib():
    assert unframe(frame(b"", "k" * MAX_ROUTING_KEY_SIZE, None, keep=True))[0][0].routing_key == "k" * 1024
    with pytest.raises(InvalidArgument, match="at most 1024"):
        frame(b"", "é" * 513, None, keep=True)


def test_a_kept_frame_whose_key_runs_past_it_is_corrupt():
    bad = b"\x80\x00\x00\x04" + b"\x02\x00\x09k"
    with pytest.raises(InvalidArgument, match="corrupt frame at 7"):
        unframe(bad, base=7)
