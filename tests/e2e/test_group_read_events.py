"""A reader-group reader's batch read over HTTP (standalone stack): ``read_events`` hands out each
event once, in per-key order, as the serializer's bytes, mixes with ``read_next_event``, returns
checkpoint markers, and leaves a position a new reader resumes from.

Events are strings ``"<n>"`` with routing key ``"k<n % KEYS>"``, written to a 2-segment stream by a
writer that keeps keys and times, and acknowledged before any reading starts.
"""

from __future__ import annotations

import threading
import time

import pytest

import rillet
from rillet import ScalingPolicy, StreamConfiguration, UTF8StringSerializer
from rillet.reader_group import GroupEventsRead, group_config

SER = UTF8StringSerializer()
KEYS = 4


class Setup:
    def __init__(self, url: str, scope: str) -> None:
        self.scope = scope
        self.manager = rillet.StreamManager(url)
        self.manager.create_scope(scope)
        self.manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        self.factory = rillet.EventStreamClientFactory(scope, url)
        self.groups = rillet.ReaderGroupManager(scope, url)
        self.groups.create_reader_group("g", group_config([f"{scope}/s"], automatic_checkpoint_interval_ms=0,
                                                          group_refresh_time_ms=100))
        self.group = self.groups.get_reader_group("g")

    def write(self, n: int) -> list[str]:
        config = rillet.EventWriterConfig(max_latency_ms=2, store_key_and_time=True)
        with self.factory.create_event_writer("s", SER, config) as writer:
            for future in [writer.write_event(str(i), routing_key=f"k{i % KEYS}") for i in range(n)]:
                future.result(timeout=30)
        return [str(i) for i in range(n)]

    def reader(self, reader_id: str) -> rillet.EventStreamReader[str]:
        return self.factory.create_reader(reader_id, "g", SER)


@pytest.fixture
def setup(url, unique) -> Setup:
    return Setup(url, unique)


def read_batches(reader, count: int, max_events: int, limit_s: float = 30.0) -> list[GroupEventsRead]:
    """``read_events`` results (no markers) until ``count`` events were read."""
    batches: list[GroupEventsRead] = []
    deadline = time.monotonic() + limit_s
    while sum(len(b.events) for b in batches) < count:
        assert time.monotonic() < deadline, f"only {sum(len(b.events) for b in batches)} of {count} events arrived"
        read = reader.read_events(max_events, timeout_ms=200)
        if read is not None and not read.is_checkpoint:
            batches.append(read)
    return batches


def assert_nothing_more(reader) -> None:
    read = reader.read_events(timeout_ms=500)
    assert read is None or read.is_checkpoint, f"read again: {[SER.deserialize(p) for p in read.events.payloads]}"


def assert_each_once_in_key_order(reads: list[str], written: list[str]) -> None:
    assert sorted(reads, key=int) == written, "not every event exactly once"
    for k in range(KEYS):
        of_key = [int(e) for e in reads if int(e) % KEYS == k]
        assert of_key == sorted(of_key), f"key k{k} out of order: {of_key}"


def segment_tails(s: Setup) -> dict[int, int]:
    return {p.segment.segment_id: p.offset for p in s.manager.get_tail(s.scope, "s").positions}


def test_read_events_hands_out_every_event_once_in_key_order_with_consecutive_positions(setup):
    written = setup.write(300)
    reader = setup.reader("r1")
    batches = read_batches(reader, len(written), max_events=7)
    assert_nothing_more(reader)

    reads: list[str] = []
    ends: dict[int, int] = {}  # per segment, the offset after the last event read
    for batch in batches:
        events = batch.events
        assert 1 <= len(events) <= 7
        assert (events.scope, events.stream) == (setup.scope, "s")
        assert events.positions[0] == ends.get(events.segment_id, 0), "a gap or an overlap between batches"
        assert events.positions == sorted(events.positions) and events.end > events.positions[-1]
        ends[events.segment_id] = events.end
        assert {o.segment_id: o.offset for o in batch.position.offsets}[events.segment_id] == events.end
        texts = [SER.deserialize(p) for p in events.payloads]
        assert events.payloads == [SER.serialize(t) for t in texts]
        assert events.routing_keys == [f"k{int(t) % KEYS}" for t in texts]
        reads += texts
    assert_each_once_in_key_order(reads, written)
    assert ends == segment_tails(setup)
    assert {o.segment_id: o.offset for o in reader.get_position().offsets} == ends
    reader.close()


def test_read_events_and_read_next_event_mix_on_one_reader(setup):
    written = setup.write(200)
    reader = setup.reader("r1")
    reads: list[str] = []
    ends: dict[int, int] = {}
    deadline = time.monotonic() + 30
    one_by_one = True
    while len(reads) < len(written):
        assert time.monotonic() < deadline, f"only {len(reads)} of {len(written)} events arrived"
        if one_by_one:
            read = reader.read_next_event(timeout_ms=200)
            if read is None or read.is_checkpoint:
                continue
            segment, start, end = read.pointer.segment_id, read.pointer.offset, read.pointer.offset + read.pointer.length
            assert read.routing_key == f"k{int(read.event) % KEYS}"
            reads.append(read.event)
        else:
            batch = reader.read_events(max_events=5, timeout_ms=200)
            if batch is None or batch.is_checkpoint:
                continue
            segment, start, end = batch.events.segment_id, batch.events.positions[0], batch.events.end
            reads += [SER.deserialize(p) for p in batch.events.payloads]
        assert start == ends.get(segment, 0), "the two reads do not continue one another"
        ends[segment] = end
        one_by_one = not one_by_one
    assert_nothing_more(reader)
    assert_each_once_in_key_order(reads, written)
    assert ends == segment_tails(setup)
    reader.close()


def test_a_checkpoint_comes_to_a_batch_reader_as_a_marker_and_completes(setup):
    written = setup.write(200)
    reader = setup.reader("r1")
    reads = [SER.deserialize(p) for b in read_batches(reader, 20, max_events=10) for p in b.events.payloads]
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(cp=setup.group.initiate_checkpoint("cp", timeout_s=20)))
    thread.start()
    markers: list[GroupEventsRead] = []
    deadline = time.monotonic() + 20
    while thread.is_alive() or len(reads) < len(written):
        assert time.monotonic() < deadline, f"checkpoint done: {not thread.is_alive()}, {len(reads)} events read"
        read = reader.read_events(max_events=10, timeout_ms=200)
        if read is None:
            continue
        if read.is_checkpoint:
            markers.append(read)
        else:
            reads += [SER.deserialize(p) for p in read.events.payloads]
    thread.join()
    assert [(m.checkpoint_name, m.events) for m in markers] == [("cp", None)]
    cut = outcome["cp"].cuts[f"{setup.scope}/s"]
    # the checkpoint's cut is where the reader was when it returned the marker
    assert {p.segment.segment_id: p.offset for p in cut.positions} == {
        o.segment_id: o.offset for o in markers[0].position.offsets}
    assert_nothing_more(reader)
    assert_each_once_in_key_order(reads, written)
    reader.close()


def test_a_reader_resumed_at_a_batch_position_continues_after_the_batch(setup):
    written = setup.write(200)
    r1 = setup.reader("r1")
    first = read_batches(r1, 50, max_events=9)
    assert r1.get_position() == first[-1].position
    setup.group.reader_offline("r1", first[-1].position)  # r1 "crashed" right after its last batch
    r2 = setup.reader("r2")
    rest = read_batches(r2, len(written) - sum(len(b.events) for b in first), max_events=9)
    assert_nothing_more(r2)
    reads = [SER.deserialize(p) for b in first + rest for p in b.events.payloads]
    assert_each_once_in_key_order(reads, written)
    r2.close()
