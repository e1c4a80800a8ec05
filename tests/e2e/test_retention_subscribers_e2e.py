"""Consumption-based retention end to end: a subscriber reader group and a non-subscriber one over HTTP.

A subscriber group (AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT) reads everything and checkpoints; a
non-subscriber group (NONE) reads slowly, with a tiny read size so that it buffers little. The
retention cycle then runs in process against the stack's moto (first through controller.retention
with an explicit time, then through the Dagster asset): the stream is truncated exactly at the
subscriber's last checkpoint, never ahead of it even though the subscriber has read further, and the
slow group keeps reading without an error: it moves on to the new head, losing the events that were
truncated before it read them (the defined semantics for a non-subscriber) but nothing after the head,
never reading an event twice and keeping per-key order.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from dagster import materialize

import rillet
from controlplane import models as control_models
from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from dagster_project.resources import RilletDeployment
from dagster_project.retention import stream_retention
from dataplane import models as data_models
from dataplane.deployment import Deployment
from rillet import RetentionPolicy, ScalingPolicy, StreamConfiguration, UTF8StringSerializer
from rillet.models import StreamDataRetention
from rillet.reader_group import EventStreamReader, ReaderGroupManager, group_config
from rillet.stream_cut import Ordering, compare_positions
from standalone.resources import bind_all

SER = UTF8StringSerializer()
KEYS = 4
PAD = "x" * 40  # ~50-byte events: the slow reader's 64-byte reads fetch about one event at a time


@contextlib.contextmanager
def bound_to(stack):
    """The in-process control plane on the stack's moto; the models' previous binding is restored after."""
    meta, data = control_models.MetadataItem.Meta, data_models.SegmentMeta.Meta
    previous = Deployment(region=meta.region, endpoint_url=meta.host, metadata_table=meta.table_name,
                          segments_table=data.table_name)
    try:
        yield Controller.for_deployment(Deployment(endpoint_url=stack.moto.url),
                                        retention_settings=RetentionSettings(frequency_ms=1))
    finally:
        bind_all(previous)


def _key(event: str) -> int:
    return int(event.split(":")[1]) % KEYS


def _seq(event: str) -> int:
    return int(event.split(":")[1])


class SubscriberReader:
    """Reads the subscriber group continuously in a thread (so that checkpoints complete)."""

    def __init__(self, factory: rillet.EventStreamClientFactory) -> None:
        self.reader = factory.create_reader("sub-1", "sub", SER)
        self.reads: list[str] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="subscriber-reader", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                read = self.reader.read_next_event(timeout_ms=100)
                if read is not None and not read.is_checkpoint:
                    self.reads.append(read.event)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def wait_for(self, n: int, limit_s: float = 30) -> None:
        deadline = time.monotonic() + limit_s
        while len(self.reads) < n and time.monotonic() < deadline and not self.errors:
            time.sleep(0.05)
        assert not self.errors, self.errors
        assert len(self.reads) >= n, f"the subscriber read only {len(self.reads)} of {n} events"

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.reader.close()


def _read(reader: EventStreamReader, count: int | None = None, until: set[str] | None = None,
          linger_s: float = 1.0, limit_s: float = 40):
    """(event, segment id, offset): ``count`` events, or until every event of ``until`` was read and then
    nothing more came for ``linger_s`` (so that a duplicate or an unexpected event would show up)."""
    out = []
    deadline, last = time.monotonic() + limit_s, time.monotonic()
    while time.monotonic() < deadline:
        if count is not None and len(out) >= count:
            return out
        done = until is not None and until <= {e for e, _, _ in out}
        read = reader.read_next_event(timeout_ms=200)
        if read is None:
            if done and time.monotonic() - last >= linger_s:
                return out
            continue
        last = time.monotonic()
        if not read.is_checkpoint:
            out.append((read.event, read.pointer.segment_id, read.pointer.offset))
    raise AssertionError(f"still reading after {limit_s} s ({len(out)} events)")


def _acknowledged(controller: Controller, scope: str, expected: dict[int, int], wait_s: float = 10) -> dict[int, int]:
    """The subscriber's acknowledged cut, once it is ``expected`` (or whatever it is after ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while True:
        (record,) = controller.retention.subscribers(scope, "s")
        assert record.group == f"{scope}/sub"
        cut = {int(s): o for s, _, _, o in record.cut}
        if cut == expected or time.monotonic() > deadline:
            return cut
        time.sleep(0.1)


@pytest.mark.timeout(180)
def test_truncation_follows_the_subscriber_and_a_non_subscriber_moves_on_to_the_head(stack, url, unique):
    scope = unique
    manager = rillet.StreamManager(url)
    manager.create_scope(scope)
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2), retention_policy=policy)
    manager.create_stream(scope, "s", config)
    factory = rillet.EventStreamClientFactory(scope, url)
    writer = factory.create_event_writer("s", SER, rillet.EventWriterConfig(max_latency_ms=2))
    where: dict[str, tuple[int, int]] = {}  # event -> (segment id, offset), from the acknowledgements

    def write(tag: str, first: int, n: int) -> list[str]:
        events = [f"{tag}:{i}:{PAD}" for i in range(first, first + n)]
        futures = [writer.write_event(e, routing_key=f"k{_key(e)}") for e in events]
        for event, future in zip(events, futures):
            ack = future.result(timeout=30)
            where[event] = (ack.segment_id, ack.offset)
        return events

    groups = ReaderGroupManager(scope, url)
    stream = f"{scope}/s"
    groups.create_reader_group("sub", group_config(
        [stream], automatic_checkpoint_interval_ms=0, group_refresh_time_ms=100,
        retention_type=StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT))
    groups.create_reader_group("slow", group_config([stream], automatic_checkpoint_interval_ms=0,
                                                    group_refresh_time_ms=100))
    sub_group = groups.get_reader_group("sub")
    first = write("a", 0, 40)
    subscriber = SubscriberReader(factory)
    slow = EventStreamReader(factory.connection, scope, "slow", "slow-1", SER, read_size=64)
    try:
        slow_reads = _read(slow, count=5)
        subscriber.wait_for(len(first))
        cp1 = sub_group.initiate_checkpoint("cp1", timeout_s=30).cuts[stream]
        ends = {}
        for event, (sid, offset) in where.items():
            ends[sid] = max(ends.get(sid, 0), offset + 4 + len(event.encode()))
        assert cp1.offsets == ends, "cp1 lies after everything written"

        with bound_to(stack) as controller:
            # the checkpoint's cut becomes the subscriber's acknowledged cut (published by the controller
            # right after it records the checkpoint as complete, so possibly a moment after the client saw it)
            assert _acknowledged(controller, scope, cp1.offsets) == cp1.offsets

            second = write("b", 40, 20)
            subscriber.wait_for(len(first) + len(second))  # read, but not acknowledged by a checkpoint
            decision = controller.retention.cycle(scope, "s", now=int(time.time() * 1000))
            assert decision.outcome == "truncated", decision
            head = controller.streams.head(scope, "s")
            assert compare_positions(head, list(cp1.positions)) == Ordering.EQUAL
            tail = controller.streams.tail(scope, "s")
            assert compare_positions(head, tail) == Ordering.BEFORE
            # again: the subscriber acknowledged nothing new, so nothing more is truncated
            decision = controller.retention.cycle(scope, "s", now=int(time.time() * 1000) + 1)
            assert decision.outcome == "kept", decision
            assert compare_positions(controller.streams.head(scope, "s"), head) == Ordering.EQUAL
        head_offsets = {p.segment.segment_id: p.offset for p in head}

        # the slow non-subscriber keeps reading: no error; it moves to the head and reads all of "b"
        slow_reads += _read(slow, until=set(second))
        events = [e for e, _, _ in slow_reads]
        assert len(events) == len(set(events)), "an event was read twice"
        for k in range(KEYS):
            seqs = [_seq(e) for e in events if _key(e) == k]
            assert seqs == sorted(seqs), (k, seqs)
        assert set(second) <= set(events)
        after_head = {e for e, (sid, off) in where.items() if off >= head_offsets[sid]}
        assert after_head == set(second)
        lost = set(first) - set(events)
        assert lost, "the truncation should have overtaken the slow reader"
        assert set(events) <= set(first) | set(second)

        # a second checkpoint covers "b": the Dagster asset (the deployment's defaults) truncates there
        cp2 = sub_group.initiate_checkpoint("cp2", timeout_s=30).cuts[stream]
        with bound_to(stack) as controller:
            assert _acknowledged(controller, scope, cp2.offsets) == cp2.offsets
            # the bucket the stack's controller put the stream in (its deployment's shard count, not this process's)
            bucket = int(controller.store.get_stream(scope, "s").retention_bucket)
        try:
            result = materialize([stream_retention], run_config={"ops": {"stream_retention": {"config": {"buckets": [bucket]}}}},
                                 resources={"rillet": RilletDeployment(endpoint_url=stack.moto.url)})
            assert result.success
            with bound_to(stack) as controller:
                assert compare_positions(controller.streams.head(scope, "s"), list(cp2.positions)) == Ordering.EQUAL
                assert compare_positions(controller.streams.head(scope, "s"),
                                         controller.streams.tail(scope, "s")) == Ordering.EQUAL
        finally:
            bind_all(Deployment(endpoint_url=stack.moto.url))
        (materialization,) = result.asset_materializations_for_node("stream_retention")
        assert f"`{stream}` | truncated" in materialization.metadata["decisions"].value

        # both groups go on reading new events normally
        third = write("c", 60, 8)
        subscriber.wait_for(len(first) + len(second) + len(third))
        assert {e for e, _, _ in _read(slow, until=set(third))} == set(third)
        assert sorted(subscriber.reads) == sorted(first + second + third)
        assert not subscriber.errors
    finally:
        subscriber.close()
        slow.close()
        writer.close()
