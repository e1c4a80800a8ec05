"""Exactly once in the segment store across concurrent merge finishers and re-created segment names
(issue 25): each test stages one interleaving with real SegmentStore instances on moto, by running
the other party's steps inside a named step of the first (a wrapped method), so the order is exact."""

from __future__ import annotations

import threading
import time

import pytest
from dataplane_model import (
    event_block,
    head,
    index_entries,
    lose_answer,
    object_keys,
    parse_events,
    read_all,
    small_store,
)

from dataplane.segment_store import SegmentStore
from rillet.errors import SegmentNotFound


@pytest.fixture
def store(deployment) -> SegmentStore:
    return small_store(deployment)


def _events(store: SegmentStore, seg: str) -> list[bytes]:
    return [event for _, event in parse_events(read_all(store, seg, store.info(seg).start_offset))]


def _pause_at(store: SegmentStore, segment: str, run_then) -> None:
    """Make ``store`` run ``run_then()`` once, just before its first head-record read of ``segment``."""
    real_meta = SegmentStore._meta
    fired: list[bool] = []

    def meta(name: str):
        if name == segment and not fired:
            fired.append(True)
            run_then()
        return real_meta(store, name)

    store._meta = meta  # this instance only


# -- defect 1: a committed transaction's events stored twice ----------------------------------------


def _transaction(store: SegmentStore, name: str, tag: str, count: int) -> list[bytes]:
    store.create(name)
    events = [event_block(f"{tag}{i}", 40 + 30 * i) for i in range(count)]  # inline and object blocks
    for i, block in enumerate(events):
        store.append(name, "txw", i, 1, block)
    return [parse_events(block)[0][1] for block in events]


def test_two_finishers_of_one_batch_store_each_transaction_once(deployment, store, unique):
    """Finisher A reads T1's head record (not merged yet); before A reads the target's head record,
    finisher B merges T1 and then T2, so the target's last merge names T2. A must still see that T1 is
    merged: the target holds T1 once, then T2, and truncating past T1 leaves every read working."""
    target, t1, t2 = f"{unique}/s/0", f"{unique}/txn/1", f"{unique}/txn/2"
    store.create(target)
    base = event_block("base", 50)
    store.append(target, "w", 0, 1, base)
    first, second = _transaction(store, t1, "one", 3), _transaction(store, t2, "two", 2)
    finisher_a, finisher_b = small_store(deployment), small_store(deployment)

    def b_finishes_the_batch() -> None:
        finisher_b.merge(target, t1)
        finisher_b.merge(target, t2)

    _pause_at(finisher_a, target, b_finishes_the_batch)
    at_a = finisher_a.merge(target, t1)
    at_b = finisher_b.merge(target, t1)  # a third call of the batch's first step: only acknowledges
    assert at_a == at_b == len(base)
    assert _events(store, target) == [parse_events(base)[0][1]] + first + second
    assert (head(t1).merged_into, head(t1).merged_offset) == (target, len(base))
    assert sum(1 for e in index_entries(target) if e.source == t1) == 1

    length = store.info(target).length
    store.truncate(target, head(t2).merged_offset)  # past T1: its segment goes
    with pytest.raises(SegmentNotFound):
        store.info(t1)
    assert read_all(store, target, head(t2).merged_offset) == read_all(store, t2)
    assert store.info(target).length == length


def test_a_finisher_that_claimed_before_the_other_merged_leaves_no_claim(deployment, store, unique):
    """A claims the target's tail for T1 with a head record read before B merged T1 and T2: A's claim
    meets B's committed entry or lands at a free tail; either way T1 is stored once and A's claim, if
    any, is gone."""
    target, t1, t2 = f"{unique}/s/0", f"{unique}/txn/1", f"{unique}/txn/2"
    store.create(target)
    first, second = _transaction(store, t1, "one", 2), _transaction(store, t2, "two", 1)
    finisher_a, finisher_b = small_store(deployment), small_store(deployment)
    real_claim = SegmentStore._claim
    fired: list[bool] = []

    def claim_after_b(segment, tail, block, *rest):
        if not fired:
            fired.append(True)
            finisher_b.merge(target, t1)
            finisher_b.merge(target, t2)
        return real_claim(finisher_a, segment, tail, block, *rest)

    finisher_a._claim = claim_after_b
    assert finisher_a.merge(target, t1) == 0
    assert _events(store, target) == first + second
    assert [e.source for e in index_entries(target)] == [t1, t2]


def test_a_lost_answer_of_the_merge_commit_is_recognised(store, unique):
    """The merge's commit (target advanced, source marked, in one transaction) is applied but its answer
    is lost and the resend refused: the finisher recognises its own commit and answers its offset."""
    target, t1 = f"{unique}/s/0", f"{unique}/txn/1"
    store.create(target)
    first = _transaction(store, t1, "one", 2)
    with lose_answer(3) as seen:  # seal, claim, commit
        at = store.merge(target, t1)
    assert seen[:3] == ["UpdateItem", "PutItem", "TransactWriteItems"]
    assert at == 0 and _events(store, target) == first
    assert [e.source for e in index_entries(target)] == [t1]
    assert store.merge(target, t1) == 0


# -- defect 2: a stale claim survives delete and re-create of a segment name ------------------------


def _after_first_read(store: SegmentStore, segment: str, then) -> None:
    """Make ``store`` run ``then()`` once, right after its first head-record read of ``segment``."""
    real_meta = SegmentStore._meta
    fired: list[bool] = []

    def meta(name: str):
        read = real_meta(store, name)
        if name == segment and not fired:
            fired.append(True)
            then()
        return read

    store._meta = meta  # this instance only


def _recreate(store: SegmentStore, seg: str) -> None:
    store.delete(seg)
    time.sleep(0.002)  # the new incarnation's created_ms differs from the old one's
    assert store.create(seg)


def _stale_claim_after_delete(deployment, store: SegmentStore, seg: str, size: int) -> None:
    """An appender reads the head record, the segment is deleted before its claim lands: it answers
    SegmentNotFound. Then the segment is created again."""
    appender = small_store(deployment)
    _after_first_read(appender, seg, lambda: store.delete(seg))
    with pytest.raises(SegmentNotFound):
        appender.append(seg, "a", 0, 1, event_block("stale", size))
    time.sleep(0.002)
    assert store.create(seg)


def test_a_claim_into_a_deleted_segment_is_not_adopted_by_its_new_incarnation(deployment, store, unique):
    """The stale claim sits at e#200; the re-created segment's tail reaches 200: the next appender must
    not commit the refused block into the new segment."""
    seg = f"{unique}/s/0"
    store.create(seg)
    for i in range(2):
        store.append(seg, "w", i, 1, event_block(f"old{i}", 100))
    _stale_claim_after_delete(deployment, store, seg, 50)
    blocks = [event_block(f"new{i}", 100) for i in range(4)]
    for i, block in enumerate(blocks):
        r = store.append(seg, "v", i, 1, block)
        assert (r.offset, r.duplicate) == (100 * i, False)
    assert read_all(store, seg) == b"".join(blocks)
    assert {e.writer for e in index_entries(seg)} == {"v"}  # the stale claim was removed when met


def test_a_stale_claim_inside_the_new_incarnation_is_never_read_or_tiered(deployment, store, unique):
    """The stale claim (inline, e#200 + 50) lies inside the new segment's committed range, which is
    written in 30-byte inline blocks: reads from its offset and across it, and tiering, use only the
    new segment's entries."""
    seg = f"{unique}/s/0"
    store.create(seg)
    for i in range(2):
        store.append(seg, "w", i, 1, event_block(f"old{i}", 100))
    _stale_claim_after_delete(deployment, store, seg, 50)
    blocks = [event_block(f"n{i}", 30) for i in range(10)]
    for i, block in enumerate(blocks):
        store.append(seg, "v", i, 1, block)
    data = b"".join(blocks)
    assert store.read(seg, 200, 50).data == data[200:250]
    assert read_all(store, seg) == data
    store.seal(seg)
    store.tier(seg)
    assert read_all(store, seg) == data
    assert {e.writer for e in index_entries(seg) if not e.sk.startswith("c#")} <= {"v"}
    assert all(e.writer != "a" for e in index_entries(seg))


def test_an_appender_whose_segment_was_recreated_at_the_same_length_appends_nothing(deployment, store, unique):
    """The appender reads the empty head record; the segment is deleted and created again (empty too)
    before its claim: its advance must not commit into the new incarnation, whose length matches."""
    seg = f"{unique}/s/0"
    store.create(seg)
    appender = small_store(deployment)
    _after_first_read(appender, seg, lambda: _recreate(store, seg))
    with pytest.raises(SegmentNotFound):
        appender.append(seg, "a", 0, 1, event_block("stale", 40))
    assert store.info(seg).length == 0
    assert index_entries(seg) == []
    block = event_block("new", 40)
    assert store.append(seg, "v", 0, 1, block).offset == 0
    assert read_all(store, seg) == block


# -- lost answers and resends: answer what happened, leave no object behind -------------------------


def test_an_inline_append_whose_claim_answer_was_lost_says_it_appended(store, unique):
    """The claim (the first write of an inline append) is applied, its answer lost, the resend refused
    by the claim itself: the request appended the block and must say so (duplicate=False), as a block
    in an object does."""
    seg = f"{unique}/s/0"
    store.create(seg)
    store.append(seg, "w", 0, 1, event_block("w0", 40))
    block = event_block("lost", 30)
    with lose_answer(1) as seen:
        r = store.append(seg, "w", 1, 1, block)
    assert seen[0] == "PutItem"
    assert (r.offset, r.duplicate) == (40, False)
    again = store.append(seg, "w", 1, 1, block)
    assert (again.offset, again.duplicate) == (40, True)
    assert read_all(store, seg)[40:] == block


def test_a_resend_whose_stale_claim_lands_on_its_twins_released_offset_deletes_its_object(deployment, store, unique):
    """A resend of a block (in an object) reads the head record before the first attempt commits at X;
    the first attempt commits, a truncation releases X (its key is free again), and the resend's claim
    lands there. The resend answers a duplicate at X and deletes its object and its claim: nothing names
    them, and the segment is never sealed to find them."""
    seg = f"{unique}/s/0"
    store.create(seg)
    store.append(seg, "v", 0, 1, event_block("v0", 100))
    block = event_block("twin", 100)
    resend = small_store(deployment)

    def first_attempt_commits_then_truncation() -> None:
        assert store.append(seg, "w", 0, 1, block).offset == 100
        store.append(seg, "v", 1, 1, event_block("v1", 100))
        store.truncate(seg, 200)

    _after_first_read(resend, seg, first_attempt_commits_then_truncation)
    r = resend.append(seg, "w", 0, 1, block)
    assert (r.offset, r.duplicate) == (100, True)
    assert object_keys(store, seg) == {e.object_key for e in index_entries(seg) if e.object_key}
    assert [e.offset for e in index_entries(seg)] == [200]
    assert read_all(store, seg, 200) == event_block("v1", 100)


# -- defect 1 through the controller: two finishers of one commit batch -----------------------------


def test_two_drivers_of_one_commit_batch_store_each_transaction_once(controller, unique, monkeypatch):
    """Through the controller: t1 and t2 commit in one batch. Driver A records the batch and, merging
    t1's first segment, pauses right after its second read of that transaction segment's head record
    (the one before it reads the target's); driver B (the sweeper, a retried commit) applies the whole
    batch meanwhile. When A resumes, every stream segment holds t1 then t2, each once."""
    from rillet.framing import frame
    from rillet.models import ScalingPolicy, StreamConfiguration, TxnState
    from rillet.names import segment_name, txn_segment_token

    c = controller
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    t1, t2 = (c.transactions.begin(unique, "s", lease_ms=60_000) for _ in range(2))
    written: dict[int, list[bytes]] = {}
    for tag, txn in (("t1", t1), ("t2", t2)):
        for seg in txn.segments:
            source = segment_name(unique, "s", txn_segment_token(seg.segment_id, txn.txn_id))
            for i in range(2):
                event = f"{tag}:{seg.segment_id}:{i}".encode()
                c.segments.append(source, "tw", i, 1, frame(event))
                written.setdefault(seg.segment_id, []).append(event)
    real_drive = type(c.transactions).drive_commits
    monkeypatch.setattr(type(c.transactions), "drive_commits", lambda *args, **kwargs: None)
    for txn in (t1, t2):  # both COMMITTING, so that one batch takes both
        assert c.transactions.commit(unique, "s", txn.txn_id).state == TxnState.COMMITTING
    monkeypatch.setattr(type(c.transactions), "drive_commits", real_drive)

    first_source = segment_name(unique, "s", txn_segment_token(t1.segments[0].segment_id, t1.txn_id))
    paused, resume = threading.Event(), threading.Event()
    driver_a: list[threading.Thread] = []
    reads: list[str] = []
    real_meta = SegmentStore._meta

    def meta(self, segment: str):
        result = real_meta(self, segment)
        if segment == first_source and driver_a and threading.current_thread() is driver_a[0]:
            reads.append(segment)
            if len(reads) == 2:
                paused.set()
                assert resume.wait(timeout=60)
        return result

    monkeypatch.setattr(SegmentStore, "_meta", meta)
    outcome: list = []

    def drive() -> None:
        try:
            c.transactions.drive_commits(unique, "s")
            outcome.append("done")
        except BaseException as e:  # noqa: BLE001 - judged below
            outcome.append(e)

    driver_a.append(threading.Thread(target=drive, daemon=True))
    driver_a[0].start()
    assert paused.wait(timeout=60), "driver A never reached the merge"
    c.transactions.drive_commits(unique, "s")  # driver B applies the whole batch
    assert c.transactions.status(unique, "s", t2.txn_id).state == TxnState.COMMITTED
    resume.set()
    driver_a[0].join(timeout=60)
    assert not driver_a[0].is_alive() and outcome
    monkeypatch.setattr(SegmentStore, "_meta", real_meta)
    for seg in t1.segments:
        events = [e for _, e in parse_events(read_all(c.segments, segment_name(unique, "s", seg.segment_id)))]
        assert events == written[seg.segment_id]


def test_a_tiering_pass_of_a_deleted_segment_saves_no_chunk_into_its_new_incarnation(deployment, store, unique):
    """A tiering pass bumps the epoch of the first segment (to 1) and scans its inline entries; before
    it saves the chunk, the segment is deleted and created again, and a pass over the new one (object
    blocks only: nothing to pack) bumps its epoch to 1 as well. The stale pass's epoch check alone
    would pass: its chunk must still not land in the new segment, whose reads would take it."""
    seg = f"{unique}/s/0"
    store.create(seg)
    for i in range(3):
        store.append(seg, "w", i, 1, event_block(f"old{i}", 40))
    new_blocks = [event_block(f"new{i}", 100) for i in range(2)]
    stale_pass = small_store(deployment)
    real_tier_run = SegmentStore._tier_run

    def recreate_then_save(segment, *args):
        _recreate(store, seg)
        for i, block in enumerate(new_blocks):
            store.append(seg, "v", i, 1, block)
        assert store.tier(seg) == 0 and head(seg).tier_epoch == 1
        return real_tier_run(stale_pass, segment, *args)

    stale_pass._tier_run = recreate_then_save
    stale_pass.tier(seg)
    assert read_all(store, seg) == b"".join(new_blocks)
    assert not [e for e in index_entries(seg) if e.sk.startswith("c#")]
    assert object_keys(store, seg) == {e.object_key for e in index_entries(seg) if e.object_key}


def test_a_truncation_of_a_deleted_segment_leaves_its_new_incarnation_alone(deployment, store, unique):
    """A truncation reads the head record (length 200) and the segment is deleted and created again
    (one 100-byte block) before its update: the new segment keeps its start, and reads all of it."""
    seg = f"{unique}/s/0"
    store.create(seg)
    for i in range(2):
        store.append(seg, "w", i, 1, event_block(f"old{i}", 100))
    block = event_block("new", 100)
    stale = small_store(deployment)

    def recreate() -> None:
        _recreate(store, seg)
        store.append(seg, "v", 0, 1, block)

    _after_first_read(stale, seg, recreate)
    stale.truncate(seg, 150)
    assert store.info(seg).start_offset == 0
    assert read_all(store, seg) == block
