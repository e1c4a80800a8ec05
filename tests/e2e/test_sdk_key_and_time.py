"""A writer that keeps each event's routing key and time (``EventWriterConfig.store_key_and_time``):
every reader returns them with the event, beside events written without them in the same stream, and
the positions it returns still walk frame by frame (a group reader resumes after the right bytes)."""

from __future__ import annotations

import itertools
import time

import pytest

import rillet
from rillet import EventWriterConfig
from rillet.errors import InvalidArgument
from rillet.reader_group import ReaderGroupManager, group_config

SER = rillet.UTF8StringSerializer()
KEEP = EventWriterConfig.lowest_latency(store_key_and_time=True)


def _stream(url: str, scope: str) -> rillet.EventStreamClientFactory:
    manager = rillet.StreamManager(url)
    manager.create_scope(scope)
    manager.create_stream(scope, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
    return rillet.EventStreamClientFactory(scope, url)


def test_keys_and_times_come_back_from_every_reader_beside_plain_events(url, unique):
    factory = _stream(url, unique)
    before = time.time_ns() // 1_000_000
    with factory.create_event_writer("s", SER) as plain:
        plain.write_event("plain", routing_key="p").result(30)
    with factory.create_event_writer("s", SER, KEEP) as keeping:
        acks = [keeping.write_event("keyed", routing_key="käy").result(30),
                keeping.write_event("unkeyed").result(30),
                keeping.write_event("dated", routing_key="k", timestamp_ms=1_700_000_000_123).result(30)]
    writer = factory.create_transactional_writer("s", SER, KEEP)
    txn = writer.begin()
    txn.write_event("in a transaction", routing_key="t", timestamp_ms=42)
    txn.commit()
    after = time.time_ns() // 1_000_000

    read = list(factory.create_stream_reader("s", SER))
    assert [(e.event, e.routing_key) for e in read] == [
        ("plain", None), ("keyed", "käy"), ("unkeyed", None), ("dated", "k"), ("in a transaction", "t")]
    assert read[0].timestamp_ms is None
    assert before <= read[1].timestamp_ms <= read[2].timestamp_ms <= after
    assert [e.timestamp_ms for e in read[3:]] == [1_700_000_000_123, 42]
    assert [e.pointer.offset for e in read[1:4]] == [a.offset for a in acks]
    assert read[1].pointer.length == 4 + 1 + 8 + 2 + len("käy".encode()) + len("keyed")  # header, flags, time, key
    for first, second in itertools.pairwise(read):  # frames follow one another: lengths include what was kept
        assert first.pointer.offset + first.pointer.length == second.pointer.offset

    ReaderGroupManager(unique, url).create_reader_group("g", group_config([f"{unique}/s"], group_refresh_time_ms=0))
    reader = factory.create_reader("r1", "g", SER)
    got = [reader.read_next_event(timeout_ms=5000) for _ in range(3)]
    assert [(e.event, e.routing_key, e.timestamp_ms) for e in got] == [
        (e.event, e.routing_key, e.timestamp_ms) for e in read[:3]]
    reader.close()  # hands back the segment at the position after "unkeyed": the rest is read once
    reader = factory.create_reader("r2", "g", SER)
    rest = [reader.read_next_event(timeout_ms=5000) for _ in range(2)]
    assert [e.event for e in rest] == ["dated", "in a transaction"]
    assert reader.read_next_event(timeout_ms=300) is None
    reader.close()


def test_a_time_without_keeping_or_out_of_range_is_refused(url, unique):
    factory = _stream(url, unique)
    with factory.create_event_writer("s", SER) as plain, pytest.raises(InvalidArgument, match="store_key_and_time"):
        plain.write_event("x", timestamp_ms=1)
    with factory.create_event_writer("s", SER, KEEP) as keeping:
        with pytest.raises(InvalidArgument, match="milliseconds since the epoch"):
            keeping.write_event("x", timestamp_ms=-1)
        with pytest.raises(InvalidArgument, match="at most 1024"):
            keeping.write_event("x", routing_key="k" * 1025)
    assert list(factory.create_stream_reader("s", SER)) == []
