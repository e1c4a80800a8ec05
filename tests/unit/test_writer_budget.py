"""The writer's latency budget (``max_latency_ms``), on a clock the test moves: a partial block grows
for the budget less the measured round trip and no longer; a full block and a flush leave at once; the
hold follows the round trip the writer measures. The fake store of test_writer_contract moves the
clock by the round trip during each append, and records the clock when each block arrives."""

from __future__ import annotations

import threading
import time
import types

import pytest
from test_writer_contract import FakeConnection, FakeSegments, outcome, writer_on

import rillet.writer
import rillet.writer_delivery
from rillet.framing import frame
from rillet.writer import EventWriterConfig

TWO_EVENTS = 2 * len(frame(b"e0"))


class Clock:
    """The writer's monotonic clock, moved only by the test (and by the store, for round trips)."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    for module in (rillet.writer, rillet.writer_delivery):  # batching and sending read the same clock
        monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=clock.monotonic, sleep=time.sleep))
    return clock


def timed_store(clock: Clock, round_trip_s: list[float]) -> FakeSegments:
    """A store whose appends take ``round_trip_s[0]`` on the clock; each call records when it arrived."""
    store = FakeSegments([0])

    def take_the_round_trip(call, applied):
        if not applied:
            call["sent_at"] = clock.now
            clock.now += round_trip_s[0]

    store.fault = take_the_round_trip
    return store


def move(writer, clock: Clock, to: float) -> None:
    """Set the clock and wake the writer's batcher (as its timed wait would once the time came)."""
    clock.now = to
    with writer._cond:
        writer._cond.notify_all()


def sent(store: FakeSegments, events: list[str]) -> dict | None:
    """The call that carried exactly ``events``, waiting (bounded) for it: no timing is asserted."""
    for _ in range(10_000):
        with store.lock:
            call = next((c for c in store.calls if c["events"] == events), None)
        if call is not None:
            return call
        time.sleep(0.001)
    return None


def warm(writer, store: FakeSegments) -> None:
    """A first block: it leaves at once (no round trip measured yet) and teaches the writer one."""
    assert outcome(writer.write_event("warm", routing_key="k")) == "ok"
    assert sent(store, ["warm"]) is not None


def test_a_partial_block_grows_for_the_budget_less_the_round_trip_and_no_longer(clock):
    store = timed_store(clock, [0.050])
    with writer_on(FakeConnection(store), EventWriterConfig(max_latency_ms=250)) as writer:
        warm(writer, store)  # round trip 50 ms: an event may be held 200 ms
        assert writer.hold_s() == pytest.approx(0.200)
        written_at = clock.now = 200.0
        first = writer.write_event("e1", routing_key="k")
        move(writer, clock, 200.1)
        second = writer.write_event("e2", routing_key="k")  # joins the block while it grows
        move(writer, clock, 200.199)
        time.sleep(0.05)  # a chance to send too early, which the arrival time below would show
        move(writer, clock, 200.2)
        call = sent(store, ["e1", "e2"])
        assert call is not None and call["sent_at"] == pytest.approx(written_at + 0.200)
        assert [outcome(first), outcome(second)] == ["ok", "ok"]
    assert store.stored(0) == ["warm", "e1", "e2"]


def test_a_full_block_leaves_at_once_whatever_the_budget(clock):
    store = timed_store(clock, [0.0])
    with writer_on(FakeConnection(store), EventWriterConfig(max_latency_ms=60_000, batch_size_bytes=TWO_EVENTS)) as writer:
        warm(writer, store)
        written_at = clock.now
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in (1, 2)]
        call = sent(store, ["e1", "e2"])  # the clock never moved: only fullness can have sent it
        assert call is not None and call["sent_at"] == written_at
        assert [outcome(f) for f in futures] == ["ok", "ok"]


def test_flush_sends_at_once_whatever_the_budget(clock):
    store = timed_store(clock, [0.0])
    with writer_on(FakeConnection(store), EventWriterConfig(max_latency_ms=60_000)) as writer:
        warm(writer, store)
        written_at = clock.now
        future = writer.write_event("e1", routing_key="k")
        writer.flush()
        assert outcome(future) == "ok" and sent(store, ["e1"])["sent_at"] == written_at


def test_the_hold_follows_the_measured_round_trip(clock):
    """The hold is the budget less the smoothed round trip: it shrinks as appends slow down, never
    below zero (a round trip longer than the budget: events leave at once), and grows back."""
    round_trip = [0.050]
    store = timed_store(clock, round_trip)
    with writer_on(FakeConnection(store), EventWriterConfig(max_latency_ms=250)) as writer:
        assert writer.hold_s() == 0.0  # nothing measured: the whole budget is taken for the round trip
        warm(writer, store)
        assert writer.hold_s() == pytest.approx(0.200)

        def append_at(t: float, name: str) -> float:
            """Write one event at ``t`` and let it leave; when it arrived at the store."""
            clock.now = t
            future = writer.write_event(name, routing_key="k")
            move(writer, clock, t + writer.hold_s())
            assert outcome(future) == "ok"
            return sent(store, [name])["sent_at"] - t

        round_trip[0] = 0.150
        holds = [append_at(300.0 + i, f"slow{i}") for i in range(20)]
        assert holds == sorted(holds, reverse=True) and holds[0] == pytest.approx(0.200)
        # TCP's smoothing: each answer moves the estimate an eighth of the way to the new round trip.
        assert writer.hold_s() == pytest.approx(0.250 - (0.150 - 0.100 * (7 / 8) ** 20))
        round_trip[0] = 0.400
        for i in range(20):
            append_at(400.0 + i, f"slower{i}")
        assert writer.hold_s() == 0.0
        clock.now = 500.0
        future = writer.write_event("at-once", routing_key="k")  # no move of the clock needed
        assert outcome(future) == "ok" and sent(store, ["at-once"])["sent_at"] == 500.0


def test_with_no_budget_left_a_partial_block_waits_for_the_answer_in_flight(clock):
    """A round trip longer than the budget leaves no hold: an event leaves at once if nothing of its
    segment is in flight, else with the answer, together with what gathered (one request per round
    trip), rather than pipelining small blocks that would only load a slow server further."""
    store = timed_store(clock, [0.400])
    arrived, release = threading.Event(), threading.Event()
    take_the_round_trip = store.fault

    def hold_e1(call, applied):
        take_the_round_trip(call, applied)
        if not applied and call["events"] == ["e1"]:
            arrived.set()
            assert release.wait(timeout=30)

    store.fault = hold_e1
    with writer_on(FakeConnection(store), EventWriterConfig(max_latency_ms=250)) as writer:
        warm(writer, store)
        assert writer.hold_s() == 0.0
        futures = [writer.write_event("e1", routing_key="k")]
        assert arrived.wait(timeout=30)
        futures += [writer.write_event(f"e{i}", routing_key="k") for i in (2, 3)]
        move(writer, clock, clock.now + 1.0)  # long past any deadline: only the answer may send them
        time.sleep(0.05)
        with store.lock:
            assert [c["events"] for c in store.calls] == [["warm"], ["e1"]]
        release.set()
        assert [outcome(f) for f in futures] == ["ok"] * 3
    assert [c["events"] for c in store.calls] == [["warm"], ["e1"], ["e2", "e3"]]
