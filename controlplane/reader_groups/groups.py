"""Reader groups: which reader reads which segment, checkpoints, and the group's position.

The group's whole shared state is one versioned record (:class:`GroupState` as JSON). Every change
is a pure function applied to the state and written back on the condition that nobody changed it
meanwhile; a lost race is retried on the fresh state. This is the role Pravega's State Synchronizer
plays, with the logic on the controller so that readers only need HTTPS.

What changes with every sync -- a reader's lease renewal and its offsets -- is not the group's to
share: each online reader has a small item of its own for them (controlplane.reader_items), and a
sync that changes nothing else writes no group record (the record is tens of kilobytes for a large
group, DynamoDB charges a write by the item's size, and readers sync every few seconds). Anything that
reads the state to decide (a join, a reader going offline, a checkpoint, the lease job, the group's
stream cuts) folds the items in first (:func:`overlay`), and a sync folds them into the record when
the group's lease deadline comes near (:func:`fold_due`).

The rules, as in Pravega:

* Segments of the start cut are unassigned at first; a reader acquires unassigned segments up to
  its fair share (ceil(segments / readers)).
* A reader that reads a segment to its end reports it completed. Its successors become available
  once all their predecessors are completed (a merge's successor is held until every predecessor is
  read: the R1, R2, S3 example of seed 004); successors past the group's end cut are never handed out.
* Checkpoints: every online reader must pass the checkpoint; it reports its positions when it does.
  When the last one has, the checkpoint's stream cuts are fixed. While a checkpoint is outstanding
  no segment is handed out, so the cut stays consistent; a reader with more than its fair share
  releases the surplus when it passes a checkpoint (rebalancing happens at checkpoints).
* ``reader_offline(reader, position)`` returns the reader's segments to the group at that position.
* Leases, not goodbyes: a reader not heard from for ``config.reader_lease_ms`` (default 60 s; every
  read syncs at least every ``group_refresh_time_ms``) is taken offline at its last reported position
  by the next sync of another reader, or by the control plane's lease job (the Dagster sensor
  ``reader_lease_sensor``), whichever comes first. Pravega leaves this to the application's
  ``readerOffline``; serverless readers are killed without saying goodbye. A reader taken offline
  that syncs again gets :class:`ReaderNotInReaderGroup`, as in Pravega: its segments are another's.
"""

from __future__ import annotations

import json
import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError
from pynamodb.transactions import TransactWrite

from controlplane.cuts import upper_bound
from controlplane.models import (
    ReaderGroupNameRecord,
    ReaderGroupRecord,
    ReaderLeaseRecord,
    reader_group_pk,
    reader_groups_pk,
)
from controlplane.reader_items import ReaderItemRecord, ReaderItems, reader_sk
from controlplane.store import _decode_token, _encode_token, failed_condition, versioned_update
from dataplane.fanout import fan_out, per_second
from dataplane.shards import query_every_shard, shard_key
from rillet.api import (
    AssignedSegment,
    Assignment,
    CheckpointInfo,
    ReaderGroupInfo,
    SegmentOffset,
    SyncRequest,
)
from rillet.errors import (
    AlreadyExists,
    IllegalState,
    InvalidArgument,
    NotFound,
    ReaderGroupNotFound,
    ReaderNotInReaderGroup,
    StreamNotFound,
    StreamRecreated,
    WriteConflict,
)
from rillet.models import (
    AcknowledgedCut,
    ReaderGroupConfig,
    ReaderSegment,
    ReaderStatus,
    SegmentPosition,
    SegmentRange,
    StreamCutBody,
    StreamDataRetention,
    StreamRange,
    SuccessorInfo,
)
from rillet.names import validate_reader_group_name, validate_scope_name
from rillet.stream_cut import (
    Ordering,
    compare_positions,
    segment_is_after,
    segment_is_before,
    validity_problem,
)

GROUP_KEY = "rg"
# a reader's item is rewritten to renew its lease once its last renewal is this fraction of a lease old
RENEW_FRACTION = 4
LEASE_KEY = "lease"
LEASE_SHARD = "reader-lease"  # the lease records' partition keys of the deadlines index: reader-lease#<n>
# The lease job (docs/limits.md): a run takes at most LEASE_RUN_LIMIT due groups, earliest first, and the
# next tick the rest; it looks at LEASE_WORKERS groups at once.
LEASE_RUN_LIMIT = 1_000
LEASE_WORKERS = 16
# DynamoDB refuses items over 400 KB; the rest is room for a checkpoint's positions (see GroupState)
MAX_STATE_BYTES = 250_000
# A subscriber group's create or reset is one DynamoDB transaction, of at most 100 writes: the group's
# record (and its listing entry), two per subscribed stream (its subscriber record and the stream's
# subscriber fence) and, for a reset, one per stream it stops subscribing to: 2 + 2 x 32 + 32 < 100.
MAX_SUBSCRIBED_STREAMS = 32


class Held(BaseModel):
    """A segment held by the group (assigned or not) with the offset reading continues from."""

    stream: str
    segment: SegmentRange
    offset: int = 0
    end_offset: int | None = None

    @property
    def key(self) -> str:
        return f"{self.stream}/{self.segment.segment_id}"


class Waiting(BaseModel):
    held: Held
    predecessors: list[str]  # keys of predecessors not yet completed: at most the segments one scale sealed


class ReaderEntry(BaseModel):
    segments: dict[str, Held] = {}  # at most the fair share: ceil(live segments / online readers)
    seen_ms: int = 0
    # the token of the reader instance that joined under this name (None: an SDK that sends none);
    # one string of at most 64 characters (rillet.api.INSTANCE_TOKEN) per online reader
    instance: str | None = None
    # random, new with every join that creates the entry: the reader's own item (controlplane.reader_items)
    # counts only while it carries this id (None: an entry stored before reader items existed)
    join: str | None = None


class Completed(BaseModel):
    stream: str
    segment: SegmentRange
    end_offset: int


class Checkpoint(BaseModel):
    name: str
    silent: bool = False
    pending: list[str]  # online readers that have not passed it: at most the online readers
    # reported at each reader's pass, plus segments completed meanwhile: at most the live segments when
    # it began (nothing is handed out while a checkpoint is outstanding)
    positions: dict[str, Held] = {}
    created_ms: int


class GroupState(BaseModel):
    """The group's shared state: one DynamoDB item, so every collection in it is bounded by the group's
    present (its online readers and the segments of its streams' current epochs), never by its past:
    about 17 KB for 100 readers over a stream of 24 segments that completed 10,000 segments
    (tests/integration/test_reader_group_bounds.py). The ceiling, as JSON: about 250 bytes per live
    segment (190 more per outstanding checkpoint, of which there are at most 10, plus 100 in the last
    checkpoint's cut) and 180 per online reader (a 31-character stream name, 39-character reader ids,
    of which 46 are the reader's instance token and 30 its join id): 1,000 readers on a 1,000-segment
    stream take 430 KB, 640 KB during a checkpoint. A change past MAX_STATE_BYTES is refused with IllegalState
    (a group of some 600 live segments), rather than failing in DynamoDB."""

    config: ReaderGroupConfig
    readers: dict[str, ReaderEntry] = {}  # online readers only: leaving, or an expired lease, removes one
    unassigned: dict[str, Held] = {}  # at most the live segments
    future: dict[str, Waiting] = {}  # successors of completed segments: at most one scale's new segments each
    # the group's newest position where no successor started (see _forget_superseded_completions)
    completed: dict[str, Completed] = {}
    start: dict[str, list[SegmentRange]] = {}  # the start cuts, fixed at creation
    end: dict[str, list[SegmentPosition]] = {}  # the end cuts, fixed at creation
    checkpoints: list[Checkpoint] = []  # at most config.max_outstanding_checkpoint_request, itself at most 10
    last_checkpoint: CheckpointInfo | None = None  # one stream cut per stream
    lease_deadline_ms: int | None = None  # the group's lease record says: look again then (see schedule_lease_check)
    last_auto_checkpoint_ms: int = 0
    checkpoint_counter: int = 0

    # -- queries -------------------------------------------------------------------------------

    def incarnation(self, stream: str) -> int | None:
        """The incarnation of ``stream`` ("scope/stream") the group reads: every position it keeps is of
        it (None: a group stored before incarnations were recorded)."""
        return next((s.incarnation for s in self.config.streams if s.scoped_name == stream), None)

    def live_count(self) -> int:
        return len(self.unassigned) + sum(len(r.segments) for r in self.readers.values())

    def fair_share(self) -> int:
        return math.ceil(self.live_count() / max(1, len(self.readers)))

    def known(self, key: str) -> bool:
        return (key in self.unassigned or key in self.future or key in self.completed
                or any(key in r.segments for r in self.readers.values()))

    def end_of_data(self) -> bool:
        return self.live_count() == 0 and not self.future

    def current_positions(self) -> dict[str, Held]:
        held = dict(self.unassigned)
        for reader in self.readers.values():
            held.update(reader.segments)
        return held

    def cuts(self, positions: dict[str, Held]) -> list[StreamCutBody]:
        """Stream cuts from ``positions``, completed where needed so each covers the key space.

        Segments still held but not in ``positions``, and completed segments whose successors have not
        started, fill the gaps (a completed segment counts at its end offset).
        """
        chosen = dict(positions)
        # Newest completed segments first: where A was split into A1, A2 and both were read, the
        # position is A1, A2 at their ends, not A at its end (which would read A1 and A2 again).
        completed = sorted(self.completed.values(), key=lambda c: c.segment.epoch, reverse=True)
        fillers = list(self.current_positions().values()) + [
            Held(stream=c.stream, segment=c.segment, offset=c.end_offset) for c in completed]
        for held in fillers:
            if held.key in chosen:
                continue
            same_stream = [h for h in chosen.values() if h.stream == held.stream]
            if not any(h.segment.low < held.segment.high and held.segment.low < h.segment.high for h in same_stream):
                chosen[held.key] = held
        result = []
        for spec in self.config.streams:
            name = spec.scoped_name
            held = {h.key: h for h in chosen.values() if h.stream == name}
            self._fill_gaps(name, held)
            ordered = sorted(held.values(), key=lambda h: h.segment.low)
            positions_ = [SegmentPosition(segment=h.segment, offset=h.offset) for h in ordered]
            if positions_ and validity_problem([p.segment for p in positions_]) is None:
                result.append(StreamCutBody(scope=spec.scope, stream=spec.stream, positions=positions_,
                                            incarnation=spec.incarnation))
        return result

    def _fill_gaps(self, stream: str, held: dict[str, Held]) -> None:
        """Make ``held`` cover the key space where a scale both split and merged segments at once.

        Then a successor may be read (its only predecessor is done) while a sibling waits for another
        predecessor, and no set of current positions tiles the key space. Fall back, for such a gap,
        to the completed predecessor at its end in place of its successors: an earlier cut, so a group
        restarted from it reads those successors again (never less than it must).
        """
        for _ in range(len(self.completed) + 1):
            covered = sorted((h.segment.low, h.segment.high) for h in held.values())
            gaps, position = [], 0.0
            for low, high in covered:
                if low > position:
                    gaps.append((position, low))
                position = max(position, high)
            if position < 1.0:
                gaps.append((position, 1.0))
            if not gaps:
                return
            newest_first = sorted(self.completed.values(), key=lambda c: c.segment.epoch, reverse=True)
            done = next((c for c in newest_first if c.stream == stream and any(
                c.segment.low < hi and lo < c.segment.high for lo, hi in gaps)), None)
            if done is None:
                return
            for key in [k for k, h in held.items()
                        if h.segment.low < done.segment.high and done.segment.low < h.segment.high]:
                del held[key]
            completed = Held(stream=stream, segment=done.segment, offset=done.end_offset)
            held[completed.key] = completed


# (scoped stream, segment id, the group's incarnation of the stream) -> successors
Successors = Callable[[str, int, int | None], list[SuccessorInfo]]


def new_state(config: ReaderGroupConfig, starts: dict[str, list[SegmentPosition]]) -> GroupState:
    """The initial state: the start cuts' segments unassigned at their offsets."""
    state = GroupState(config=config)
    for spec in config.streams:
        name = spec.scoped_name
        positions = starts[name]
        state.start[name] = [p.segment for p in positions]
        if spec.end:
            state.end[name] = list(spec.end)
        ends = {p.segment.segment_id: p.offset for p in spec.end or []}
        for p in positions:
            if spec.end and p.segment.segment_id not in ends and segment_is_after(p.segment, [e.segment for e in spec.end]):
                continue
            held = Held(stream=name, segment=p.segment, offset=p.offset, end_offset=ends.get(p.segment.segment_id))
            if held.end_offset is not None and held.offset >= held.end_offset:
                state.completed[held.key] = Completed(stream=name, segment=p.segment, end_offset=held.offset)
            else:
                state.unassigned[held.key] = held
    return state


# -- transitions (pure: they change the state object they are given) --------------------------------


def add_reader(state: GroupState, reader: str, now: int, instance: str | None = None) -> None:
    """A reader joins (it takes segments at its first sync, so that readers joining together share
    them); it is not asked to pass checkpoints begun before it joined (it held nothing then).

    A name is one reader, as in Pravega: a join carrying another ``instance`` token than the online
    reader of that name is refused (two would read the same segments), unless that reader's lease has
    ended; the same token is the same reader repeating a join whose answer it lost. A join without a
    token, or to a reader that joined without one, is accepted by name.
    """
    entry = state.readers.get(reader)
    another = entry is not None and _another_instance(entry, instance)
    expire_readers(state, now, sparing=None if another else reader)
    if another and reader in state.readers:
        raise AlreadyExists(f"reader {reader} is already online in this reader group (another instance joined "
                            "under that name); take it offline first (reader_offline) or wait for its lease "
                            "to end", reader=reader)
    state.readers.setdefault(reader, ReaderEntry(instance=instance, join=uuid.uuid4().hex[:16])).seen_ms = now


def _another_instance(entry: ReaderEntry, instance: str | None) -> bool:
    """Whether a request carrying ``instance`` comes from another reader than the one online under the
    entry's name (unknowable, so no, when either side has no token)."""
    return None not in (instance, entry.instance) and entry.instance != instance


def expire_readers(state: GroupState, now: int, sparing: str | None = None) -> list[str]:
    """Take offline, at their last reported positions, the readers not seen for the group's reader lease.

    ``sparing`` is the reader whose own request this is: it is alive, whenever it was last seen.
    """
    lease = state.config.reader_lease_ms
    expired = sorted(name for name, entry in state.readers.items()
                     if name != sparing and now - entry.seen_ms >= lease)
    for name in expired:
        reader_offline(state, name, None)
    return expired


def schedule_lease_check(state: GroupState, now: int) -> int | None:
    """When the control plane should next look for expired readers of this group (None: no reader).

    Never after an online reader's lease ends, so no dead reader is missed; moved on only when it is
    due within a third of a lease (see :func:`fold_due`: the sync that moves it has read every reader's
    renewals) or half a lease behind, so live readers cost one small write of the lease record per
    half lease rather than one per sync, and the lease job never wakes for a group whose readers all sync.
    """
    expiries = [entry.seen_ms + state.config.reader_lease_ms for entry in state.readers.values()]
    if not expiries:
        state.lease_deadline_ms = None
        return None
    earliest, scheduled = min(expiries), state.lease_deadline_ms
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
    """Bring the readers' entries up to their own items (controlplane.reader_items): the later renewal
    and, per segment still held, the further offset. An item counts only for the entry it was written
    for (same generation, same join id), so one left from before a reset, a rejoin or a re-create of the
    group never moves anyone's position or lease."""
    for name, item in items.items():
        entry = state.readers.get(name)
        if entry is None or entry.join is None or item.join != entry.join or item.generation != state.config.generation:
            continue
        entry.seen_ms = max(entry.seen_ms, item.seen_ms)
        for key, offset in item.offsets.items():
            if key in entry.segments:
                entry.segments[key].offset = max(entry.segments[key].offset, offset)


def stale_items(state: GroupState, items: dict[str, Any]) -> list[Any]:
    """The items that count for no online reader of ``state`` (see :func:`overlay`)."""
    return [item for name, item in items.items()
            if name not in state.readers or item.join != state.readers[name].join
            or item.generation != state.config.generation]


def shared_view(state: GroupState) -> dict[str, Any]:
    """The state without what readers' own items carry (their renewals and offsets): a change that
    leaves this alike needs no group record write."""
    body = state.model_dump(mode="json")
    for entry in body["readers"].values():
        entry["seen_ms"] = 0
        for held in entry["segments"].values():
            held["offset"] = 0
    return body


def _acquire(state: GroupState, entry: ReaderEntry) -> None:
    """Take unassigned segments up to the fair share; never while a checkpoint is outstanding."""
    if not state.checkpoints:
        while len(entry.segments) < state.fair_share() and state.unassigned:
            key = min(state.unassigned)
            entry.segments[key] = state.unassigned.pop(key)


def sync(state: GroupState, reader: str, request: SyncRequest, now: int, successors: Successors) -> Assignment:
    entry = state.readers.get(reader)
    if entry is None or _another_instance(entry, request.instance):
        raise ReaderNotInReaderGroup(
            f"reader {reader} is not in this group: it was taken offline (by reader_offline or because its "
            "lease expired, and its segments went to other readers; another reader may have joined under its "
            "name since), or the group was reset; close it and create a new reader",
            generation=state.config.generation)
    entry.seen_ms = now
    if entry.join is None:  # joined before reader items existed: from now on it has one
        entry.join = uuid.uuid4().hex[:16]
    expire_readers(state, now, sparing=reader)
    for p in request.positions:
        key = f"{p.stream}/{p.segment_id}"
        if key in entry.segments:
            entry.segments[key].offset = p.offset
    for c in request.completed:
        _complete(state, entry, c, successors)
    if request.checkpoint:
        _pass_checkpoint(state, reader, entry, request.checkpoint, now)
    _maybe_auto_checkpoint(state, now)
    _acquire(state, entry)
    return assignment(state, reader)


def assignment(state: GroupState, reader: str) -> Assignment:
    entry = state.readers[reader]
    checkpoint = next((c for c in state.checkpoints if reader in c.pending), None)
    return Assignment(
        generation=state.config.generation,
        segments=[AssignedSegment(stream=h.stream, segment=h.segment, offset=h.offset, end_offset=h.end_offset,
                                  incarnation=state.incarnation(h.stream))
                  for h in entry.segments.values()],
        checkpoint=checkpoint.name if checkpoint else None,
        silent=checkpoint.silent if checkpoint else False,
        end_of_data=state.end_of_data())


def reader_offline(state: GroupState, reader: str, position: list[SegmentOffset] | None,
                   instance: str | None = None) -> None:
    """The reader leaves; with ``instance``, only if that instance is the one online under the name."""
    entry = state.readers.get(reader)
    if entry is None or _another_instance(entry, instance):
        return
    del state.readers[reader]
    given = {f"{p.stream}/{p.segment_id}": p.offset for p in position or []}
    for key, held in entry.segments.items():
        if key in given:
            held.offset = given[key]
        state.unassigned[key] = held
    for checkpoint in state.checkpoints:
        if reader in checkpoint.pending:
            checkpoint.pending.remove(reader)
            for key, held in entry.segments.items():
                checkpoint.positions[key] = held.model_copy()
    _finish_checkpoints(state)


def initiate_checkpoint(state: GroupState, name: str, silent: bool, now: int) -> None:
    if any(c.name == name for c in state.checkpoints) or (state.last_checkpoint and state.last_checkpoint.name == name):
        raise AlreadyExists(f"checkpoint {name} already exists")
    if len(state.checkpoints) >= state.config.max_outstanding_checkpoint_request:
        raise IllegalState(f"the group already has {len(state.checkpoints)} outstanding checkpoints "
                           f"(maximum {state.config.max_outstanding_checkpoint_request})")
    state.checkpoints.append(Checkpoint(name=name, silent=silent, pending=sorted(state.readers), created_ms=now))
    _finish_checkpoints(state)


def _complete(state: GroupState, entry: ReaderEntry, done: SegmentOffset, successors: Successors) -> None:
    key = f"{done.stream}/{done.segment_id}"
    held = entry.segments.pop(key, None)
    if held is None:
        return
    state.completed[key] = Completed(stream=held.stream, segment=held.segment, end_offset=done.offset)
    for checkpoint in state.checkpoints:
        if checkpoint.pending and key not in checkpoint.positions:
            checkpoint.positions[key] = Held(stream=held.stream, segment=held.segment, offset=done.offset)
    end_cut = [p.segment for p in state.end.get(held.stream, [])]
    end_offsets = {p.segment.segment_id: p.offset for p in state.end.get(held.stream, [])}
    if held.end_offset is not None:
        return  # read up to the end cut: nothing after it belongs to the group
    start = state.start.get(held.stream, [])
    for info in successors(held.stream, held.segment.segment_id, state.incarnation(held.stream)):
        successor = Held(stream=held.stream, segment=info.segment, end_offset=end_offsets.get(info.segment.segment_id))
        if state.known(successor.key) or (end_cut and successor.segment.segment_id not in end_offsets
                                          and segment_is_after(successor.segment, end_cut)):
            continue
        waiting = [f"{held.stream}/{p.segment_id}" for p in info.predecessors
                   if f"{held.stream}/{p.segment_id}" not in state.completed and not segment_is_before(p, start)]
        state.future[successor.key] = Waiting(held=successor, predecessors=waiting)
    for fkey, waiting in list(state.future.items()):
        waiting.predecessors = [p for p in waiting.predecessors if p not in state.completed]
        if not waiting.predecessors:
            del state.future[fkey]
            state.unassigned[fkey] = waiting.held
    _forget_superseded_completions(state)


def _forget_superseded_completions(state: GroupState) -> None:
    """Drop completed segments that newer segments of the group cover on every key.

    A completion is remembered for two things: releasing a successor still waiting for other
    predecessors (its ``Waiting.predecessors`` already lists only the unread ones), and the group's
    position where no successor has started (a completed segment counts at its end). Once every key
    of the segment lies in a newer segment that is held, unassigned or itself completed, neither
    needs it: its successors there were all handed out, and no predecessor of theirs completes again.
    What stays are the completed segments that are the group's newest on some key -- those whose
    successors wait, or that have none yet -- so ``completed`` is bounded by the group's position
    (about one per segment of the streams' current epochs), not by the streams' history.

    Not while a checkpoint is outstanding: its positions may name a segment read to its end whose
    neighbours' completions its cut still needs. No segment is handed out meanwhile, so what completes
    then is bounded by what the readers held when it began; the checkpoint's end forgets it.
    """
    if state.checkpoints:
        return
    newer_candidates = list(state.current_positions().values()) + [
        Held(stream=c.stream, segment=c.segment) for c in state.completed.values()]
    for key, done in list(state.completed.items()):
        newer = sorted((h.segment.low, h.segment.high) for h in newer_candidates
                       if h.stream == done.stream and h.segment.epoch > done.segment.epoch
                       and h.segment.low < done.segment.high and done.segment.low < h.segment.high)
        covered_to = done.segment.low
        for low, high in newer:
            if low > covered_to:
                break
            covered_to = max(covered_to, high)
        if covered_to >= done.segment.high:
            del state.completed[key]


def _pass_checkpoint(state: GroupState, reader: str, entry: ReaderEntry, name: str, now: int) -> None:
    checkpoint = next((c for c in state.checkpoints if c.name == name), None)
    if checkpoint is None or reader not in checkpoint.pending:
        return  # already passed (a retried request) or a checkpoint that no longer exists
    checkpoint.pending.remove(reader)
    for key, held in entry.segments.items():
        previous = checkpoint.positions.get(key)
        if previous is None or held.offset > previous.offset:
            checkpoint.positions[key] = held.model_copy()
    surplus = len(entry.segments) - state.fair_share()
    others_short = any(len(r.segments) < state.fair_share() for n, r in state.readers.items() if n != reader)
    if surplus > 0 and others_short:
        for key in sorted(entry.segments)[-surplus:]:
            state.unassigned[key] = entry.segments.pop(key)
    _finish_checkpoints(state)


def _finish_checkpoints(state: GroupState) -> None:
    while state.checkpoints and not state.checkpoints[0].pending:
        checkpoint = state.checkpoints.pop(0)
        state.last_checkpoint = CheckpointInfo(name=checkpoint.name, complete=True, silent=checkpoint.silent,
                                               cuts=state.cuts(checkpoint.positions))
    _forget_superseded_completions(state)


def _maybe_auto_checkpoint(state: GroupState, now: int) -> None:
    interval = state.config.automatic_checkpoint_interval_ms
    if interval <= 0 or state.checkpoints or not state.readers:
        return
    if state.last_auto_checkpoint_ms == 0:
        state.last_auto_checkpoint_ms = now
        return
    if now - state.last_auto_checkpoint_ms >= interval:
        state.checkpoint_counter += 1
        state.last_auto_checkpoint_ms = now
        initiate_checkpoint(state, f"auto-{state.checkpoint_counter}", False, now)


def checkpoint_info(state: GroupState, name: str) -> CheckpointInfo:
    if state.last_checkpoint and state.last_checkpoint.name == name:
        return state.last_checkpoint
    if any(c.name == name for c in state.checkpoints):
        return CheckpointInfo(name=name, complete=False)
    raise NotFound(f"no outstanding or last checkpoint named {name}")


# -- the store side: read-modify-write with retries ------------------------------------------------


@dataclass(frozen=True)
class LeaseRun:
    """What a lease run did: the readers it took offline, per group it looked at, and how fast."""

    expired: dict[tuple[str, str], list[str]]
    seconds: float

    def summary(self) -> str:
        readers = sum(len(names) for names in self.expired.values())
        return (f"looked at {len(self.expired)} reader group(s) in {self.seconds:.2f} s "
                f"({per_second(len(self.expired), self.seconds):,.1f}/s), took {readers} reader(s) offline")


class ReaderGroups:
    """Reader group operations, each a conditional read-modify-write of the group's record.

    A group whose retention type is not NONE is a *subscriber* of each of its streams. Its subscriber
    records change only in one transaction with the group's record: a create writes them with the new
    group, a reset writes them at the new generation (and removes those of streams it drops) with the
    new state, conditioned on the version it read, and a delete removes them with the group. So a
    group and its subscriptions are never at two generations, whatever stops a reset part way, and a
    delete that loses a race (a reader's sync) leaves the group subscribed. Each registration moves
    the stream's subscriber fence (controlplane.retention), read before the head it starts at: a
    retention cycle deciding meanwhile truncates nothing, and a registration racing a truncation reads
    the head again. The acknowledged cut then follows every completed checkpoint
    (AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT) or the application's explicit cuts
    (MANUAL_RELEASE_AT_USER_STREAMCUT).
    """

    def __init__(self, streams: Any, retention: Any) -> None:  # StreamTasks, RetentionTasks
        self.streams = streams
        self.retention = retention
        self.items = ReaderItems()

    def create(self, scope: str, group: str, config: ReaderGroupConfig) -> bool:
        """Create the group with its subscriptions in one transaction; False if it exists. A create whose
        answer was lost, and whose resend its own first attempt refused, is told by its token in the
        group's listing entry (which nothing rewrites)."""
        validate_reader_group_name(group)
        config = config.model_copy(update={"generation": 0})
        _check_subscriptions(config)
        for attempt in range(20):
            try:
                self._record(scope, group)
                return False  # it exists: creating is idempotent, and its subscriptions stay as they are
            except ReaderGroupNotFound:
                pass
            fences = self._fences(config)  # before the heads the group starts at
            config, starts = self._starts(config)
            state = _storable(new_state(config, starts), f"reader group {scope}/{group}")
            token = uuid.uuid4().hex
            record = ReaderGroupRecord(reader_group_pk(scope, group), GROUP_KEY, scope=scope, group=group, state=state,
                                       write_id=token)
            listed = ReaderGroupNameRecord(reader_groups_pk(scope), group, created_ms=_now(), write_id=token)
            try:
                with TransactWrite(connection=self.streams.store.transaction_connection) as tx:
                    tx.save(record, condition=ReaderGroupRecord.pk.does_not_exist())
                    tx.save(listed)
                    self._write_subscriptions(tx, scope, group, config, starts, fences, token, dropping=None)
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
        _check_subscriptions(config)
        for attempt in range(20):
            record = self._record(scope, group)
            items = self.items.all(scope, group)
            current = GroupState.model_validate(record.state)
            new = config.model_copy(update={"generation": current.config.generation + 1})
            fences = self._fences(new)  # before the heads the group starts at
            new, starts = self._starts(new)
            state = new_state(new, starts)
            deadline, version = schedule_lease_check(state, _now()), record.version + 1
            token = uuid.uuid4().hex
            try:
                with TransactWrite(connection=self.streams.store.transaction_connection) as tx:
                    tx.update(record, actions=[
                        ReaderGroupRecord.state.set(_storable(state, f"reader group {scope}/{group}")),
                        ReaderGroupRecord.write_id.set(token)])
                    self._write_subscriptions(tx, scope, group, new, starts, fences, token, dropping=current.config)
            except TransactWriteError as e:
                if not self._written_by(scope, group, token):
                    if not _contended(e):
                        raise
                    time.sleep(random.uniform(0, 0.02 * (attempt + 1)))
                    continue
            if deadline != current.lease_deadline_ms:
                self._announce_lease(scope, group, version, deadline)
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
            record = ReaderGroupRecord.get(reader_group_pk(scope, group), GROUP_KEY, consistent_read=True)
        except DoesNotExist:
            return False
        items = self.items.all(scope, group)
        config = GroupState.model_validate(record.state).config
        try:
            with TransactWrite(connection=self.streams.store.transaction_connection) as tx:
                tx.delete(record, condition=ReaderGroupRecord.version == record.version)
                tx.delete(ReaderGroupNameRecord(reader_groups_pk(scope), group))
                for spec in _subscribed(config):
                    self.retention.unsubscribe(tx, spec.scope, spec.stream, f"{scope}/{group}")
        except TransactWriteError as e:
            if not _contended(e):
                raise
            try:
                self._record(scope, group)
            except ReaderGroupNotFound:
                pass
            else:
                raise WriteConflict(f"reader group {scope}/{group} changed while being deleted") from e
        self._drop_lease(scope, group, ReaderLeaseRecord.group_version <= record.version)
        self.items.delete(items.values())
        return True

    def update_truncation_cut(self, scope: str, group: str, cut: StreamCutBody) -> StreamCutBody:
        """The application acknowledges consumption up to ``cut`` (MANUAL_RELEASE_AT_USER_STREAMCUT)."""
        state = self.state(scope, group)
        config = state.config
        if config.retention_type != StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT:
            raise IllegalState(f"reader group {scope}/{group} is {config.retention_type.value}: "
                               "only MANUAL_RELEASE_AT_USER_STREAMCUT groups publish cuts themselves")
        if f"{cut.scope}/{cut.stream}" not in {s.scoped_name for s in config.streams}:
            raise InvalidArgument(f"reader group {scope}/{group} does not read {cut.scope}/{cut.stream}")
        incarnation = state.incarnation(f"{cut.scope}/{cut.stream}")
        if None not in (cut.incarnation, incarnation) and cut.incarnation != incarnation:
            raise StreamRecreated(f"the cut is of incarnation {cut.incarnation} of {cut.scope}/{cut.stream}; reader "
                                  f"group {scope}/{group} reads its incarnation {incarnation}",
                                  expected=cut.incarnation, current=incarnation)
        positions = self.retention.update_truncation_cut(cut.scope, cut.stream, f"{scope}/{group}", config.generation,
                                                         {p.segment.segment_id: p.offset for p in cut.positions})
        return StreamCutBody(scope=cut.scope, stream=cut.stream, positions=positions, incarnation=incarnation)

    def _fences(self, config: ReaderGroupConfig) -> dict[str, int | None]:
        """The subscriber fence of each stream the group subscribes to."""
        return {spec.scoped_name: self.retention.fence(spec.scope, spec.stream) for spec in _subscribed(config)}

    def _write_subscriptions(self, tx: TransactWrite, scope: str, group: str, config: ReaderGroupConfig,
                             starts: dict[str, list[SegmentPosition]], fences: dict[str, int | None], token: str,
                             dropping: ReaderGroupConfig | None) -> None:
        """Add to ``tx`` the group's subscription of each stream of ``config`` at its start, moving each
        stream's fence from the value read, and the removal of those of ``dropping`` that it lacks."""
        name, kept = f"{scope}/{group}", set()
        for spec in _subscribed(config):
            self.retention.subscribe(tx, spec.scope, spec.stream, name, config.generation, starts[spec.scoped_name],
                                     fences[spec.scoped_name], token)
            kept.add(spec.scoped_name)
        for spec in _subscribed(dropping) if dropping else []:
            if spec.scoped_name not in kept:
                self.retention.unsubscribe(tx, spec.scope, spec.stream, name)

    def _listed_by(self, scope: str, group: str, token: str) -> bool:
        try:
            return ReaderGroupNameRecord.get(reader_groups_pk(scope), group, consistent_read=True).write_id == token
        except DoesNotExist:
            return False

    def _written_by(self, scope: str, group: str, token: str) -> bool:
        try:
            return self._record(scope, group).write_id == token
        except ReaderGroupNotFound:
            return False

    def _publish(self, scope: str, group: str, before: CheckpointInfo | None, state: GroupState) -> None:
        """After a completed checkpoint, an automatic subscriber acknowledges its cuts."""
        done = state.last_checkpoint
        if (state.config.retention_type != StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT
                or done is None or done.silent or (before is not None and before.name == done.name)):
            return
        for cut in done.cuts:
            try:
                self.retention.update_truncation_cut(cut.scope, cut.stream, f"{scope}/{group}",
                                                     state.config.generation,
                                                     {p.segment.segment_id: p.offset for p in cut.positions})
            except StreamNotFound:
                pass  # the stream was deleted: nothing of it is retained for anyone
            except (InvalidArgument, NotFound):
                self._check_subscription(scope, group, cut, state.config.generation)
            except WriteConflict:
                pass  # contended: the subscriber's cut lags (it never runs ahead); the next checkpoint publishes

    def _check_subscription(self, scope: str, group: str, cut: StreamCutBody, generation: int) -> None:
        """Judge a refused publish: stale (the group was reset or deleted since, or a later checkpoint's
        cut got there first) unless the group still has ``generation`` and its subscription of the
        stream is gone or of another generation. Then retention no longer follows the group's
        checkpoints, and the caller hears it (IllegalState) instead of the refusal being swallowed."""
        acknowledged = self.retention.acknowledged_cut(cut.scope, cut.stream, f"{scope}/{group}")
        if acknowledged is not None and acknowledged.generation == generation:
            return
        try:
            if self.state(scope, group).config.generation != generation:
                return
        except ReaderGroupNotFound:
            return
        found = "none" if acknowledged is None else f"generation {acknowledged.generation}'s"
        raise IllegalState(f"reader group {scope}/{group} (generation {generation}) has {found} subscription of "
                           f"{cut.scope}/{cut.stream}: retention does not follow its checkpoints there; reset "
                           "the group to subscribe again", stream=f"{cut.scope}/{cut.stream}", generation=generation)

    def state(self, scope: str, group: str) -> GroupState:
        """The group's state with each online reader's renewal and offsets from its own item."""
        state = GroupState.model_validate(self._record(scope, group).state)
        overlay(state, self.items.all(scope, group))
        return state

    def info(self, scope: str, group: str) -> ReaderGroupInfo:
        state = self.state(scope, group)
        return ReaderGroupInfo(scope=scope, group=group, config=state.config, online_readers=sorted(state.readers),
                               outstanding_checkpoints=[c.name for c in state.checkpoints],
                               last_checkpoint=state.last_checkpoint, unassigned_segments=len(state.unassigned))

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
        config = self.state(scope, group).config
        if config.retention_type == StreamDataRetention.NONE:
            return []
        cuts = (self.retention.acknowledged_cut(s.scope, s.stream, f"{scope}/{group}") for s in config.streams)
        return [cut for cut in cuts if cut is not None]

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
            return self._modify(scope, group, lambda s: expire_readers(s, now), announce_lease=True)
        except ReaderGroupNotFound:
            try:
                orphan = ReaderLeaseRecord.get(reader_group_pk(scope, group), LEASE_KEY, consistent_read=True)
            except DoesNotExist:
                return []
            self._drop_lease(scope, group, ReaderLeaseRecord.group_version == orphan.group_version)
            return []

    def expire_readers_of(self, groups: list[tuple[str, str]], workers: int = LEASE_WORKERS) -> LeaseRun:
        """:meth:`expire_readers` of each (scope, group), ``workers`` at once (each changes only its own
        group's records, by conditioned writes)."""
        expired, seconds = fan_out(lambda group: self.expire_readers(*group), groups, workers)
        return LeaseRun(dict(zip(groups, expired, strict=True)), seconds)

    def groups_due_for_lease_check(self, limit: int = LEASE_RUN_LIMIT) -> dict[tuple[str, str], int]:
        """The groups whose earliest reader lease may have ended, (scope, group) -> the deadline that
        passed (a group is due again later with a new one): one query per index shard, at most
        ``limit`` groups, earliest first (the next call finds the rest)."""
        now = _now()
        due = query_every_shard(LEASE_SHARD, lambda key: ReaderLeaseRecord.txn_deadlines.query(
            key, ReaderLeaseRecord.deadline_ms <= now, limit=limit))
        return {(lease.scope, lease.group): lease.deadline_ms for lease in sorted(due, key=lambda x: x.deadline_ms)[:limit]}

    def sync(self, scope: str, group: str, reader: str, request: SyncRequest) -> Assignment:
        """A reader's sync. It writes the group record only when what the group shares changed (an
        assignment, a checkpoint, the lease deadline, a fold of every reader's renewals when the
        deadline is near: :func:`fold_due`); otherwise the reader's own small item, and that only when
        its offsets moved or its last renewal is a RENEW_FRACTION-th of a lease old. A sync that
        changes nothing writes nothing."""
        everyone = False  # read every reader's item, not only this reader's
        for attempt in range(20):
            record = self._record(scope, group)
            state = GroupState.model_validate(record.state)
            now = _now()
            fold = everyone or fold_due(state, now)
            if fold:
                items = self.items.all(scope, group)
            else:
                items = self.items.one(scope, group, reader) if reader in state.readers else {}
            overlay(state, items)
            before, scheduled = shared_view(state), state.lease_deadline_ms
            joins = {name: e.join for name, e in state.readers.items()}
            entry = state.readers.get(reader)
            renewed = entry.seen_ms if entry else 0
            offsets = _offsets(entry) if entry else {}
            checkpoint = state.last_checkpoint
            result = sync(state, reader, request, now, self._successors)
            deadline = schedule_lease_check(state, now)
            lease = state.config.reader_lease_ms
            if not fold and _leaving(joins, state, items):
                everyone = True  # it takes readers offline: only on what every reader's own item says
                continue
            if shared_view(state) == before:
                entry = state.readers[reader]
                if _offsets(entry) != offsets or now - renewed >= lease // RENEW_FRACTION:
                    self.items.write(scope, group, reader, items.get(reader), state.config.generation, entry.join,
                                     now, _offsets(entry))
                    if now - renewed >= lease - lease // RENEW_FRACTION and self._record(scope, group).version != record.version:
                        continue  # near its lease's end: another sync may be taking it offline (see _write)
                return result
            try:
                self._write(scope, group, record, state, _leaving(joins, state, items))
            except WriteConflict:
                time.sleep(random.uniform(0, 0.02 * (attempt + 1)))
                continue
            if deadline != scheduled:
                self._announce_lease(scope, group, record.version, deadline)
            self.items.delete(stale_items(state, items))
            self._publish(scope, group, checkpoint, state)
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

    def _starts(self, config: ReaderGroupConfig) -> tuple[ReaderGroupConfig, dict[str, list[SegmentPosition]]]:
        """Where the group starts on each stream, and the configuration naming the incarnation of each
        stream it reads. The stream's record is read before its head: a name deleted and created again
        in between gives positions of the new stream under the old incarnation, which every read then
        refuses (StreamRecreated), never the other way round (old positions read on the new stream)."""
        starts, streams = {}, []
        for spec in config.streams:
            record = self.streams.record(spec.scope, spec.stream)
            self.streams.check_incarnation(record, spec.incarnation)
            head = self.streams.head(spec.scope, spec.stream, record)
            starts[spec.scoped_name] = head
            if spec.start:
                offsets = {p.segment.segment_id: p.offset for p in spec.start}
                start = self.streams.resolve_cut(spec.scope, spec.stream, offsets)
                if compare_positions(start, head) in (Ordering.BEFORE, Ordering.OVERLAPPING):
                    # Part of it is truncated already (perhaps by a truncation decided a moment ago, whose
                    # fence move came before this registration's fence read): the group acknowledges no
                    # earlier than the head, where its readers start anyway, key by key.
                    records = {r.segment_id: r for r in self.streams.store.list_segments(spec.scope, spec.stream)}
                    start = upper_bound([start, head], records)
                starts[spec.scoped_name] = start
            if spec.end:
                problem = validity_problem([p.segment for p in spec.end])
                if problem:
                    raise InvalidArgument(f"invalid end stream cut for {spec.scoped_name}: {problem}")
            streams.append(spec.model_copy(update={"incarnation": int(record.created_ms)}))
        return config.model_copy(update={"streams": streams}), starts

    def _successors(self, stream: str, segment_id: int, incarnation: int | None) -> list[SuccessorInfo]:
        scope, name = stream.split("/", 1)
        return self.streams.successors(scope, name, segment_id, incarnation)

    def _record(self, scope: str, group: str) -> ReaderGroupRecord:
        try:
            return ReaderGroupRecord.get(reader_group_pk(scope, group), GROUP_KEY, consistent_read=True)
        except DoesNotExist:
            raise ReaderGroupNotFound(f"reader group {scope}/{group} does not exist") from None

    def _modify(self, scope: str, group: str, change: Callable[[GroupState], Any], announce_lease: bool = False,
                lease_first: bool = False) -> Any:
        """Apply ``change`` to the group's state and write it back if nobody raced; retry if somebody did.

        Every change, a lease takeover included, is conditional on the version read. Then, if the time
        to look for expired readers moved (or ``announce_lease``), the group's lease record says so;
        with ``lease_first`` it says so before the change is stored, as the decision of the version the
        change will have (for changes that only add readers: an earlier deadline is always safe).
        """
        for attempt in range(20):
            record = self._record(scope, group)
            state = GroupState.model_validate(record.state)
            items = self.items.all(scope, group)
            overlay(state, items)
            before, scheduled = state.last_checkpoint, state.lease_deadline_ms
            joins = {name: e.join for name, e in state.readers.items()}
            result = change(state)
            deadline = schedule_lease_check(state, _now())
            if lease_first:
                self._announce_lease(scope, group, record.version + 1, deadline)
            try:
                self._write(scope, group, record, state, _leaving(joins, state, items))
            except WriteConflict:
                time.sleep(random.uniform(0, 0.02 * (attempt + 1)))
                continue
            if not lease_first and (announce_lease or deadline != scheduled):
                self._announce_lease(scope, group, record.version, deadline)
            self.items.delete(stale_items(state, items))
            self._publish(scope, group, before, state)
            return result
        raise WriteConflict(f"reader group {scope}/{group} is too contended; try again")

    def _write(self, scope: str, group: str, record: ReaderGroupRecord, state: GroupState,
               leaving: dict[str, ReaderItemRecord | None]) -> None:
        """Store ``state`` if the record still has the version read (WriteConflict if not). A resend
        refused after a lost answer counts as the write it is (the change is stored).

        ``leaving``: the readers this change takes offline, with their items as read (None: none). Then
        the write is one transaction that also checks each of those items is unchanged, so a reader whose
        sync renewed its lease in its item meanwhile is not taken offline (the change is read again).
        With the sync's own check (a sync that renewed a lease near its end reads the record's version
        again), a reader is never told it holds segments that a concurrent expiry gave away."""
        body = _storable(state, f"reader group {scope}/{group}")
        if not leaving:
            versioned_update(record, [ReaderGroupRecord.state.set(body)], "reader group state changed concurrently")
            return
        token, version = uuid.uuid4().hex, record.version
        try:
            with TransactWrite(connection=self.streams.store.transaction_connection) as tx:
                tx.update(record, actions=[ReaderGroupRecord.state.set(body), ReaderGroupRecord.write_id.set(token)])
                for name, item in leaving.items():
                    tx.condition_check(ReaderItemRecord, reader_group_pk(scope, group), reader_sk(name),
                                       ReaderItemRecord.sk.does_not_exist() if item is None
                                       else ReaderItemRecord.version == item.version)
        except TransactWriteError as e:
            if not self._written_by(scope, group, token):
                if _contended(e):
                    raise WriteConflict("reader group state, or a leaving reader's item, changed concurrently") from e
                raise
            record.version = version + 1

    def _announce_lease(self, scope: str, group: str, version: int, deadline: int | None) -> None:
        """Write the lease record decided by the group record's ``version``, unless a later decision is
        already there (writes may arrive out of order). A write lost after the group's was stored
        leaves an earlier deadline (joins announce first), which only makes the lease job look once
        in vain."""
        lease = ReaderLeaseRecord(reader_group_pk(scope, group), LEASE_KEY, scope=scope, group=group,
                                  group_version=version, deadline_ms=deadline,
                                  deadline_shard=None if deadline is None else shard_key(LEASE_SHARD, f"{scope}/{group}"))
        try:
            lease.save(condition=ReaderLeaseRecord.group_version.does_not_exist()
                       | (ReaderLeaseRecord.group_version < version))
        except PutError as e:
            if not failed_condition(e):
                raise

    def _drop_lease(self, scope: str, group: str, condition: Any) -> None:
        try:
            ReaderLeaseRecord(reader_group_pk(scope, group), LEASE_KEY).delete(condition=condition)
        except DeleteError as e:
            if not failed_condition(e):
                raise


def _subscribed(config: ReaderGroupConfig) -> list[StreamRange]:
    """The streams the group subscribes to (none unless its retention type asks for it)."""
    return [] if config.retention_type == StreamDataRetention.NONE else list(config.streams)


def _check_subscriptions(config: ReaderGroupConfig) -> None:
    if len(_subscribed(config)) > MAX_SUBSCRIBED_STREAMS:
        raise InvalidArgument(f"a reader group with retention type {config.retention_type.value} reads at most "
                              f"{MAX_SUBSCRIBED_STREAMS} streams (it has {len(config.streams)}); use NONE for more")


def _contended(error: TransactWriteError) -> bool:
    """Whether a transaction was refused for a race (a condition, or a concurrent transaction)."""
    reasons = {r.code for r in error.cancellation_reasons or [] if r is not None}
    return bool(reasons & {"ConditionalCheckFailed", "TransactionConflict"})


def _cancelled_by_condition(error: TransactWriteError, index: int) -> bool:
    """Whether a transaction was refused because the condition of its ``index``-th write failed."""
    reasons = error.cancellation_reasons or []
    return len(reasons) > index and reasons[index] is not None and reasons[index].code == "ConditionalCheckFailed"


def _now() -> int:
    return int(time.time() * 1000)


def _offsets(entry: ReaderEntry) -> dict[str, int]:
    return {key: held.offset for key, held in entry.segments.items()}


def _leaving(joins: dict[str, str | None], state: GroupState, items: dict[str, ReaderItemRecord]
             ) -> dict[str, ReaderItemRecord | None]:
    """The readers of ``joins`` (name -> join id before a change) that ``state`` no longer has online
    (or has under another join), each with its item as read."""
    return {name: items.get(name) for name, join in joins.items()
            if name not in state.readers or state.readers[name].join != join}


def _storable(state: GroupState, group: str) -> dict[str, Any]:
    """The state as stored, or a typed refusal when it would not fit in its DynamoDB item."""
    body = state.model_dump(mode="json")
    size = len(json.dumps(body))
    if size > MAX_STATE_BYTES:
        raise IllegalState(f"{group} cannot take this change: its state would be {size} bytes, more than "
                           f"{MAX_STATE_BYTES} (it grows with its online readers and its streams' live segments)",
                           size=size)
    return body

