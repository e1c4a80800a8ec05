"""Byte streams over HTTP: a one-segment stream used as an append-only file."""

from __future__ import annotations

import io
import threading
import time

import pytest
from dataplane_model import payload

import rillet
from rillet import InvalidArgument, OffsetMismatch, Truncated
from rillet.byte_stream import ByteStreamWriter


def _stream(url: str, scope: str, segments: int = 1) -> rillet.ByteStreamClientFactory:
    manager = rillet.StreamManager(url)
    manager.create_scope(scope)
    manager.create_stream(scope, "bytes", rillet.StreamConfiguration(
        scaling_policy=rillet.ScalingPolicy.fixed(segments)))
    return rillet.ByteStreamClientFactory(scope, url)


def test_write_flush_seek_tell_read(url, unique):
    factory = _stream(url, unique)
    writer = factory.create_byte_stream_writer("bytes")
    reader = factory.create_byte_stream_reader("bytes")
    assert (writer.head_offset(), writer.tail_offset()) == (0, 0)
    assert writer.write(b"hello ") == 6  # sent now; flush waits until it is durable
    writer.write(b"world")
    writer.flush()
    assert writer.tail_offset() == 11 and reader.tail_offset() == 11 and reader.available() == 11
    assert reader.read(5) == b"hello" and reader.tell() == 5
    assert reader.read(100) == b" world" and reader.tell() == 11
    assert reader.available() == 0
    assert reader.seek(6) == 6 and reader.read(5) == b"world"
    assert reader.seek(-5, io.SEEK_END) == 6 and reader.read(2) == b"wo"
    assert reader.seek(-2, io.SEEK_CUR) == 6
    with pytest.raises(InvalidArgument):
        reader.seek(-1)
    buffer = bytearray(4)
    assert reader.readinto(buffer) == 4 and bytes(buffer) == b"worl"

    # Several blocks, some of them S3-sized: the bytes read back are exactly the bytes written.
    big = ByteStreamWriter(writer.connection, unique, "bytes", block_size=100_000)
    blob = payload("blob", 350_000)
    big.write(blob[:123_456])
    big.write(blob[123_456:])
    big.flush()
    assert big.tail_offset() == 11 + len(blob)
    reader.seek(11)
    got = bytearray()
    while len(got) < len(blob):
        got += reader.read(len(blob) - len(got))
    assert bytes(got) == blob and reader.tell() == 11 + len(blob)
    reader.seek(11 + 99_990)
    assert reader.read(20) == blob[99_990:100_010]  # across a block boundary


def test_truncate_data_before(url, unique):
    factory = _stream(url, unique)
    writer = factory.create_byte_stream_writer("bytes")
    reader = factory.create_byte_stream_reader("bytes")
    writer.write(b"0123456789" * 3)
    writer.flush()
    writer.write(b"abcdef")
    writer.truncate_data_before(12)  # flushes first
    assert writer.head_offset() == 12 and reader.head_offset() == 12
    assert writer.tail_offset() == 36
    with pytest.raises(Truncated):
        reader.seek(0)
        reader.read(5)
    with pytest.raises(Truncated):
        reader.seek(11)
        reader.read(1)
    reader.seek(12)
    assert reader.read(100) == b"23456789" + b"0123456789" + b"abcdef"
    with pytest.raises(InvalidArgument):  # truncation only moves forward
        writer.truncate_data_before(5)
    writer.truncate_data_before(12)  # at the head already: a no-op
    assert writer.head_offset() == 12
    with pytest.raises(InvalidArgument):  # beyond the tail
        writer.truncate_data_before(37)
    assert writer.head_offset() == 12 and reader.seek(12) == 12 and reader.read(2) == b"23"


def test_write_at_is_conditional(url, unique):
    factory = _stream(url, unique)
    writer = factory.create_byte_stream_writer("bytes")
    reader = factory.create_byte_stream_reader("bytes")
    assert writer.write_at(b"first", 0) == 5
    with pytest.raises(OffsetMismatch):
        writer.write_at(b"stale", 0)
    with pytest.raises(OffsetMismatch):
        writer.write_at(b"ahead", 6)
    assert writer.write_at(b"second", 5) == 11
    other = factory.create_byte_stream_writer("bytes")  # a second writer racing for the same offset
    with pytest.raises(OffsetMismatch):
        other.write_at(b"lost", 5)
    assert other.write_at(b"won", 11) == 14
    big = payload("big-conditional", 10_000)
    with pytest.raises(OffsetMismatch):
        writer.write_at(big, 11)
    assert writer.write_at(big, 14) == 14 + len(big)
    got = bytearray()
    while len(got) < 14 + len(big):
        got += reader.read(14 + len(big) - len(got))
    assert bytes(got) == b"firstsecondwon" + big


def test_close_and_seal_ends_the_stream(url, unique):
    factory = _stream(url, unique)
    writer = factory.create_byte_stream_writer("bytes")
    writer.write(b"the end")
    writer.close_and_seal()
    reader = factory.create_byte_stream_reader("bytes")
    assert reader.read(100) == b"the end"
    assert reader.read(100) == b""  # at the end of a sealed stream: no wait, no data


def test_a_byte_stream_needs_a_single_segment(url, unique):
    factory = _stream(url, unique, segments=3)
    with pytest.raises(InvalidArgument):
        factory.create_byte_stream_writer("bytes")
    with pytest.raises(InvalidArgument):
        factory.create_byte_stream_reader("bytes")


def test_a_read_at_the_tail_waits_with_tail_checks_not_a_held_request(url, unique):
    """Issue 27: a waiting byte reader holds no function instance (no server long poll); it checks the
    tail with backed-off tail checks and returns the bytes once they are written."""
    factory = _stream(url, unique)
    writer = factory.create_byte_stream_writer("bytes")
    reader = factory.create_byte_stream_reader("bytes")
    segments = reader.connection.segments
    reads, checks = [], []
    real_read, real_tails = segments.read, segments.tails
    segments.read = lambda *a, **kw: reads.append((a, kw)) or real_read(*a, **kw)
    segments.tails = lambda *a, **kw: checks.append(a) or real_tails(*a, **kw)
    got = {}
    waiting = threading.Thread(target=lambda: got.setdefault("data", reader.read(100)))
    waiting.start()
    deadline = time.monotonic() + 20
    while len(checks) < 2:  # the reader found nothing and is checking the tail
        assert time.monotonic() < deadline, f"no tail checks while waiting; reads: {reads}"
        time.sleep(0.05)
    writer.write(b"late bytes")
    writer.flush()
    waiting.join(timeout=30)
    assert got["data"] == b"late bytes"
    assert all(len(a) <= 5 and not kw.get("wait_ms") for a, kw in reads)  # no wait_ms: nothing held open
    assert len(reads) == 2  # one read before waiting, one after the tail check showed bytes
