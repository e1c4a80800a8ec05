"""Reader leases: readers' renewals in their own items, and when the control plane looks for dead readers.

What changes with every sync -- a reader's lease renewal and its offsets -- is not the group's to
share: each online reader has a small item of its own for them (controlplane.reader_items), and a
sync that changes nothing else writes no group record (the record is tens of kilobytes for a large
group, DynamoDB charges a write by the item's size, and readers sync every few seconds). Anything that
reads the state to decide (a join, a reader going offline, a checkpoint, the lease job, the group's
stream cuts) folds the items in first (:func:`overlay`), and a sync folds them into the record when
the group's lease deadline comes near (:func:`fold_due`).

The deadline (``GroupState.lease_deadline_ms``, :func:`schedule_lease_check`) is announced in the
group's lease record (``rg#<scope>/<group>``, sort key ``lease``), which a sparse index keeps by
deadline; the lease job (the Dagster sensor ``reader_lease_sensor``) queries it for due groups
(:func:`groups_due`) and takes their expired readers offline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pynamodb.exceptions import DeleteError, DoesNotExist, PutError

from controlplane.models import ReaderLeaseRecord, reader_group_pk
from controlplane.reader_groups.checkpoints import record_item_passes
from controlplane.reader_groups.state import GroupState, get_record
from controlplane.store import failed_condition
from dataplane.fanout import per_second
from dataplane.shards import query_every_shard, shard_key
from rillet.errors import ReaderGroupNotFound

# a reader's item is rewritten to renew its lease once its last renewal is this fraction of a lease old
RENEW_FRACTION = 4
LEASE_KEY = "lease"
LEASE_SHARD = "reader-lease"  # the lease records' partition keys of the deadlines index: reader-lease#<n>
# The lease job (docs/limits.md): a run takes at most LEASE_RUN_LIMIT due groups, earliest first, and the
# next tick the rest; it looks at LEASE_WORKERS groups at once.
LEASE_RUN_LIMIT = 1_000
LEASE_WORKERS = 16
# an announce reads and puts again at most this many times while the lease record changes under it
LEASE_ATTEMPTS = 3


# -- the deadline and the readers' items (pure) -------------------------------------------------


def schedule_lease_check(state: GroupState, now: int) -> int | None:
    """When the control plane should next look for expired readers of this group (None: no reader).

    Never after an online reader's lease ends, so no dead reader is missed; moved on only when it is
    due within a third of a lease (see :func:`fold_due`: the sync that moves it has read every reader's
    renewals) or half a lease behind, so live readers cost one small write of the lease record per
    half lease rather than one per sync, and the lease job never wakes for a group whose readers all sync.
    A lease that ended already (a change takes at most MAX_EXPIRED_PER_WRITE readers offline) makes it
    ``now``, this change's time: due at once, and apart from the deadline the lease job last ran for (its
    run key names the deadline, and readers that joined together share one).
    """
    expiries = [entry.seen_ms + state.config.reader_lease_ms for entry in state.readers.values()]
    if not expiries:
        state.lease_deadline_ms = None
        return None
    earliest, scheduled = max(min(expiries), now), state.lease_deadline_ms
    if (scheduled is None or earliest < scheduled or fold_due(state, now)
            or earliest - scheduled > state.config.reader_lease_ms // 2):
        state.lease_deadline_ms = earliest
    return state.lease_deadline_ms


def fold_due(state: GroupState, now: int) -> bool:
    """Whether the group's lease deadline is due within a third of a lease: then a sync reads every
    reader's item, folds their renewals and offsets into the group record (taking offline those whose
    lease did end) and moves the deadline on, before the lease job would wake for the group.

    Readers renew their item at least every RENEW_FRACTION-th of a lease and the SDK syncs at least every
    sixth of one, so a live reader's renewal is never older than about 0.42 leases: a fold moves the
    deadline at least a quarter lease on, and live readers' syncs fold before the lease job looks."""
    scheduled = state.lease_deadline_ms
    return scheduled is not None and scheduled <= now + state.config.reader_lease_ms // 3


def overlay(state: GroupState, items: dict[str, Any]) -> None:
    """Bring the readers' entries up to their own items (controlplane.reader_items): the later renewal,
    per segment still held the further offset, and the checkpoints passed. An item counts only for the
    entry it was written for (same generation, same join id), so one left from before a reset, a rejoin
    or a re-create of the group never moves anyone's position or lease, nor passes a checkpoint."""
    for name, item in items.items():
        entry = state.readers.get(name)
        if entry is None or entry.join is None or item.join != entry.join or item.generation != state.config.generation:
            continue
        entry.seen_ms = max(entry.seen_ms, item.seen_ms)
        record_item_passes(state, name, item.passes or {})  # at the offsets of the passes, before later ones
        for key, offset in item.offsets.items():
            if key in entry.segments:
                entry.segments[key].offset = max(entry.segments[key].offset, offset)


def stale_items(state: GroupState, items: dict[str, Any]) -> list[Any]:
    """The items that count for no online reader of ``state`` (see :func:`overlay`)."""
    return [item for name, item in items.items()
            if name not in state.readers or item.join != state.readers[name].join
            or item.generation != state.config.generation]


# What readers' own items carry (their renewals and offsets), left out of shared_view.
_IN_READER_ITEMS = {"readers": {"__all__": {"seen_ms": True, "segments": {"__all__": {"offset"}}}}}


def shared_view(state: GroupState) -> str:
    """The state without what readers' own items carry, as JSON: a change that leaves this alike needs
    no group record write. Compared, never parsed; a JSON string rather than a dict because pydantic
    writes it in a third of the time (a sync takes two, and a large group's state is megabytes), at the
    price of also seeing a change that only reorders a map (a record write that was not needed)."""
    return state.model_dump_json(exclude=_IN_READER_ITEMS)


# -- the group's lease record --------------------------------------------------------------------


def announce_lease(scope: str, group: str, incarnation: str | None, version: int, deadline: int | None) -> None:
    """Write the lease record decided by version ``version`` of the group's ``incarnation`` (its record's
    create_id), unless a later decision of that incarnation is already there (writes may arrive out of
    order). A write lost after the group's was stored leaves an earlier deadline (joins announce first),
    which only makes the lease job look once in vain.

    Versions restart when the name is created again, so a version is compared only with one of the same
    incarnation; a record of another incarnation is replaced only while the group record is still of
    this one (:func:`_left_by_another_group`). So the newest group's announces land, and a deleted group's
    late announce never replaces the new group's deadline. The common announce is one conditional put as
    before; only a refused one reads the lease record (a small consistent read) and, when that is of
    another incarnation, the group record's item (its size in read units: up to about a hundred for a
    large group, once after each create under a name whose lease record was left, and per late announce
    of a deleted group). After LEASE_ATTEMPTS records changed under it, the writers that changed them
    decide."""
    lease = ReaderLeaseRecord(reader_group_pk(scope, group), LEASE_KEY, scope=scope, group=group,
                              create_id=incarnation, group_version=version, deadline_ms=deadline,
                              deadline_shard=None if deadline is None else shard_key(LEASE_SHARD, f"{scope}/{group}"))
    later = _of_incarnation(incarnation) & (ReaderLeaseRecord.group_version < version)
    for _ in range(LEASE_ATTEMPTS):
        if _put(lease, ReaderLeaseRecord.pk.does_not_exist() | later):
            return
        try:
            there = ReaderLeaseRecord.get(reader_group_pk(scope, group), LEASE_KEY, consistent_read=True)
        except DoesNotExist:
            continue  # dropped since the put: put it again
        if there.create_id == incarnation or not _left_by_another_group(lease, there):
            return  # a later decision of this group is there, or this group was deleted
        if _put(lease, _of_incarnation(there.create_id) & (ReaderLeaseRecord.group_version == there.group_version)):
            return


def _left_by_another_group(lease: ReaderLeaseRecord, there: ReaderLeaseRecord) -> bool:
    """Whether ``there``, the lease record of another incarnation than ``lease``'s, was left by a group
    that is gone: the group record is (still) of ``lease``'s incarnation. One without any incarnation may
    be a previous release's announce for this very group (a rolling upgrade): it is replaced by a later
    version, as then, or when its version is past any this group had yet (joins announce version + 1)."""
    try:
        current = get_record(lease.scope, lease.group)
    except ReaderGroupNotFound:
        return False
    if current.create_id != lease.create_id:
        return False
    if there.create_id is None:
        return there.group_version < lease.group_version or there.group_version > current.version + 1
    return True


def _put(lease: ReaderLeaseRecord, condition: Any) -> bool:
    """Save ``lease`` on ``condition``; False if the condition failed."""
    try:
        lease.save(condition=condition)
        return True
    except PutError as e:
        if not failed_condition(e):
            raise
        return False


def _of_incarnation(incarnation: str | None) -> Any:
    """The condition that the lease record is of the group's ``incarnation`` (None: a group created, or
    a record written, before incarnations were recorded)."""
    if incarnation is None:
        return ReaderLeaseRecord.create_id.does_not_exist()
    return ReaderLeaseRecord.create_id == incarnation


def drop_lease(scope: str, group: str, incarnation: str | None, version: int) -> None:
    """Delete the lease record of a deleted group (its ``incarnation``), whose last version was
    ``version``: a record a later group of that name wrote stays, whatever its version."""
    _delete_lease(scope, group, _of_incarnation(incarnation) & (ReaderLeaseRecord.group_version <= version))


def drop_orphan_lease(scope: str, group: str) -> None:
    """Delete the lease record a deleted group left, unless it changed since it was read here or its
    group is there after all (a group created again since the lease job found none, which announced)."""
    try:
        orphan = ReaderLeaseRecord.get(reader_group_pk(scope, group), LEASE_KEY, consistent_read=True)
    except DoesNotExist:
        return
    try:
        if get_record(scope, group).create_id == orphan.create_id:
            return
    except ReaderGroupNotFound:
        pass
    _delete_lease(scope, group, _of_incarnation(orphan.create_id)
                  & (ReaderLeaseRecord.group_version == orphan.group_version))


def _delete_lease(scope: str, group: str, condition: Any) -> None:
    try:
        ReaderLeaseRecord(reader_group_pk(scope, group), LEASE_KEY).delete(condition=condition)
    except DeleteError as e:
        if not failed_condition(e):
            raise


def groups_due(now: int, limit: int) -> dict[tuple[str, str], int]:
    """The groups whose earliest reader lease may have ended by ``now``, (scope, group) -> the deadline
    that passed: one query per index shard, at most ``limit`` groups, earliest first."""
    due = query_every_shard(LEASE_SHARD, lambda key: ReaderLeaseRecord.txn_deadlines.query(
        key, ReaderLeaseRecord.deadline_ms <= now, limit=limit), ReaderLeaseRecord)
    return {(lease.scope, lease.group): lease.deadline_ms for lease in sorted(due, key=lambda x: x.deadline_ms)[:limit]}


@dataclass(frozen=True)
class LeaseRun:
    """What a lease run did: the readers it took offline, per group it looked at, and how fast; the
    groups whose look raised, with their error outcome (the next run looks at them again)."""

    expired: dict[tuple[str, str], list[str]]
    seconds: float
    errors: dict[tuple[str, str], str] = field(default_factory=dict)

    def summary(self) -> str:
        readers = sum(len(names) for names in self.expired.values())
        looked_at = len(self.expired) + len(self.errors)
        return (f"looked at {looked_at} reader group(s) in {self.seconds:.2f} s "
                f"({per_second(looked_at, self.seconds):,.1f}/s), took {readers} reader(s) offline"
                + (f", {len(self.errors)} group(s) failed" if self.errors else ""))
