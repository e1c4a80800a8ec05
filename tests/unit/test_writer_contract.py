"""The event writer's idempotent-producer contract, against a fake segment store (no HTTP).

The fake keeps the server's rules that the contract rests on: a block whose (writer id, event
numbers) are already appended is acknowledged again at its offset; a sealed segment refuses new
blocks; a block whose predecessor (``after``) has not committed is refused at once with OutOfOrder.
Faults are scripted per request, "before it is applied" or "applied, then the answer is lost".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from rillet import api
from rillet.errors import (
    EventsNotAcknowledged,
    InvalidArgument,
    NotSent,
    OutcomeUnknown,
    OutOfOrder,
    RilletError,
    SegmentSealed,
    ServiceUnavailable,
    from_wire,
)
from rillet.framing import unframe
from rillet.models import SegmentRange, SuccessorInfo
from rillet.serializers import UTF8StringSerializer
from rillet.writer import EventStreamWriter, EventWriterConfig

WHOLE = SegmentRange(segment_id=0, low=0.0, high=1.0)
SUCCESSOR = SegmentRange(segment_id=1, low=0.0, high=1.0)
ONE_EVENT_BLOCKS = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, max_inflight_blocks=3, retry_timeout_s=30)


def internal_error() -> RilletError:
    """What the transport raises for a bare 500 once its own attempts are used up."""
    return from_wire(500, {"code": "InternalError", "message": "internal error"})


class FakeSegments:
    """Segments with the server's de-duplication, seal and ordering rules.

    ``fault(call, applied)`` is called before (``applied=False``) and after (``applied=True``) a request
    is applied; an exception it raises is the request's answer.
    """

    def __init__(self, segments: list[int]) -> None:
        self.lock = threading.Lock()
        self.events: dict[int, list[tuple[str, bytes]]] = {s: [] for s in segments}  # (writer id, event)
        self.blocks: dict[int, dict[tuple[str, int], int]] = {s: {} for s in segments}  # (writer, first) -> offset
        self.length: dict[int, int] = dict.fromkeys(segments, 0)
        self.last: dict[int, dict[str, int]] = {s: {} for s in segments}
        self.sealed: set[int] = set()
        self.calls: list[dict] = []
        self.fault: Callable[[dict, bool], None] = lambda call, applied: None

    def append(self, scope, stream, segment, writer_id, first_event, event_count, block, expected_offset=None,
               raw=False, after=None, block_age_ms=None, deadline=None):
        call = {"segment": segment, "writer": writer_id, "first": first_event, "count": event_count,
                "events": [e.payload.decode() for e in unframe(block)[0]], "age_ms": block_age_ms}
        with self.lock:
            self.calls.append(call)
        self.fault(call, False)
        with self.lock:
            last = first_event + event_count - 1
            if self.last[segment].get(writer_id, -1) >= last:
                return api.AppendAck(offset=self.blocks[segment][(writer_id, first_event)],
                                     length=self.length[segment], duplicate=True)
            if segment in self.sealed:
                raise SegmentSealed(f"segment {segment} is sealed")
            if after is not None and self.last[segment].get(writer_id, -1) < after:
                raise OutOfOrder(f"event {after} of {writer_id} is not appended yet")
            offset = self.length[segment]
            self.blocks[segment][(writer_id, first_event)] = offset
            self.length[segment] += len(block)
            self.last[segment][writer_id] = last
            self.events[segment] += [(writer_id, e) for e in call["events"]]
        self.fault(call, True)
        return api.AppendAck(offset=offset, length=offset + len(block))

    def stored(self, segment: int) -> list[str]:
        with self.lock:
            return [e for _, e in self.events[segment]]


class FakeController:
    def __init__(self, successors: dict[int, list[SegmentRange]]) -> None:
        self.successor_ranges = successors
        self.failures: list[RilletError] = []  # raised by the next lookups, in turn
        self.lookups = 0

    def successors(self, scope, stream, segment_id):
        self.lookups += 1
        if self.failures:
            raise self.failures.pop(0)
        return [SuccessorInfo(segment=s, predecessors=[WHOLE]) for s in self.successor_ranges.get(segment_id, [])]


class FakeConnection:
    def __init__(self, segments: FakeSegments, controller: FakeController | None = None) -> None:
        self.segments = segments
        self.controller = controller or FakeController({})


def writer_on(connection: FakeConnection, config: EventWriterConfig = ONE_EVENT_BLOCKS) -> EventStreamWriter[str]:
    return EventStreamWriter(connection, "sc", "s", UTF8StringSerializer(), config, segments=[WHOLE])


def outcome(future: Future) -> str | type:
    """``"ok"`` for an acknowledged event, else the type of its error."""
    error = future.exception(timeout=60)
    return "ok" if error is None else type(error)


def test_an_answer_lost_as_a_bare_500_is_retried_until_acknowledged():
    """The block is applied, then the answer is a 500 InternalError: the event is stored, so its
    future must be acknowledged, and the retry must not store it twice or reorder what follows."""
    store = FakeSegments([0])

    def lose_first_answer_of_e1(call, applied):
        if applied and call["events"] == ["e1"] and sum(c["events"] == ["e1"] for c in store.calls) == 1:
            raise internal_error()

    store.fault = lose_first_answer_of_e1
    with writer_on(FakeConnection(store)) as writer:
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(6)]
        writer.flush()
        assert [outcome(f) for f in futures] == ["ok"] * 6
    assert store.stored(0) == [f"e{i}" for i in range(6)]
    assert len({c["writer"] for c in store.calls}) == 1


def test_writer_id_is_not_replaced_while_a_block_is_unresolved():
    """e0's requests go unanswered for a while; e1 is refused for good (a 4xx that proves it is not
    stored). The events behind e1 cannot commit under this writer id any more, but a new writer id
    may only start once e0 is resolved: anything sent under it earlier could land before e0."""
    store = FakeSegments([0])
    e0_resolved = threading.Event()
    sent_under_new_id_early: list[dict] = []
    first_id: list[str] = []

    def script(call, applied):
        if applied:
            if call["events"] == ["e0"]:
                e0_resolved.set()
            return
        if not first_id:
            first_id.append(call["writer"])
        if call["writer"] != first_id[0] and not e0_resolved.is_set():
            sent_under_new_id_early.append(call)
        if call["events"] == ["e0"] and sum(c["events"] == ["e0"] for c in store.calls) <= 4:
            raise ServiceUnavailable("throttled")  # before it is applied
        if call["events"] == ["e1"]:
            raise InvalidArgument("refused")

    store.fault = script
    with writer_on(FakeConnection(store)) as writer:
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(6)]
        with pytest.raises(EventsNotAcknowledged):  # failures nobody looked at yet
            writer.flush()
        outcomes = [outcome(f) for f in futures]
    assert sent_under_new_id_early == []
    assert outcomes == ["ok", InvalidArgument, "ok", "ok", "ok", "ok"]
    assert store.stored(0) == ["e0", "e2", "e3", "e4", "e5"]


def test_rerouting_after_a_seal_keeps_the_order_events_were_written():
    """e5 is refused for good while e6 and e7 are in flight behind it; the segment is then sealed, so
    those and the later events are held and re-sent to the successor. They must arrive there in the
    order written, whatever writer ids and event numbers they were sent with before."""
    store = FakeSegments([0, 1])
    sealing = threading.Event()
    original: list[str] = []

    def script(call, applied):
        if applied:
            return
        if not original:
            original.append(call["writer"])
        if call["segment"] == 0 and call["writer"] != original[0]:
            with store.lock:
                store.sealed.add(0)
            sealing.set()
        if call["events"] == ["e5"]:
            raise InvalidArgument("refused")
        if call["writer"] == original[0] and call["events"] in (["e6"], ["e7"]):
            sealing.wait(timeout=2)
            with store.lock:
                store.sealed.add(0)

    connection = FakeConnection(store, FakeController({0: [SUCCESSOR]}))
    with writer_on(connection, EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, max_inflight_blocks=3)) as writer:
        early = [writer.write_event(f"e{i}", routing_key="k") for i in range(5)]
        writer.flush()
        store.fault = script
        late = [writer.write_event(f"e{i}", routing_key="k") for i in range(5, 10)]
        with pytest.raises(EventsNotAcknowledged):  # failures nobody looked at yet
            writer.flush()
        outcomes = [outcome(f) for f in early + late]
    assert outcomes == ["ok"] * 5 + [InvalidArgument] + ["ok"] * 4
    assert store.stored(0) == ["e0", "e1", "e2", "e3", "e4"]
    assert store.stored(1) == ["e6", "e7", "e8", "e9"]
    assert [f.result().segment_id for f in late[1:]] == [1] * 4


def test_a_failed_successors_lookup_does_not_close_the_key_range():
    """A 500 from the successors lookup is transient: it is asked again, and the held event goes on
    to the successor. Even when the lookup fails past the deadline (the held event then fails, not
    stored), the next event for those keys asks again instead of failing for good."""
    store = FakeSegments([0, 1])
    store.sealed.add(0)
    controller = FakeController({0: [SUCCESSOR]})
    controller.failures = [internal_error()]
    with writer_on(FakeConnection(store, controller)) as writer:
        assert outcome(writer.write_event("e0", routing_key="k")) == "ok"
    assert store.stored(1) == ["e0"]

    store = FakeSegments([0, 1])
    store.sealed.add(0)
    controller = FakeController({0: [SUCCESSOR]})
    controller.failures = [internal_error()] * 1000
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, retry_timeout_s=1.0)  # e1 below waits within it
    with writer_on(FakeConnection(store, controller), config) as writer:
        first = writer.write_event("e0", routing_key="k")
        error = first.exception(timeout=60)
        assert isinstance(error, SegmentSealed) and "not stored" in str(error)
        controller.failures = []
        assert outcome(writer.write_event("e1", routing_key="k")) == "ok"
    assert store.stored(1) == ["e1"]


def test_a_stream_sealed_for_good_fails_its_events():
    """No successors of a sealed segment proves the stream is sealed: the events fail, not stored."""
    store = FakeSegments([0])
    store.sealed.add(0)
    with writer_on(FakeConnection(store, FakeController({}))) as writer:
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(3)]
        with pytest.raises(EventsNotAcknowledged):  # failures nobody looked at yet
            writer.flush()
        assert [outcome(f) for f in futures] == [SegmentSealed] * 3
        assert outcome(writer.write_event("e3", routing_key="k")) == SegmentSealed
    assert store.stored(0) == []


def test_outcome_unknown_only_after_the_deadline():
    """Every answer is a 503 or a bare 500 until the deadline passes: the futures fail with
    OutcomeUnknown (never a plain failure), and the events behind the first one share its fate. Once
    the service answers again, later events go out under a new writer id and are acknowledged."""
    store = FakeSegments([0])
    down = threading.Event()
    down.set()
    errors = [ServiceUnavailable("unavailable"), internal_error()]

    def script(call, applied):
        if down.is_set() and not applied:
            raise errors[len(store.calls) % 2]

    store.fault = script
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, max_inflight_blocks=3, retry_timeout_s=0.5)
    with writer_on(FakeConnection(store), config) as writer:
        started = time.monotonic()
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(4)]
        with pytest.raises(EventsNotAcknowledged):  # failures nobody looked at yet
            writer.flush()
        assert time.monotonic() - started >= 0.5
        for future in futures[:3]:  # sent (three blocks in flight)
            error = future.exception(timeout=0)
            assert isinstance(error, OutcomeUnknown)
            assert "may or may not" in str(error)
        # e3 was sent once e0 gave up, or expired still queued behind them (not stored then)
        assert isinstance(futures[3].exception(timeout=0), (OutcomeUnknown, NotSent))
        down.clear()
        assert outcome(writer.write_event("e4", routing_key="k")) == "ok"
    assert store.stored(0) == ["e4"]


def test_out_of_order_is_resent_while_the_predecessor_is_in_flight():
    """The server refuses a pipelined block at once while the block before it has not committed; the
    writer sends it again once that one is through, instead of failing it."""
    store = FakeSegments([0])
    release = threading.Event()

    def script(call, applied):
        if not applied and call["events"] == ["e0"]:
            release.wait(timeout=5)
        if not applied and call["events"] == ["e2"]:
            release.set()

    store.fault = script
    with writer_on(FakeConnection(store)) as writer:
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(5)]
        writer.flush()
        assert [outcome(f) for f in futures] == ["ok"] * 5
    assert store.stored(0) == [f"e{i}" for i in range(5)]


@pytest.mark.parametrize("error", [InvalidArgument("bad"), OutOfOrder("gap")])
def test_a_proven_refusal_fails_only_the_refused_event(error):
    store = FakeSegments([0])
    store.fault = lambda call, applied: (_ for _ in ()).throw(error) if (
        not applied and call["events"] == ["e1"] and call["first"] == 1) else None
    with writer_on(FakeConnection(store)) as writer:
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(4)]
        with pytest.raises(EventsNotAcknowledged):  # failures nobody looked at yet
            writer.flush()
        outcomes = [outcome(f) for f in futures]
    assert outcomes[0] == "ok" and outcomes[2:] == ["ok", "ok"]
    assert outcomes[1] is type(error)
    assert store.stored(0) == ["e0", "e2", "e3"]


def test_a_block_refused_as_out_of_order_waits_for_its_predecessor_before_it_is_sent_again():
    """With many blocks in flight, a refused block is resent only once every block before it is
    resolved: each block costs at most one OutOfOrder refusal (a resend on a timer would spend another
    invocation on the same refusal, again and again, while the predecessor waits for a worker)."""
    fake = FakeSegments([0])
    release = threading.Event()

    def slow_first_block(call, applied):
        if not applied and call["first"] == 0:
            release.wait(10)  # the first block is slow; every other one arrives before it commits

    fake.fault = slow_first_block
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, max_inflight_blocks=8, max_concurrency=8,
                               retry_timeout_s=30)
    writer = writer_on(FakeConnection(fake), config)
    futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(8)]
    time.sleep(0.5)  # blocks 1..7 are refused meanwhile and park until block 0 is through
    release.set()
    writer.flush()
    assert [outcome(f) for f in futures] == ["ok"] * 8
    assert fake.stored(0) == [f"e{i}" for i in range(8)]
    attempts = [sum(1 for c in fake.calls if c["first"] == i) for i in range(8)]
    assert attempts[0] == 1 and all(n <= 2 for n in attempts), attempts
    writer.close()
