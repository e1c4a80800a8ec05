"""What a writer's user meets when the service is down (issue 56): one bound on an event's wait that
flush and close keep, back-pressure on write_event, failures raised on flush and on leaving the
``with`` block, and a warning logged once per failure episode. Against the fake segment store of
test_writer_contract (no HTTP)."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import wait

import pytest
from test_writer_contract import FakeConnection, FakeSegments, outcome, writer_on

from rillet.errors import (
    EventsNotAcknowledged,
    InvalidArgument,
    NotSent,
    OutcomeUnknown,
    ServiceUnavailable,
    WriterBufferFull,
)
from rillet.framing import frame
from rillet.writer import EventWriterConfig

SLACK_S = 0.5  # scheduling on a loaded machine; far below the bound a second time (the bug measured)


def timed_flush(writer) -> tuple[float, EventsNotAcknowledged | None]:
    """How long flush took, and what it raised (timed first, so a slow flush is reported as such)."""
    started = time.monotonic()
    try:
        writer.flush()
    except EventsNotAcknowledged as e:
        return time.monotonic() - started, e
    return time.monotonic() - started, None


def test_events_queued_behind_an_unanswered_block_wait_the_bound_once_not_twice():
    """The stack is stopped: every append is answered 503. With one block in flight, the events written
    meanwhile wait in the queue. They must fail within retry_timeout_s of write_event, not be sent when
    the first block gives up and then wait the bound again (flush took twice the bound)."""
    store = FakeSegments([0])
    store.fault = lambda call, applied: (_ for _ in ()).throw(ServiceUnavailable("connection refused")) if (
        not applied) else None
    bound = 1.0
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, max_inflight_blocks=1, retry_timeout_s=bound)
    writer = writer_on(FakeConnection(store), config)
    try:
        written = time.monotonic()
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(5)]
        elapsed, raised = timed_flush(writer)
        assert time.monotonic() - written <= bound + SLACK_S, f"flush took {elapsed:.2f} s for a {bound} s bound"
        assert store.calls, "the outage was never met"
        outcomes = [outcome(f) for f in futures]
        assert outcomes[0] is OutcomeUnknown  # sent: it may be stored
        assert set(outcomes[1:]) <= {NotSent, OutcomeUnknown}  # never "refused" for an outcome not proven
        assert raised is not None and raised.details["failed"] == 5
    finally:
        writer.close()


def test_flush_and_close_keep_the_bound_against_a_server_that_never_answers():
    """Requests hang (no answer, no timeout): flush returns once the events' bound passed, every future
    resolved as OutcomeUnknown, and close does not wait for the hung requests either."""
    store = FakeSegments([0])
    entered, release = threading.Event(), threading.Event()

    def hang(call, applied):
        if not applied:
            entered.set()
            release.wait(timeout=10)
            raise ServiceUnavailable("reset")

    store.fault = hang
    bound = 0.5
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, max_inflight_blocks=3, retry_timeout_s=bound)
    writer = writer_on(FakeConnection(store), config)
    try:
        written = time.monotonic()
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(3)]
        assert entered.wait(timeout=5)
        elapsed, raised = timed_flush(writer)
        assert time.monotonic() - written <= bound + SLACK_S, f"flush took {elapsed:.2f} s for a {bound} s bound"
        assert all(f.done() for f in futures)
        assert [outcome(f) for f in futures] == [OutcomeUnknown] * 3
        assert raised is not None and raised.details["outcome_unknown"] == 3
        closing = time.monotonic()
        writer.close()
        assert time.monotonic() - closing <= SLACK_S
        assert not release.is_set(), "the requests were still hanging: close did not wait for them"
    finally:
        release.set()
        writer.close()


def test_write_event_blocks_on_a_full_buffer_then_raises_and_resumes_when_room_frees():
    store = FakeSegments([0])
    release = threading.Event()
    store.fault = lambda call, applied: release.wait(timeout=10) if not applied else None
    event_bytes = len(frame(b"e0"))
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, retry_timeout_s=30,
                               buffer_bytes=2 * event_bytes, max_block_s=0.5)
    with writer_on(FakeConnection(store), config) as writer:
        first = [writer.write_event(f"e{i}", routing_key="k") for i in range(2)]  # fills the buffer
        started = time.monotonic()
        with pytest.raises(WriterBufferFull):
            writer.write_event("e2", routing_key="k")
        assert 0.5 <= time.monotonic() - started <= 0.5 + SLACK_S

        threading.Timer(0.1, release.set).start()  # an answer frees room while write_event waits
        started = time.monotonic()
        blocked = writer.write_event("e3", routing_key="k")
        assert time.monotonic() - started >= 0.05
        assert [outcome(f) for f in [*first, blocked]] == ["ok"] * 3
    assert store.stored(0) == ["e0", "e1", "e3"]  # e2 was refused before it was queued


def test_leaving_the_with_block_raises_naming_the_failures_nobody_looked_at():
    store = FakeSegments([0])
    refused = []

    def refuse_e1(call, applied):
        if not applied and call["events"] == ["e1"]:
            refused.append(call)
            raise InvalidArgument("refused")

    store.fault = refuse_e1
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0)
    with pytest.raises(EventsNotAcknowledged) as e, writer_on(FakeConnection(store), config) as writer:
        for i in range(3):
            writer.write_event(f"e{i}", routing_key="k")  # the README's pattern: futures not kept
    assert refused
    assert e.value.details["failed"] == 1 and e.value.details["outcome_unknown"] == 0
    assert "1 event(s)" in str(e.value) and "refused" in str(e.value)
    assert isinstance(e.value.__cause__, InvalidArgument)
    assert store.stored(0) == ["e0", "e2"]

    # Failures looked at through their futures are not raised again; nor twice.
    with writer_on(FakeConnection(FakeSegments([0])), config) as writer:
        writer.connection.segments.fault = refuse_e1
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(3)]
        assert [outcome(f) for f in futures] == ["ok", InvalidArgument, "ok"]
        writer.flush()

    # A block already leaving on an exception keeps it.
    with pytest.raises(KeyError), writer_on(FakeConnection(FakeSegments([0])), config) as writer:
        writer.connection.segments.fault = refuse_e1
        futures = [writer.write_event(f"e{i}", routing_key="k") for i in range(3)]
        wait(futures, timeout=10)  # looks at none of them
        assert futures[1].done() and not futures[1].seen
        assert writer.connection.segments.stored(0) == ["e0", "e2"]  # e1 failed, unseen
        raise KeyError("the application's own error")


def test_a_warning_is_logged_once_per_failure_episode(caplog):
    store = FakeSegments([0])
    down = threading.Event()
    down.set()
    store.fault = lambda call, applied: (_ for _ in ()).throw(ServiceUnavailable("down")) if (
        down.is_set() and not applied) else None
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, retry_timeout_s=0.3)
    caplog.set_level(logging.WARNING, logger="rillet.writer")
    with writer_on(FakeConnection(store), config) as writer:
        for _ in range(2):  # two failed flushes of the same outage: one episode
            futures = [writer.write_event(f"e{i}", routing_key=f"k{i}") for i in range(4)]
            with pytest.raises(EventsNotAcknowledged):
                writer.flush()
            assert all(isinstance(f.exception(timeout=0), (OutcomeUnknown, NotSent)) for f in futures)
        warnings = [r for r in caplog.records if r.name == "rillet.writer" and r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "sc/s" in warnings[0].getMessage()

        down.clear()
        assert outcome(writer.write_event("up", routing_key="k")) == "ok"  # the episode ends
        down.set()
        assert outcome(writer.write_event("down again", routing_key="k")) is OutcomeUnknown
    warnings = [r for r in caplog.records if r.name == "rillet.writer" and r.levelno == logging.WARNING]
    assert len(warnings) == 2


def test_a_block_failed_at_its_deadline_keeps_the_writer_id_until_its_request_ends():
    """The first block's request hangs past retry_timeout_s and is then applied (an answer lost on the way):
    its future fails OutcomeUnknown at the deadline, but the writer must not start a new writer id for the
    next event of the same key while that request may still be applied, or the later event could be
    stored before the earlier one."""
    store = FakeSegments([0])
    entered, release = threading.Event(), threading.Event()

    def late_e0(call, applied):
        if not applied and call["events"] == ["e0"] and not entered.is_set():
            entered.set()
            release.wait(timeout=10)  # then applied

    store.fault = late_e0
    bound = 0.3
    config = EventWriterConfig(batch_size_bytes=1, max_latency_ms=0, retry_timeout_s=bound)
    writer = writer_on(FakeConnection(store), config)
    try:
        first = writer.write_event("e0", routing_key="k")
        assert entered.wait(timeout=5)
        assert outcome(first) is OutcomeUnknown  # at the deadline, while its request still hangs
        second = writer.write_event("e1", routing_key="k")
        time.sleep(0.1)  # well within its own bound
        assert store.stored(0) == [], "a new writer id's block was sent while the old request could still land"
        release.set()
        assert outcome(second) == "ok"
        assert store.stored(0) == ["e0", "e1"]  # per-key order kept
    finally:
        release.set()
        writer.close()
