"""The reader group operations the control plane's API, lambdas and jobs call (:class:`ReaderGroups`).

Each operation is a conditional read-modify-write of the group's record
(controlplane.reader_groups.state): read it, fold in the readers' own items
(controlplane.reader_groups.leases), apply a pure transition, and write it back on the condition that
nobody changed it meanwhile; a lost race is retried on the fresh state. This is the role Pravega's
State Synchronizer plays, with the logic on the controller so that readers only need HTTPS. The
operations that create, reset or delete a group write its subscriptions in the same transaction
(controlplane.reader_groups.subscriptions). This module owns the clock (:func:`_now`): everything
below it takes the time as an argument.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from controlplane.models import (
    ReaderGroupHeadRecord,
    ReaderGroupNameRecord,
    ReaderGroupRecord,
    reader_group_pk,
    reader_groups_pk,
)
from controlplane.reader_groups.assignment import assignment, sync
from controlplane.reader_groups.checkpoints import (
    checkpoint_info,
    finish_checkpoints,
    initiate_checkpoint,
    pending_checkpoint,
    record_pass,
    releases_surplus,
)
from controlplane.reader_groups.leases import (
    LEASE_RUN_LIMIT,
    LEASE_WORKERS,
    RENEW_FRACTION,
    LeaseRun,
    announce_lease,
    drop_lease,
    drop_orphan_lease,
    fold_due,
    groups_due,
    overlay,
    schedule_lease_check,
    shared_view,
    stale_items,
)
from controlplane.reader_groups.readers import add_reader, expire_readers, reader_offline
from controlplane.reader_groups.state import (
    FIRST_VERSION,
    GROUP_KEY,
    HEAD_KEY,
    Checkpoint,
    GroupState,
    Held,
    ReaderEntry,
    count_pass,
    current_record,
    delete_pages,
    get_record,
    new_head,
    new_state,
    paged,
    raise_bound,
    read_record,
    record_actions,
    same_incarnation,
    storable,
    write_pages,
)
from controlplane.reader_groups.subscriptions import (
    MAX_TRANSACTION_WRITES,
    Subscriptions,
    check_subscription_count,
)
from controlplane.reader_items import ReaderItemRecord, ReaderItems, reader_sk
from controlplane.store import _decode_token, _encode_token, versioned_update
from dataplane.fanout import error_outcome, fan_out
from rillet.api import Assignment, CheckpointInfo, ReaderGroupInfo, SegmentOffset, SyncRequest
from rillet.errors import IllegalState, ReaderGroupNotFound, WriteConflict
from rillet.models import (
    AcknowledgedCut,
    ReaderGroupConfig,
    ReaderSegment,
    ReaderStatus,
    StreamCutBody,
    SuccessorInfo,
)
from rillet.names import validate_reader_group_name, validate_scope_name


class ReaderGroups:
    """Reader group operations, each a conditional read-modify-write of the group's record."""

    def __init__(self, streams: Any, retention: Any) -> None:  # StreamTasks, RetentionTasks
        self.streams = streams
        self.subscriptions = Subscriptions(streams, retention)
        self.items = ReaderItems()

    def create(self, scope: str, group: str, config: ReaderGroupConfig) -> bool:
        """Create the group with its subscriptions in one transaction; False if it exists. A create whose
        answer was lost, and whose resend its own first attempt refused, is told by its token in the
        group's listing entry (which nothing rewrites)."""
        validate_reader_group_name(group)
        config = config.model_copy(update={"generation": 0})
        check_subscription_count(config)
        for attempt in range(20):
            try:
                read_record(scope, group)
                return False  # it exists: creating is idempotent, and its subscriptions stay as they are
            except ReaderGroupNotFound:
                pass
            fences = self.subscriptions.fences(config)  # before the heads the group starts at
            config, starts = self.subscriptions.starts(config)
            stored = storable(new_state(config, starts), f"reader group {scope}/{group}")
            token, pk = uuid.uuid4().hex, reader_group_pk(scope, group)
            # ``token`` is also the group's incarnation (create_id): every later write of the record, and
            # every acknowledgement of its subscriptions, is of this group only, not of one created again
            record = ReaderGroupRecord(pk, GROUP_KEY, scope=scope, group=group, write_id=token, create_id=token,
                                       state=None if stored.pieces else stored.body, pages=len(stored.pieces) or None)
            listed = ReaderGroupNameRecord(reader_groups_pk(scope), group, created_ms=_now(), write_id=token)
            try:
                with TransactWrite(connection=self.streams.store.transaction_connection) as tx:
                    tx.save(record, condition=ReaderGroupRecord.pk.does_not_exist())
                    write_pages(tx, None, stored, pk)
                    tx.save(new_head(scope, group, FIRST_VERSION))
                    tx.save(listed)
                    self.subscriptions.subscribe(tx, scope, group, config, starts, fences, token, dropping=None,
                                                 incarnation=token)
                return True
            except TransactWriteError as e:
                if self._listed_by(scope, group, token):
                    return True
                if _cancelled_by_condition(e, 0):
                    return False
                if not _contended(e):
                    raise
            time.sleep(random.uniform(0, 0.02 * (attempt + 1)))  # a subscriber fence moved: read again
        raise WriteConflict(f"reader group {scope}/{group} is too contended; try again")

    def reset(self, scope: str, group: str, config: ReaderGroupConfig) -> ReaderGroupConfig:
        """Start over with a new configuration (a new generation); online readers are dropped. One
        transaction: the new state, conditioned on the version read, with the subscriptions at the new
        generation and the removal of those the new configuration drops. The readers' items are of the
        old generation from then on, so they count for nobody (:func:`overlay`); those read before are
        deleted after it."""
        check_subscription_count(config)
        for attempt in range(20):
            record = read_record(scope, group)
            items = self.items.all(scope, group)
            current = GroupState.model_validate(record.state)
            new = config.model_copy(update={"generation": current.config.generation + 1})
            fences = self.subscriptions.fences(new)  # before the heads the group starts at
            new, starts = self.subscriptions.starts(new)
            state = new_state(new, starts)
            deadline, version = schedule_lease_check(state, _now()), record.version + 1
            token, stored = uuid.uuid4().hex, storable(state, f"reader group {scope}/{group}")
            writes = 1 + self.subscriptions.writes(new, current.config) + max(len(stored.pieces), int(record.pages or 0))
            if writes > MAX_TRANSACTION_WRITES:
                raise IllegalState(f"reader group {scope}/{group} cannot be reset to this configuration at once: it "
                                   f"would write {writes} items in one transaction, more than DynamoDB's "
                                   f"{MAX_TRANSACTION_WRITES} (its state is large and many subscribed streams "
                                   "change); reset it to a configuration that keeps more of its streams first",
                                   writes=writes)
            raise_bound(scope, group, record, stored.body)
            try:
                with TransactWrite(connection=self.streams.store.transaction_connection) as tx:
                    tx.update(record, actions=[*record_actions(stored), ReaderGroupRecord.write_id.set(token)],
                              condition=same_incarnation(record))
                    write_pages(tx, record, stored, record.pk)
                    self.subscriptions.subscribe(tx, scope, group, new, starts, fences, token, dropping=current.config,
                                                 incarnation=record.create_id)
            except TransactWriteError as e:
                if not self._written_by(scope, group, token):
                    if not _contended(e):
                        raise
                    time.sleep(random.uniform(0, 0.02 * (attempt + 1)))
                    continue
            if deadline != current.lease_deadline_ms:
                announce_lease(scope, group, record.create_id, version, deadline)
            self.items.delete(items.values())
            return new
        raise WriteConflict(f"reader group {scope}/{group} is too contended; try again")

    def delete(self, scope: str, group: str) -> bool:
        """Delete the group, its listing entry and its subscriptions in one transaction conditioned on the
        version read: a delete that loses a race (a reader's sync) changes nothing and answers
        WriteConflict. A refusal that finds the group gone is a delete done (this call's first attempt,
        whose answer was lost, or another's): the lease record goes too, and the reader items read
        before the transaction (one a reader rewrote meanwhile stays, counting for nobody: :func:`overlay`)."""
        try:
            record = read_record(scope, group)
        except ReaderGroupNotFound:
            return False
        items = self.items.all(scope, group)
        config = GroupState.model_validate(record.state).config
        try:
            with TransactWrite(connection=self.streams.store.transaction_connection) as tx:
                tx.delete(record, condition=(ReaderGroupRecord.version == record.version) & same_incarnation(record))
                delete_pages(tx, record)
                tx.delete(ReaderGroupHeadRecord(reader_group_pk(scope, group), HEAD_KEY))
                tx.delete(ReaderGroupNameRecord(reader_groups_pk(scope), group))
                self.subscriptions.unsubscribe(tx, scope, group, config)
        except TransactWriteError as e:
            if not _contended(e):
                raise
            try:
                read_record(scope, group)
            except ReaderGroupNotFound:
                pass
            else:
                raise WriteConflict(f"reader group {scope}/{group} changed while being deleted") from e
        drop_lease(scope, group, record.create_id, record.version)
        self.items.delete(items.values())
        return True

    def update_truncation_cut(self, scope: str, group: str, cut: StreamCutBody,
                              incarnation: str | None = None) -> StreamCutBody:
        """The application acknowledges consumption up to ``cut`` (MANUAL_RELEASE_AT_USER_STREAMCUT), as
        the group's ``incarnation`` when it names one (ReaderGroupInfo.incarnation, which the SDK's
        handle learns when it opens the group): a cut an application of a deleted group sends after the
        name was created again is refused (ReaderGroupNotFound), never taken for the new group's. None:
        whichever group has the name (a caller that knows no incarnation)."""
        record, state = self._read_state(scope, group)
        if incarnation is not None and incarnation != record.create_id:
            raise ReaderGroupNotFound(f"reader group {scope}/{group} of incarnation {incarnation} was deleted "
                                      "(the name holds another group now)", incarnation=incarnation)
        return self.subscriptions.publish_cut(scope, group, state, record.create_id, cut)

    def _listed_by(self, scope: str, group: str, token: str) -> bool:
        try:
            return ReaderGroupNameRecord.get(reader_groups_pk(scope), group, consistent_read=True).write_id == token
        except DoesNotExist:
            return False

    def _written_by(self, scope: str, group: str, token: str) -> bool:
        try:
            return get_record(scope, group).write_id == token
        except ReaderGroupNotFound:
            return False

    def state(self, scope: str, group: str) -> GroupState:
        """The group's state with each online reader's renewal and offsets from its own item."""
        return self._read_state(scope, group)[1]

    def _read_state(self, scope: str, group: str) -> tuple[ReaderGroupRecord, GroupState]:
        """The group's record (its incarnation: create_id) and :meth:`state` as that record holds it."""
        record = current_record(scope, group, _now()).record
        state = GroupState.model_validate(record.state)
        overlay(state, self.items.all(scope, group))
        return record, state

    def info(self, scope: str, group: str) -> ReaderGroupInfo:
        record, state = self._read_state(scope, group)
        return ReaderGroupInfo(scope=scope, group=group, config=state.config, online_readers=sorted(state.readers),
                               outstanding_checkpoints=[c.name for c in state.checkpoints],
                               last_checkpoint=state.last_checkpoint, unassigned_segments=len(state.unassigned),
                               incarnation=record.create_id)

    def list_groups(self, scope: str, limit: int, token: str | None) -> tuple[list[str], str | None]:
        """A page of the scope's reader groups by name: one query of the scope's listing partition."""
        self.streams.store.get_scope(validate_scope_name(scope))
        result = ReaderGroupNameRecord.query(reader_groups_pk(scope), limit=limit,
                                             last_evaluated_key=_decode_token(token, reader_groups_pk(scope)))
        names = [r.group for r in result]
        return names, _encode_token(result.last_evaluated_key)

    def reader_statuses(self, scope: str, group: str) -> list[ReaderStatus]:
        """Each online reader's segments at the offsets it last reported, with what it has yet to read of
        them: one segment length read per held segment (bounded by the group's live segments)."""
        statuses = []
        for name, entry in sorted(self.state(scope, group).readers.items()):
            segments = [self._reader_segment(h) for h in sorted(entry.segments.values(), key=lambda h: h.key)]
            statuses.append(ReaderStatus(reader=name, last_seen_ms=entry.seen_ms, segments=segments,
                                         unread_bytes=sum(s.unread_bytes for s in segments)))
        return statuses

    def _reader_segment(self, held: Held) -> ReaderSegment:
        length = self.streams.segments.info(f"{held.stream}/{held.segment.segment_id}").length
        end = length if held.end_offset is None else min(length, held.end_offset)
        return ReaderSegment(stream=held.stream, segment=held.segment, offset=held.offset,
                             end_offset=held.end_offset, unread_bytes=max(0, end - held.offset))

    def acknowledged_cuts(self, scope: str, group: str) -> list[AcknowledgedCut]:
        """A subscriber's acknowledged cut in each of its streams (none for a group that is no subscriber)."""
        return self.subscriptions.acknowledged_cuts(scope, group, self.state(scope, group).config)

    def add_reader(self, scope: str, group: str, reader: str, instance: str | None = None) -> Assignment:
        """A reader joins (AlreadyExists if another instance is online under its name). Its lease is
        announced before the join is stored, so that a crash in between never leaves an online reader
        the lease job does not know of (only, at worst, a deadline at which the job looks in vain)."""
        now = _now()
        return self._modify(scope, group, lambda s: (add_reader(s, reader, now, instance), assignment(s, reader))[1],
                            lease_first=True)

    def expire_readers(self, scope: str, group: str) -> list[str]:
        """The lease job's work on a due group: take offline the readers whose lease ended, and say when
        to look again. A lease record left by a deleted group is removed."""
        now = _now()
        try:
            return self._modify(scope, group, lambda s: expire_readers(s, now), announce_anyway=True)
        except ReaderGroupNotFound:
            drop_orphan_lease(scope, group)
            return []

    def expire_readers_of(self, groups: list[tuple[str, str]], workers: int = LEASE_WORKERS) -> LeaseRun:
        """:meth:`expire_readers` of each (scope, group), ``workers`` at once (each changes only its own
        group's records, by conditioned writes). A group whose look raises (throttled, say) is that
        group's error outcome, not the run's: the other groups are looked at all the same."""
        outcomes, seconds = fan_out(lambda group: self.expire_readers(*group), groups, workers,
                                    on_error=lambda _, error: error_outcome(error))
        looked_at = dict(zip(groups, outcomes, strict=True))
        return LeaseRun({g: readers for g, readers in looked_at.items() if not isinstance(readers, str)}, seconds,
                        {g: error for g, error in looked_at.items() if isinstance(error, str)})

    def groups_due_for_lease_check(self, limit: int = LEASE_RUN_LIMIT) -> dict[tuple[str, str], int]:
        """The groups whose earliest reader lease may have ended, (scope, group) -> the deadline that
        passed (a group is due again later with a new one): one query per index shard, at most
        ``limit`` groups, earliest first (the next call finds the rest)."""
        return groups_due(_now(), limit)

    def sync(self, scope: str, group: str, reader: str, request: SyncRequest) -> Assignment:
        """A reader's sync. It writes the group record only when what the group shares changed (an
        assignment, a checkpoint, the lease deadline, a fold of every reader's renewals when the
        deadline is near: :func:`fold_due`); otherwise the reader's own small item, and that only when
        its offsets moved, its last renewal is a RENEW_FRACTION-th of a lease old, or it passed a
        checkpoint. A pass goes to the item when it releases no segment and another reader has yet to
        pass (the group's head item counts such passes); the pass whose count says it may be the last
        reads every reader's item and stores all their passes in the record, finishing the checkpoint,
        so a checkpoint of N readers rewrites the record about once rather than N times. A sync that
        changes nothing writes nothing."""
        everyone = False  # read every reader's item, not only this reader's
        for attempt in range(20):
            now = _now()
            record, passes = current_record(scope, group, now)
            state = GroupState.model_validate(record.state)
            published = state.last_checkpoint
            fold = everyone or fold_due(state, now)
            if fold:
                stored = shared_view(state)  # before the items: what they carry is this fold's to store
                items = self.items.all(scope, group)
                if passes is not None:
                    state.folded_passes = passes  # the passes counted before the items were read are in them
            else:
                items = self.items.one(scope, group, reader) if reader in state.readers else {}
            overlay(state, items)
            passing, in_item = request, None
            if not fold:
                in_item = _item_pass(state, reader, request) if passes is not None else None
                if in_item:
                    record_pass(state, reader, *in_item)
                    passing = request.model_copy(update={"checkpoint": None})
                elif _passed_checkpoint(state, reader, request) and passes is not None and passes > state.folded_passes:
                    everyone = True  # other passes may wait in items: fold them in with this one
                    continue
                stored = shared_view(state)  # what the items carry needs no record write: only a fold stores it
            finish_checkpoints(state)
            scheduled = state.lease_deadline_ms
            joins = {name: e.join for name, e in state.readers.items()}
            entry = state.readers.get(reader)
            renewed = entry.seen_ms if entry else 0
            offsets = _offsets(entry) if entry else {}
            result = sync(state, reader, passing, now, self._successors)
            deadline = schedule_lease_check(state, now)
            lease = state.config.reader_lease_ms
            if not fold and _leaving(joins, state, items):
                everyone = True  # it takes readers offline: only on what every reader's own item says
                continue
            if shared_view(state) == stored:
                entry = state.readers[reader]
                if in_item or _offsets(entry) != offsets or now - renewed >= lease // RENEW_FRACTION:
                    written = self.items.write(scope, group, reader, items.get(reader), state.config.generation,
                                               entry.join, now, _offsets(entry), _kept_passes(state, entry, items.get(reader), in_item))
                    if in_item and not written:
                        continue  # the reader is told it passed only once its pass is stored
                    if in_item and _may_be_last(state, in_item[0], count_pass(scope, group)):
                        everyone = True  # fold every reader's pass in: the checkpoint finishes in the record
                        continue
                # Near its lease's end by the clock now, after the item's write: another sync or the lease
                # job may have taken it offline since this sync's reads (see _write), however long it
                # stalled before or during the write; by ``now`` a stall would slip past that expiry.
                if (_now() - renewed >= lease - lease // RENEW_FRACTION
                        and current_record(scope, group, now).record.version != record.version):
                    continue
                return result
            try:
                self._write(scope, group, record, state, _leaving(joins, state, items))
            except WriteConflict:
                time.sleep(random.uniform(0, 0.02 * (attempt + 1)))
                continue
            if deadline != scheduled:
                announce_lease(scope, group, record.create_id, record.version, deadline)
            self.items.delete(stale_items(state, items))
            self.subscriptions.publish_checkpoint(scope, group, published, state, record.create_id)
            return result
        raise WriteConflict(f"reader group {scope}/{group} is too contended; try again")

    def reader_offline(self, scope: str, group: str, reader: str, position: list[SegmentOffset] | None,
                       instance: str | None = None) -> None:
        self._modify(scope, group, lambda s: reader_offline(s, reader, position, instance))

    def initiate_checkpoint(self, scope: str, group: str, name: str, silent: bool = False) -> CheckpointInfo:
        now = _now()
        return self._modify(scope, group, lambda s: (initiate_checkpoint(s, name, silent, now),
                                                     checkpoint_info(s, name))[1])

    def checkpoint(self, scope: str, group: str, name: str) -> CheckpointInfo:
        return checkpoint_info(self.state(scope, group), name)

    def stream_cuts(self, scope: str, group: str) -> list[StreamCutBody]:
        state = self.state(scope, group)
        return state.cuts(state.current_positions())

    def unread_bytes(self, scope: str, group: str) -> int:
        total = 0
        for cut in self.stream_cuts(scope, group):
            offsets = {p.segment.segment_id: p.offset for p in cut.positions}
            total += sum(s.end_offset - s.start_offset for s in self.streams.slices(cut.scope, cut.stream, offsets))
        return total

    # -- helpers -------------------------------------------------------------------------------

    def _successors(self, stream: str, segment_id: int, incarnation: int | None) -> list[SuccessorInfo]:
        scope, name = stream.split("/", 1)
        return self.streams.successors(scope, name, segment_id, incarnation)

    def _modify(self, scope: str, group: str, change: Callable[[GroupState], Any], announce_anyway: bool = False,
                lease_first: bool = False) -> Any:
        """Apply ``change`` to the group's state and write it back if nobody raced; retry if somebody did.

        Every change, a lease takeover included, is conditional on the version read. Then, if the time
        to look for expired readers moved (or ``announce_anyway``), the group's lease record says so;
        with ``lease_first`` it says so before the change is stored, as the decision of the version the
        change will have (for changes that only add readers: an earlier deadline is always safe).
        """
        for attempt in range(20):
            record, passes = current_record(scope, group, _now())
            state = GroupState.model_validate(record.state)
            before = state.last_checkpoint
            items = self.items.all(scope, group)
            overlay(state, items)
            if passes is not None:
                state.folded_passes = passes  # the passes counted before the items were read are in them
            finish_checkpoints(state)
            scheduled = state.lease_deadline_ms
            joins = {name: e.join for name, e in state.readers.items()}
            result = change(state)
            deadline = schedule_lease_check(state, _now())
            if lease_first:
                announce_lease(scope, group, record.create_id, record.version + 1, deadline)
            try:
                self._write(scope, group, record, state, _leaving(joins, state, items))
            except WriteConflict:
                time.sleep(random.uniform(0, 0.02 * (attempt + 1)))
                continue
            if not lease_first and (announce_anyway or deadline != scheduled):
                announce_lease(scope, group, record.create_id, record.version, deadline)
            self.items.delete(stale_items(state, items))
            self.subscriptions.publish_checkpoint(scope, group, before, state, record.create_id)
            return result
        raise WriteConflict(f"reader group {scope}/{group} is too contended; try again")

    def _write(self, scope: str, group: str, record: ReaderGroupRecord, state: GroupState,
               leaving: dict[str, ReaderItemRecord | None]) -> None:
        """Store ``state`` if the record still has the version read (WriteConflict if not). A resend
        refused after a lost answer counts as the write it is (the change is stored).

        ``leaving``: the readers this change takes offline, with their items as read (None: none). Then
        the write is one transaction that also checks each of those items is unchanged, so a reader whose
        sync renewed its lease in its item meanwhile is not taken offline (the change is read again). A
        state in pages (state.PAGE_BYTES) is written in one transaction with them too.
        With the sync's own check (a sync that renewed a lease near its end reads the record's version
        again), a reader is never told it holds segments that a concurrent expiry gave away."""
        stored = storable(state, f"reader group {scope}/{group}")
        raise_bound(scope, group, record, stored.body)
        if not leaving and not paged(record, stored):
            versioned_update(record, record_actions(stored), "reader group state changed concurrently",
                             same_incarnation(record))
            return
        token, version = uuid.uuid4().hex, record.version
        try:
            with TransactWrite(connection=self.streams.store.transaction_connection) as tx:
                tx.update(record, actions=[*record_actions(stored), ReaderGroupRecord.write_id.set(token)],
                          condition=same_incarnation(record))
                write_pages(tx, record, stored, record.pk)
                for name, item in (leaving or {}).items():
                    tx.condition_check(ReaderItemRecord, reader_group_pk(scope, group), reader_sk(name),
                                       ReaderItemRecord.sk.does_not_exist() if item is None
                                       else ReaderItemRecord.version == item.version)
        except TransactWriteError as e:
            if not self._written_by(scope, group, token):
                if _contended(e):
                    raise WriteConflict("reader group state, or a leaving reader's item, changed concurrently") from e
                raise
            record.version = version + 1


def _contended(error: TransactWriteError) -> bool:
    """Whether a transaction was refused for a race (a condition, or a concurrent transaction)."""
    reasons = {r.code for r in error.cancellation_reasons or [] if r is not None}
    return bool(reasons & {"ConditionalCheckFailed", "TransactionConflict"})


def _cancelled_by_condition(error: TransactWriteError, index: int) -> bool:
    """Whether a transaction was refused because the condition of its ``index``-th write failed."""
    reasons = error.cancellation_reasons or []
    return len(reasons) > index and reasons[index] is not None and reasons[index].code == "ConditionalCheckFailed"


def _now() -> int:
    """The time every operation here reads, in milliseconds (tests and benchmarks replace it)."""
    return int(time.time() * 1000)


def _offsets(entry: ReaderEntry) -> dict[str, int]:
    return {key: held.offset for key, held in entry.segments.items()}


def _passed_checkpoint(state: GroupState, reader: str, request: SyncRequest) -> Checkpoint | None:
    """The checkpoint this sync passes, if its reader has yet to pass it."""
    if not request.checkpoint or reader not in state.readers:
        return None
    return pending_checkpoint(state, reader, request.checkpoint)


def _item_pass(state: GroupState, reader: str, request: SyncRequest) -> tuple[Checkpoint, dict[str, int]] | None:
    """The checkpoint this sync passes and the offsets it passes it at, if the pass may be stored in the
    reader's own item: it releases no segment (rebalancing changes the record), the sync completes no
    segment (a completion's end offset must not be taken for the pass's position), and someone else has
    yet to pass it (the last pass finishes it in the record)."""
    checkpoint = _passed_checkpoint(state, reader, request)
    if checkpoint is None or request.completed or releases_surplus(state, reader) or len(checkpoint.pending) < 2:
        return None
    offsets = _offsets(state.readers[reader])
    for p in request.positions:
        key = f"{p.stream}/{p.segment_id}"
        if key in offsets:
            offsets[key] = p.offset
    return checkpoint, offsets


def _may_be_last(state: GroupState, checkpoint: Checkpoint, counted: int | None) -> bool:
    """Whether the pass just counted (``counted``: the head's count with it) may have been the last of
    ``checkpoint``: the passes counted since the last fold, other than this one, are as many as the
    readers the state still has pending. Concurrent last passes each see the others' counts."""
    return counted is not None and counted - 1 - state.folded_passes >= len(checkpoint.pending)


def _kept_passes(state: GroupState, entry: ReaderEntry, item: ReaderItemRecord | None,
                 new: tuple[Checkpoint, dict[str, int]] | None) -> dict[str, dict[str, int]]:
    """The passes a reader's item keeps ({Checkpoint.key: offsets}): those its entry's item carries of
    checkpoints still outstanding (an item of an earlier join or generation passes nothing), and the new one."""
    outstanding = {c.key for c in state.checkpoints}
    carried = item.passes if item and item.join == entry.join and item.generation == state.config.generation else None
    kept = {key: offsets for key, offsets in (carried or {}).items() if key in outstanding}
    if new:
        kept[new[0].key] = new[1]
    return kept


def _leaving(joins: dict[str, str | None], state: GroupState, items: dict[str, ReaderItemRecord]
             ) -> dict[str, ReaderItemRecord | None]:
    """The readers of ``joins`` (name -> join id before a change) that ``state`` no longer has online
    (or has under another join), each with its item as read."""
    return {name: items.get(name) for name, join in joins.items()
            if name not in state.readers or state.readers[name].join != join}
