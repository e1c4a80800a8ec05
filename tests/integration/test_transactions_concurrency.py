"""Transactions under concurrency (invariant 5), on moto with an in-process controller.

* Several transactions committing at once on one stream: all end COMMITTED, each one's events are
  one contiguous run in every segment, and the transactions follow each other in the same order in
  every segment (commits are serial), while plain appends go on beside them.
* A commit racing an abort of the same transaction: exactly one wins, and the end state is the
  winner's (events visible once, or never and the transaction's segments deleted).
* Several callers committing the same transaction at once (the writer's retries, the sweeper): one
  outcome, the events once.
* A finisher of a commit workflow that was slowed down while another actor finished the workflow
  and the next commit went ahead: it must not apply its (finished) transaction a second time.
"""

from __future__ import annotations

import threading
import time
import traceback

import pytest
from dataplane_model import segment_events

from controlplane.service import Controller
from controlplane.streams import now_ms
from dataplane.segment_store import SegmentStore
from rillet.errors import SegmentNotFound, TxnFailed, WriteConflict
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState, TxnInfo, TxnState
from rillet.names import segment_name, txn_segment_token

STREAM = "s"
SEGMENTS = 3


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """See tests/conftest.py."""


@pytest.fixture
def scope(controller: Controller, unique: str) -> str:
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(SEGMENTS)))
    return unique


def txn_segment(scope: str, sid: int, txn_id: str) -> str:
    return segment_name(scope, STREAM, txn_segment_token(sid, txn_id))


def write_txn(c: Controller, scope: str, txn: TxnInfo, per_segment: int, tag: str = "") -> dict[int, list[bytes]]:
    written = {}
    for segment in txn.segments:
        payloads = [f"txn:{tag}{txn.txn_id}:{segment.segment_id}:{i}".encode() for i in range(per_segment)]
        for i, payload in enumerate(payloads):
            c.segments.append(txn_segment(scope, segment.segment_id, txn.txn_id), "tw", i, 1, frame(payload))
        written[segment.segment_id] = payloads
    return written


def runs(events: list[bytes], written: dict[str, list[bytes]]) -> list[str]:
    """The transactions in the order their events appear in one segment, checking on the way that
    each one's events form exactly one contiguous run in write order."""
    owner = {e: t for t, es in written.items() for e in es}
    order: list[str] = []
    i = 0
    while i < len(events):
        t = owner.get(events[i])
        if t is None:
            i += 1
            continue
        assert t not in order, f"transaction {t} appears twice (or not contiguously) in the segment"
        expected = written[t]
        assert events[i:i + len(expected)] == expected, f"transaction {t}: its events are not one contiguous run"
        order.append(t)
        i += len(expected)
    return order


def assert_idle(c: Controller, scope: str) -> None:
    record = c.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.workflow is None and record.pending is None
    assert not [i for i in c.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == scope]


def commit_until_done(c: Controller, scope: str, txn_id: str, conflicts: list) -> TxnInfo:
    """What the SDK does: repeat the commit while it answers COMMITTING or a retryable WriteConflict."""
    for _ in range(50):
        try:
            info = c.transactions.commit(scope, STREAM, txn_id)
        except WriteConflict as e:  # retryable by contract (the transport repeats it)
            conflicts.append(e)
            continue
        if info.state == TxnState.COMMITTED:
            return info
        time.sleep(0.05)
    raise AssertionError(f"transaction {txn_id} not committed after 50 attempts")


def run_threads(targets: list) -> list:
    """Run each callable in its own thread; return their results (or the exceptions they raised)."""
    results: list = [None] * len(targets)

    def run(i: int) -> None:
        try:
            results[i] = targets[i]()
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            e.trace = traceback.format_exc()
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(targets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread hung"
    return results


# -- many transactions committing at once ---------------------------------------------------------


def test_concurrent_commits_are_serial_and_contiguous(controller: Controller, scope: str):
    c, n = controller, 6
    txns = [c.transactions.begin(scope, STREAM, lease_ms=60_000) for _ in range(n)]
    barrier = threading.Barrier(n + 1)
    conflicts: list = []
    written: dict[str, dict[int, list[bytes]]] = {}
    plain_written: dict[int, list[bytes]] = {s.segment_id: [] for s in txns[0].segments}
    stop = threading.Event()

    def transaction(i: int):
        def body() -> TxnInfo:
            written[txns[i].txn_id] = write_txn(c, scope, txns[i], per_segment=2 + i % 3)
            barrier.wait(timeout=60)
            return commit_until_done(c, scope, txns[i].txn_id, conflicts)
        return body

    def plain_appender() -> int:
        """Appends go on in every segment while the transactions commit."""
        barrier.wait(timeout=60)
        number = 0
        while not stop.is_set() or number < 3:
            for sid, events in plain_written.items():
                payload = f"plain:{sid}:{number}".encode()
                c.segments.append(segment_name(scope, STREAM, sid), "plain", number, 1, frame(payload))
                events.append(payload)
            number += 1
        return number

    appender = threading.Thread(target=lambda: appended.append(plain_appender()), daemon=True)
    appended: list[int] = []
    appender.start()
    results = run_threads([transaction(i) for i in range(n)])
    stop.set()
    appender.join(timeout=60)
    assert appended, "the plain appender failed"
    failures = [getattr(r, "trace", repr(r)) for r in results if isinstance(r, BaseException)]
    assert not failures, "\n".join(failures)
    assert all(r.state == TxnState.COMMITTED for r in results)

    orders = {}
    for sid, plain in plain_written.items():
        events = segment_events(c.segments, segment_name(scope, STREAM, sid))
        flat = {t: w[sid] for t, w in written.items()}
        orders[sid] = runs(events, flat)
        assert sorted(orders[sid]) == sorted(written), f"segment {sid}: a committed transaction is missing"
        assert [e for e in events if e.startswith(b"plain:")] == plain
        assert len(events) == len(plain) + sum(len(es) for es in flat.values())
    first = next(iter(orders.values()))
    for sid, order in orders.items():
        assert order == first, f"segment {sid} orders the transactions differently: {order} vs {first}"
    for txn in txns:
        assert c.transactions.status(scope, STREAM, txn.txn_id).state == TxnState.COMMITTED
    assert_idle(c, scope)


# -- a commit racing an abort ---------------------------------------------------------------------


def test_commit_racing_abort_has_exactly_one_winner(controller: Controller, scope: str):
    c = controller
    committed: dict[str, dict[int, list[bytes]]] = {}
    aborted: dict[str, dict[int, list[bytes]]] = {}
    for round_ in range(10):
        txn = c.transactions.begin(scope, STREAM, lease_ms=60_000)
        written = write_txn(c, scope, txn, per_segment=2)
        barrier = threading.Barrier(2)

        def commit(txn: TxnInfo = txn, barrier: threading.Barrier = barrier) -> TxnInfo:
            barrier.wait(timeout=30)
            return c.transactions.commit(scope, STREAM, txn.txn_id)

        def abort(txn: TxnInfo = txn, barrier: threading.Barrier = barrier) -> TxnInfo:
            barrier.wait(timeout=30)
            return c.transactions.abort(scope, STREAM, txn.txn_id)

        racers = [commit, abort] if round_ % 2 else [abort, commit]  # alternate who starts first
        by_name = dict(zip([r.__name__ for r in racers], run_threads(racers)))
        outcome = by_name["commit"], by_name["abort"]
        unexpected = [r for r in outcome if isinstance(r, BaseException) and not isinstance(r, TxnFailed)]
        assert not unexpected, [getattr(r, "trace", r) for r in unexpected]
        winners = [r for r in outcome if not isinstance(r, BaseException)]
        assert len(winners) == 1, f"round {round_}: {outcome}"
        final = c.transactions.status(scope, STREAM, txn.txn_id).state
        if isinstance(outcome[1], TxnFailed):  # the commit won
            assert outcome[0].state == TxnState.COMMITTED == final, round_
            assert outcome[1].details["status"] in ("COMMITTING", "COMMITTED")
            committed[txn.txn_id] = written
        else:
            assert outcome[1].state == TxnState.ABORTED == final, round_
            assert outcome[0].details["status"] in ("ABORTING", "ABORTED")
            aborted[txn.txn_id] = written
            for sid in written:
                with pytest.raises(SegmentNotFound):
                    c.segments.info(txn_segment(scope, sid, txn.txn_id))
        # whatever the outcome, asking again answers the same
        if final == TxnState.COMMITTED:
            assert c.transactions.commit(scope, STREAM, txn.txn_id).state == TxnState.COMMITTED
        else:
            assert c.transactions.abort(scope, STREAM, txn.txn_id).state == TxnState.ABORTED
    for segment in c.streams.current_segments(scope, STREAM):
        sid = segment.segment_id
        events = segment_events(c.segments, segment_name(scope, STREAM, sid))
        order = runs(events, {t: w[sid] for t, w in committed.items()})
        assert sorted(order) == sorted(committed)
        assert len(events) == sum(len(w[sid]) for w in committed.values())  # nothing of the aborted ones
    assert_idle(c, scope)


def test_one_transaction_committed_by_several_callers_at_once(controller: Controller, scope: str):
    """The writer's commit, a retry of it, and the sweeper's drive of the stream's commits, at once."""
    c = controller
    all_written: dict[str, dict[int, list[bytes]]] = {}
    for round_ in range(3):
        txn = c.transactions.begin(scope, STREAM, lease_ms=60_000)
        all_written[txn.txn_id] = write_txn(c, scope, txn, per_segment=2)
        barrier = threading.Barrier(4)

        def commit(txn: TxnInfo = txn, barrier: threading.Barrier = barrier) -> TxnState:
            barrier.wait(timeout=30)
            return c.transactions.commit(scope, STREAM, txn.txn_id).state

        def sweep(barrier: threading.Barrier = barrier) -> TxnState:
            barrier.wait(timeout=30)
            for _ in range(5):
                c.transactions.drive_commits(scope, STREAM)
            return TxnState.COMMITTED

        results = run_threads([commit, commit, commit, sweep])
        failures = [getattr(r, "trace", r) for r in results if isinstance(r, BaseException)]
        assert not failures, (round_, failures)
        assert c.transactions.status(scope, STREAM, txn.txn_id).state == TxnState.COMMITTED
        assert TxnState.COMMITTED in results[:3]
    for segment in c.streams.current_segments(scope, STREAM):
        sid = segment.segment_id
        events = segment_events(c.segments, segment_name(scope, STREAM, sid))
        assert sorted(runs(events, {t: w[sid] for t, w in all_written.items()})) == sorted(all_written)
        assert len(events) == sum(len(w[sid]) for w in all_written.values())
    assert_idle(c, scope)


# -- a slow finisher ------------------------------------------------------------------------------


def test_a_slow_finisher_does_not_merge_its_transaction_twice(controller: Controller, scope: str, monkeypatch):
    """Deterministic interleaving of a real race between two finishers of one commit workflow.

    Caller A commits t1 and, inside the merge of t1's first segment, is delayed right after it read
    that transaction segment's metadata (a slow Lambda, a GC pause, a slow network). Meanwhile the
    writer's retry of the same commit (caller B) finishes the workflow, and then t2 commits. When A
    resumes, the finished t1 must not be appended to the segment again.
    """
    c = controller
    t1 = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    t2 = c.transactions.begin(scope, STREAM, lease_ms=60_000)
    w1 = write_txn(c, scope, t1, per_segment=2, tag="1:")
    w2 = write_txn(c, scope, t2, per_segment=2, tag="2:")
    first_source = txn_segment(scope, t1.segments[0].segment_id, t1.txn_id)
    paused, resume = threading.Event(), threading.Event()
    slow_thread: list[threading.Thread] = []
    original_meta = SegmentStore._meta

    def meta(self, segment: str):
        result = original_meta(self, segment)
        if segment == first_source and slow_thread and threading.current_thread() is slow_thread[0] \
                and not paused.is_set():
            paused.set()
            assert resume.wait(timeout=60)
        return result

    monkeypatch.setattr(SegmentStore, "_meta", meta)
    outcome: list = []

    def caller_a() -> None:
        try:
            outcome.append(c.transactions.commit(scope, STREAM, t1.txn_id).state)
        except BaseException as e:  # noqa: BLE001
            outcome.append(e)

    a = threading.Thread(target=caller_a, daemon=True)
    slow_thread.append(a)
    a.start()
    assert paused.wait(timeout=60), "caller A never reached the merge"
    conflicts: list = []
    assert commit_until_done(c, scope, t1.txn_id, conflicts).state == TxnState.COMMITTED  # caller B
    assert commit_until_done(c, scope, t2.txn_id, conflicts).state == TxnState.COMMITTED
    resume.set()
    a.join(timeout=60)
    assert not a.is_alive()
    monkeypatch.setattr(SegmentStore, "_meta", original_meta)

    for segment in t1.segments:
        sid = segment.segment_id
        events = segment_events(c.segments, segment_name(scope, STREAM, sid))
        assert runs(events, {"t1": w1[sid], "t2": w2[sid]}) == ["t1", "t2"], f"segment {sid}: {events}"
        assert len(events) == len(w1[sid]) + len(w2[sid]), f"segment {sid}: {events}"
    assert outcome and (outcome[0] == TxnState.COMMITTED or isinstance(outcome[0], WriteConflict)), outcome
    assert_idle(c, scope)
