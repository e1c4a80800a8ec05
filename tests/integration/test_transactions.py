"""Transactions on moto with an in-process controller (invariant 5): begin, invisibility, commit by
merge, outcomes that never change, ping and its errors, and the interplay with sealing.

Events are written straight into the data plane (``SegmentStore.append``) as framed payloads naming
their origin, so every check reads the bytes the readers would get: the parent segments' frames,
parsed with ``controller.segments.read``.
"""

from __future__ import annotations

import time

import pytest
from dataplane_model import inject_crash, segment_events

from controlplane.models import TxnRecord, workflow_shard
from controlplane.service import Controller
from controlplane.streams import now_ms
from controlplane.sweeper import Sweeper
from controlplane.transactions import TxnSettings
from rillet.errors import (
    IllegalState,
    InvalidArgument,
    LeaseTooLarge,
    SegmentNotFound,
    SegmentSealed,
    TxnFailed,
    TxnNotFound,
)
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState, TxnInfo, TxnState
from rillet.names import segment_name, txn_segment_token

STREAM = "s"
SEGMENTS = 3


# -- helpers --------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """See tests/conftest.py: every test here creates a stream."""


@pytest.fixture
def scope(controller: Controller, unique: str) -> str:
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(SEGMENTS)))
    return unique


def parent_events(c: Controller, scope: str, sid: int) -> list[bytes]:
    return segment_events(c.segments, segment_name(scope, STREAM, sid))


def txn_segment(scope: str, sid: int, txn_id: str) -> str:
    return segment_name(scope, STREAM, txn_segment_token(sid, txn_id))


def write_txn(c: Controller, scope: str, txn: TxnInfo, per_segment: int, size: int = 0) -> dict[int, list[bytes]]:
    """Append ``per_segment`` events to each of the transaction's segments (one of them ``size`` bytes
    of padding, so a large one lands in an S3 object); returns the payloads per parent segment."""
    written: dict[int, list[bytes]] = {}
    for segment in txn.segments:
        name = txn_segment(scope, segment.segment_id, txn.txn_id)
        payloads = [f"{txn.txn_id}:{segment.segment_id}:{i}:".encode() + (b"x" * size if i == 0 else b"")
                    for i in range(per_segment)]
        for i, payload in enumerate(payloads):
            c.segments.append(name, "txn-writer", i, 1, frame(payload))
        written[segment.segment_id] = payloads
    return written


def write_plain(c: Controller, scope: str, tag: str, first: int = 0) -> dict[int, list[bytes]]:
    """One plain (non-transactional) event in each current segment, writer ``plain``."""
    written = {}
    for segment in c.streams.current_segments(scope, STREAM):
        payload = f"plain:{tag}:{segment.segment_id}".encode()
        c.segments.append(segment_name(scope, STREAM, segment.segment_id), "plain", first, 1, frame(payload))
        written[segment.segment_id] = [payload]
    return written


def assert_contiguous(events: list[bytes], expected: list[bytes], what: str) -> int:
    """``expected`` occurs in ``events`` exactly once, as one contiguous run in order; returns its start."""
    positions = [i for i, e in enumerate(events) if e in set(expected)]
    assert len(positions) == len(expected), f"{what}: {len(positions)} of {len(expected)} events present"
    start = positions[0]
    assert events[start:start + len(expected)] == expected, f"{what}: not one contiguous run in write order"
    return start


def stream_bytes(c: Controller, scope: str) -> int:
    return sum(s.end_offset - s.start_offset for s in c.streams.slices(scope, STREAM))


# -- begin and invisibility ----------------------------------------------------------------------


def test_begin_creates_invisible_transaction_segments(controller: Controller, scope: str):
    c = controller
    plain = write_plain(c, scope, "before")
    before = stream_bytes(c, scope)
    txn = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    assert txn.state == TxnState.OPEN and txn.epoch == 0
    assert [s.segment_id for s in txn.segments] == [s.segment_id for s in c.streams.current_segments(scope, STREAM)]
    assert txn.lease_expiry_ms - now_ms() <= 10_000
    for segment in txn.segments:  # the data plane has one empty, open segment per parent
        info = c.segments.info(txn_segment(scope, segment.segment_id, txn.txn_id))
        assert (info.length, info.sealed) == (0, False)

    written = write_txn(c, scope, txn, per_segment=3, size=5000)
    for sid, payloads in written.items():
        info = c.segments.info(txn_segment(scope, sid, txn.txn_id))
        assert info.length == sum(len(frame(p)) for p in payloads)
        assert parent_events(c, scope, sid) == plain[sid]  # the parents hold only the plain events
    assert stream_bytes(c, scope) == before  # slices (what batch readers read) do not include them
    # readers find segments through the stream's segment records: the transaction's are not among them
    assert {r.segment_id for r in c.store.list_segments(scope, STREAM)} == {s.segment_id for s in txn.segments}
    assert c.streams.stream_info(scope, STREAM).state == StreamState.ACTIVE
    assert c.transactions.status(scope, STREAM, txn.txn_id).state == TxnState.OPEN


def test_begin_lease_bounds_and_unknown_transactions(controller: Controller, scope: str):
    c = controller
    settings = c.transactions.settings
    with pytest.raises(LeaseTooLarge) as e:
        c.transactions.begin(scope, STREAM, lease_ms=settings.max_lease_ms + 1)
    assert e.value.code == "LeaseTooLarge"
    with pytest.raises(InvalidArgument) as e:
        c.transactions.begin(scope, STREAM, lease_ms=settings.min_lease_ms - 1)
    assert e.value.code == "InvalidArgument"
    default = c.transactions.begin(scope, STREAM)
    assert default.lease_expiry_ms - now_ms() <= settings.default_lease_ms
    assert default.lease_expiry_ms - now_ms() > settings.default_lease_ms - 10_000
    for call in (c.transactions.status, c.transactions.commit, c.transactions.abort):
        with pytest.raises(TxnNotFound):
            call(scope, STREAM, "0" * 32)


# -- commit -----------------------------------------------------------------------------------------


def test_commit_merges_each_transaction_contiguously(controller: Controller, scope: str):
    c = controller
    write_plain(c, scope, "a", 0)
    t1 = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    t2 = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    w1 = write_txn(c, scope, t1, per_segment=4, size=5000)
    write_plain(c, scope, "b", 1)  # plain appends keep going while the transactions are open
    w2 = write_txn(c, scope, t2, per_segment=3)
    lengths = {sid: c.segments.info(segment_name(scope, STREAM, sid)).length for sid in w1}

    assert c.transactions.commit(scope, STREAM, t2.txn_id).state == TxnState.COMMITTED
    write_plain(c, scope, "c", 2)
    assert c.transactions.commit(scope, STREAM, t1.txn_id).state == TxnState.COMMITTED

    for sid in w1:
        events = parent_events(c, scope, sid)
        start2 = assert_contiguous(events, w2[sid], f"t2 in segment {sid}")
        start1 = assert_contiguous(events, w1[sid], f"t1 in segment {sid}")
        # commit order: t2 lands right after what the segment held at its commit, then plain c, then t1
        assert events[:2] == [f"plain:a:{sid}".encode(), f"plain:b:{sid}".encode()]
        assert start2 == 2 and events[start2 + len(w2[sid])] == f"plain:c:{sid}".encode()
        assert start1 == start2 + len(w2[sid]) + 1 and len(events) == start1 + len(w1[sid])
        # the bytes below the length at commit never changed
        assert c.segments.read(segment_name(scope, STREAM, sid), 0).data[:lengths[sid]] == b"".join(
            frame(e) for e in events[:2])
        for txn in (t1, t2):  # the transaction segments are sealed, and stay as merged data
            assert c.segments.info(txn_segment(scope, sid, txn.txn_id)).sealed
    record = c.store.get_stream(scope, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.workflow is None and record.current_epoch == 0
    expected = sum(len(frame(p)) for w in (w1, w2) for ps in w.values() for p in ps)
    assert stream_bytes(c, scope) == expected + 3 * SEGMENTS * len(frame(b"plain:a:0"))


def test_commit_of_an_empty_transaction_and_of_one_that_wrote_to_some_segments(controller: Controller, scope: str):
    c = controller
    empty = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    partial = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    only = partial.segments[1].segment_id
    name = txn_segment(scope, only, partial.txn_id)
    c.segments.append(name, "w", 0, 1, frame(b"only-one"))
    assert c.transactions.commit(scope, STREAM, empty.txn_id).state == TxnState.COMMITTED
    assert c.transactions.commit(scope, STREAM, partial.txn_id).state == TxnState.COMMITTED
    for segment in partial.segments:
        expected = [b"only-one"] if segment.segment_id == only else []
        assert parent_events(c, scope, segment.segment_id) == expected


def test_outcomes_never_change(controller: Controller, scope: str):
    c = controller
    committed = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    aborted = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    wc = write_txn(c, scope, committed, per_segment=2)
    wa = write_txn(c, scope, aborted, per_segment=2, size=5000)

    assert c.transactions.commit(scope, STREAM, committed.txn_id).state == TxnState.COMMITTED
    assert c.transactions.commit(scope, STREAM, committed.txn_id).state == TxnState.COMMITTED  # idempotent
    with pytest.raises(TxnFailed) as e:
        c.transactions.abort(scope, STREAM, committed.txn_id)
    assert e.value.code == "TxnFailed" and e.value.details["status"] == "COMMITTED"

    assert c.transactions.abort(scope, STREAM, aborted.txn_id).state == TxnState.ABORTED
    assert c.transactions.abort(scope, STREAM, aborted.txn_id).state == TxnState.ABORTED  # idempotent
    with pytest.raises(TxnFailed) as e:
        c.transactions.commit(scope, STREAM, aborted.txn_id)
    assert e.value.details["status"] == "ABORTED"

    # the aborted transaction's segments are gone; appends to them fail
    for segment in aborted.segments:
        name = txn_segment(scope, segment.segment_id, aborted.txn_id)
        with pytest.raises(SegmentNotFound):
            c.segments.info(name)
        with pytest.raises(SegmentNotFound):
            c.segments.append(name, "txn-writer", 9, 1, frame(b"late"))
    # a late append to a committed transaction's segment can never reach the stream
    for segment in committed.segments:
        with pytest.raises(SegmentSealed):
            c.segments.append(txn_segment(scope, segment.segment_id, committed.txn_id), "txn-writer", 9, 1,
                              frame(b"late"))
    for sid in wc:
        assert parent_events(c, scope, sid) == wc[sid]
        assert not set(wa[sid]) & set(parent_events(c, scope, sid))
    assert c.transactions.status(scope, STREAM, committed.txn_id).state == TxnState.COMMITTED
    assert c.transactions.status(scope, STREAM, aborted.txn_id).state == TxnState.ABORTED
    # neither is still waiting for the sweeper or the timeout job
    ids = {getattr(i, "txn_id", None) for i in c.store.pending_workflows(now_ms())}
    assert not ids & {committed.txn_id, aborted.txn_id}
    assert not {t.txn_id for t in c.transactions.expired(limit=1000)} & {committed.txn_id, aborted.txn_id}


# -- ping -------------------------------------------------------------------------------------------


# A lease of 1,000 ms fits in the maximum execution time for 3 s after a begin (2.5 s was too little once
# in a loaded full run); the largest lease never fits.
SMALL = TxnSettings(min_lease_ms=100, max_lease_ms=5_000, default_lease_ms=1_000, max_execution_ms=4_000)


@pytest.fixture
def small(isolated_deployment, unique) -> Controller:
    """A controller with short leases and a short maximum execution time, on tables of its own (the
    timeout job here aborts every expired transaction it finds); its stream is ``unique``/``s``."""
    c = Controller.for_deployment(isolated_deployment("txn-timeouts"), txn_settings=SMALL)
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    return c


def test_ping_renews_the_lease_within_bounds(small: Controller, unique: str):
    txns = small.transactions
    txn = txns.begin(unique, STREAM, lease_ms=200)
    assert txn.max_expiry_ms - txn.lease_expiry_ms >= SMALL.max_execution_ms - 200 - 50
    renewed = txns.ping(unique, STREAM, txn.txn_id, 1_000)
    assert renewed.state == TxnState.OPEN and renewed.lease_expiry_ms > txn.lease_expiry_ms
    with pytest.raises(LeaseTooLarge) as e:
        txns.ping(unique, STREAM, txn.txn_id, SMALL.max_lease_ms + 1)
    assert e.value.code == "LeaseTooLarge" and e.value.details["max_lease_ms"] == SMALL.max_lease_ms
    with pytest.raises(InvalidArgument) as e:
        txns.ping(unique, STREAM, txn.txn_id, SMALL.min_lease_ms - 1)
    assert e.value.code == "InvalidArgument"
    # a lease that would end past the maximum execution time is refused, and the lease stays as it was
    # (tests/integration/test_transactions_max_execution.py has the rest of that rule)
    with pytest.raises(TxnFailed) as e:
        txns.ping(unique, STREAM, txn.txn_id, SMALL.max_lease_ms)
    assert e.value.details["status"] == "MAX_EXECUTION_TIME_EXCEEDED"
    assert txns.status(unique, STREAM, txn.txn_id).lease_expiry_ms == renewed.lease_expiry_ms
    # a lease that ran out makes the transaction expired (for the timeout job) until pinged again
    short = txns.begin(unique, STREAM, lease_ms=100)
    time.sleep(0.25)
    assert short.txn_id in {t.txn_id for t in txns.expired(limit=1000)}
    txns.ping(unique, STREAM, short.txn_id, 1_000)
    assert short.txn_id not in {t.txn_id for t in txns.expired(limit=1000)}


def test_ping_after_max_execution_time_fails(small: Controller, unique: str):
    txns = small.transactions
    txn = txns.begin(unique, STREAM, lease_ms=SMALL.max_lease_ms)
    # the lease asked for is longer than the bound on the maximum execution time: it is cut to it
    assert txn.lease_expiry_ms == txn.max_expiry_ms
    time.sleep(max(0.0, (txn.max_expiry_ms - now_ms()) / 1000) + 0.05)
    with pytest.raises(TxnFailed) as e:
        txns.ping(unique, STREAM, txn.txn_id, 1_000)
    assert e.value.code == "TxnFailed" and e.value.details["status"] == "MAX_EXECUTION_TIME_EXCEEDED"
    # the timeout job finds it and aborts it
    assert txn.txn_id in {t.txn_id for t in txns.expired(limit=1000)}
    assert (f"{unique}/{STREAM}", txn.txn_id) in txns.abort_expired(limit=1000)
    assert txns.status(unique, STREAM, txn.txn_id).state == TxnState.ABORTED


def test_ping_on_closed_transactions_fails(small: Controller, unique: str):
    txns = small.transactions
    committed = txns.begin(unique, STREAM, lease_ms=1_000)
    aborted = txns.begin(unique, STREAM, lease_ms=1_000)
    txns.commit(unique, STREAM, committed.txn_id)
    txns.abort(unique, STREAM, aborted.txn_id)
    for txn, status in ((committed, "COMMITTED"), (aborted, "ABORTED")):
        with pytest.raises(TxnFailed) as e:
            txns.ping(unique, STREAM, txn.txn_id, 1_000)
        assert e.value.details["status"] == status
        with pytest.raises(TxnFailed):  # closed comes first, whatever the lease asked for
            txns.ping(unique, STREAM, txn.txn_id, SMALL.max_lease_ms * 10)


# -- sealing --------------------------------------------------------------------------------------


def test_sealing_aborts_open_transactions_and_commits_requested_ones(controller: Controller, scope: str):
    c = controller
    open_txn = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    committed = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    w_open = write_txn(c, scope, open_txn, per_segment=2)
    w_committed = write_txn(c, scope, committed, per_segment=2)
    assert c.transactions.commit(scope, STREAM, committed.txn_id).state == TxnState.COMMITTED

    c.streams.seal_stream(scope, STREAM)
    assert c.streams.stream_info(scope, STREAM).state == StreamState.SEALED
    assert c.transactions.status(scope, STREAM, open_txn.txn_id).state == TxnState.ABORTED
    assert c.transactions.status(scope, STREAM, committed.txn_id).state == TxnState.COMMITTED
    for segment in open_txn.segments:
        with pytest.raises(SegmentNotFound):
            c.segments.info(txn_segment(scope, segment.segment_id, open_txn.txn_id))
    for sid in w_open:
        events = parent_events(c, scope, sid)
        assert events == w_committed[sid] and not set(w_open[sid]) & set(events)
    with pytest.raises(TxnFailed) as e:
        c.transactions.commit(scope, STREAM, open_txn.txn_id)
    assert e.value.details["status"] == "ABORTED"
    with pytest.raises(IllegalState) as e:
        c.transactions.begin(scope, STREAM, lease_ms=10_000)
    assert e.value.code == "IllegalState"
    assert not [i for i in c.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == scope]


def test_commit_requested_while_the_stream_is_being_sealed_does_not_hang(controller: Controller, scope: str,
                                                                          monkeypatch):
    """A commit request that lands between the seal's last drive of commits and its SEALING step (a
    real race between two callers, made deterministic here) must still end: the transaction is
    either committed before the seal or its commit fails; it never stays COMMITTING for ever."""
    c = controller
    txn = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    written = write_txn(c, scope, txn, per_segment=2)
    original = c.transactions.drive_commits
    raced = []

    def drive_then_race(s: str, st: str) -> None:
        original(s, st)
        if not raced:  # a writer's commit request marks its transaction COMMITTING right now
            raced.append(True)
            record = c.transactions._get(scope, STREAM, txn.txn_id)  # the request's own step, marker and all
            c.transactions._to_committing(record, [
                TxnRecord.state.set(TxnState.COMMITTING.value), TxnRecord.commit_ms.set(now_ms()),
                TxnRecord.deadline_shard.remove(), TxnRecord.deadline_ms.remove(),
                TxnRecord.pending.set(workflow_shard(record.pk, record.sk)), TxnRecord.pending_since.set(now_ms())])

    monkeypatch.setattr(c.transactions, "drive_commits", drive_then_race)
    c.streams.seal_stream(scope, STREAM)
    monkeypatch.setattr(c.transactions, "drive_commits", original)
    assert raced
    # the writer repeats its commit request, and the sweeper runs, as they would
    try:
        c.transactions.commit(scope, STREAM, txn.txn_id)
    except TxnFailed:
        pass
    sweeper = Sweeper(c.streams, grace_ms=0)  # what a sweep does, for this stream's pending items only
    for item in c.store.pending_workflows(now_ms()):
        if getattr(item, "scope", None) == scope:
            sweeper._finish(item)
    state = c.transactions.status(scope, STREAM, txn.txn_id).state
    assert state in (TxnState.COMMITTED, TxnState.ABORTED), f"transaction left {state.value} on a sealed stream"
    for sid, payloads in written.items():
        events = parent_events(c, scope, sid)
        assert events == (payloads if state == TxnState.COMMITTED else [])


def test_a_batch_executed_again_aborts_only_its_own_open_transactions(controller: Controller, scope: str):
    """A streaming writer's batch commits once; its re-execution's new transactions are aborted, and
    ids that are not open transactions (however many) cost no abort each."""
    c = controller
    first = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    write_txn(c, scope, first, per_segment=1)
    assert c.transactions.commit_batch(scope, STREAM, "query", 0, [first.txn_id]) is True
    again = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    bystander = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    ids = [again.txn_id, first.txn_id] + [f"not-open-{i}" for i in range(4000)]
    with inject_crash(None) as calls:
        assert c.transactions.commit_batch(scope, STREAM, "query", 0, ids) is False
    assert len(calls.all_calls) < 30
    assert c.transactions.status(scope, STREAM, again.txn_id).state == TxnState.ABORTED
    assert c.transactions.status(scope, STREAM, first.txn_id).state == TxnState.COMMITTED
    assert c.transactions.status(scope, STREAM, bystander.txn_id).state == TxnState.OPEN


def test_a_batch_older_than_the_sinks_last_is_refused_not_dropped(controller: Controller, scope: str):
    """Two queries under one sink id (or a restart from a fresh checkpoint): the older batch is an error
    naming the cause, and its transactions are aborted, never silently left uncommitted."""
    c = controller
    for batch_id in (0, 1):
        txn = c.transactions.begin(scope, STREAM, lease_ms=10_000)
        write_txn(c, scope, txn, per_segment=1)
        assert c.transactions.commit_batch(scope, STREAM, "shared", batch_id, [txn.txn_id]) is True
    other = c.transactions.begin(scope, STREAM, lease_ms=10_000)
    write_txn(c, scope, other, per_segment=1)
    with pytest.raises(IllegalState, match="has committed batch 1, so batch 0 is not a re-execution"):
        c.transactions.commit_batch(scope, STREAM, "shared", 0, [other.txn_id])
    assert c.transactions.status(scope, STREAM, other.txn_id).state == TxnState.ABORTED
