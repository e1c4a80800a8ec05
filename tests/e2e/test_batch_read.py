"""``StreamReader.read_events``: the batch read returns exactly what ``read_next_event`` returns, the
same events in the same order with the same pointers, keys and times, and leaves the reader at the
same positions, however the two are mixed."""

from __future__ import annotations

import rillet
from rillet import EventWriterConfig

SER = rillet.BytesSerializer()


def _events(reader: rillet.StreamReader, max_events: int | None) -> list[tuple]:
    got = []
    for events in reader.iter_events(max_events):
        keys, times = events.routing_keys or [None] * len(events), events.timestamps or [None] * len(events)
        got += [(events.payloads[i], events.pointer(i), keys[i], times[i]) for i in range(len(events))]
    return got


def test_the_batch_read_returns_what_the_per_event_read_returns(url, unique):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(3)))
    factory = rillet.EventStreamClientFactory(unique, url)
    with factory.create_event_writer("s", SER) as writer:
        for i in range(300):
            writer.write_event(b"plain %d" % i, routing_key=f"k{i % 7}")
    with factory.create_event_writer("s", SER, EventWriterConfig.lowest_latency(store_key_and_time=True)) as writer:
        for i in range(30):
            writer.write_event(b"kept %d" % i, routing_key=f"k{i % 7}", timestamp_ms=1000 + i).result(30)

    one_by_one = factory.create_stream_reader("s", SER)
    expected = [(e.event, e.pointer, e.routing_key, e.timestamp_ms) for e in one_by_one]
    assert len(expected) == 330 and any(k is not None for *_, k, _ in expected)
    for max_events in (None, 1, 7):
        batched = factory.create_stream_reader("s", SER)
        assert _events(batched, max_events) == expected
        assert batched.positions() == one_by_one.positions()

    mixed = factory.create_stream_reader("s", SER)
    first = [mixed.read_next_event() for _ in range(5)]
    assert [(e.event, e.pointer, e.routing_key, e.timestamp_ms) for e in first] + _events(mixed, 3) == expected
