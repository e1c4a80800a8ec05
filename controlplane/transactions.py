"""Transactions: begin, ping, commit, abort, and the serial commit of a stream's transactions.

A transaction gets one segment per segment of the epoch it began in (``<parent id>.<txn id>``);
its events are appended there and stay invisible to readers until commit.

Outcomes never change once acknowledged: OPEN moves to COMMITTING or ABORTING by a write
conditional on the version read, so a commit racing an abort (or the timeout job) has exactly one
winner, and COMMITTING/COMMITTED and ABORTING/ABORTED never turn into each other.

Commits on one stream are serial. A commit marks its transaction COMMITTING, then drives the
stream's commit workflow, one *batch* at a time, as Pravega's controller does: the committing
transactions of the oldest epoch, together with every committing transaction whose epoch has the same
*reference epoch* (EpochRecord.reference_epoch: the epoch whose key ranges it duplicates; its own
number for an epoch a scale made). The stream enters COMMITTING_TXN (the barrier that also excludes a
concurrent scale) with the batch, the batch is applied, and the stream returns to ACTIVE. A batch:

* whose reference is the active epoch's is merged in place: each transaction segment into the active
  segment of its key range (one index entry referring to it: no copy, contiguous, idempotent);
* otherwise the stream scaled meanwhile and the whole batch *rolls*, once (seed 003; Pravega's
  rolling transactions): a new epoch of fresh segments with the reference epoch's key ranges receives
  every transaction's events and is sealed at once, and another epoch duplicates the active key
  ranges, with the active epoch's reference; the active segments are sealed with the first new epoch
  as successors. Transactions begun in the epoch the duplicates copy then commit in place, so one
  scale costs one roll per older epoch, never a cascade.

The batch recorded on the stream is a handful of numbers (its id, the epochs, the first new segment
number); its transactions carry its id (stamped before it is recorded, conditioned on the stream
record's version, which recording it changes). So no item grows with segments x transactions, and
a crash at any step leaves a workflow that the sweeper (or the next commit) finishes by repeating
idempotent steps.
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
    STREAM_SK,
    CommittingRecord,
    EpochRecord,
    SegmentRecord,
    SinkRecord,
    StreamRecord,
    TxnRecord,
    committing_sk,
    stream_pk,
    txn_sk,
    workflow_shard,
)
from controlplane.store import (
    _decode_token,
    _encode_token,
    conditional,
    create_item,
    failed_condition,
    versioned_update,
)
from controlplane.streams import StreamTasks, _range, scale_thresholds
from dataplane.deployment import batch_get
from dataplane.fanout import error_outcome, fan_out, per_second
from dataplane.shards import query_every_shard, shard_key
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
from rillet.models import SegmentRange, StreamConfiguration, StreamState, TxnInfo, TxnState
from rillet.names import segment_name, txn_segment_token

OPEN_SHARD = "open"  # the open transactions' partition keys of the deadlines index: open#<n> (dataplane.shards)
# The timeout job (docs/limits.md): a run takes at most TIMEOUT_RUN_LIMIT expired transactions, earliest
# first, and the next tick the rest; it aborts TIMEOUT_WORKERS at once (an abort is 10 to 30 round trips,
# a third of its time in S3, whose client pools 32 connections; the rest spread over models of 10 each).
# 1,500 a 10 s tick is 150 aborts a second, and a run of them ends within the tick at AWS latencies.
TIMEOUT_RUN_LIMIT = 1_500
TIMEOUT_WORKERS = 32
_BATCHES_PER_DRIVE = 20  # a call that finds more batches due leaves the rest to the sweeper
_STAMPS_PER_WRITE = 24  # transactions stamped per TransactWriteItems, with the stream's condition check
_COMMIT_STATES = [s.value for s in StreamState if s not in (StreamState.SEALING, StreamState.SEALED)]
_BEGIN_STATES = {StreamState.ACTIVE, StreamState.UPDATING, StreamState.SCALING, StreamState.COMMITTING_TXN,
                 StreamState.TRUNCATING}


def now_ms() -> int:
    return int(time.time() * 1000)


LEASES_PER_EXECUTION = 1_000  # Pravega's MAX_EXECUTION_TIME_MULTIPLIER: renewals a transaction may need


@dataclass(frozen=True)
class TxnSettings:
    """Each field is also read from ``RILLET_TXN_<FIELD>`` (e.g. RILLET_TXN_MAX_EXECUTION_MS)."""

    min_lease_ms: int = 1_000
    max_lease_ms: int = 120_000
    default_lease_ms: int = 30_000
    # The bound on a transaction's maximum execution time (Pravega's
    # controller.transaction.execution.timeBound.days, a day there too).
    max_execution_ms: int = 24 * 3_600_000
    keep_finished_ms: int = 24 * 3_600_000  # how long a finished transaction's status stays queryable

    def max_execution_for(self, lease_ms: int) -> int:
        """As Pravega's createTxn: a thousand leases, up to the bound. A safety net that long-lived
        transactions seldom meet, derived from the lease so a short-lease writer cannot hold a
        transaction open for a day by pinging."""
        return min(LEASES_PER_EXECUTION * lease_ms, self.max_execution_ms)

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


@dataclass(frozen=True)
class TimeoutRun:
    """What a timeout run did with each transaction it was given, and how fast."""

    outcomes: dict[str, str]  # "scope/stream/txn id" -> its state after the run, or why it was not aborted
    seconds: float

    @property
    def aborted(self) -> list[str]:
        return [item for item, outcome in self.outcomes.items() if outcome == TxnState.ABORTED.value]

    def summary(self) -> str:
        return (f"aborted {len(self.aborted)} of {len(self.outcomes)} expired transaction(s) in {self.seconds:.2f} s "
                f"({per_second(len(self.aborted), self.seconds):,.1f}/s)")


@dataclass(frozen=True)
class AppliedBatch:
    """What applying a commit batch closed (in the order the commits were requested), and whether the
    read of the committing transactions it made found others, left to a later batch."""

    closed: list[TxnRecord]
    others_waiting: bool


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
        max_execution = self.settings.max_execution_for(lease)
        # No lease ends past the maximum execution time (here only if the bound is below the lease), so
        # the timeout job, which finds open transactions by their lease, aborts them by then.
        expiry = now + min(lease, max_execution)
        txn_id = uuid.uuid4().hex
        txn = TxnRecord(stream_pk(scope, stream), "", scope=scope, stream=stream, txn_id=txn_id,
                        state=TxnState.OPEN.value, epoch=record.current_epoch, segments=epoch.segments,
                        created_ms=now, lease_expiry_ms=expiry, max_expiry_ms=now + max_execution,
                        deadline_shard=shard_key(OPEN_SHARD, f"{scope}/{stream}/{txn_id}"), deadline_ms=expiry)
        txn.sk = txn_sk(txn.txn_id)
        if not create_item(txn, TxnRecord.pk.does_not_exist()):  # a resend refused by its own save is True
            raise WriteConflict(f"transaction id {txn.txn_id} is taken; begin again")
        for sid, _, _ in txn.segments:  # a crash here leaves an open transaction that times out
            self.segments.create(segment_name(scope, stream, txn_segment_token(int(sid), txn.txn_id)),
                                 int(record.created_ms))
        return info(txn)

    def status(self, scope: str, stream: str, txn_id: str) -> TxnInfo:
        return info(self._get(scope, stream, txn_id))

    def list_unfinished(self, scope: str, stream: str, limit: int,
                        token: str | None) -> tuple[list[TxnInfo], str | None]:
        """A page of the stream's open, committing and aborting transactions: one query of the stream's
        ``txn#`` items (finished ones are filtered out until their TTL removes them)."""
        self.store.get_stream(scope, stream)
        unfinished = [TxnState.OPEN.value, TxnState.COMMITTING.value, TxnState.ABORTING.value]
        result = TxnRecord.query(stream_pk(scope, stream), TxnRecord.sk.startswith("txn#"), limit=limit,
                                 filter_condition=TxnRecord.state.is_in(*unfinished),
                                 last_evaluated_key=_decode_token(token, stream_pk(scope, stream), "txn#"))
        return [info(r) for r in result], _encode_token(result.last_evaluated_key)

    def ping(self, scope: str, stream: str, txn_id: str, lease_ms: int) -> TxnInfo:
        """Renew the lease to ``lease_ms`` from now: LeaseTooLarge, TxnFailed once closed, or TxnFailed
        (status MAX_EXECUTION_TIME_EXCEEDED) if the new lease would end past the maximum execution time.

        As Pravega's pingTxn, that refusal changes nothing: the transaction stays open (its writer may
        still commit it) until its current lease ends, and then the timeout job aborts it.
        """
        while True:
            txn = self._get(scope, stream, txn_id)
            if txn.state != TxnState.OPEN.value:
                raise TxnFailed(f"transaction {txn_id} is {txn.state}", status=txn.state)
            self._check_lease(lease_ms)
            expiry = now_ms() + lease_ms
            if expiry > txn.max_expiry_ms:
                raise TxnFailed(f"transaction {txn_id}: a lease of {lease_ms} ms would end past its maximum "
                                f"execution time; it stays open until its current lease ends",
                                status="MAX_EXECUTION_TIME_EXCEEDED", max_expiry_ms=int(txn.max_expiry_ms))
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
                    TxnRecord.pending.set(workflow_shard(txn.pk, txn.sk)), TxnRecord.pending_since.set(now)])
                break
            except WriteConflict:
                continue
        # Also when already COMMITTED: the workflow that committed it may have died before its last
        # step (the stream still COMMITTING_TXN), and repeating the request must finish it.
        closed = self.drive_commits(scope, stream, until=txn_id)
        final = closed if closed is not None and closed.state == TxnState.COMMITTED.value \
            else self._get(scope, stream, txn_id)
        if final.state == TxnState.COMMITTED.value and final.timestamp_ms is not None and final.writer_id:
            # The transaction's events are now before the tail: its writer notes the commit time there.
            tail = {p.segment.segment_id: p.offset for p in self.streams.tail(scope, stream)}
            try:
                self.watermarks.note_time(scope, stream, final.writer_id, int(final.timestamp_ms), tail)
            except InvalidArgument:
                pass  # the writer already noted a later time
        return info(final)

    def _to_committing(self, txn: TxnRecord, actions: list) -> None:
        """OPEN -> COMMITTING with its committing marker, atomically with a check that the stream is not
        being sealed: a seal applies the commits requested before it began and aborts every transaction
        still open."""
        try:
            with TransactWrite(connection=self.store.transaction_connection) as tx:
                tx.condition_check(StreamRecord, stream_pk(txn.scope, txn.stream), STREAM_SK,
                                   condition=StreamRecord.state.is_in(*_COMMIT_STATES))
                tx.save(_marker(txn))
                tx.update(txn, actions=actions, condition=TxnRecord.state == TxnState.OPEN.value)
        except TransactWriteError as e:
            # PynamoDB sends condition checks, then puts, then updates: the refusals in that order.
            reasons = [r.code if r else None for r in (e.cancellation_reasons or [])]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                raise TxnFailed(f"stream {txn.scope}/{txn.stream} is sealed or being sealed: transaction "
                                f"{txn.txn_id} is aborted with it", status="ABORTED") from e
            if len(reasons) > 2 and reasons[2] == "ConditionalCheckFailed":
                raise WriteConflict("transaction changed concurrently") from e
            raise

    def mark_committing(self, txn: TxnRecord) -> None:
        """Give a COMMITTING transaction its marker if it has none: one that moved to COMMITTING before
        markers existed (the sweeper calls this before it drives the stream's commits)."""
        if txn.state == TxnState.COMMITTING.value:
            _marker(txn).save()

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
                                            TxnRecord.pending.set(workflow_shard(txn.pk, txn.sk)), TxnRecord.pending_since.set(now)])
                except WriteConflict:
                    continue
            if txn.state == TxnState.ABORTING.value:
                self.finish_abort(txn)
            return info(self._get(scope, stream, txn_id))

    def finish_abort(self, txn: TxnRecord) -> None:
        for sid, _, _ in txn.segments:
            self.segments.delete(segment_name(txn.scope, txn.stream, txn_segment_token(int(sid), txn.txn_id)))
        self._close(txn, TxnState.ABORTED, TxnState.ABORTING)

    def expired(self, limit: int = TIMEOUT_RUN_LIMIT) -> list[TxnRecord]:
        """Open transactions whose lease or maximum execution time has passed: at most ``limit``, the
        earliest deadlines first (each shard's query stops at ``limit``; the next call finds the rest)."""
        now = now_ms()
        due = query_every_shard(OPEN_SHARD, lambda key: TxnRecord.txn_deadlines.query(
            key, TxnRecord.deadline_ms <= now, limit=limit), TxnRecord)
        return sorted(due, key=lambda t: t.deadline_ms)[:limit]

    def abort_expired(self, limit: int = TIMEOUT_RUN_LIMIT) -> list[tuple[str, str]]:
        """Abort up to ``limit`` expired open transactions; returns (scoped stream, txn id) of those aborted."""
        run = self.abort_all_if_expired([f"{t.scope}/{t.stream}/{t.txn_id}" for t in self.expired(limit)])
        return [(item.rsplit("/", 1)[0], item.rsplit("/", 1)[1]) for item in run.aborted]

    def abort_all_if_expired(self, transactions: list[str], workers: int = TIMEOUT_WORKERS) -> TimeoutRun:
        """:meth:`abort_if_expired` of each "scope/stream/txn id", ``workers`` at once: each abort is
        conditioned on what it read of its own transaction, so they need no order among them. Any other
        error (throttled, say) is that transaction's outcome, ``error: <code>``, not the run's: the other
        transactions are aborted all the same and the next run asks again for this one."""
        def outcome(item: str) -> str:
            scope, stream, txn_id = item.split("/")
            try:
                return self.abort_if_expired(scope, stream, txn_id).state.value
            except (TxnFailed, TxnNotFound) as e:  # committed (or gone) in the meantime: the outcome stands
                return f"not aborted: {e.code} {e.details.get('status', '')}".strip()

        outcomes, seconds = fan_out(outcome, transactions, workers, on_error=lambda _, error: error_outcome(error))
        return TimeoutRun(dict(zip(transactions, outcomes, strict=True)), seconds)

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
                                            TxnRecord.pending.set(workflow_shard(txn.pk, txn.sk)), TxnRecord.pending_since.set(now_ms())],
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
        """Commit the transactions of one batch of a streaming writer exactly once; False if it is the
        sink's last committed batch again (a re-execution after a crash between the sink's commit and
        Spark's own commit log: its new transactions are aborted, the first execution's events stay).

        An older batch id than the last committed is not a re-execution (Spark re-runs only its last
        batch): another query writes under this sink id, or the query restarted with a fresh checkpoint.
        Its transactions are aborted and IllegalState says so, rather than dropping the batch silently.

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
                # Only the listed transactions still open: one query, instead of an abort per id (4,096
                # ids that are not open took 33 s, past the function's time limit).
                listed = set(txn_ids)
                for txn in self._transactions(scope, stream, TxnState.OPEN):
                    if txn.txn_id in listed:
                        try:
                            self.abort(scope, stream, txn.txn_id)
                        except (TxnFailed, TxnNotFound):
                            pass  # committed or aborted meanwhile
                if batch_id < record.last_batch:
                    raise IllegalState(
                        f"sink {sink!r} of {scope}/{stream} has committed batch {record.last_batch}, so batch "
                        f"{batch_id} is not a re-execution: another query writes under this sink id, or the "
                        f"query restarted with a fresh checkpoint. Its transactions were aborted (nothing of "
                        f"it is stored); give each query its own sink id")
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
            try:  # a resend refused by its own first attempt (answer lost) is this call's commit: True
                versioned_update(record, [SinkRecord.last_batch.set(batch_id), SinkRecord.pending_batch.remove(),
                                          SinkRecord.pending_txns.remove()], "sink changed concurrently")
            except WriteConflict:
                continue
            return True

    # -- the commit workflow ---------------------------------------------------------------------

    def drive_commits(self, scope: str, stream: str, until: str | None = None) -> TxnRecord | None:
        """Apply the stream's committing transactions, one batch per workflow, until none is left.

        With ``until`` (a transaction id) it returns that transaction's record once a batch closed it,
        and stops there when that batch's read of the committing transactions found no other: one that
        starts committing later is driven by its own commit call, which drives after marking it (or by
        the sweeper, if that call dies), so the last look for more work is saved."""
        mine = None
        for _ in range(_BATCHES_PER_DRIVE):
            record = self.store.get_stream(scope, stream)
            if StreamState(record.state) == StreamState.COMMITTING_TXN:
                applied = self.finish_commit_stream(record)
            elif StreamState(record.state) != StreamState.ACTIVE:
                return mine  # another workflow holds the stream: the sweeper comes back
            else:
                try:
                    planned = self._plan_batch(record)
                    if planned is None:
                        return mine
                    batch, allocated, active = planned
                    self.streams._begin(record, StreamState.COMMITTING_TXN, {"name": "commit", "batch": batch},
                                        StreamRecord.segment_count.add(allocated))
                except WriteConflict:
                    continue
                applied = self.finish_commit_stream(record, active)
            mine = mine or next((txn for txn in applied.closed if txn.txn_id == until), None)
            if mine is not None and not applied.others_waiting:
                return mine
        return mine

    def finish_commit_stream(self, record: StreamRecord, active: EpochRecord | None = None) -> AppliedBatch:
        """Apply the recorded batch and end the workflow. ``active``: the stream's current epoch if the
        caller just read it (planning did)."""
        epoch, applied = self._apply_batch(record, record.workflow["batch"], active)
        self.streams._finish(record, StreamState.ACTIVE, StreamRecord.current_epoch.set(epoch))
        return applied

    def commit_for_seal(self, record: StreamRecord) -> None:
        """Apply, within a seal, the transactions that were committing when it began (none can start
        committing once the stream is SEALING): batch by batch, each recorded in the seal's workflow
        before it is applied, so that a crash resumes it. ``record`` is kept up to date."""
        while StreamState(record.state) == StreamState.SEALING:
            try:
                batch = record.workflow.get("batch")
                if batch is not None:
                    epoch, _ = self._apply_batch(record, batch)
                    rest = {k: v for k, v in record.workflow.items() if k != "batch"}
                    self.store.update(record, [StreamRecord.workflow.set(rest), StreamRecord.current_epoch.set(epoch)],
                                      f"stream {record.scope}/{record.stream} changed concurrently")
                    continue
                planned = self._plan_batch(record)
                if planned is None:
                    return
                batch, allocated, _ = planned
                self.store.update(record, [StreamRecord.workflow.set({**record.workflow, "batch": batch}),
                                           StreamRecord.segment_count.add(allocated)],
                                  f"stream {record.scope}/{record.stream} changed concurrently")
            except WriteConflict:
                record.refresh(consistent_read=True)  # another finisher of the seal moved it on

    def _plan_batch(self, record: StreamRecord) -> tuple[dict, int, EpochRecord] | None:
        """The next batch, with its transactions stamped: (the batch, how many segment numbers it takes,
        the stream's current epoch as read).

        As Pravega does, the oldest epoch's committing transactions go first, together with every
        committing transaction whose epoch has the same reference epoch (the same key ranges): merged
        in place if that is the active epoch's reference, else rolled, all in one roll. The stamps are
        conditioned on the stream record's version, which recording the batch then changes: no
        transaction joins a batch once it is recorded, so its membership is fixed before any merge.
        The batch is a handful of numbers whatever the number of segments and transactions.
        """
        scope, stream = record.scope, record.stream
        committing = self._committing(scope, stream)
        if not committing:
            return None
        epochs = {e: self.store.get_epoch(scope, stream, e)  # one read per epoch
                  for e in {int(t.epoch) for t in committing} | {int(record.current_epoch)}}
        oldest, active = epochs[min(int(t.epoch) for t in committing)], epochs[int(record.current_epoch)]
        reference = _reference_of(oldest)
        # The id names the reference too: a planner that stamped transactions and then lost the race
        # to record its batch (same stream version) may have chosen another reference epoch.
        batch = {"id": f"{record.version}/{reference}", "reference": reference, "epoch": int(record.current_epoch),
                 "active_reference": _reference_of(active), "created_ms": now_ms()}
        allocated = 0
        if reference != batch["active_reference"]:
            batch.update(rolled_epoch=batch["epoch"] + 1, duplicate_epoch=batch["epoch"] + 2,
                         first_number=int(record.segment_count))
            allocated = len(oldest.segments) + len(active.segments)  # epochs of one reference share its ranges
        members = [t for t in committing if _reference_of(epochs[int(t.epoch)]) == reference and t.batch != batch["id"]]
        for start in range(0, len(members), _STAMPS_PER_WRITE):
            self._stamp(record, members[start:start + _STAMPS_PER_WRITE], batch["id"])
        return batch, allocated, active

    def _stamp(self, record: StreamRecord, members: list[TxnRecord], batch_id: str) -> None:
        """Mark transactions as members of a batch, provided the stream record (and each transaction)
        is still as read."""
        try:
            with TransactWrite(connection=self.store.transaction_connection) as tx:
                tx.condition_check(StreamRecord, record.pk, record.sk,
                                   condition=StreamRecord.version == record.version)
                for txn in members:
                    tx.update(txn, actions=[TxnRecord.batch.set(batch_id)],
                              condition=TxnRecord.state == TxnState.COMMITTING.value)
        except TransactWriteError as e:
            if any(r is not None and r.code == "ConditionalCheckFailed" for r in e.cancellation_reasons or []):
                raise WriteConflict(f"stream {record.scope}/{record.stream} changed while a commit was planned") from e
            raise

    def _apply_batch(self, record: StreamRecord, batch: dict,
                     active: EpochRecord | None = None) -> tuple[int, AppliedBatch]:
        """Apply a batch (every step idempotent); returns the epoch current afterwards and what it closed.
        Its transactions are closed only once their events are readable in order: after the roll sealed
        the segments current before it, a writer's next events can only land after the transaction's.
        ``active``: the batch's epoch, if the caller read it (epochs never change)."""
        scope, stream = record.scope, record.stream
        committing = self._committing(scope, stream)
        members = sorted((txn for txn in committing if txn.batch == batch["id"]), key=lambda t: (t.commit_ms, t.txn_id))
        applied = AppliedBatch(members, others_waiting=len(members) < len(committing))
        if "rolled_epoch" not in batch:
            if active is None or int(active.epoch) != int(batch["epoch"]):
                active = self.store.get_epoch(scope, stream, int(batch["epoch"]))
            for txn in members:
                for source, target in _same_ranges(txn.segments, active.segments):
                    self._merge(segment_name(scope, stream, target),
                                segment_name(scope, stream, txn_segment_token(source, txn.txn_id)))
                self._close(txn, TxnState.COMMITTED, TxnState.COMMITTING)
            return int(batch["epoch"]), applied
        self._roll(record, batch, members)
        for txn in members:
            self._close(txn, TxnState.COMMITTED, TxnState.COMMITTING)
        return int(batch["duplicate_epoch"]), applied

    def _committing(self, scope: str, stream: str) -> list[TxnRecord]:
        """The stream's COMMITTING transactions, read through their markers: one query of the markers and
        one consistent batch read of their records, whatever the number of transactions the stream kept.
        Markers of transactions closed meanwhile (or left by a crash after a close) are deleted."""
        markers = list(CommittingRecord.query(stream_pk(scope, stream), CommittingRecord.sk.startswith("cm#"),
                                              consistent_read=True))
        if not markers:
            return []
        found = {t.txn_id: t for t in batch_get(TxnRecord, [(stream_pk(scope, stream), txn_sk(m.txn_id))
                                                            for m in markers], consistent_read=True)}
        committing = []
        for marker in markers:
            txn = found.get(marker.txn_id)
            if txn is not None and txn.state == TxnState.COMMITTING.value:
                committing.append(txn)
            else:
                _delete_marker(scope, stream, marker.txn_id)
        return committing

    def _roll(self, record: StreamRecord, batch: dict, members: list[TxnRecord]) -> None:
        """Roll the batch (seed 003, Pravega's rolling transactions): a new epoch of fresh segments with
        the reference epoch's key ranges receives every member's events and is sealed at once; another
        epoch duplicates the active key ranges; the active segments are sealed with the first new epoch
        as successors. Readers finish the active segments before the transactions', and those before
        the duplicates, so per-key order holds."""
        scope, stream = record.scope, record.stream
        created = int(batch["created_ms"])
        previous = [_range_of(s) for s in self.store.get_epoch(scope, stream, int(batch["epoch"])).segments]
        reference = self.store.get_epoch(scope, stream, int(batch["reference"])).segments
        rolled_epoch, epoch, first = int(batch["rolled_epoch"]), int(batch["duplicate_epoch"]), int(batch["first_number"])
        rolled = [SegmentRange(segment_id=segment_id(rolled_epoch, first + i), low=lo, high=hi)
                  for i, (_, lo, hi) in enumerate(reference)]
        duplicates = [SegmentRange(segment_id=segment_id(epoch, first + len(rolled) + i), low=s.low, high=s.high)
                      for i, s in enumerate(previous)]
        # The duplicates become current: they signal auto-scaling as any segment of the stream does.
        config = StreamConfiguration.model_validate(record.configuration)
        scaling = scale_thresholds(config.scaling_policy)
        for segment in rolled + duplicates:
            self.segments.create(segment_name(scope, stream, segment.segment_id), int(record.created_ms), scaling,
                                 sublogs=True, sublog_shards=config.sublog_shards)
        rolled_ranges = [[s.segment_id, s.low, s.high] for s in rolled]
        for txn in members:
            for source, target in _same_ranges(txn.segments, rolled_ranges):
                self._merge(segment_name(scope, stream, target),
                            segment_name(scope, stream, txn_segment_token(source, txn.txn_id)))
        records = [SegmentRecord(segment_id=s.segment_id, low=s.low, high=s.high, created_ms=created,
                                 predecessors=_overlapping(s, previous), successors=_overlapping(s, duplicates))
                   for s in rolled]
        records += [SegmentRecord(segment_id=s.segment_id, low=s.low, high=s.high, created_ms=created,
                                  predecessors=_overlapping(s, rolled)) for s in duplicates]
        # Only ever *add* these records, and only *set* the old segments' successors: a finisher of
        # this workflow that was delayed while another one finished it (and the stream moved on, e.g.
        # a later scale sealed a duplicate segment) must not write back stale records over newer ones.
        # Each write is fenced on this incarnation of the stream, and each seal below is conditioned on
        # it (StreamTasks._seal_segment): a finisher that stalled across a delete and create again of the
        # name changes nothing of the new stream (StreamRecreated or SegmentNotFound ends it).
        self.store.add_segments(scope, stream, records, fence=record)
        for old in self.store.get_segments(scope, stream, [s.segment_id for s in previous]):
            self.store.set_successors(old, _overlapping(_range(old), rolled), fence=record)
        self.store.put_epoch(scope, stream, rolled_epoch, created, rolled_ranges,
                             reference_epoch=int(batch["reference"]), fence=record)
        self.store.put_epoch(scope, stream, epoch, created, [[s.segment_id, s.low, s.high] for s in duplicates],
                             reference_epoch=int(batch["active_reference"]), fence=record)
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
        if expected == TxnState.COMMITTING:
            _delete_marker(txn.scope, txn.stream, txn.txn_id)  # after the close: a crash between leaves garbage


def _marker(txn: TxnRecord) -> CommittingRecord:
    return CommittingRecord(txn.pk, committing_sk(txn.txn_id), txn_id=txn.txn_id)


def _delete_marker(scope: str, stream: str, txn_id: str) -> None:
    """Delete a committing marker. Unconditional: a marker is written only with its transaction's move
    to COMMITTING, once per transaction, so whatever marker is there is of that closed transaction."""
    CommittingRecord(stream_pk(scope, stream), committing_sk(txn_id)).delete()


def _range_of(segment: list) -> SegmentRange:
    return SegmentRange(segment_id=int(segment[0]), low=segment[1], high=segment[2])


def _reference_of(epoch: EpochRecord) -> int:
    """The epoch whose key ranges an epoch duplicates (a rolling commit's epochs), else its own number."""
    return int(epoch.epoch if epoch.reference_epoch is None else epoch.reference_epoch)


def _same_ranges(sources: list[list], targets: list[list]) -> list[tuple[int, int]]:
    """Pair each source segment with the target of the same key range: epochs that share a reference
    epoch have the same ranges, so a transaction's segments map one to one onto theirs."""
    by_range = {(lo, hi): int(sid) for sid, lo, hi in targets}
    return [(int(sid), by_range[(lo, hi)]) for sid, lo, hi in sources]


def _overlapping(segment: SegmentRange, others: list[SegmentRange]) -> list[int]:
    return [o.segment_id for o in others if o.low < segment.high and segment.low < o.high]
