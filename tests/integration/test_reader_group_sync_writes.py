"""What a reader group's syncs write (issue 27) and read (issue 40), through controlplane.reader_groups
on the session's moto.

A sync that changes nothing the group shares writes no group record: the reader's offsets and lease
renewals go to its own small item, and that only when they moved or the renewal is due. Nor does it
read the record while its head item says no write can have changed the process's copy. The requests
are counted from the moto server's request records (what the benchmarks price). Items count only for
the reader entry they were written for, so one left from before a reset lends nobody its positions.
Time is simulated where leases matter (the module's clock is replaced), so no assertion depends on
how fast the machine is.
"""

from __future__ import annotations

import pytest

from controlplane.models import ReaderGroupHeadRecord, ReaderGroupRecord, reader_group_pk
from controlplane.reader_groups import groups as module
from controlplane.reader_groups import state as state_module
from controlplane.reader_groups.readers import MAX_EXPIRED_PER_WRITE
from controlplane.reader_groups.state import HEAD_KEY
from controlplane.reader_items import ReaderItemRecord, reader_sk
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import ReaderNotInReaderGroup
from rillet.models import ReaderGroupConfig, ScalingPolicy, StreamConfiguration, StreamRange

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
READS = {"GetItem", "Query", "BatchGetItem", "TransactGetItems"}


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture
def clock(monkeypatch):
    now = [1_800_000_000_000]
    monkeypatch.setattr(module, "_now", lambda: now[0])
    return now


@pytest.fixture
def metered(moto_server):
    moto_server.meter.keep_records = True
    moto_server.meter.reset()
    yield moto_server.meter
    moto_server.meter.keep_records = False
    moto_server.meter.reset()


@pytest.fixture
def every_record_large(monkeypatch):
    """Treat every group record as too large to read whole on each sync (the copies, the head item and
    passes in readers' items), so that small groups show what large ones do."""
    monkeypatch.setattr(state_module, "SMALL_STATE_JSON", 0)


def group(controller, scope: str, lease_ms: int = 60_000, segments: int = 2):
    controller.streams.create_scope(scope)
    controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments)))
    config = ReaderGroupConfig(streams=[StreamRange(scope=scope, stream="s")], automatic_checkpoint_interval_ms=0,
                               group_refresh_time_ms=1_000, reader_lease_ms=lease_ms)
    controller.reader_groups.create(scope, "g", config)
    return controller.reader_groups


def writes(meter, scope: str) -> list[tuple[str, str]]:
    """(operation, sort key) of every write to the group's partition since the meter was reset."""
    return requests(meter, scope, WRITES)


def record_reads(meter, scope: str) -> int:
    """Reads of the group's record since the meter was reset."""
    return requests(meter, scope, READS).count(("GetItem", module.GROUP_KEY))


def requests(meter, scope: str, operations: set[str]) -> list[tuple[str, str]]:
    """(operation, sort key) of every request of ``operations`` to an item of the group's partition
    named by its key, since the meter was reset."""
    pk = reader_group_pk(scope, "g")
    found = []
    for record in meter.snapshot()[1]:
        if record.operation not in operations:
            continue
        body = record.request or {}
        actions = [next(iter(a.values())) for a in body.get("TransactItems", [])] or [body]
        for action in actions:
            key = action.get("Key") or action.get("Item") or {}
            if key.get("pk", {}).get("S") == pk:
                found.append((record.operation, key["sk"]["S"]))
    return found


def report(scope: str, offsets: dict[int, int], token: str) -> SyncRequest:
    return SyncRequest(positions=[SegmentOffset(stream=f"{scope}/s", segment_id=s, offset=o) for s, o in offsets.items()],
                       instance=token)


def held(assignment) -> dict[int, int]:
    return {a.segment.segment_id: a.offset for a in assignment.segments}


def cut(groups, scope: str) -> dict[int, int]:
    (stream_cut,) = groups.stream_cuts(scope, "g")
    return {p.segment.segment_id: p.offset for p in stream_cut.positions}


def test_a_sync_that_changes_nothing_writes_nothing_and_moved_offsets_write_only_the_readers_item(
        controller, unique, metered, clock):
    groups = group(controller, unique)
    groups.add_reader(unique, "g", "r1", "tok1")
    offsets = held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1")))  # acquires: a group write
    assert len(offsets) == 2
    metered.reset()
    for _ in range(5):
        clock[0] += 1_000
        assert held(groups.sync(unique, "g", "r1", report(unique, offsets, "tok1"))) == offsets
    assert writes(metered, unique) == []

    moved = {s: 40 for s in offsets}
    clock[0] += 1_000
    assert held(groups.sync(unique, "g", "r1", report(unique, moved, "tok1"))) == moved
    assert writes(metered, unique) == [("PutItem", reader_sk("r1"))]
    assert cut(groups, unique) == moved  # the group's position includes what only the item holds
    (status,) = groups.reader_statuses(unique, "g")
    assert {s.segment.segment_id: s.offset for s in status.segments} == moved


def test_live_readers_renew_only_their_items_and_a_dead_one_is_taken_offline_at_its_items_position(
        controller, unique, metered, clock):
    """Three readers sync every 10 s without change for ten leases: nobody is taken offline, each
    renews its own item about every quarter lease, and the group record is written only by the folds
    that move the lease deadline on (a small fraction of the syncs). Then one stops: the next fold after
    its lease takes it offline at the offsets only its item held."""
    lease = 60_000
    groups = group(controller, unique, lease_ms=lease, segments=3)
    readers = {f"r{i}": f"tok{i}" for i in range(3)}
    for name, token in readers.items():
        groups.add_reader(unique, "g", name, token)
    offsets = {name: held(groups.sync(unique, "g", name, report(unique, {}, token))) for name, token in readers.items()}
    assert sorted(len(o) for o in offsets.values()) == [1, 1, 1]
    (dead_segment,) = offsets["r2"]
    clock[0] += 1_000
    groups.sync(unique, "g", "r2", report(unique, {dead_segment: 70}, "tok2"))  # only its item holds 70
    metered.reset()
    syncs = 0
    for _ in range(10 * lease // 10_000):
        clock[0] += 10_000
        for name, token in readers.items():
            groups.sync(unique, "g", name, report(unique, {s: 70 if name == "r2" else 0 for s in offsets[name]}, token))
            syncs += 1
    assert sorted(groups.info(unique, "g").online_readers) == sorted(readers)
    written = writes(metered, unique)
    group_writes = [w for w in written if w[1] == module.GROUP_KEY]
    item_writes = [w for w in written if w[1].startswith("reader#")]
    assert 0 < len(group_writes) <= syncs // 5, written  # before issue 27: every sync
    assert len(item_writes) <= syncs * 2 // 3, written

    del readers["r2"]  # r2 is killed
    taken_offline = False
    for _ in range(lease // 10_000 + 1):
        clock[0] += 10_000
        for name, token in readers.items():
            groups.sync(unique, "g", name, report(unique, {}, token))
        taken_offline = "r2" not in groups.info(unique, "g").online_readers
    assert taken_offline
    everything = {}
    for name, token in readers.items():
        everything.update(held(groups.sync(unique, "g", name, report(unique, {}, token))))
    assert everything[dead_segment] == 70
    with pytest.raises(ReaderNotInReaderGroup):
        groups.sync(unique, "g", "r2", report(unique, {}, "tok2"))
    assert "r2" not in groups.items.all(unique, "g")  # taking it offline deleted its item


def test_a_stale_reader_item_is_ignored_after_a_reset(controller, unique, clock):
    """A reader's item that outlived a reset (a sync of the old generation landing after the reset's
    cleanup) must not move the new generation's positions, nor keep anyone's lease alive: an item
    counts only with the group's generation and the reader entry's join id."""
    groups = group(controller, unique)
    groups.add_reader(unique, "g", "r1", "tok1")
    offsets = held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1")))
    moved = {s: 40 for s in offsets}
    clock[0] += 1_000
    groups.sync(unique, "g", "r1", report(unique, moved, "tok1"))
    old = ReaderItemRecord.get(reader_group_pk(unique, "g"), reader_sk("r1"), consistent_read=True)
    assert old.generation == 0 and set(old.offsets.values()) == {40}

    config = groups.state(unique, "g").config
    assert groups.reset(unique, "g", config).generation == 1
    with pytest.raises(ReaderItemRecord.DoesNotExist):  # the reset deleted the items it read
        ReaderItemRecord.get(reader_group_pk(unique, "g"), reader_sk("r1"), consistent_read=True)
    with pytest.raises(ReaderNotInReaderGroup):
        groups.sync(unique, "g", "r1", report(unique, moved, "tok1"))

    groups.add_reader(unique, "g", "r1", "tok1")
    assert held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1"))) == {s: 0 for s in offsets}
    join = groups.state(unique, "g").readers["r1"].join
    for generation, join_id in ((0, old.join), (0, join), (1, old.join)):  # each stale in one way
        stale = ReaderItemRecord(reader_group_pk(unique, "g"), reader_sk("r1"), generation=generation, join=join_id,
                                 seen_ms=clock[0] + 10 * 60_000, offsets=old.offsets)
        stale.save(add_version_condition=False)
        assert cut(groups, unique) == {s: 0 for s in offsets}
        assert groups.state(unique, "g").readers["r1"].seen_ms <= clock[0]
    clock[0] += 1_000
    assert held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1"))) == {s: 0 for s in offsets}
    assert cut(groups, unique) == {s: 0 for s in offsets}


def test_a_reader_whose_renewal_lands_while_another_sync_expires_it_stays_online(controller, unique, clock, monkeypatch):
    """The interleaving a no-change renewal opens: r2's sync reads every reader's item, finds r1's lease
    over, and before it stores that, r1's sync renews r1's lease in r1's item (it wrote no group record).
    r2's write checks the items of the readers it takes offline, so it is refused and read again, and r1
    stays online with its segment (it was told it holds it)."""
    lease = 60_000
    groups = group(controller, unique, lease_ms=lease)
    for name in ("r1", "r2"):
        groups.add_reader(unique, "g", name, f"tok-{name}")
    held_by = {name: held(groups.sync(unique, "g", name, report(unique, {}, f"tok-{name}"))) for name in ("r1", "r2")}
    join = groups.state(unique, "g").readers["r1"].join
    clock[0] += lease  # r1 was silent for its whole lease; r2 syncs within its own below
    read_all, renewals = groups.items.all, []

    def renewal_lands_after_the_read(scope, name):
        items = read_all(scope, name)
        if not renewals:
            renewals.append(clock[0])
            groups.items.write(scope, name, "r1", items.get("r1"), 0, join, clock[0], held_by["r1"], {})
        return items

    monkeypatch.setattr(groups.items, "all", renewal_lands_after_the_read)
    groups.sync(unique, "g", "r2", report(unique, held_by["r2"], "tok-r2"))
    assert renewals and sorted(groups.info(unique, "g").online_readers) == ["r1", "r2"]
    assert held(groups.sync(unique, "g", "r1", report(unique, held_by["r1"], "tok-r1"))) == held_by["r1"]


def test_a_sync_reads_the_group_record_only_after_it_changed(controller, unique, metered, clock):
    """Unchanged, a sync reads the group's head item (a few bytes) instead of its record (a unit per 4 KB,
    25 at 1,000 readers): the process's copy serves. A change by another operation moves the head, so
    the next sync reads the record once, and sees the change. (64 segments: a record over 4 KB.)"""
    groups = group(controller, unique, segments=64)
    groups.add_reader(unique, "g", "r1", "tok1")
    offsets = held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1")))  # acquires: a group write
    metered.reset()
    for _ in range(5):
        clock[0] += 1_000
        assert groups.sync(unique, "g", "r1", report(unique, offsets, "tok1")).checkpoint is None
    assert record_reads(metered, unique) == 1  # the first after the acquiring write; before issue 40: 5
    assert requests(metered, unique, READS).count(("GetItem", HEAD_KEY)) == 5

    groups.initiate_checkpoint(unique, "g", "cp")
    metered.reset()
    for _ in range(3):
        clock[0] += 1_000
        assert groups.sync(unique, "g", "r1", report(unique, offsets, "tok1")).checkpoint == "cp"
    assert record_reads(metered, unique) == 1


def test_a_small_group_reads_its_record_whole_and_raises_no_bound(controller, unique, metered, clock):
    """A record under 4 KB costs a consistent read 1 unit, as the head item does: its syncs read it
    whole (no head read), and its changes write no head (before head items, exactly so)."""
    groups = group(controller, unique)
    groups.add_reader(unique, "g", "r1", "tok1")
    offsets = held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1")))
    metered.reset()
    for _ in range(5):
        clock[0] += 1_000
        groups.sync(unique, "g", "r1", report(unique, offsets, "tok1"))
    groups.initiate_checkpoint(unique, "g", "cp")
    assert record_reads(metered, unique) == 6
    touched = requests(metered, unique, READS | WRITES)
    assert not [r for r in touched if r[1] == HEAD_KEY], touched


def test_a_write_applied_by_a_controller_that_died_is_never_hidden_by_a_copy(controller, unique, clock, monkeypatch,
                                                                            every_record_large):
    """The head moves before the record is written, so a change stored by a request whose controller
    died before it could answer (or do anything else) is seen by the next sync, not the copy from
    before it. A head raised for a write that never landed only costs reads of the record."""
    groups = group(controller, unique)
    groups.add_reader(unique, "g", "r1", "tok1")
    offsets = held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1")))
    clock[0] += 1_000
    groups.sync(unique, "g", "r1", report(unique, offsets, "tok1"))  # the copy is current now
    checkpoint_by_a_dying_controller(groups, unique, "cp", monkeypatch, applied=True)
    clock[0] += 1_000
    assert groups.sync(unique, "g", "r1", report(unique, offsets, "tok1")).checkpoint == "cp"

    checkpoint_by_a_dying_controller(groups, unique, "cp2", monkeypatch, applied=False)
    clock[0] += 1_000
    assignment = groups.sync(unique, "g", "r1", report(unique, offsets, "tok1"))
    assert assignment.checkpoint == "cp" and held(assignment) == offsets
    assert [c.name for c in groups.state(unique, "g").checkpoints] == ["cp"]


def checkpoint_by_a_dying_controller(groups, scope: str, name: str, monkeypatch, applied: bool) -> None:
    """initiate_checkpoint by a controller that dies at the record's update, once it was applied or before."""
    stored = ReaderGroupRecord.update

    def die(self, *args, **kwargs):
        if applied:
            stored(self, *args, **kwargs)
        raise ConnectionResetError("the controller died")

    monkeypatch.setattr(ReaderGroupRecord, "update", die)
    with pytest.raises(ConnectionResetError):
        groups.initiate_checkpoint(scope, "g", name)
    monkeypatch.setattr(ReaderGroupRecord, "update", stored)


def test_a_copy_of_a_deleted_group_never_answers_for_a_new_group_of_its_name(controller, unique, every_record_large):
    """Both groups' records are at the same version, so only the head's token, new with every create,
    tells the deleted group's copy from the new record."""
    groups = group(controller, unique)
    assert groups.state(unique, "g").config.group_refresh_time_ms == 1_000  # the copy is taken here
    assert groups.delete(unique, "g")
    config = ReaderGroupConfig(streams=[StreamRange(scope=unique, stream="s")], automatic_checkpoint_interval_ms=0,
                               group_refresh_time_ms=2_000)
    assert groups.create(unique, "g", config)
    assert groups.state(unique, "g").config.group_refresh_time_ms == 2_000


def test_a_group_created_without_a_head_item_is_read_until_its_next_change_makes_one(
        controller, unique, metered, clock, every_record_large):
    """Groups created by a release before head items: every sync reads the record, as it did; the first
    change writes the head, and the syncs after it are served from the copy."""
    groups = group(controller, unique)
    ReaderGroupHeadRecord(reader_group_pk(unique, "g"), HEAD_KEY).delete()
    groups.add_reader(unique, "g", "r1", "tok1")
    ReaderGroupHeadRecord(reader_group_pk(unique, "g"), HEAD_KEY).delete()
    metered.reset()
    clock[0] += 1_000
    offsets = held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1")))  # acquires: makes the head
    for _ in range(4):
        clock[0] += 1_000
        assert held(groups.sync(unique, "g", "r1", report(unique, offsets, "tok1"))) == offsets
    assert record_reads(metered, unique) == 2  # the acquiring sync's and the first after it
    assert ReaderGroupHeadRecord.get(reader_group_pk(unique, "g"), HEAD_KEY, consistent_read=True).bound \
        == ReaderGroupRecord.get(reader_group_pk(unique, "g"), module.GROUP_KEY, consistent_read=True).version


def readers_each_holding_one(groups, scope: str, count: int) -> dict[str, int]:
    """``count`` readers joined (tokens tok-<name>), each holding one segment: name -> its segment."""
    names = [f"r{i}" for i in range(count)]
    for name in names:
        groups.add_reader(scope, "g", name, f"tok-{name}")
    holding = {name: held(groups.sync(scope, "g", name, report(scope, {}, f"tok-{name}"))) for name in names}
    assert sorted(len(h) for h in holding.values()) == [1] * count
    return {name: next(iter(h)) for name, h in holding.items()}


def pass_at(groups, scope: str, name: str, segment: int, offset: int, checkpoint: str = "cp", token: str | None = None):
    request = report(scope, {segment: offset}, token or f"tok-{name}").model_copy(update={"checkpoint": checkpoint})
    return groups.sync(scope, "g", name, request)


def checkpoint_cut(groups, scope: str, name: str = "cp") -> dict[int, int] | None:
    info = groups.checkpoint(scope, "g", name)
    if not info.complete:
        return None
    (stream_cut,) = info.cuts
    return {p.segment.segment_id: p.offset for p in stream_cut.positions}


def test_a_checkpoint_of_five_readers_rewrites_the_group_record_once_at_each_passes_offsets(
        controller, unique, metered, clock, every_record_large):
    """Passes that release nothing are stored in the readers' own items and counted on the head item; the
    pass expected to be the last reads every item and finishes the checkpoint in one record write (before
    issue 40, every pass rewrote the record: 1,000 rewrites of 98 KB for 1,000 readers). The cut is each
    reader's offset at its pass, though every reader read on after it."""
    groups = group(controller, unique, segments=5)
    segment_of = readers_each_holding_one(groups, unique, 5)
    groups.initiate_checkpoint(unique, "g", "cp")
    metered.reset()
    for i, (name, segment) in enumerate(segment_of.items()):
        clock[0] += 1_000
        assert groups.sync(unique, "g", name, report(unique, {segment: 10 * i}, f"tok-{name}")).checkpoint == "cp"
        assert pass_at(groups, unique, name, segment, 100 + i).checkpoint is None
        assert groups.sync(unique, "g", name, report(unique, {segment: 500}, f"tok-{name}")).checkpoint is None
        assert (checkpoint_cut(groups, unique) is None) == (i < 4)
    assert [w for w in writes(metered, unique) if w[1] == module.GROUP_KEY] == [("UpdateItem", module.GROUP_KEY)]
    assert checkpoint_cut(groups, unique) == {segment: 100 + i for i, segment in enumerate(segment_of.values())}


def test_a_pass_stored_but_never_counted_is_folded_in_by_the_next_lease_fold(controller, unique, clock, monkeypatch,
                                                                             every_record_large):
    """A controller that dies between storing a pass in the reader's item and counting it on the head
    leaves the count short: the last pass then looks like it is not the last and goes to its item too.
    The sync that folds every reader's renewals before the lease deadline folds the passes in as well,
    and the checkpoint completes at the passes' offsets."""
    lease = 60_000
    groups = group(controller, unique, lease_ms=lease, segments=3)
    segment_of = readers_each_holding_one(groups, unique, 3)
    groups.initiate_checkpoint(unique, "g", "cp")
    names = list(segment_of)
    counted = module.count_pass
    monkeypatch.setattr(module, "count_pass", lambda scope, group: None)  # the first pass is never counted
    pass_at(groups, unique, names[0], segment_of[names[0]], 7)
    monkeypatch.setattr(module, "count_pass", counted)
    for name in names[1:]:
        clock[0] += 1_000
        pass_at(groups, unique, name, segment_of[name], 7)
    assert checkpoint_cut(groups, unique) is None  # counted 2 of 3: the last pass went to its item
    for _ in range(lease // 10_000):
        clock[0] += 10_000
        for name in names:
            groups.sync(unique, "g", name, report(unique, {segment_of[name]: 99}, f"tok-{name}"))
        if checkpoint_cut(groups, unique) is not None:
            break
    assert checkpoint_cut(groups, unique) == {segment: 7 for segment in segment_of.values()}


def test_a_segment_completed_after_a_pass_in_the_item_keeps_the_pass_offset_in_the_cut(controller, unique, clock,
                                                                                       every_record_large):
    """A reader passes (stored in its item), reads its segment on to the end and says so: the completion
    writes the record, with the pass folded in first, so the checkpoint keeps the offset at the pass
    and a group restored from it reads the rest again rather than skipping it."""
    groups = group(controller, unique, segments=3)
    segment_of = readers_each_holding_one(groups, unique, 3)
    groups.initiate_checkpoint(unique, "g", "cp")
    first, *others = segment_of
    pass_at(groups, unique, first, segment_of[first], 40)
    clock[0] += 1_000
    done = SegmentOffset(stream=f"{unique}/s", segment_id=segment_of[first], offset=900)
    groups.sync(unique, "g", first, SyncRequest(completed=[done], instance=f"tok-{first}"))
    for name in others:
        clock[0] += 1_000
        pass_at(groups, unique, name, segment_of[name], 5)
    assert checkpoint_cut(groups, unique) == {segment_of[first]: 40, **{segment_of[n]: 5 for n in others}}


def test_a_last_pass_that_completes_a_segment_folds_in_the_passes_waiting_in_items(
        controller, unique, clock, every_record_large):
    """The last reader's pass goes to the record (its sync also completes a segment), while the others'
    passes wait in their items: the head's count shows passes not folded in yet, so that sync folds every
    item in and the checkpoint finishes then, not at the next lease fold."""
    groups = group(controller, unique, segments=3)
    segment_of = readers_each_holding_one(groups, unique, 3)
    groups.initiate_checkpoint(unique, "g", "cp")
    *first, last = segment_of
    for name in first:
        clock[0] += 1_000
        pass_at(groups, unique, name, segment_of[name], 7)
    clock[0] += 1_000
    done = SegmentOffset(stream=f"{unique}/s", segment_id=segment_of[last], offset=900)
    groups.sync(unique, "g", last, SyncRequest(completed=[done], checkpoint="cp", instance=f"tok-{last}"))
    assert checkpoint_cut(groups, unique) == {**{segment_of[n]: 7 for n in first}, segment_of[last]: 900}


def test_a_small_group_passes_in_its_record_whichever_process_serves_the_sync(controller, unique, metered, clock):
    """A process that has not read a small group before reads its head first; it must still pass in the
    record, as every other process does, or a pass stored in an item would wait for a lease fold."""
    groups = group(controller, unique, segments=3)
    segment_of = readers_each_holding_one(groups, unique, 3)
    groups.initiate_checkpoint(unique, "g", "cp")
    metered.reset()
    for name in list(segment_of)[:2]:
        state_module._COPIES.forget(reader_group_pk(unique, "g"))  # a process new to the group
        clock[0] += 1_000
        pass_at(groups, unique, name, segment_of[name], 7)
    last = list(segment_of)[2]
    clock[0] += 1_000
    pass_at(groups, unique, last, segment_of[last], 7)
    assert checkpoint_cut(groups, unique) == {segment: 7 for segment in segment_of.values()}
    assert ("UpdateItem", HEAD_KEY) not in requests(metered, unique, WRITES)


def test_a_pass_stored_for_an_earlier_checkpoint_of_the_same_name_passes_nothing(
        controller, unique, clock, every_record_large):
    """A checkpoint's name may come back once another checkpoint is done after it. r0's item still holds
    its pass of the first "cp" (its next pass went to the record, with a completed segment), and must
    not pass the second "cp" for it: r0 is asked to pass it."""
    groups = group(controller, unique, segments=2)
    segment_of = readers_each_holding_one(groups, unique, 2)
    r0, r1 = segment_of
    groups.initiate_checkpoint(unique, "g", "cp")
    pass_at(groups, unique, r0, segment_of[r0], 7)  # to r0's item
    pass_at(groups, unique, r1, segment_of[r1], 7)  # the last: folds r0's in
    assert checkpoint_cut(groups, unique) == {segment: 7 for segment in segment_of.values()}
    clock[0] += 1_000
    groups.initiate_checkpoint(unique, "g", "cp2")
    done = SegmentOffset(stream=f"{unique}/s", segment_id=segment_of[r0], offset=50)
    groups.sync(unique, "g", r0, SyncRequest(completed=[done], checkpoint="cp2", instance=f"tok-{r0}"))
    pass_at(groups, unique, r1, segment_of[r1], 60, "cp2")
    assert checkpoint_cut(groups, unique, "cp2") == {segment_of[r0]: 50, segment_of[r1]: 60}
    clock[0] += 1_000
    groups.initiate_checkpoint(unique, "g", "cp")
    clock[0] += 1_000
    assert groups.sync(unique, "g", r0, SyncRequest(instance=f"tok-{r0}")).checkpoint == "cp"
    groups.sync(unique, "g", r0, SyncRequest(checkpoint="cp", instance=f"tok-{r0}"))
    pass_at(groups, unique, r1, segment_of[r1], 95)
    assert checkpoint_cut(groups, unique) == {segment_of[r0]: 50, segment_of[r1]: 95}


def test_a_change_by_a_writer_that_raises_no_bound_is_seen_within_a_minute(
        controller, unique, clock, monkeypatch, every_record_large):
    """A writer of a release before head items (still running while an upgrade rolls out) changes the
    record without raising the bound. A copy serves at most COPY_MAX_AGE_MS, and a write conditioned on
    the copy's version is refused once: its own raise of the bound sends the retry to the record."""
    groups = group(controller, unique)
    groups.add_reader(unique, "g", "r1", "tok1")
    offsets = held(groups.sync(unique, "g", "r1", report(unique, {}, "tok1")))
    clock[0] += 1_000
    groups.sync(unique, "g", "r1", report(unique, offsets, "tok1"))  # the copy is current now
    raised = module.raise_bound
    monkeypatch.setattr(module, "raise_bound", lambda *args: None)
    groups.initiate_checkpoint(unique, "g", "cp")
    monkeypatch.setattr(module, "raise_bound", raised)
    clock[0] += 1_000
    assert groups.sync(unique, "g", "r1", report(unique, offsets, "tok1")).checkpoint is None  # the copy
    clock[0] += state_module.COPY_MAX_AGE_MS
    assert groups.sync(unique, "g", "r1", report(unique, offsets, "tok1")).checkpoint == "cp"
    pass_at(groups, unique, "r1", next(iter(offsets)), 0, token="tok1")  # a write that raises the bound again
    groups.sync(unique, "g", "r1", report(unique, offsets, "tok1"))  # and a copy of it

    monkeypatch.setattr(module, "raise_bound", lambda *args: None)
    groups.add_reader(unique, "g", "r2", "tok2")
    monkeypatch.setattr(module, "raise_bound", raised)
    groups.initiate_checkpoint(unique, "g", "cp2")  # on the copy from before r2 joined: refused, read again
    (cp2,) = [c for c in groups.state(unique, "g").checkpoints if c.name == "cp2"]
    assert set(cp2.pending) == {"r1", "r2"}


def test_a_fleet_whose_leases_all_expired_is_taken_offline_in_transactions_dynamodb_takes(controller, unique, clock):
    """Each reader an expiry takes offline adds a check of its item to the write's transaction, and
    DynamoDB takes at most 100 actions in one: 120 readers whose leases ran out together (a fleet stopped
    at once) leave in writes of at most MAX_EXPIRED_PER_WRITE, not in one transaction DynamoDB refuses
    (which would have kept every one of them holding its segments)."""
    groups = group(controller, unique, lease_ms=60_000)
    for n in range(120):
        groups.add_reader(unique, "g", f"r{n}", f"tok-r{n}")
    clock[0] += 61_000
    deadline = groups.groups_due_for_lease_check()[(unique, "g")]
    first = groups.expire_readers(unique, "g")
    assert len(first) == MAX_EXPIRED_PER_WRITE
    # due again, under a deadline of its own: the lease job's run key names it, and a run key it used
    # already (the readers joined at one instant, so their leases ended at one) would not run again
    assert groups.groups_due_for_lease_check()[(unique, "g")] == clock[0] != deadline
    rest = groups.expire_readers(unique, "g")
    assert sorted(first + rest) == sorted(f"r{n}" for n in range(120))
    assert not groups.state(unique, "g").readers


def test_a_reader_rejoining_after_its_lease_ended_is_let_in_whatever_the_expiry_cap_leaves(controller, unique, clock):
    """A restarted reader joins under its name with a new instance token once its lease has ended, even
    when 120 leases ended together and the capped expiry of its join takes 64 others first."""
    groups = group(controller, unique, lease_ms=60_000)
    for n in range(120):
        groups.add_reader(unique, "g", f"r{n}", f"tok-r{n}")
    clock[0] += 61_000
    groups.add_reader(unique, "g", "r99", "tok-restarted")  # last by name: not among the 64 taken first
    online = groups.state(unique, "g").readers
    assert online["r99"].instance == "tok-restarted"
    assert len(online) == 120 - MAX_EXPIRED_PER_WRITE
