"""Transactions: begin, ping, commit, abort, and the serial commit of a stream's transactions.

A transaction gets one segment per segment of the epoch it began in (``<parent id>.<txn id>``);
its events are appended there and stay invisible to readers until commit.

Outcomes never change once acknowledged: OPEN moves to COMMITTING or ABORTING by a write
conditional on the version read, so a commit racing an abort (or the timeout job) has exactly one
winner, and COMMITTING/COMMITTED and ABORTING/ABORTED never turn into each other.

Commits on one stream are serial and in the order they were requested. A commit marks its
transaction COMMITTING, then drives the stream's commit workflow: the stream enters COMMITTING_TXN
(the barrier that also excludes a concurrent scale) with a *plan* of every committing transaction,
each transaction is applied, and the stream returns to ACTIVE. Applying a transaction:

* if it began in the current epoch, each transaction segment is merged into its parent (one index
  entry referring to it: no copy, contiguous, idempotent);
* otherwise the stream scaled meanwhile and the transaction *rolls* (seed 003): a new epoch is made
  of fresh segments holding the transaction segments' bytes (same key ranges as when it began),
  sealed at once, and then another epoch duplicates the current key ranges; the current segments
  are sealed with the first new epoch as successors. Per-key order holds because readers finish the
  current segments before the transaction's, and those before the duplicates.

The plan is written with the COMMITTING_TXN state, new segment ids included, so a crash at any
step leaves a workflow that the sweeper (or the next commit) finishes by repeating idempotent steps.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from controlplane.models import (
    PENDING,
    SegmentRecord,
    SinkRecord,
    StreamRecord,
    TxnRecord,
    scope_pk,
    stream_pk,
    txn_sk,
)
from controlplane.store import conditional, failed_condition
from controlplane.streams import StreamTasks, _range
from rillet.errors import (
    IllegalState,
    InvalidArgument,
    LeaseTooLarge,
    SegmentNotFound,
    TxnFailed,
    TxnNotFound,
    WriteConflict,
)
from rillet.keyspace import segment_id
from rillet.models import SegmentRange, StreamState, TxnInfo, TxnState
from rillet.names import segment_name, txn_segment_token

OPEN_SHARD = "open"
_COMMIT_STATES = [s.value for s in StreamState if s not in (StreamState.SEALING, StreamState.SEALED)]
_BEGIN_STATES = {StreamState.ACTIVE, StreamState.UPDATING, StreamState.SCALING, StreamState.COMMITTING_TXN,
                 StreamState.TRUNCATING}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class TxnSettings:
    min_lease_ms: int = 1_000
    max_lease_ms: int = 120_000
    default_lease_ms: int = 30_000
    max_execution_ms: int = 24 * 3_600_000
    keep_finished_ms: int = 24 * 3_600_000  # how long a finished transaction's status stays queryable

    @classmethod
    def from_env(cls) -> TxnSettings:
        env = os.environ
        return cls(**{name: int(env[f"RILLET_TXN_{name.upper()}"])
                      for name in cls.__dataclass_fields__ if f"RILLET_TXN_{name.upper()}" in env})


def info(record: TxnRecord) -> TxnInfo:
    return TxnInfo(scope=record.scope, stream=record.stream, txn_id=record.txn_id, state=record.state,
                   epoch=record.epoch, segments=[SegmentRange(segment_id=int(s), low=lo, high=hi)
                                                 for s, lo, hi in record.segments],
                   lease_expiry_ms=record.lease_expiry_ms, max_expiry_ms=record.max_expiry_ms)


class TransactionTasks:
    def __init__(self, streams: StreamTasks, settings: TxnSettings | None = None) -> None:
        self.streams = streams
        self.store = streams.store
        self.segments = streams.segments
        self.settings = settings or TxnSettings()
        self.watermarks = None  # controlplane.watermarks.WatermarkTasks, wired by the Controller

    # -- client operations -----------------------------------------------------------------------

    def begin(self, scope: str, stream: str, lease_ms: int | None = None) -> TxnInfo:
        record = self.store.get_stream(scope, stream)
        if StreamState(record.state) not in _BEGIN_STATES or record.workflow and record.workflow.get("name") == "delete":
            raise IllegalState(f"stream {scope}/{stream} is {record.state}: no transaction can begin",
                               state=record.state)
        lease = self._check_lease(lease_ms or self.settings.default_lease_ms)
        now = now_ms()
        epoch = self.store.get_epoch(scope, stream, record.current_epoch)
        # As for a ping, the lease never reaches past the maximum execution time: the timeout job
        # finds open transactions by this deadline.
        expiry = now + min(lease, self.settings.max_execution_ms)
        txn = TxnRecord(stream_pk(scope, stream), "", scope=scope, stream=stream, txn_id=uuid.uuid4().hex,
                        state=TxnState.OPEN.value, epoch=record.current_epoch, segments=epoch.segments,
                        created_ms=now, lease_expiry_ms=expiry, max_expiry_ms=now + self.settings.max_execution_ms,
                        deadline_shard=OPEN_SHARD, deadline_ms=expiry)
        txn.sk = txn_sk(txn.txn_id)
        txn.save(condition=TxnRecord.pk.does_not_exist())
        for sid, _, _ in txn.segments:  # a crash here leaves an open transaction that times out
            self.segments.create(segment_name(scope, stream, txn_segment_token(int(sid), txn.txn_id)))
        return info(txn)

    def status(self, scope: str, stream: str, txn_id: str) -> TxnInfo:
        return info(self._get(scope, stream, txn_id))

    def ping(self, scope: str, stream: str, txn_id: str, lease_ms: int) -> TxnInfo:
        """Renew the lease: LeaseTooLarge, or TxnFailed once closed or past its maximum execution time."""
        while True:
            txn = self._get(scope, stream, txn_id)
            if txn.state != TxnState.OPEN.value:
                raise TxnFailed(f"transaction {txn_id} is {txn.state}", status=txn.state)
            self._check_lease(lease_ms)
            now = now_ms()
            if now >= txn.max_expiry_ms:
                raise TxnFailed(f"transaction {txn_id} exceeded its maximum execution time",
                                status="MAX_EXECUTION_TIME_EXCEEDED")
            expiry = min(now + lease_ms, txn.max_expiry_ms)
            try:
                with conditional("transaction changed concurrently"):
                    txn.update(actions=[TxnRecord.lease_expiry_ms.set(expiry), TxnRecord.deadline_ms.set(expiry)])
                return info(txn)
            except WriteConflict:
                continue

    def commit(self, scope: str, stream: str, txn_id: str, timestamp_ms: int | None = None,
               writer_id: str | None = None) -> TxnInfo:
        """Request the commit and drive the stream's commits; answers COMMITTED, or COMMITTING if another
        workflow holds the stream right now (repeat the call: it is idempotent)."""
        while True:
            txn = self._get(scope, stream, txn_id)
            if txn.state in (TxnState.ABORTING.value, TxnState.ABORTED.value):
                raise TxnFailed(f"transaction {txn_id} is {txn.state}", status=txn.state)
            if txn.state != TxnState.OPEN.value:
                break
            now = now_ms()
            try:
                self._to_committing(txn, [
                    TxnRecord.state.set(TxnState.COMMITTING.value), TxnRecord.commit_ms.set(now),
                    TxnRecord.timestamp_ms.set(timestamp_ms), TxnRecord.writer_id.set(writer_id),
                    TxnRecord.deadline_shard.remove(), TxnRecord.deadline_ms.remove(),
                    TxnRecord.pending.set(PENDING), TxnRecord.pending_since.set(now)])
                break
            except WriteConflict:
                continue
        # Also when already COMMITTED: the workflow that committed it may have died before its last
        # step (the stream still COMMITTING_TXN), and repeating the request must finish it.
        self.drive_commits(scope, stream)
        final = self._get(scope, stream, txn_id)
        if final.state == TxnState.COMMITTED.value and final.timestamp_ms is not None and final.writer_id:
            # The transaction's events are now before the tail: its writer notes the commit time there.
            tail = {p.segment.segment_id: p.offset for p in self.streams.tail(scope, stream)}
            try:
                self.watermarks.note_time(scope, stream, final.writer_id, int(final.timestamp_ms), tail)
            except InvalidArgument:
                pass  # the writer already noted a later time
        return info(final)

    def _to_committing(self, txn: TxnRecord, actions: list) -> None:
        """OPEN -> COMMITTING, atomically with a check that the stream is not being sealed: a seal
        applies the commits requested before it began and aborts every transaction still open."""
        try:
            with TransactWrite(connection=self.store.transaction_connection) as tx:
                tx.condition_check(StreamRecord, scope_pk(txn.scope), txn.stream,
                                   condition=StreamRecord.state.is_in(*_COMMIT_STATES))
                tx.update(txn, actions=actions, condition=TxnRecord.state == TxnState.OPEN.value)
        except TransactWriteError as e:
            reasons = [r.code if r else None for r in (e.cancellation_reasons or [])]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                raise TxnFailed(f"stream {txn.scope}/{txn.stream} is sealed or being sealed: transaction "
                                f"{txn.txn_id} is aborted with it", status="ABORTED") from e
            if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                raise WriteConflict("transaction changed concurrently") from e
            raise

    def abort(self, scope: str, stream: str, txn_id: str) -> TxnInfo:
        while True:
            txn = self._get(scope, stream, txn_id)
            if txn.state in (TxnState.COMMITTING.value, TxnState.COMMITTED.value):
                raise TxnFailed(f"transaction {txn_id} is {txn.state}", status=txn.state)
            if txn.state == TxnState.OPEN.value:
                now = now_ms()
                try:
                    with conditional("transaction changed concurrently"):
                        txn.update(actions=[TxnRecord.state.set(TxnState.ABORTING.value),
                                            TxnRecord.deadline_shard.remove(), TxnRecord.deadline_ms.remove(),
                                            TxnRecord.pending.set(PENDING), TxnRecord.pending_since.set(now)])
                except WriteConflict:
                    continue
            if txn.state == TxnState.ABORTING.value:
                self.finish_abort(txn)
            return info(self._get(scope, stream, txn_id))

    def finish_abort(self, txn: TxnRecord) -> None:
        for sid, _, _ in txn.segments:
            self.segments.delete(segment_name(txn.scope, txn.stream, txn_segment_token(int(sid), txn.txn_id)))
        self._close(txn, TxnState.ABORTED, TxnState.ABORTING)

    def expired(self, limit: int = 100) -> list[TxnRecord]:
        """Open transactions whose lease or maximum execution time has passed."""
        return list(TxnRecord.txn_deadlines.query(OPEN_SHARD, TxnRecord.deadline_ms <= now_ms(), limit=limit))

    def abort_expired(self, limit: int = 100) -> list[tuple[str, str]]:
        """Abort every expired open transaction; returns (scoped stream, txn id) of those aborted."""
        aborted = []
        for txn in self.expired(limit):
            try:
                if self.abort_if_expired(txn.scope, txn.stream, txn.txn_id).state == TxnState.ABORTED:
                    aborted.append((f"{txn.scope}/{txn.stream}", txn.txn_id))
            except (TxnFailed, TxnNotFound):
                pass  # committed (or gone) in the meantime: the outcome stands
        return aborted

    def abort_if_expired(self, scope: str, stream: str, txn_id: str) -> TxnInfo:
        """The timeout job's abort: only of a transaction whose lease has run out, by a write conditioned
        on the lease and version it read, so a ping that renews the lease in between wins (the
        transaction stays OPEN). TxnFailed if it is committing or committed."""
        while True:
            txn = self._get(scope, stream, txn_id)
            if txn.state in (TxnState.COMMITTING.value, TxnState.COMMITTED.value):
                raise TxnFailed(f"transaction {txn_id} is {txn.state}", status=txn.state)
            if txn.state == TxnState.OPEN.value:
                if txn.deadline_ms is None or txn.deadline_ms > now_ms():
                    return info(txn)  # pinged since the job found it expired
                try:
                    with conditional("transaction changed concurrently"):
                        txn.update(actions=[TxnRecord.state.set(TxnState.ABORTING.value),
                                            TxnRecord.deadline_shard.remove(), TxnRecord.deadline_ms.remove(),
                                            TxnRecord.pending.set(PENDING), TxnRecord.pending_since.set(now_ms())],
                                   condition=(TxnRecord.state == TxnState.OPEN.value)
                                   & (TxnRecord.lease_expiry_ms == txn.lease_expiry_ms))
                except WriteConflict:
                    continue  # re-read: a renewed lease is no longer expired
            if txn.state == TxnState.ABORTING.value:
                self.finish_abort(txn)
            return info(self._get(scope, stream, txn_id))

    def abort_open(self, scope: str, stream: str) -> None:
        """Abort every open transaction of a stream (sealing a stream does this)."""
        for txn in self._transactions(scope, stream, TxnState.OPEN):
            try:
                self.abort(scope, stream, txn.txn_id)
            except TxnFailed:
                pass

    def commit_batch(self, scope: str, stream: str, sink: str, batch_id: int, txn_ids: list[str]) -> bool:
        """Commit the transactions of one batch of a streaming writer exactly once; False if the batch was
        committed before (its new transactions, from a re-executed batch, are then aborted).

        The sink record first records the batch and its transactions as pending, then they are
        committed, then the batch becomes the last committed: a retry at any point resumes it.
        """
        key = (stream_pk(scope, stream), f"sink#{sink}")
        while True:
            try:
                record = SinkRecord.get(*key, consistent_read=True)
            except SinkRecord.DoesNotExist:
                record = SinkRecord(*key, last_batch=-1)
            if batch_id <= record.last_batch:
                for txn_id in txn_ids:
                    try:
                        self.abort(scope, stream, txn_id)
                    except (TxnFailed, TxnNotFound):
                        pass  # committed as part of the original batch, or already gone
                return False
            if record.pending_batch != batch_id:
                try:
                    with conditional("sink changed concurrently"):
                        record.pending_batch, record.pending_txns = batch_id, txn_ids
                        record.save()
                except WriteConflict:
                    continue
            for txn_id in record.pending_txns:
                self.commit(scope, stream, txn_id)
            try:
                with conditional("sink changed concurrently"):
                    record.update(actions=[SinkRecord.last_batch.set(batch_id), SinkRecord.pending_batch.remove(),
                                           SinkRecord.pending_txns.remove()])
            except WriteConflict:
                continue
            return True

    # -- the commit workflow ---------------------------------------------------------------------

    def drive_commits(self, scope: str, stream: str) -> None:
        """Apply the stream's committing transactions, serially, oldest request first."""
        for _ in range(20):
            record = self.store.get_stream(scope, stream)
            if StreamState(record.state) == StreamState.COMMITTING_TXN:
                self.finish_commit_stream(record)
                continue
            committing = sorted(self._transactions(scope, stream, TxnState.COMMITTING), key=lambda t: t.commit_ms)
            if not committing or StreamState(record.state) != StreamState.ACTIVE:
                return  # nothing to do, or another workflow holds the stream: the sweeper comes back
            plan, allocated = self._plan(record, committing)
            try:
                self.streams._begin(record, StreamState.COMMITTING_TXN,
                                    {"name": "commit", "plan": plan, "created_ms": now_ms()},
                                    StreamRecord.segment_count.add(allocated))
            except WriteConflict:
                continue
            self.finish_commit_stream(record)

    def _plan(self, record: StreamRecord, committing: list[TxnRecord]) -> tuple[list[dict], int]:
        epoch = record.current_epoch
        count = record.segment_count
        current = self.store.get_epoch(record.scope, record.stream, epoch).segments
        plan = []
        for txn in committing:
            if txn.epoch == epoch:
                plan.append({"txn": txn.txn_id, "mode": "merge"})
                continue
            n1, n2 = epoch + 1, epoch + 2
            rolled = []
            for sid, low, high in txn.segments:
                rolled.append([segment_id(n1, count), low, high, int(sid)])
                count += 1
            duplicates = []
            for _, low, high in current:
                duplicates.append([segment_id(n2, count), low, high])
                count += 1
            plan.append({"txn": txn.txn_id, "mode": "roll", "previous": epoch, "rolled_epoch": n1, "rolled": rolled,
                         "epoch": n2, "duplicates": duplicates})
            epoch, current = n2, duplicates
        return plan, count - record.segment_count

    def finish_commit_stream(self, record: StreamRecord) -> None:
        epoch = self.apply_plan(record, record.workflow["plan"], int(record.workflow["created_ms"]))
        self.streams._finish(record, StreamState.ACTIVE, StreamRecord.current_epoch.set(epoch))

    def plan_for_seal(self, record: StreamRecord) -> None:
        """Put the plan of the transactions committing when a seal began into the seal's workflow."""
        if "plan" in record.workflow:
            return
        committing = sorted(self._transactions(record.scope, record.stream, TxnState.COMMITTING),
                            key=lambda t: t.commit_ms)
        plan, allocated = self._plan(record, committing)
        self.store.update(record, [StreamRecord.workflow.set({**record.workflow, "plan": plan, "created_ms": now_ms()}),
                                   StreamRecord.segment_count.add(allocated)],
                          f"stream {record.scope}/{record.stream} changed concurrently")

    def apply_plan(self, record: StreamRecord, plan: list[dict], created: int) -> int:
        """Apply each planned transaction (idempotently); returns the epoch current afterwards."""
        epoch = record.current_epoch
        for step in plan:
            txn = self._get(record.scope, record.stream, step["txn"])
            if step["mode"] == "roll":
                epoch = int(step["epoch"])
            if txn.state == TxnState.COMMITTED.value:
                continue
            if step["mode"] == "merge":
                for sid, _, _ in txn.segments:
                    self._merge(segment_name(record.scope, record.stream, int(sid)),
                                segment_name(record.scope, record.stream, txn_segment_token(int(sid), txn.txn_id)))
            else:
                self._roll(record, txn, step, created)
            self._close(txn, TxnState.COMMITTED, TxnState.COMMITTING)
        return epoch

    def _roll(self, record: StreamRecord, txn: TxnRecord, step: dict, created: int) -> None:
        scope, stream = record.scope, record.stream
        previous = [_range_of(s) for s in self.store.get_epoch(scope, stream, int(step["previous"])).segments]
        rolled = [SegmentRange(segment_id=int(n), low=lo, high=hi) for n, lo, hi, _ in step["rolled"]]
        duplicates = [_range_of(s) for s in step["duplicates"]]
        rolled_epoch, epoch = int(step["rolled_epoch"]), int(step["epoch"])
        for (new, _, _, parent), segment in zip(step["rolled"], rolled):
            name = segment_name(scope, stream, int(new))
            self.segments.create(name)
            self._merge(name, segment_name(scope, stream, txn_segment_token(int(parent), txn.txn_id)))
        for segment in duplicates:
            self.segments.create(segment_name(scope, stream, segment.segment_id))
        records = [SegmentRecord(segment_id=s.segment_id, low=s.low, high=s.high, created_ms=created,
                                 predecessors=_overlapping(s, previous), successors=_overlapping(s, duplicates))
                   for s in rolled]
        records += [SegmentRecord(segment_id=s.segment_id, low=s.low, high=s.high, created_ms=created,
                                  predecessors=_overlapping(s, rolled)) for s in duplicates]
        # Only ever *add* these records, and only *set* the old segments' successors: a finisher of
        # this workflow that was delayed while another one finished it (and the stream moved on, e.g.
        # a later scale sealed a duplicate segment) must not write back stale records over newer ones.
        self.store.add_segments(scope, stream, records)
        for old in self.store.get_segments(scope, stream, [s.segment_id for s in previous]):
            self.store.set_successors(old, _overlapping(_range(old), rolled))
        self.store.put_epoch(scope, stream, rolled_epoch, created, [[s.segment_id, s.low, s.high] for s in rolled])
        self.store.put_epoch(scope, stream, epoch, created, [[s.segment_id, s.low, s.high] for s in duplicates])
        for segment in rolled:
            self.streams._seal_segment(record, segment.segment_id, epoch)
        for segment in previous:
            self.streams._seal_segment(record, segment.segment_id, rolled_epoch)

    # -- helpers -------------------------------------------------------------------------------

    def _merge(self, target: str, source: str) -> None:
        """Merge a transaction segment into ``target``; one that is gone was merged before (the segment
        store deletes an empty source instead of merging it, and releases a merged one with the data
        truncated past it), so a repeated step after a crash, or a second finisher, has nothing to do."""
        try:
            self.segments.merge(target, source)
        except SegmentNotFound:
            pass

    def _check_lease(self, lease_ms: int) -> int:
        if lease_ms > self.settings.max_lease_ms:
            raise LeaseTooLarge(f"lease {lease_ms} ms exceeds the maximum of {self.settings.max_lease_ms} ms",
                                max_lease_ms=self.settings.max_lease_ms)
        if lease_ms < self.settings.min_lease_ms:
            raise InvalidArgument(f"lease {lease_ms} ms is below the minimum of {self.settings.min_lease_ms} ms")
        return lease_ms

    def _get(self, scope: str, stream: str, txn_id: str) -> TxnRecord:
        try:
            return TxnRecord.get(stream_pk(scope, stream), txn_sk(txn_id), consistent_read=True)
        except DoesNotExist:
            raise TxnNotFound(f"transaction {txn_id} of {scope}/{stream} does not exist") from None

    def _transactions(self, scope: str, stream: str, state: TxnState) -> list[TxnRecord]:
        return list(TxnRecord.query(stream_pk(scope, stream), TxnRecord.sk.startswith("txn#"),
                                    filter_condition=TxnRecord.state == state.value, consistent_read=True))

    def _close(self, txn: TxnRecord, state: TxnState, expected: TxnState) -> None:
        expires = datetime.now(UTC) + timedelta(milliseconds=self.settings.keep_finished_ms)
        try:
            txn.update(actions=[TxnRecord.state.set(state.value), TxnRecord.pending.remove(),
                                TxnRecord.pending_since.remove(), TxnRecord.expires_at.set(expires)],
                       condition=TxnRecord.state == expected.value)
        except UpdateError as e:
            if not failed_condition(e):
                raise  # otherwise a concurrent finisher closed it first: the outcome is the same


def _range_of(segment: list) -> SegmentRange:
    return SegmentRange(segment_id=int(segment[0]), low=segment[1], high=segment[2])


def _overlapping(segment: SegmentRange, others: list[SegmentRange]) -> list[int]:
    return [o.segment_id for o in others if o.low < segment.high and segment.low < o.high]
