"""The reader group's record stays small however long the group runs (DESIGN "Scale rules").

A stream that auto-scales all week has completed thousands of segments; the group's record must not
remember them all (DynamoDB refuses items over 400 KB and charges updates on the item's size). The
group's history here is driven through the pure transitions of controlplane.reader_groups (fast), then
stored in moto and updated once more through ReaderGroups, and the stored item's size is measured.
"""

from __future__ import annotations

import random
import time
import uuid
from types import SimpleNamespace

import boto3
import pytest

from controlplane.models import ReaderGroupPageRecord, ReaderGroupRecord, reader_group_pk
from controlplane.reader_groups import (
    GROUP_KEY,
    MAX_STATE_BYTES,
    GroupState,
    ReaderGroups,
    add_reader,
    initiate_checkpoint,
    new_state,
    sync,
)
from controlplane.reader_groups.state import FIRST_VERSION, PAGE_BYTES, PAGE_PREFIX, page_sk, read_record
from controlplane.streams import StreamTasks
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import IllegalState, ReaderGroupNotFound
from rillet.models import ReaderGroupConfig, SegmentPosition, StreamRange, SuccessorInfo

try:
    from history import ScalingHistory
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import ScalingHistory

READERS = 100
COMPLETED = 10_000
ITEM_LIMIT = 64 * 1024


class Scaling:
    """A stream that scales all the time: splits while narrower than ``width``, merges otherwise."""

    def __init__(self, scope: str, width: int = 24, seed: int = 7) -> None:
        self.stream = f"{scope}/s"
        self.history = ScalingHistory.start([i / 8 for i in range(8)] + [1.0])
        self.width, self.random = width, random.Random(seed)
        self.successors_of: dict[int, list[int]] = {}
        self.predecessors_of: dict[int, list[int]] = {}

    def scale(self) -> set[int]:
        current = self.history.current
        if len(current) < self.width or self.random.random() < 0.3:
            first, count = self.random.randrange(len(current)), 1
            s = self.history.segments[current[first]]
            inner = [(s.low + s.high) / 2]
        else:
            first, count, inner = self.random.randrange(len(current) - 1), 2, []
        event = self.history.scale(first, count, inner)
        for sid in event.sealed:
            s = self.history.segments[sid]
            self.successors_of[sid] = [c for c in event.created if self.history.segments[c].low < s.high
                                       and s.low < self.history.segments[c].high]
        for sid in event.created:
            s = self.history.segments[sid]
            self.predecessors_of[sid] = [p for p in event.sealed if self.history.segments[p].low < s.high
                                         and s.low < self.history.segments[p].high]
        return set(event.sealed)

    def successors(self, stream: str, sid: int, incarnation: int | None) -> list[SuccessorInfo]:
        segments = self.history.segments
        return [SuccessorInfo(segment=segments[c], predecessors=[segments[p] for p in self.predecessors_of[c]])
                for c in self.successors_of.get(sid, [])]

    # the two StreamTasks methods ReaderGroups uses for this group
    def head(self, scope: str, stream: str) -> list[SegmentPosition]:
        return [SegmentPosition(segment=self.history.segments[s], offset=0) for s in self.history.epochs[0]]

    def successors_for(self, scope: str, stream: str, sid: int) -> list[SuccessorInfo]:
        return self.successors(f"{scope}/{stream}", sid)


class _Streams:
    """The StreamTasks calls a reader group makes, answered from the simulated scaling (one incarnation)."""

    check_incarnation = staticmethod(StreamTasks.check_incarnation)

    def __init__(self, scaling: Scaling) -> None:
        self.scaling = scaling

    @property
    def store(self) -> SimpleNamespace:
        """The connection the groups' transactions go through: the metadata table's."""
        return SimpleNamespace(transaction_connection=ReaderGroupRecord._get_connection().connection)

    def record(self, scope: str, stream: str) -> SimpleNamespace:
        return SimpleNamespace(scope=scope, stream=stream, created_ms=1)

    def head(self, scope: str, stream: str, record: object = None) -> list[SegmentPosition]:
        return self.scaling.head(scope, stream)

    def successors(self, scope: str, stream: str, sid: int, incarnation: int | None = None) -> list[SuccessorInfo]:
        return self.scaling.successors_for(scope, stream, sid)


def run_for_a_week(scaling: Scaling, scope: str) -> tuple[GroupState, list[str]]:
    """100 readers read a stream through enough scale events to complete 10,000 segments, with a
    checkpoint every 50 scale events."""
    # the simulated readers sync only when they have work: a week-long lease keeps them all online
    config = ReaderGroupConfig(streams=[StreamRange(scope=scope, stream="s")], automatic_checkpoint_interval_ms=0,
                               reader_lease_ms=7 * 24 * 3600 * 1000)
    state = new_state(config, {scaling.stream: scaling.head(scope, "s")})
    readers = [f"reader-{uuid.UUID(int=scaling.random.getrandbits(128)).hex}" for _ in range(READERS)]
    now = int(time.time() * 1000) - 24 * 3600 * 1000  # a day ago, so every reader is still online now
    for reader in readers:
        add_reader(state, reader, now)
    for reader in readers:
        sync(state, reader, SyncRequest(), now, scaling.successors)
    completed, scales = 0, 0
    while completed < COMPLETED:
        sealed = scaling.scale()
        scales += 1
        now += 10_000
        for reader in readers:
            held = state.readers[reader].segments.values()
            done = [SegmentOffset(stream=h.stream, segment_id=h.segment.segment_id, offset=10**9 + h.offset)
                    for h in held if h.segment.segment_id in sealed]
            if done:
                sync(state, reader, SyncRequest(completed=done), now, scaling.successors)
                completed += len(done)
        idle = (r for r in readers if not state.readers[r].segments)
        while state.unassigned:
            sync(state, next(idle), SyncRequest(), now, scaling.successors)
        if scales % 50 == 0:
            initiate_checkpoint(state, f"cp-{scales}", False, now)
            for reader in readers:
                positions = [SegmentOffset(stream=h.stream, segment_id=h.segment.segment_id, offset=123_456_789)
                             for h in state.readers[reader].segments.values()]
                sync(state, reader, SyncRequest(positions=positions, checkpoint=f"cp-{scales}"), now,
                     scaling.successors)
            assert state.last_checkpoint.name == f"cp-{scales}" and state.last_checkpoint.cuts
    return state, readers


def stored_size(item: dict) -> int:
    """An item's size as DynamoDB counts it: attribute names plus values (numbers as their digits)."""
    def value_size(value: dict) -> int:
        (kind, v), = value.items()
        if kind == "S":
            return len(v.encode())
        if kind == "N":
            return len(v.lstrip("-").replace(".", "").lstrip("0")) // 2 + 2
        if kind in ("M", "L"):
            entries = v.items() if kind == "M" else ((None, x) for x in v)
            return 3 + sum((len(k.encode()) if k else 0) + 1 + value_size(x) for k, x in entries)
        return 1
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def test_a_group_that_completed_10000_segments_with_100_readers_stays_under_64_kb(deployment, unique):
    scaling = Scaling(unique)
    state, readers = run_for_a_week(scaling, unique)
    assert sum(len(r.segments) for r in state.readers.values()) + len(state.unassigned) > 0

    record = ReaderGroupRecord(reader_group_pk(unique, "g"), GROUP_KEY, scope=unique, group="g",
                               state=state.model_dump(mode="json"))
    record.save()
    # one more read-modify-write through the store: the record can still be updated
    groups = ReaderGroups(_Streams(scaling), retention=None)
    reader = next(r for r in readers if state.readers[r].segments)
    held = next(iter(state.readers[reader].segments.values()))
    groups.sync(unique, "g", reader, SyncRequest(positions=[
        SegmentOffset(stream=held.stream, segment_id=held.segment.segment_id, offset=987_654_321)]))

    client = boto3.client("dynamodb", endpoint_url=deployment.endpoint_url, region_name=deployment.region)
    item = client.get_item(TableName=deployment.metadata_table, ConsistentRead=True,
                           Key={"pk": {"S": reader_group_pk(unique, "g")}, "sk": {"S": GROUP_KEY}})["Item"]
    size = stored_size(item)
    print(f"group record after {COMPLETED} completed segments, {READERS} readers: {size} bytes")
    assert size < ITEM_LIMIT, f"the group's record is {size} bytes"
    assert len(groups.state(unique, "g").readers) == READERS


def test_a_group_too_large_for_its_item_is_refused_with_a_typed_error(deployment, unique):
    """A group over a stream of 50,000 live segments passes MAX_STATE_BYTES (40,000 fit, in pages:
    docs/limits.md): creating it answers IllegalState (409) saying so, not DynamoDB's validation failure
    (an opaque 500), and leaves nothing."""
    scaling = Scaling(unique)
    scaling.history = ScalingHistory.start([i / 50_000 for i in range(50_000)] + [1.0])
    groups = ReaderGroups(_Streams(scaling), retention=None)
    config = ReaderGroupConfig(streams=[StreamRange(scope=unique, stream="s")])
    with pytest.raises(IllegalState) as refused:
        groups.create(unique, "huge", config)
    assert refused.value.details["size"] > MAX_STATE_BYTES
    with pytest.raises(ReaderGroupNotFound):
        groups.info(unique, "huge")


def items_of(deployment, pk: str) -> dict[str, dict]:
    """Every item under the group's partition key, by sort key, as DynamoDB stores it."""
    client = boto3.client("dynamodb", endpoint_url=deployment.endpoint_url, region_name=deployment.region)
    pages = client.get_paginator("query").paginate(
        TableName=deployment.metadata_table, ConsistentRead=True, KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": pk}})
    return {item["sk"]["S"]: item for page in pages for item in page["Items"]}


def a_large_group(scope: str, readers: int, segments: int) -> tuple[Scaling, ReaderGroupConfig, GroupState, list[str]]:
    """``readers`` readers holding their shares of a stream of ``segments`` live segments, built through
    the pure transitions, with a checkpoint every reader but the last has passed."""
    scaling = Scaling(scope)
    scaling.history = ScalingHistory.start([i / segments for i in range(segments)] + [1.0])
    config = ReaderGroupConfig(streams=[StreamRange(scope=scope, stream="s")], automatic_checkpoint_interval_ms=0,
                               reader_lease_ms=7 * 24 * 3600 * 1000)
    state = new_state(config, {scaling.stream: scaling.head(scope, "s")})
    names = [f"reader-{n:04d}" for n in range(readers)]
    now = int(time.time() * 1000)
    for name in names:
        add_reader(state, name, now)
    for name in names:
        sync(state, name, SyncRequest(), now, scaling.successors)
    initiate_checkpoint(state, "cp", False, now)
    for name in names[:-1]:
        positions = [SegmentOffset(stream=h.stream, segment_id=h.segment.segment_id, offset=123_456_789)
                     for h in state.readers[name].segments.values()]
        sync(state, name, SyncRequest(positions=positions, checkpoint="cp"), now, scaling.successors)
    return scaling, config, state, names


def test_a_group_of_1000_readers_over_5000_segments_works_with_every_item_far_from_the_limit(deployment, unique):
    """Issue 40: the state of 1,000 readers on a 5,000-segment stream with a checkpoint outstanding stores
    in about 220 KB, which no single item should hold (moto even refuses its rewrite). It is cut into page
    items of at most PAGE_BYTES: the group is created, takes that state, completes the checkpoint through
    a real sync, and is deleted with every page."""
    scaling, config, state, readers = a_large_group(unique, 1_000, 5_000)
    groups = ReaderGroups(_Streams(scaling), retention=None)
    assert groups.create(unique, "g", config)
    pk = reader_group_pk(unique, "g")
    assert page_sk(0) not in items_of(deployment, pk)  # 124 KB when created: in the record
    groups._write(unique, "g", read_record(unique, "g"), state, None)

    last = readers[-1]
    positions = [SegmentOffset(stream=h.stream, segment_id=h.segment.segment_id, offset=987_654_321)
                 for h in state.readers[last].segments.values()]
    groups.sync(unique, "g", last, SyncRequest(positions=positions, checkpoint="cp"))

    done = groups.checkpoint(unique, "g", "cp")
    assert done.complete
    offsets = {p.offset for cut in done.cuts for p in cut.positions}
    assert offsets == {123_456_789, 987_654_321}, "every reader's pass is in the checkpoint"
    items = items_of(deployment, pk)
    pages = sorted(sk for sk in items if sk.startswith(PAGE_PREFIX))
    sizes = {sk: stored_size(item) for sk, item in items.items()}
    print(f"1,000 readers on 5,000 segments: {len(pages)} pages, largest item {max(sizes.values())} bytes")
    assert len(pages) >= 2 and int(items[GROUP_KEY]["pages"]["N"]) == len(pages)
    assert max(sizes.values()) <= PAGE_BYTES + 1_000
    assert len(groups.state(unique, "g").readers) == 1_000

    assert groups.delete(unique, "g")
    assert not [sk for sk in items_of(deployment, pk) if sk == GROUP_KEY or sk.startswith(PAGE_PREFIX)]


def test_a_state_that_shrinks_back_into_its_record_leaves_no_page_behind(deployment, unique):
    scaling, config, _state, _readers = a_large_group(unique, 10, 8_000)  # created in 2 pages
    groups = ReaderGroups(_Streams(scaling), retention=None)
    assert groups.create(unique, "g", config)
    pk = reader_group_pk(unique, "g")
    assert page_sk(1) in items_of(deployment, pk)

    small = new_state(config, {scaling.stream: scaling.head(unique, "s")[:3]})
    groups._write(unique, "g", read_record(unique, "g"), small, None)

    items = items_of(deployment, pk)
    assert not [sk for sk in items if sk.startswith(PAGE_PREFIX)] and "pages" not in items[GROUP_KEY]
    assert len(groups.state(unique, "g").unassigned) == 3


def test_a_read_that_meets_a_write_between_the_record_and_its_pages_reads_again(deployment, unique, monkeypatch):
    """The record and its pages are two requests: a write landing between them (a checkpoint begun by
    another controller) must not give a state joined from two versions, but the newer one whole."""
    scaling, config, _state, _readers = a_large_group(unique, 10, 8_000)  # created in 2 pages
    groups = ReaderGroups(_Streams(scaling), retention=None)
    assert groups.create(unique, "g", config)
    query, calls = ReaderGroupPageRecord.query, []

    def a_write_lands_first(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            ReaderGroups(_Streams(scaling), retention=None).initiate_checkpoint(unique, "g", "between")
        return query(*args, **kwargs)

    monkeypatch.setattr(ReaderGroupPageRecord, "query", a_write_lands_first)
    record = read_record(unique, "g")
    assert len(calls) == 3  # ours, which met the write; the writer's own read; ours again
    assert GroupState.model_validate(record.state).last_checkpoint.name == "between"  # no reader: done at once
    assert record.version == FIRST_VERSION + 1
