"""A transaction committed after the stream scaled, through the SDK over HTTP: the commit rolls it.

Plain writers (routing keys) write before the transaction begins, while it is open, across a split
and a merge, and after the commit; the transactional writer writes in between. The whole stream is
then read with a StreamReader: every event exactly once, and per key the events written before the
commit, then the transaction's, then those written after it. The current epoch is two beyond the
scale's, and the rolled epoch's segments (the successors of the segments current at the commit) and
those segments themselves are sealed.
"""

from __future__ import annotations

from collections import Counter

import pytest

import rillet
from rillet import EventWriterConfig, ScalingPolicy, StreamConfiguration, TxnState, UTF8StringSerializer
from rillet.keyspace import segment_epoch

SER = UTF8StringSerializer()
STREAM = "s"
FAST = EventWriterConfig(max_latency_ms=10)
KEYS = [f"key-{i}" for i in (0, 1, 3, 4, 5, 8, 9, 11)]  # one in each of [0, .1), [.1, .125), ..., [.875, 1)


@pytest.fixture
def factory(manager, url, unique):
    manager.create_scope(unique)
    manager.create_stream(unique, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    with rillet.EventStreamClientFactory(unique, url) as f:
        yield f


def test_commit_after_scaling_rolls_and_keeps_key_order(factory, manager, unique):
    scope = unique
    expected: dict[str, list[str]] = {k: [] for k in KEYS}
    plain = factory.create_event_writer(STREAM, SER, FAST)

    def write_plain(tag: str) -> None:
        futures = [plain.write_event(f"{k}|plain|{tag}", routing_key=k) for k in KEYS]
        plain.flush()
        assert all(f.exception(timeout=60) is None for f in futures)
        for k in KEYS:
            expected[k].append(f"{k}|plain|{tag}")

    write_plain("before-0")
    writer = factory.create_transactional_writer(STREAM, SER, FAST)
    txn = writer.begin(lease_ms=60_000)
    txn_events = {k: [f"{k}|txn|{i}" for i in range(3)] for k in KEYS}
    for i in range(3):
        for k in KEYS:
            txn.write_event(txn_events[k][i], routing_key=k)
    txn.flush()
    write_plain("before-1")
    s0, _ = manager.controller.current_segments(scope, STREAM)
    manager.scale_stream(scope, STREAM, [s0.segment_id], [(0.0, 0.25), (0.25, 0.5)])
    write_plain("before-2")
    _, mid, last = manager.controller.current_segments(scope, STREAM)
    scale_epoch = manager.scale_stream(scope, STREAM, [mid.segment_id, last.segment_id], [(0.25, 1.0)])
    assert scale_epoch == 2
    write_plain("before-3")
    current_at_commit = manager.controller.current_segments(scope, STREAM)

    txn.commit()
    assert txn.check_status() == TxnState.COMMITTED
    for k in KEYS:
        expected[k] += txn_events[k]
    write_plain("after-0")  # the plain writer finds its segments sealed and moves on to the duplicates
    write_plain("after-1")
    plain.close()

    info = manager.get_stream_info(scope, STREAM)
    assert info.current_epoch == scale_epoch + 2
    assert [(s.low, s.high) for s in info.current_segments] == [(s.low, s.high) for s in current_at_commit]
    segments = factory.connection.segments
    rolled = {}
    for segment in current_at_commit:
        assert segments.info(scope, STREAM, segment.segment_id).sealed
        for successor in manager.controller.successors(scope, STREAM, segment.segment_id):
            rolled[successor.segment.segment_id] = successor.segment
    assert {segment_epoch(sid) for sid in rolled} == {scale_epoch + 1}
    assert sorted((s.low, s.high) for s in rolled.values()) == sorted((s.low, s.high) for s in txn.info.segments)
    for sid in rolled:
        assert segments.info(scope, STREAM, sid).sealed

    reads = list(factory.create_stream_reader(STREAM, SER))
    counts = Counter(r.event for r in reads)
    assert [e for e, n in counts.items() if n > 1] == []
    got: dict[str, list[str]] = {k: [] for k in KEYS}
    for r in reads:
        got[r.event.split("|")[0]].append(r.event)
    for k in KEYS:
        assert got[k] == expected[k], f"key {k}"
    # the transaction's events were read from the rolled segments only
    assert {r.pointer.segment_id for r in reads if "|txn|" in r.event} <= set(rolled)
