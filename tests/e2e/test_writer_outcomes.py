"""The writer's outcomes over HTTP: an answer that does not prove what happened never fails an event.

The fault sits between the SDK's segment client and the real append API: the request is applied by
the standalone stack, then the answer the writer sees is replaced by a 500 InternalError (what the
transport raises once its own attempts end on a bare 500). Whole histories are checked: every event
acknowledged, stored exactly once, in the order written per routing key, under one writer id.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import rillet
from rillet import EventWriterConfig
from rillet.errors import from_wire


def test_an_append_applied_then_answered_with_500_is_acknowledged_once(url, unique):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(2)))
    factory = rillet.EventStreamClientFactory(unique, url)
    serializer = rillet.UTF8StringSerializer()
    writer = factory.create_event_writer("s", serializer, EventWriterConfig(batch_size_bytes=64, linger_ms=5))
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
