"""The commit workflow: the serial commit of a stream's transactions (:class:`TxnCommits`, the half of
:class:`controlplane.transactions.TransactionTasks` that applies what ``commit`` requested).

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

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pynamodb.exceptions import TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from controlplane.models import (
    CommittingRecord,
    EpochRecord,
    SegmentRecord,
    StreamRecord,
    TxnRecord,
    committing_sk,
    stream_pk,
    txn_sk,
)
from controlplane.store import failed_condition
from controlplane.streams import _range, now_ms, scale_thresholds
from dataplane.deployment import batch_get
from rillet.errors import SegmentNotFound, WriteConflict
from rillet.keyspace import segment_id
from rillet.models import SegmentRange, StreamConfiguration, StreamState, TxnState
from rillet.names import segment_name, txn_segment_token

_BATCHES_PER_DRIVE = 20  # a call that finds more batches due leaves the rest to the sweeper
_STAMPS_PER_WRITE = 24  # transactions stamped per TransactWriteItems, with the stream's condition check


@dataclass(frozen=True)
class AppliedBatch:
    """What applying a commit batch closed (in the order the commits were requested), and whether the
    read of the committing transactions it made found others, left to a later batch."""

    closed: list[TxnRecord]
    others_waiting: bool


class TxnCommits:
    """The commit workflow of :class:`controlplane.transactions.TransactionTasks`, which sets ``streams``,
    ``store``, ``segments`` and ``settings``."""

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

    def _merge(self, target: str, source: str) -> None:
        """Merge a transaction segment into ``target``; one that is gone was merged before (the segment
        store deletes an empty source instead of merging it, and releases a merged one with the data
        truncated past it), so a repeated step after a crash, or a second finisher, has nothing to do."""
        try:
            self.segments.merge(target, source)
        except SegmentNotFound:
            pass

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
