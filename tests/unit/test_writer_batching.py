"""The writer's batching profiles, block age and writer-id lifetime, against the fake
segment store of test_writer_contract (no HTTP, no timing assertions)."""

from __future__ import annotations

import threading
import time
import types

import pytest
from test_writer_contract import FakeConnection, FakeSegments, outcome, writer_on

import rillet.clock
import rillet.writer
from rillet import api
from rillet.errors import EventsNotAcknowledged, OutcomeUnknown, ServiceUnavailable, WriterExpired
from rillet.framing import MAX_EVENT_SIZE, frame
from rillet.segments import SegmentClient
from rillet.writer import EventWriterConfig

TWO_EVENTS = 2 * len(frame(b"e0"))


def gate_first_block(store: FakeSegments) -> tuple[threading.Event, threading.Event]:
    """Hold e0's request inside the store until released: e0 is in flight meanwhile."""
    arrived, release = threading.Event(), threading.Event()

    def hold(call, applied):
        if not applied and call["events"] == ["e0"]:
            arrived.set()
            assert release.wait(timeout=30)

    store.fault = hold
    return arrived, release


def test_lowest_latency_gathers_behind_the_block_in_flight_and_sends_with_its_answer():
    """lowest_latency(): e0 leaves alone at once. While it is in flight, full blocks still leave
    (pipelining), but a partial block waits, and leaves as soon as e0's answer comes back."""
    store = FakeSegments([0])
    arrived, release = gate_first_block(store)
    config = EventWriterConfig.lowest_latency(batch_size_bytes=TWO_EVENTS)
    with writer_on(FakeConnection(store), config) as writer:
        futures = [writer.write_event("e0", routing_key="k")]
        assert arrived.wait(timeout=30)
        futures += [writer.write_event(f"e{i}", routing_key="k") for i in range(1, 6)]
        release.set()
        writer.flush()
        assert [outcome(f) for f in futures] == ["ok"] * 6
    blocks = {tuple(c["events"]) for c in store.calls}  # a block refused OutOfOrder is sent again
    assert sorted(blocks) == [("e0",), ("e1", "e2"), ("e3", "e4"), ("e5",)]
    assert store.stored(0) == [f"e{i}" for i in range(6)]


def test_the_profiles_are_points_on_one_latency_budget():
    default, cost, fast = EventWriterConfig(), EventWriterConfig.cost_optimized(), EventWriterConfig.lowest_latency()
    assert default.max_latency_ms == 250 and default.idle_writer_id_s == 3600
    assert cost.max_latency_ms > 1000 and cost.batch_size_bytes == MAX_EVENT_SIZE
    assert fast.max_latency_ms == 0 and fast.max_inflight_blocks == default.max_inflight_blocks
    assert EventWriterConfig.cost_optimized(retry_timeout_s=10).retry_timeout_s == 10


def test_an_idle_writer_thread_waits_without_a_timeout(monkeypatch):
    """A short budget must not make the batcher poll: once nothing is pending it sleeps until woken."""
    linger_waits: list[float | None] = []

    class RecordingCondition(threading.Condition):
        def wait(self, timeout=None):
            if threading.current_thread().name == "rillet-writer-batcher":
                linger_waits.append(timeout)
            return super().wait(timeout)

    monkeypatch.setattr(threading, "Condition", RecordingCondition)
    store = FakeSegments([0])
    with writer_on(FakeConnection(store), EventWriterConfig(max_latency_ms=0)) as writer:
        writer.write_event("e0", routing_key="k").result(timeout=30)
        for _ in range(3000):  # until the linger thread is back asleep (bounded; no timing asserted)
            if linger_waits and linger_waits[-1] is None:
                break
            time.sleep(0.001)
        assert linger_waits and linger_waits[-1] is None


def test_every_attempt_says_how_long_ago_its_block_was_first_sent():
    store = FakeSegments([0])

    def slow_then_unavailable(call, applied):
        if not applied and call["events"] == ["e0"] and len(store.calls) <= 2:
            time.sleep(0.01)  # so that the resend is at least 10 ms after the first attempt
            raise ServiceUnavailable("throttled")  # before it is applied: resent

    store.fault = slow_then_unavailable
    with writer_on(FakeConnection(store)) as writer:
        assert outcome(writer.write_event("e0", routing_key="k")) == "ok"
        assert outcome(writer.write_event("e1", routing_key="k")) == "ok"
    ages = {tuple(c["events"]): [] for c in store.calls}
    for c in store.calls:
        ages[tuple(c["events"])].append(c["age_ms"])
    assert len(ages[("e1",)]) == 1 and len(ages[("e0",)]) == 3
    first, second, third = ages[("e0",)]
    # Resends are at least the 10 ms sleep later than the first attempt (whole milliseconds); the first
    # attempt's own age is near 0, but a loaded machine may take a few ms from the block to its send.
    assert second - first >= 9 and second <= third


def test_writer_expired_fails_the_block_as_such_and_the_next_block_starts_a_new_writer_id():
    """e0's first attempt ends unanswered, its resend is refused WriterExpired: e0 fails with that
    error (not stored under this id now, but maybe before: the docstring says outcome unknown), the
    blocks behind it share its unknown fate, and later events go under a new writer id."""
    store = FakeSegments([0])

    def expire_e0(call, applied):
        if not applied and call["events"] == ["e0"]:
            attempts = sum(c["events"] == ["e0"] for c in store.calls)
            raise ServiceUnavailable("timeout") if attempts == 1 else WriterExpired("writer id expired")

    store.fault = expire_e0
    with writer_on(FakeConnection(store)) as writer:
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(3)]
        with pytest.raises(EventsNotAcknowledged):  # failures nobody looked at yet
            writer.flush()
        assert [outcome(f) for f in futures] == [WriterExpired, OutcomeUnknown, OutcomeUnknown]
        assert outcome(writer.write_event("e3", routing_key="k")) == "ok"
    first_id = store.calls[0]["writer"]
    e3 = [c for c in store.calls if c["events"] == ["e3"]]
    assert e3[0]["writer"] != first_id and e3[0]["first"] == 0
    assert store.stored(0) == ["e3"]


def test_a_writer_id_idle_past_its_window_is_not_continued(monkeypatch):
    """An hour (the default) without an acknowledged block: the segment's next block starts a new id,
    also when the hour passed while the machine was suspended (only the wall clock counted it)."""
    skipped = [0.0]
    clock = types.SimpleNamespace(monotonic=time.monotonic, time=lambda: time.time() + skipped[0])
    monkeypatch.setattr(rillet.clock, "time", clock)
    store = FakeSegments([0])
    with writer_on(FakeConnection(store), EventWriterConfig(batch_size_bytes=1, max_latency_ms=0)) as writer:
        assert outcome(writer.write_event("e0", routing_key="k")) == "ok"
        skipped[0] += 3500
        assert outcome(writer.write_event("e1", routing_key="k")) == "ok"  # within the window: same id
        skipped[0] += 3601
        assert outcome(writer.write_event("e2", routing_key="k")) == "ok"
    ids = [(c["writer"], c["first"]) for c in store.calls]
    assert ids[0][0] == ids[1][0] and ids[1][1] == 1
    assert ids[2][0] != ids[0][0] and ids[2][1] == 0
    assert store.stored(0) == ["e0", "e1", "e2"]


def test_the_segment_client_sends_the_block_age_as_a_header():
    sent: list[dict] = []

    class Transport:
        def json(self, method, path, body=None, headers=None, deadline=None):
            sent.append(headers)
            return {"offset": 0, "length": len(body)}

    segments = SegmentClient(Transport(), Transport())
    segments.append("sc", "s", 0, "w", 0, 1, frame(b"e0"), after=-1, block_age_ms=1234)
    assert sent[0][api.BLOCK_AGE_MS] == "1234" and sent[0][api.AFTER_EVENT] == "-1"
