"""A reader group's shared state (:class:`GroupState`) and the DynamoDB record that holds it.

The whole state is one versioned record (``rg#<scope>/<group>``, sort key ``rg``): every change reads
it, applies a pure transition (controlplane.reader_groups.readers, .assignment, .checkpoints) and
writes it back on the condition that nobody changed it meanwhile. A state that stores in more than
PAGE_BYTES is cut into page items beside the record (``page#<n>``), written with it in one transaction,
so no item of a group nears DynamoDB's 400 KB whatever its streams' live segments. Every collection
here is bounded by the group's present, never by its past, and the stored state by MAX_STATE_BYTES;
this module also holds what keeps it so (:func:`forget_superseded_completions`, :func:`storable`).
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
import uuid
from collections import OrderedDict
from typing import Any, NamedTuple

from pydantic import BaseModel
from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.transactions import TransactWrite

from controlplane.models import (
    ReaderGroupHeadRecord,
    ReaderGroupPageRecord,
    ReaderGroupRecord,
    reader_group_pk,
)
from controlplane.store import failed_condition
from rillet.api import CheckpointInfo
from rillet.errors import IllegalState, ReaderGroupNotFound, WriteConflict
from rillet.models import ReaderGroupConfig, SegmentPosition, SegmentRange, StreamCutBody
from rillet.stream_cut import segment_is_after, validity_problem

GROUP_KEY = "rg"
HEAD_KEY = "head"
FIRST_VERSION = 1  # a new record's version (PynamoDB's VersionAttribute starts there)
# Groups whose record a process keeps a copy of (least recently read dropped first), and at most
# CACHED_STATE_BYTES of them in all: each copy is the record as stored, at most MAX_STATE_BYTES.
CACHED_GROUPS = 64
# A state of at most this much JSON stores in about 3 KB (deflated JSON is a quarter of it in the groups
# bench.reader_group_state builds, and base64 adds a third): a consistent read of the record then takes
# 1 unit, as the head item's does, so such a record is read whole and its writers raise no bound (see
# current_record). A small group (a few readers on a few dozen segments) costs what it did before.
SMALL_STATE_JSON = 12_000
# A copy older than this is read again whatever the head says: what a writer that does not raise the
# bound changed (a release before head items, still running while an upgrade rolls out; an operator's
# edit) is seen within it. Each process then reads a large group's record once a minute.
COPY_MAX_AGE_MS = 60_000
# A state that stores in at most this many bytes stays in its record; a larger one is cut into page items
# of this size (ReaderGroupPageRecord). An item of 150 KB is far from DynamoDB's 400 KB, and moto, which
# counts an update's old and new values together against that limit, takes its rewrite. A paged write is
# a transaction (2 write units per KB instead of 1), so the bound is no lower than it needs to be: 1,000
# readers on 1,000 segments during a checkpoint (about 130 KB) stay in one item.
PAGE_BYTES = 150_000
PAGE_PREFIX = "page#"
# The most a group's state may store in: at most 7 pages, so that a write (the record and at most 7 page
# puts or deletes, in one TransactWriteItems of at most 100 actions and 4 MB) and a process's copies
# (CACHED_STATE_BYTES) stay bounded. It holds a group created over some 40,000 live segments, or 1,000
# readers on 15,000 with a checkpoint outstanding (docs/limits.md).
MAX_STATE_BYTES = 1_000_000
# The most a process keeps in copies of group records (least recently read dropped first).
CACHED_STATE_BYTES = 16_000_000
# Deflate grows data by at most 5 bytes per 16 KB block plus 11, and base64 adds a third: a state whose
# JSON is no longer than this stores in one page, so a write compresses it only once, to store it.
_FITS_ONE_PAGE_JSON = PAGE_BYTES * 3 // 4 - 1_000
# How often a read meets pages of another version than the record's (a write between its two requests)
# before it gives up with WriteConflict: each time, a write landed, so a group written this often is
# too contended to read.
_TORN_READS = 8


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

    @property
    def key(self) -> str:
        """What a pass stored in a reader's item names it by: a name may come back once its checkpoint
        is done, so with the time it was created (a pass of the earlier one never counts for it)."""
        return f"{self.name}@{self.created_ms}"


class GroupState(BaseModel):
    """The group's shared state: one record (cut into page items past PAGE_BYTES), so every collection in
    it is bounded by the group's present (its online readers and the segments of its streams' current epochs), never by its past:
    about 17 KB for 100 readers over a stream of 24 segments that completed 10,000 segments
    (tests/integration/test_reader_group_bounds.py). The ceiling, as JSON: about 250 bytes per live
    segment (190 more per outstanding checkpoint, of which there are at most 10, plus 100 in the last
    checkpoint's cut) and 180 per online reader (a 31-character stream name, 39-character reader ids,
    of which 46 are the reader's instance token and 30 its join id): 1,000 readers on a 1,000-segment
    stream take 430 KB, 640 KB during a checkpoint. The record stores it compressed
    (controlplane.models.CompressedJSONAttribute), at a quarter to a ninth of that: 98 KB for 1,000
    readers on 1,000 segments, 202 KB for 1,000 readers on 5,000 (2 pages). A change past MAX_STATE_BYTES
    of stored bytes is refused with IllegalState, rather than failing in DynamoDB (a group created over
    50,000 live segments is)."""

    config: ReaderGroupConfig
    readers: dict[str, ReaderEntry] = {}  # online readers only: leaving, or an expired lease, removes one
    unassigned: dict[str, Held] = {}  # at most the live segments
    future: dict[str, Waiting] = {}  # successors of completed segments: at most one scale's new segments each
    # the group's newest position where no successor started (see forget_superseded_completions)
    completed: dict[str, Completed] = {}
    start: dict[str, list[SegmentRange]] = {}  # the start cuts, fixed at creation
    end: dict[str, list[SegmentPosition]] = {}  # the end cuts, fixed at creation
    checkpoints: list[Checkpoint] = []  # at most config.max_outstanding_checkpoint_request, itself at most 10
    last_checkpoint: CheckpointInfo | None = None  # one stream cut per stream
    lease_deadline_ms: int | None = None  # the group's lease record says: look again then (see schedule_lease_check)
    last_auto_checkpoint_ms: int = 0
    checkpoint_counter: int = 0
    # the head item's pass count (ReaderGroupHeadRecord.passes) when every reader's item was last folded
    # in: the passes counted since are at most that many more than the head says (see groups.sync)
    folded_passes: int = 0

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


def forget_superseded_completions(state: GroupState) -> None:
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


class Stored(NamedTuple):
    """A state as its items hold it: ``body`` in the record, or ``pieces`` of it as stored, one per page."""

    body: dict[str, Any]
    pieces: list[str]


def storable(state: GroupState, group: str) -> Stored:
    """The state as stored, or a typed refusal when it would pass MAX_STATE_BYTES (the limit is on the
    stored, compressed bytes: ReaderGroupRecord.state)."""
    body = state.model_dump(mode="json")
    if len(json.dumps(body)) <= _FITS_ONE_PAGE_JSON:
        return Stored(body, [])
    stored = ReaderGroupRecord.state.serialize(body)
    if len(stored) > MAX_STATE_BYTES:
        raise IllegalState(f"{group} cannot take this change: its state would be {len(stored)} bytes, more than "
                           f"{MAX_STATE_BYTES} (it grows with its online readers and its streams' live segments)",
                           size=len(stored))
    if len(stored) <= PAGE_BYTES:
        return Stored(body, [])
    return Stored(body, [stored[at:at + PAGE_BYTES] for at in range(0, len(stored), PAGE_BYTES)])


def stored_size(body: dict[str, Any]) -> int:
    """The bytes the state takes in its record and pages."""
    return len(ReaderGroupRecord.state.serialize(body))


def page_sk(n: int) -> str:
    return f"{PAGE_PREFIX}{n:02d}"


def record_actions(stored: Stored) -> list:
    """What a write of ``stored`` sets on the record (beside its pages: :func:`write_pages`)."""
    if stored.pieces:
        return [ReaderGroupRecord.state.remove(), ReaderGroupRecord.pages.set(len(stored.pieces))]
    return [ReaderGroupRecord.state.set(stored.body), ReaderGroupRecord.pages.remove()]


def paged(record: ReaderGroupRecord | None, stored: Stored) -> bool:
    """Whether writing ``stored`` over ``record`` (None: a new group) writes page items, and so has to be
    one transaction with the record's write."""
    return bool(stored.pieces) or bool(record is not None and record.pages)


def write_pages(tx: TransactWrite, record: ReaderGroupRecord | None, stored: Stored, pk: str) -> None:
    """Add to ``tx``, which writes the record read as ``record`` (None: creates it), the pages of
    ``stored`` at the record's next version and the removal of the pages the state before had beyond
    them. Each page is written on the condition that it is as the record read says (of its version, or
    absent): the record's own condition already decides the transaction, this only keeps every
    overwrite conditioned on what was read."""
    before, version = (0, None) if record is None else (int(record.pages or 0), record.version)
    written = FIRST_VERSION if version is None else version + 1
    for n, piece in enumerate(stored.pieces):
        tx.save(ReaderGroupPageRecord(pk, page_sk(n), version=written, piece=piece),
                condition=ReaderGroupPageRecord.version == version if n < before
                else ReaderGroupPageRecord.sk.does_not_exist())
    for n in range(len(stored.pieces), before):
        tx.delete(ReaderGroupPageRecord(pk, page_sk(n)), condition=ReaderGroupPageRecord.version == version)


def delete_pages(tx: TransactWrite, record: ReaderGroupRecord) -> None:
    """Add to ``tx``, which deletes the record read as ``record``, the deletion of its pages."""
    for n in range(int(record.pages or 0)):
        tx.delete(ReaderGroupPageRecord(record.pk, page_sk(n)), condition=ReaderGroupPageRecord.version == record.version)


def same_incarnation(record: ReaderGroupRecord) -> Any:
    """The condition that the group's record is still of the group ``record`` was read from: its
    create_id, random and new with every create under the name (absent: a group created before
    incarnations were recorded). The version alone restarts at FIRST_VERSION when the name is created
    again, so a write of a deleted group's state read at version N would land on a new group that
    reached N."""
    if record.create_id is None:
        return ReaderGroupRecord.create_id.does_not_exist()
    return ReaderGroupRecord.create_id == record.create_id


def get_record(scope: str, group: str) -> ReaderGroupRecord:
    """The group's record item alone, read consistently (ReaderGroupNotFound if there is none): its
    version and write id, without the pages of a large state (``state`` is then None)."""
    try:
        return ReaderGroupRecord.get(reader_group_pk(scope, group), GROUP_KEY, consistent_read=True)
    except DoesNotExist:
        raise ReaderGroupNotFound(f"reader group {scope}/{group} does not exist") from None


def read_record(scope: str, group: str) -> ReaderGroupRecord:
    """The group's record with its whole state, read consistently (ReaderGroupNotFound if there is
    none): for a state in pages, the record, then its pages (one Query), read again if a write landed
    between the two (:class:`~controlplane.models.ReaderGroupPageRecord`)."""
    for attempt in range(_TORN_READS):
        record = get_record(scope, group)
        if not record.pages:
            return record
        pages = list(ReaderGroupPageRecord.query(record.pk, ReaderGroupPageRecord.sk.startswith(PAGE_PREFIX),
                                                 consistent_read=True))
        if [p.sk for p in pages] == [page_sk(n) for n in range(int(record.pages))] \
                and all(int(p.version) == record.version for p in pages):
            record.state = ReaderGroupRecord.state.deserialize("".join(p.piece for p in pages))
            return record
        time.sleep(random.uniform(0, 0.005 * (attempt + 1)))  # writers are busy: let one finish
    raise WriteConflict(f"reader group {scope}/{group} changed at each of {_TORN_READS} reads; try again")


class Current(NamedTuple):
    record: ReaderGroupRecord
    # the head item's count of passes stored in readers' items; None: the head was not read (a small
    # record, or a group created before head items), and passes go to the record
    passes: int | None


def current_record(scope: str, group: str, now_ms: int) -> Current:
    """The group's record as it stands, as :func:`read_record` would read it now (``now_ms``).

    A large record comes from this process's copy when the group's head item says no write can have
    changed it since (one read unit instead of one per 4 KB of the record), and the copy is at most
    COPY_MAX_AGE_MS old. A record this process last found small (:func:`small`) is read whole, as is
    one of a group without a head item (created before there were any)."""
    pk = reader_group_pk(scope, group)
    if _COPIES.small(pk):
        record = read_record(scope, group)
        if not small(record.state):
            _COPIES.forget(pk)  # grown: the head is read from the next sync on
        return Current(record, None)
    try:
        head = ReaderGroupHeadRecord.get(pk, HEAD_KEY, consistent_read=True)
    except DoesNotExist:
        return Current(read_record(scope, group), None)
    passes = int(head.passes or 0)
    copy = _COPIES.get(pk, head.token, head.bound, now_ms - COPY_MAX_AGE_MS)
    if copy is not None:
        return Current(copy, passes)
    record = read_record(scope, group)
    if small(record.state):
        _COPIES.mark_small(pk)
        return Current(record, None)  # as every later read of it here will: its passes go to the record
    if record.version == head.bound:  # no write is on its way: the copy is current until the bound moves
        _COPIES.put(pk, head.token, record, now_ms)
    return Current(record, passes)


def small(body: dict[str, Any]) -> bool:
    """Whether a state is read whole rather than kept as a copy (SMALL_STATE_JSON)."""
    return len(json.dumps(body)) <= SMALL_STATE_JSON


def count_pass(scope: str, group: str) -> int | None:
    """Count one more checkpoint pass stored in a reader's item (after storing it): the count with it
    (None: the group was deleted meanwhile). A resend after a lost answer counts it twice, and a crash
    before it not at all: too many only makes a pass fold every reader's item sooner than needed, too
    few leaves the last passes to the next lease fold."""
    head = ReaderGroupHeadRecord(reader_group_pk(scope, group), HEAD_KEY)
    try:
        head.update(actions=[ReaderGroupHeadRecord.passes.add(1)], condition=ReaderGroupHeadRecord.token.exists())
    except UpdateError as e:
        if not failed_condition(e):
            raise
        return None
    return int(head.passes)


def raise_bound(scope: str, group: str, record: ReaderGroupRecord, body: dict[str, Any]) -> None:
    """Say that the group's record is about to be written with ``body`` at the version after
    ``record``'s, before writing it, so that no process takes its copy of the version before for current
    (:func:`current_record`). A bound already there or beyond (another writer's, or this request's own
    resend after a lost answer) is left; a head item that is missing (a group created before head
    items) is created.

    Not when both the state read and the one written are small: no process keeps a copy of a small
    version, so a bound left below the record names a version nobody has a copy of, and a copy is
    only taken of a version the bound names."""
    if small(record.state) and small(body):
        return
    version = record.version + 1
    head = ReaderGroupHeadRecord(reader_group_pk(scope, group), HEAD_KEY)
    try:
        head.update(actions=[ReaderGroupHeadRecord.kind.set(ReaderGroupHeadRecord),
                             ReaderGroupHeadRecord.bound.set(version),
                             ReaderGroupHeadRecord.token.set(ReaderGroupHeadRecord.token | uuid.uuid4().hex)],
                    condition=ReaderGroupHeadRecord.bound.does_not_exist() | (ReaderGroupHeadRecord.bound < version))
    except UpdateError as e:
        if not failed_condition(e):
            raise


def new_head(scope: str, group: str, version: int) -> ReaderGroupHeadRecord:
    """The head item of a group just created at ``version``, with a token no earlier group had."""
    return ReaderGroupHeadRecord(reader_group_pk(scope, group), HEAD_KEY, token=uuid.uuid4().hex, bound=version)


class _RecordCopies:
    """This process's copies of group records, each under the head token and version it was read at and
    the time it was taken, or a mark that the group's record was small when last read."""

    def __init__(self, limit: int, limit_bytes: int) -> None:
        self._limit, self._limit_bytes = limit, limit_bytes
        # pk -> (head token, version, the record as stored, when taken): at most ``limit`` groups, whose
        # stored states (``_bytes`` in all) take at most ``limit_bytes``
        self._copies: OrderedDict[str, tuple[str, int, dict, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, pk: str, token: str, version: int, taken_after_ms: int) -> ReaderGroupRecord | None:
        with self._lock:
            copy = self._copies.get(pk)
            if copy is None or copy[:2] != (token, version) or copy[3] < taken_after_ms:
                return None
            self._copies.move_to_end(pk)
        return ReaderGroupRecord.from_raw_data(copy[2])  # a record of its own: callers change theirs

    def small(self, pk: str) -> bool:
        with self._lock:
            return self._copies.get(pk) is _SMALL

    def mark_small(self, pk: str) -> None:
        self._keep(pk, _SMALL)

    def forget(self, pk: str) -> None:
        with self._lock:
            self._drop(pk)

    def put(self, pk: str, token: str, record: ReaderGroupRecord, taken_ms: int) -> None:
        self._keep(pk, (token, record.version, record.serialize(), taken_ms))

    def _keep(self, pk: str, entry: tuple[str, int, dict, int]) -> None:
        with self._lock:
            self._drop(pk)
            self._copies[pk] = entry
            self._bytes += _size(entry)
            while len(self._copies) > self._limit or self._bytes > self._limit_bytes:
                self._drop(next(iter(self._copies)))

    def _drop(self, pk: str) -> None:
        entry = self._copies.pop(pk, None)
        if entry is not None:
            self._bytes -= _size(entry)


def _size(entry: tuple[str, int, dict, int]) -> int:
    """The bytes of a copy's stored state (what its memory is mostly)."""
    return len(entry[2].get("state", {}).get("S", ""))


_SMALL = ("", 0, {}, 0)  # what a process keeps of a group whose record it last found small


_COPIES = _RecordCopies(CACHED_GROUPS, CACHED_STATE_BYTES)
