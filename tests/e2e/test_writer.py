"""EventStreamWriter and StreamReader over HTTP: every acknowledged event is read exactly once, in
per-key order, where its acknowledgement says it is; retries after lost answers add no duplicates."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import pytest

import rillet
from rillet import EventWriterConfig, WriteAck
from rillet.errors import ServiceUnavailable, TooLarge
from rillet.framing import MAX_EVENT_SIZE


def _stream(url: str, scope: str, stream: str, segments: int) -> None:
    manager = rillet.StreamManager(url)
    manager.create_scope(scope)
    manager.create_stream(scope, stream, rillet.StreamConfiguration(
        scaling_policy=rillet.ScalingPolicy.fixed(segments)))


def _read_everything(factory, stream: str, serializer) -> list:
    reader = factory.create_stream_reader(stream, serializer)
    return list(reader)


FAST = EventWriterConfig(batch_size_bytes=16 * 1024, max_latency_ms=20)


def _check_exactly_once_in_key_order(events: list, written: dict[str, list[str]],
                                     acks: dict[str, WriteAck]) -> None:
    seen = [e.event for e in events]
    assert len(seen) == len(set(seen)), "an event was read twice"
    assert set(seen) == set(acks), "an acknowledged event was not read, or an unknown one was"
    by_key = defaultdict(list)
    for e in events:
        key, _ = e.event.split(":")
        by_key[key].append(e.event)
        ack = acks[e.event]
        assert (e.pointer.segment_id, e.pointer.offset) == (ack.segment_id, ack.offset)
    assert dict(by_key) == written  # per routing key, in the order written


def test_thousands_of_small_events_exactly_once_in_key_order(url, unique):
    _stream(url, unique, "s", 3)
    factory = rillet.EventStreamClientFactory(unique, url)
    serializer = rillet.UTF8StringSerializer()
    rng = random.Random(11)
    keys = [f"k{i}" for i in range(40)]
    written: dict[str, list[str]] = defaultdict(list)
    futures = {}
    with factory.create_event_writer("s", serializer, FAST) as writer:
        for i in range(3000):
            key = rng.choice(keys)
            event = f"{key}:{i}"
            written[key].append(event)
            futures[event] = writer.write_event(event, routing_key=key)
        writer.flush()
        assert all(f.done() for f in futures.values())
        acks = {event: f.result(timeout=0) for event, f in futures.items()}
        with pytest.raises(TooLarge):  # an oversize event fails at once, before anything is queued
            writer.write_event("x" * (MAX_EVENT_SIZE + 1), routing_key="k0")
    assert all(isinstance(a, WriteAck) and a.offset >= 0 for a in acks.values())
    assert len({a.segment_id for a in acks.values()}) == 3
    assert len({(a.segment_id, a.offset) for a in acks.values()}) == len(acks)
    for key in keys:  # a routing key always maps to one segment of a fixed stream
        assert len({acks[e].segment_id for e in written[key]}) == 1
    _check_exactly_once_in_key_order(_read_everything(factory, "s", serializer), dict(written), acks)


def test_large_events_round_trip(url, unique):
    _stream(url, unique, "s", 1)
    factory = rillet.EventStreamClientFactory(unique, url)
    serializer = rillet.BytesSerializer()
    sizes = [0, 1, 3 * 1024, 3 * 1024 + 1, 100_000, 300_000, 450_000, 17]
    events = [bytes([i]) * size for i, size in enumerate(sizes)]
    with factory.create_event_writer("s", serializer, EventWriterConfig(batch_size_bytes=512 * 1024,
                                                                        max_latency_ms=5)) as writer:
        futures = [writer.write_event(e, routing_key="one") for e in events]
        writer.flush()
        acks = [f.result(timeout=0) for f in futures]
    read = _read_everything(factory, "s", serializer)
    assert [e.event for e in read] == events
    assert [(e.pointer.segment_id, e.pointer.offset) for e in read] == [(a.segment_id, a.offset) for a in acks]
    assert [e.pointer.length for e in read] == [len(e) + 4 for e in events]


def test_retries_after_lost_answers_add_no_duplicates(url, unique):
    """The first attempt of some blocks is appended but its answer is lost (ServiceUnavailable): the
    writer retries, the server recognises the block, and the stream holds each event once."""
    _stream(url, unique, "s", 2)
    factory = rillet.EventStreamClientFactory(unique, url)
    serializer = rillet.UTF8StringSerializer()
    writer = factory.create_event_writer("s", serializer, EventWriterConfig(batch_size_bytes=128, max_latency_ms=5))
    segments = writer.connection.segments
    original_append = segments.append
    lock = threading.Lock()
    attempts: dict[tuple, int] = defaultdict(int)
    lost: list[tuple] = []
    duplicates: list[tuple] = []

    def flaky_append(scope, stream, segment, writer_id, first_event, event_count, block, *args, **kwargs):
        key = (segment, writer_id, first_event, event_count)
        with lock:
            attempts[key] += 1
            first_attempt = attempts[key] == 1
            # Every other new block, up to 8: how many blocks the writer makes depends on the server's
            # speed (events gather while a block is in flight), so sparser rules lost none on a slow machine.
            drop = first_attempt and len(attempts) % 2 == 1 and len(lost) < 8
        ack = original_append(scope, stream, segment, writer_id, first_event, event_count, block, *args, **kwargs)
        if drop:
            with lock:
                lost.append(key)
            raise ServiceUnavailable("the answer was lost on the way back")
        if ack.duplicate:
            with lock:
                duplicates.append(key)
        return ack

    segments.append = flaky_append
    try:
        keys = [f"k{i}" for i in range(10)]
        written: dict[str, list[str]] = defaultdict(list)
        futures = {}
        for i in range(600):
            key = keys[i % len(keys)]
            event = f"{key}:{i}"
            written[key].append(event)
            futures[event] = writer.write_event(event, routing_key=key)
        writer.flush()
        acks = {event: f.result(timeout=0) for event, f in futures.items()}
    finally:
        writer.close()
        segments.append = original_append
    assert len(lost) >= 4, "the test did not lose any answers"
    assert set(lost) <= set(duplicates)  # every lost answer was retried and recognised as appended
    events = _read_everything(factory, "s", serializer)
    _check_exactly_once_in_key_order(events, dict(written), acks)
