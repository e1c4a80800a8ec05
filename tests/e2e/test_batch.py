"""The batch client over HTTP: slices cover every byte, and reading every slice yields exactly the
events written."""

from __future__ import annotations

import random
from collections import Counter

import rillet
from rillet import EventWriterConfig


def test_slices_cover_all_bytes_and_yield_exactly_the_events(url, unique):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(4)))
    events = rillet.EventStreamClientFactory(unique, url)
    serializer = rillet.UTF8StringSerializer()
    rng = random.Random(13)
    written = []
    with events.create_event_writer("s", serializer, EventWriterConfig(batch_size_bytes=4096,
                                                                        max_latency_ms=10)) as writer:
        futures = []
        for i in range(800):
            event = f"e{i}:" + "x" * rng.randrange(0, 5000 if i % 50 == 0 else 60)
            written.append(event)
            futures.append(writer.write_event(event, routing_key=f"key{rng.randrange(100)}"))
        writer.flush()
        acks = [f.result(timeout=0) for f in futures]
    total = sum(len(e.encode()) + 4 for e in written)

    batch = rillet.BatchClientFactory(unique, url).create_batch_client()
    slices = batch.list_segments(unique, "s")
    assert len(slices) == 4
    assert sum(s.end_offset - s.start_offset for s in slices) == total
    assert all(s.start_offset == 0 for s in slices)
    lengths = Counter()
    for a, e in zip(acks, written):
        lengths[a.segment_id] = max(lengths[a.segment_id], a.offset + len(e.encode()) + 4)
    assert {s.segment.segment_id: s.end_offset for s in slices} == dict(lengths)

    read = []
    for piece in reversed(slices):  # any order
        offsets = []
        for offset, event in batch.read_segment(unique, "s", piece, serializer, read_size=1000):
            offsets.append(offset)
            read.append(event)
        assert offsets == sorted(offsets) and all(piece.start_offset <= o < piece.end_offset for o in offsets)
    assert Counter(read) == Counter(written)
    assert len(read) == len(written)
