"""Transactions: begin, ping, commit, abort, the timeouts, and a streaming sink's exactly-once batches.

A transaction gets one segment per segment of the epoch it began in (``<parent id>.<txn id>``);
its events are appended there and stay invisible to readers until commit.

Outcomes never change once acknowledged: OPEN moves to COMMITTING or ABORTING by a write
conditional on the version read, so a commit racing an abort (or the timeout job) has exactly one
winner, and COMMITTING/COMMITTED and ABORTING/ABORTED never turn into each other.

A commit marks its transaction COMMITTING; the stream's commit workflow that then applies it, one batch
at a time, is :mod:`controlplane.txn_commits`.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from controlplane.models import (
    STREAM_SK,
    SinkRecord,
    StreamRecord,
    TxnRecord,
    stream_pk,
    txn_sk,
    workflow_shard,
)
from controlplane.store import _decode_token, _encode_token, conditional, create_item, versioned_update
from controlplane.streams import StreamTasks
from controlplane.txn_commits import TxnCommits, _marker
from dataplane.fanout import error_outcome, fan_out, per_second
from dataplane.shards import query_every_shard, shard_key
from rillet.errors import IllegalState, InvalidArgument, LeaseTooLarge, TxnFailed, TxnNotFound, WriteConflict
from rillet.models import SegmentRange, StreamState, TxnInfo, TxnState
from rillet.names import segment_name, txn_segment_token

OPEN_SHARD = "open"  # the open transactions' partition keys of the deadlines index: open#<n> (dataplane.shards)
# The timeout job (docs/limits.md): a run takes at most TIMEOUT_RUN_LIMIT expired transactions, earliest
# first, and the next tick the rest; it aborts TIMEOUT_WORKERS at once (an abort is 10 to 30 round trips,
# a third of its time in S3, whose client pools 32 connections; the rest spread over models of 10 each).
# 1,500 a 10 s tick is 150 aborts a second, and a run of them ends within the tick at AWS latencies.
TIMEOUT_RUN_LIMIT = 1_500
TIMEOUT_WORKERS = 32
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



class TransactionTasks(TxnCommits):
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

    # -- helpers -------------------------------------------------------------------------------

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
