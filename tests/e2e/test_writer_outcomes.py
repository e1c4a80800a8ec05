"""The writer's outcomes over HTTP: an answer that does not prove what happened never fails an event.

The fault sits between the SDK's segment client and the real append API: the request is applied by
the standalone stack, then the answer the writer sees is replaced by a 500 InternalError (what the
transport raises once its own attempts end on a bare 500). Whole histories are checked: every event
acknowledged, stored exactly once, in the order written per routing key, under one writer id.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

import rillet
import rillet.clock as rillet_clock
import rillet.writer as rillet_writer
from rillet import EventWriterConfig
from rillet.errors import WriterExpired, from_wire
from rillet.framing import frame


def test_an_append_applied_then_answered_with_500_is_acknowledged_once(url, unique):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(2)))
    factory = rillet.EventStreamClientFactory(unique, url)
    serializer = rillet.UTF8StringSerializer()
    writer = factory.create_event_writer("s", serializer, EventWriterConfig(batch_size_bytes=64, max_latency_ms=5))
    segments = writer.connection.segments
    original_append = segments.append
    lock = threading.Lock()
    attempts: dict[tuple, int] = defaultdict(int)
    lost: list[tuple] = []
    writer_ids: set[str] = set()

    def applied_then_500(scope, stream, segment, writer_id, first_event, event_count, block, *args, **kwargs):
        key = (segment, writer_id, first_event)
        with lock:
            attempts[key] += 1
            writer_ids.add(writer_id)
            lose = attempts[key] == 1 and len(attempts) % 3 == 1
        ack = original_append(scope, stream, segment, writer_id, first_event, event_count, block, *args, **kwargs)
        if lose:
            with lock:
                lost.append(key)
            raise from_wire(500, {"code": "InternalError", "message": "internal error"})
        return ack

    segments.append = applied_then_500
    keys = [f"k{i}" for i in range(8)]
    written: dict[str, list[str]] = defaultdict(list)
    futures = {}
    try:
        for i in range(400):
            key = keys[i % len(keys)]
            event = f"{key}:{i}"
            written[key].append(event)
            futures[event] = writer.write_event(event, routing_key=key)
        writer.flush()
        failed = {event: f.exception(timeout=0) for event, f in futures.items() if f.exception(timeout=0)}
    finally:
        writer.close()
        segments.append = original_append
    assert len(lost) >= 5, "the test lost no answers"
    assert failed == {}, "an event that was stored was reported failed"
    assert len(writer_ids) == 1, "the writer changed its id"
    read = [e.event for e in factory.create_stream_reader("s", serializer)]
    assert sorted(read) == sorted(futures), "an event is missing or stored twice"
    by_key: dict[str, list[str]] = defaultdict(list)
    for event in read:
        by_key[event.split(":")[0]].append(event)
    assert dict(by_key) == dict(written)


WINDOW_MS = 168 * 3_600_000  # the standalone stack's writer expiry window (RILLET_WRITER_EXPIRY_HOURS default)


def test_a_resend_older_than_the_writer_expiry_window_is_refused_only_for_an_unknown_writer(url, unique):
    """The block age travels as a header: a writer id the segment knows gets its duplicate answer
    whatever the age; one it does not know gets WriterExpired (409), and nothing is appended."""
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
    segments = rillet.EventStreamClientFactory(unique, url).connection.segments
    block = frame(b"once")
    first = segments.append(unique, "s", 0, "known", 0, 1, block, after=-1)
    again = segments.append(unique, "s", 0, "known", 0, 1, block, after=-1, block_age_ms=WINDOW_MS + 1)
    assert (again.offset, again.duplicate) == (first.offset, True)
    with pytest.raises(WriterExpired) as refused:
        segments.append(unique, "s", 0, "forgotten", 0, 1, block, after=-1, block_age_ms=WINDOW_MS + 1)
    assert refused.value.status == 409 and "expiry window" in str(refused.value)
    assert segments.append(unique, "s", 0, "fresh", 0, 1, block, after=-1, block_age_ms=WINDOW_MS).offset == len(block)
    assert segments.read(unique, "s", 0, 0).data == block + block


class _LateClock:
    """The writer's clocks (rillet.writer's and rillet.clock's), moved past the expiry window on demand
    (other modules keep theirs)."""

    def __init__(self) -> None:
        self.ahead_s = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead_s

    def time(self) -> float:
        return time.time() + self.ahead_s

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_a_writer_whose_lost_block_outlived_the_window_fails_it_as_unknown_and_goes_on_under_a_new_id(
        url, unique, monkeypatch):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
    factory = rillet.EventStreamClientFactory(unique, url)
    serializer = rillet.UTF8StringSerializer()
    clock = _LateClock()
    monkeypatch.setattr(rillet_writer, "time", clock)
    monkeypatch.setattr(rillet_clock, "time", clock)
    writer = factory.create_event_writer("s", serializer, EventWriterConfig(retry_timeout_s=30 * 24 * 3600.0))
    segments = writer.connection.segments
    original_append = segments.append
    writer_ids: list[str] = []

    def lost_then_late(scope, stream, segment, writer_id, *args, **kwargs):
        writer_ids.append(writer_id)
        if len(writer_ids) == 1:  # the first request never reaches the server; its resend comes a week later
            clock.ahead_s = (WINDOW_MS + 3_600_000) / 1000
            raise from_wire(500, {"code": "InternalError", "message": "internal error"})
        return original_append(scope, stream, segment, writer_id, *args, **kwargs)

    segments.append = lost_then_late
    try:
        lost = writer.write_event("lost", routing_key="k")
        with pytest.raises(WriterExpired):
            lost.result(timeout=60)
        writer.write_event("after", routing_key="k").result(timeout=60)
    finally:
        writer.close()
        segments.append = original_append
    assert writer_ids[0] == writer_ids[1] != writer_ids[2], "the resend kept its id, the next block took a new one"
    assert [e.event for e in factory.create_stream_reader("s", serializer)] == ["after"]
