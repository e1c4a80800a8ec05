"""Invariant 6 for transactions (and 5 across crashes): a commit or an abort interrupted before any of
its mutating requests is brought to the same end by the sweeper, or by the caller repeating it.

For k = 1, 2, ... a fresh stream and transaction are set up and the commit (or abort) runs with the
process "dying" right before its k-th mutating AWS request (crash.py); the loop ends at the first k
the request survives, so every gap between two steps has been crashed in. Recovery is
``Sweeper(grace_ms=0).sweep()`` or the same request again. The end state must be the one an
uninterrupted request reaches: the transaction COMMITTED (or ABORTED), the stream ACTIVE with no
workflow pending, and the transaction's events in the stream exactly once and contiguously (or not at
all, with its segments and their objects deleted). Meanwhile the outcome never changes: once a crash
left the transaction COMMITTING, an abort fails, and vice versa.

Commits are crashed in both modes: a merge (the transaction began in the current epoch) and a roll
(the stream scaled after it began, so the commit makes two new epochs). With *companions*, two more
transactions were already committing: one of the same older epoch (stamped into the same batch and
rolled with it) and one begun after the scale (committed in place by the next batch); and a seal is
crashed while it applies such batches itself.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from crash import CrashInjector, SimulatedCrash
from dataplane_model import segment_events

from controlplane.service import Controller
from controlplane.streams import now_ms
from controlplane.sweeper import Sweeper
from rillet.errors import SegmentNotFound, TxnFailed
from rillet.framing import frame
from rillet.keyspace import segment_epoch
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState, TxnInfo, TxnState
from rillet.names import segment_name, txn_segment_token
from rillet.ordering import SegmentOrder

STREAM = "s"


# -- set-up and reading -----------------------------------------------------------------------------


@contextmanager
def commits_left_waiting(c: Controller) -> Iterator[None]:
    """Commit requests are recorded (COMMITTING) but not applied, as when another workflow holds the
    stream; the instance attribute shadows the method until it is removed."""
    c.transactions.drive_commits = lambda scope, stream, until=None: None
    try:
        yield
    finally:
        del c.transactions.drive_commits


@pytest.fixture
def controller(isolated_deployment, request):
    """The control plane on tables of this test's own: the sweeps here take every pending workflow they
    find, so neither other tests' leftovers nor this test's (should it fail) reach another test."""
    name = "ftxn-" + hashlib.blake2b(request.node.name.encode(), digest_size=4).hexdigest()
    return Controller.for_deployment(isolated_deployment(name))



class Setup:
    """A stream with plain events and one open transaction with events (one of them large enough to
    be an S3 object) in its first two segments and none in its third (if it has one); with ``roll``
    the stream has scaled after the transaction began; with ``companions`` (and ``roll``) the commits
    of a transaction of the older epoch and of one begun after the scale are already requested."""

    def __init__(self, c: Controller, roll: bool, segments: int, companions: bool = False) -> None:
        self.c, self.roll = c, roll
        self.scope = "f" + uuid.uuid4().hex[:12]
        c.streams.create_scope(self.scope)
        c.streams.create_stream(self.scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments)))
        self.plain: list[bytes] = []
        for segment in c.streams.current_segments(self.scope, STREAM):
            payload = f"plain:{segment.segment_id}".encode()
            c.segments.append(segment_name(self.scope, STREAM, segment.segment_id), "p", 0, 1, frame(payload))
            self.plain.append(payload)
        self.txn: TxnInfo = c.transactions.begin(self.scope, STREAM, lease_ms=60_000)
        self.written: dict[int, list[bytes]] = {}
        for n, segment in enumerate(self.txn.segments):
            sid = segment.segment_id
            payloads = [f"txn:{sid}:0:".encode() + b"x" * 4000, f"txn:{sid}:1".encode()]
            if n == 2:
                payloads = []  # a transaction that wrote nothing to one of its segments
            for i, payload in enumerate(payloads):
                c.segments.append(self.txn_segment(sid), "tw", i, 1, frame(payload))
            self.written[sid] = payloads
        self.companions: dict[str, dict[int, list[bytes]]] = {}  # txn id -> segment id -> payloads
        older = c.transactions.begin(self.scope, STREAM, lease_ms=60_000) if companions else None
        self.scale_epoch = 0
        if roll:
            first = self.txn.segments[0]
            mid = (first.low + first.high) / 2
            self.scale_epoch = c.streams.scale_stream(self.scope, STREAM, [first.segment_id],
                                                      [(first.low, mid), (mid, first.high)])
        if companions:
            newer = c.transactions.begin(self.scope, STREAM, lease_ms=60_000)
            for txn in (older, newer):
                self.companions[txn.txn_id] = {}
                for segment in txn.segments:
                    payload = f"companion:{txn.txn_id}:{segment.segment_id}".encode()
                    c.segments.append(segment_name(self.scope, STREAM, txn_segment_token(segment.segment_id, txn.txn_id)),
                                      f"cw-{txn.txn_id}", 0, 1, frame(payload))
                    self.companions[txn.txn_id][segment.segment_id] = [payload]
            with commits_left_waiting(c):
                for txn in (older, newer):
                    assert c.transactions.commit(self.scope, STREAM, txn.txn_id).state == TxnState.COMMITTING

    def txn_segment(self, sid: int) -> str:
        return segment_name(self.scope, STREAM, txn_segment_token(sid, self.txn.txn_id))

    def state(self) -> TxnState:
        return self.c.transactions.status(self.scope, STREAM, self.txn.txn_id).state

    def pending(self) -> list:
        return [i for i in self.c.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == self.scope]

    def pending_but_companions(self) -> list:
        return [i for i in self.pending() if getattr(i, "txn_id", None) not in self.companions]

    def sweep(self) -> list:
        return [(o.workflow, o.outcome) for o in Sweeper(self.c.streams, grace_ms=0).sweep()
                if o.subject == f"{self.scope}/{STREAM}"]

    def read_events(self, sid: int) -> list[bytes]:
        return segment_events(self.c.segments, segment_name(self.scope, STREAM, sid))

    def read_stream(self) -> dict[int, list[bytes]]:
        """Every segment a reader reaches from the head, in a reader's order, with its events."""
        head = [p.segment for p in self.c.streams.head(self.scope, STREAM)]
        order, queue, out = SegmentOrder(head), list(head), {}
        while queue:
            segment = queue.pop(0)
            assert segment.segment_id not in out
            out[segment.segment_id] = self.read_events(segment.segment_id)
            if self.c.segments.info(segment_name(self.scope, STREAM, segment.segment_id)).sealed:
                successors = self.c.streams.successors(self.scope, STREAM, segment.segment_id)
                queue += order.complete(segment.segment_id, [(s.segment, s.predecessors) for s in successors])
        assert set(out) == {r.segment_id for r in self.c.store.list_segments(self.scope, STREAM)}
        return out

    def assert_stream_idle(self, epoch: int, state: StreamState = StreamState.ACTIVE) -> None:
        record = self.c.store.get_stream(self.scope, STREAM)
        assert record.state == state.value, record.state
        assert record.workflow is None and record.pending is None
        assert record.current_epoch == epoch, (record.current_epoch, epoch)
        assert self.pending() == []

    def assert_committed(self, state: StreamState = StreamState.ACTIVE) -> None:
        c = self.c
        assert self.state() == TxnState.COMMITTED
        for txn_id in self.companions:
            assert c.transactions.status(self.scope, STREAM, txn_id).state == TxnState.COMMITTED
        self.assert_stream_idle(self.scale_epoch + 2 if self.roll else 0, state)
        stream = self.read_stream()
        everything = [e for events in stream.values() for e in events]
        companions = [e for written in self.companions.values() for es in written.values() for e in es]
        assert sorted(everything) == sorted(self.plain + [e for es in self.written.values() for e in es]
                                            + companions), "events lost or duplicated"
        for (txn_id, written), epoch in zip(self.companions.items(), (self.scale_epoch + 1, self.scale_epoch + 2)):
            for payloads in written.values():  # the older one rolled with the transaction, the newer one in place
                (holder,) = [s for s, events in stream.items() if payloads[0] in events]
                assert segment_epoch(holder) == epoch, (txn_id, holder)
        for sid, payloads in self.written.items():  # each segment's share is one contiguous run
            if not payloads:
                continue
            (holder,) = [s for s, events in stream.items() if payloads[0] in events]
            events = stream[holder]
            start = events.index(payloads[0])
            assert events[start:start + len(payloads)] == payloads
            assert c.segments.info(self.txn_segment(sid)).sealed
        if self.roll:
            assert c.store.get_epoch(self.scope, STREAM, self.scale_epoch + 1).reference_epoch == 0
            assert c.store.get_epoch(self.scope, STREAM, self.scale_epoch + 2).reference_epoch == self.scale_epoch
            rolled = c.store.get_epoch(self.scope, STREAM, self.scale_epoch + 1).segments
            assert [(lo, hi) for _, lo, hi in rolled] == [(s.low, s.high) for s in self.txn.segments]
            for sid, _, _ in rolled:
                assert c.segments.info(segment_name(self.scope, STREAM, int(sid))).sealed
                (record,) = c.store.get_segments(self.scope, STREAM, [int(sid)])
                assert record.sealed_epoch == self.scale_epoch + 2 and record.sealed_size is not None
            for sid, _, _ in c.store.get_epoch(self.scope, STREAM, self.scale_epoch).segments:
                (record,) = c.store.get_segments(self.scope, STREAM, [int(sid)])
                assert record.sealed_epoch == self.scale_epoch + 1 and record.successors
        else:
            for sid, payloads in self.written.items():
                assert self.read_events(sid) == [f"plain:{sid}".encode(), *payloads]

    def assert_aborted(self) -> None:
        c = self.c
        assert self.state() == TxnState.ABORTED
        self.assert_stream_idle(self.scale_epoch)
        everything = [e for events in self.read_stream().values() for e in events]
        assert sorted(everything) == sorted(self.plain)
        for sid in self.written:
            with pytest.raises(SegmentNotFound):
                c.segments.info(self.txn_segment(sid))
            prefix = f"segments/{self.txn_segment(sid)}/"
            listed = c.deployment.s3.list_objects_v2(Bucket=c.deployment.bucket, Prefix=prefix)
            assert listed.get("KeyCount", 0) == 0, f"objects of {prefix} left behind"


# -- the crash loops --------------------------------------------------------------------------------


def crash_loop(controller: Controller, crash: CrashInjector, request: str, roll: bool, recovery,
               companions: bool = False) -> list[str]:
    """Run ``request`` ("commit" or "abort") crashed before its k-th mutating call for k = 1, 2, ...;
    ``recovery(k)`` says "sweeper" or "retry". Returns the operations crashed before."""
    crash_points: list[str] = []
    k = 1
    while True:
        s = Setup(controller, roll, segments=1 if roll else 3, companions=companions)
        call = getattr(controller.transactions, request)
        crash.arm(k)
        try:
            info = call(s.scope, STREAM, s.txn.txn_id)
        except SimulatedCrash as e:
            assert e.k == k
            crash_points.append(e.operation)
        else:
            assert crash.crashed is None and len(crash.mutations) == k - 1
            assert info.state == (TxnState.COMMITTED if request == "commit" else TxnState.ABORTED)
            (s.assert_committed if request == "commit" else s.assert_aborted)()
            break
        finally:
            crash.disarm()

        how = recovery(k)
        where = f"{request} crashed before mutating request #{k} ({crash_points[-1]}), recovery by {how}"
        state = s.state()
        # the outcome is decided by the first step; a crash never changes it, and never half-decides it
        if k == 1:
            assert state == TxnState.OPEN and s.pending_but_companions() == [], where
        elif request == "commit":
            assert state in (TxnState.COMMITTING, TxnState.COMMITTED), where
            with pytest.raises(TxnFailed):
                controller.transactions.abort(s.scope, STREAM, s.txn.txn_id)
        else:
            assert state in (TxnState.ABORTING, TxnState.ABORTED), where
            with pytest.raises(TxnFailed):
                controller.transactions.commit(s.scope, STREAM, s.txn.txn_id)
        if how == "sweeper":
            try:
                outcomes = s.sweep()
            except Exception as e:
                raise AssertionError(f"{where}: the sweep itself failed: {e!r}") from e
            assert all(outcome == "completed" for _, outcome in outcomes), (where, outcomes)
            if k == 1:
                # died before the request was recorded: nothing to sweep; the caller just asks again
                assert outcomes == [], where
                call(s.scope, STREAM, s.txn.txn_id)
        else:
            assert call(s.scope, STREAM, s.txn.txn_id).state in (TxnState.COMMITTED, TxnState.ABORTED), where
        try:
            (s.assert_committed if request == "commit" else s.assert_aborted)()
            # repeating the request answers the same outcome; the sweeper finds nothing more to do
            assert call(s.scope, STREAM, s.txn.txn_id).state == (
                TxnState.COMMITTED if request == "commit" else TxnState.ABORTED)
            assert s.sweep() == []
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from e
        k += 1
    assert k > 3, crash_points
    # the first step marks the transaction (a commit together with a check that the stream is not sealing)
    assert crash_points[0] == ("TransactWriteItems" if request == "commit" else "UpdateItem")
    return crash_points


@pytest.mark.parametrize("recovery", ["sweeper", "retry"])
def test_merging_commit_crashed_before_every_step_is_recovered(controller: Controller, crash: CrashInjector,
                                                               recovery: str):
    points = crash_loop(controller, crash, "commit", roll=False, recovery=lambda k: recovery)
    assert "PutItem" in points  # the merges' index entries


def test_rolling_commit_crashed_before_every_step_is_recovered(controller: Controller, crash: CrashInjector):
    """Recovery alternates (a roll has about twice as many steps as a merge): a retry of the commit
    after a crash before an odd-numbered request, the sweeper after an even-numbered one."""
    points = crash_loop(controller, crash, "commit", roll=True, recovery=lambda k: "retry" if k % 2 else "sweeper")
    assert len(points) > 15, points


def test_abort_crashed_before_every_step_is_recovered(controller: Controller, crash: CrashInjector):
    """Recovery alternates: the sweeper after a crash before an odd-numbered request, a retry of the
    abort after an even-numbered one."""
    points = crash_loop(controller, crash, "abort", roll=False, recovery=lambda k: "sweeper" if k % 2 else "retry")
    assert "DeleteItem" in points


def test_rolling_commit_with_companions_crashed_before_every_step_is_recovered(controller: Controller,
                                                                              crash: CrashInjector):
    """The commit drives two batches: the older epoch's two transactions stamped and rolled together,
    then the newer one merged in place. Recovery alternates as above, a retry first (the sweeper would
    commit the companions on their own if the request itself was never recorded)."""
    points = crash_loop(controller, crash, "commit", roll=True, recovery=lambda k: "retry" if k % 2 else "sweeper",
                        companions=True)
    assert points.count("TransactWriteItems") >= 3  # the request and the two batches' stamps
    assert len(points) > 25, points


def test_seal_applying_rolling_batches_crashed_before_every_step_is_recovered(controller: Controller,
                                                                             crash: CrashInjector):
    """A seal that begins with commits requested applies them itself, batch by batch, each recorded
    in the seal's workflow (here the commits are left waiting during the crashed call, as when they
    are requested after the seal's own drive of the commits and before it begins). Crashed before
    every step and recovered by a retry of the seal or the sweeper, in turn, it ends SEALED with every
    requested commit applied once: a seal never aborts an acknowledged commit request."""
    points: list[str] = []
    k = 1
    while True:
        s = Setup(controller, roll=True, segments=1, companions=True)
        with commits_left_waiting(controller):
            assert controller.transactions.commit(s.scope, STREAM, s.txn.txn_id).state == TxnState.COMMITTING
            crash.arm(k)
            try:
                controller.streams.seal_stream(s.scope, STREAM)
            except SimulatedCrash as e:
                points.append(e.operation)
            else:
                assert crash.crashed is None and len(crash.mutations) == k - 1
                s.assert_committed(StreamState.SEALED)
                break
            finally:
                crash.disarm()
        how = "retry" if k % 2 else "sweeper"
        where = f"seal crashed before mutating request #{k} ({points[-1]}), recovery by {how}"
        assert s.state() in (TxnState.COMMITTING, TxnState.COMMITTED), where
        if how == "sweeper":
            outcomes = s.sweep()
            assert outcomes and all(outcome == "completed" for _, outcome in outcomes), (where, outcomes)
        else:
            controller.streams.seal_stream(s.scope, STREAM)
        try:
            s.assert_committed(StreamState.SEALED)
            assert s.sweep() == []
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from e
        k += 1
    assert points[0] == "UpdateItem" and "TransactWriteItems" in points  # SEALING first; the stamps
    assert len(points) > 25, points
