"""Sub-log mode on moto (dataplane/sublog_path.py): batches of many writers' blocks, de-duplication,
order, crashes and lost answers at each step, seal, merges, conditional appends, tiering, deletion.

Each test uses fresh segments created in sub-log mode, with a small ``inline_max`` so that blocks take
both the inline path and the S3-object path.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import replace

import pytest
from dataplane_model import (
    SimulatedCrash,
    _api_calls_through,
    event_block,
    index_entries,
    inject_crash,
    lose_answer,
    object_keys,
    parse_events,
    payload,
    read_all,
)

from dataplane import models
from dataplane.journal import BATCH_KEY
from dataplane.models import BatchLease, PendingBlock, SegmentItem, WriterState, writer_key
from dataplane.segment_store import SegmentStore, StoreSettings, now_ms
from dataplane.sublog_path import _shard, lease_pk, pending_pk, pending_sk, writer_pk
from rillet.errors import OffsetMismatch, OutOfOrder, SegmentSealed, WriteConflict

SHARDS = 4
SETTINGS = StoreSettings(inline_max=64, chunk_target=400, tier_min_age_ms=0, sublog_shards=SHARDS,
                         sublog_lease_ms=200)


@pytest.fixture
def store(deployment) -> SegmentStore:
    models.bind(deployment)
    return SegmentStore(deployment, SETTINGS)


@pytest.fixture
def seg(store, unique) -> str:
    name = f"{unique}/s/0"
    assert store.create(name, sublogs=True) is True
    return name


def _sublog_items(seg: str, created_ms: int) -> list[SegmentItem]:
    partitions = [f"{seg}#{created_ms}#{kind}{n}" for kind in ("p", "w") for n in range(SHARDS)]
    return [item for pk in [*partitions, lease_pk(seg, created_ms)]
            for item in SegmentItem.query(pk, consistent_read=True)]


def _lease(seg: str) -> BatchLease:
    return BatchLease.get(lease_pk(seg, models.SegmentMeta.get(seg, "m").created_ms), "lease", consistent_read=True)


def _created(seg: str) -> int:
    return int(models.SegmentMeta.get(seg, "m").created_ms)


def _writer_shard(writer: str) -> int:
    return _shard(writer, SHARDS)


def _tags(store: SegmentStore, seg: str) -> list[bytes]:
    return [p.split(b"|", 1)[0] for _, p in parse_events(read_all(store, seg))]


def test_only_a_stream_segment_takes_the_mode_and_a_transaction_segment_keeps_the_chain(store, unique):
    assert store.create(f"{unique}/s/0", sublogs=True)
    assert store.create(f"{unique}/txn/0")
    assert models.SegmentMeta.get(f"{unique}/s/0", "m").sublog_shards == SHARDS
    assert models.SegmentMeta.get(f"{unique}/txn/0", "m").sublog_shards is None


def test_appends_read_back_in_batch_entries_and_resends_are_duplicates(store, seg):
    first = store.append(seg, "wa", 0, 1, event_block("a0", 20))
    assert (first.offset, first.length, first.duplicate) == (0, 20, False)
    big = event_block("a1", 300)  # an S3 object
    second = store.append(seg, "wa", 1, 1, big, after=0)
    assert (second.offset, second.duplicate) == (20, False)
    third = store.append(seg, "wa", 2, 1, event_block("a2", 10), after=1)
    assert third.offset == 320

    assert store.append(seg, "wa", 2, 1, event_block("a2", 10)).duplicate  # the last block again
    older = store.append(seg, "wa", 0, 1, event_block("a0", 20))  # an older one: the writer's recent blocks
    assert (older.offset, older.duplicate) == (0, True)
    assert store.append(seg, "wa", 1, 1, big).offset == 20
    assert _tags(store, seg) == [b"a0", b"a1", b"a2"]
    assert {e.writer for e in index_entries(seg)} == {BATCH_KEY}
    # Committed blocks leave no pending item behind: their appenders delete them.
    meta = models.SegmentMeta.get(seg, "m", consistent_read=True)
    assert [i for i in _sublog_items(seg, meta.created_ms) if isinstance(i, PendingBlock)] == []
    assert _lease(seg).batcher is None  # the last batcher, with nothing left, freed its lease


def test_many_writers_at_once_commit_in_batches_each_writer_in_order(store, seg):
    writers, per_writer = 12, 6
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            for n in range(per_writer):
                size = 200 if (w + n) % 5 == 0 else 16 + w  # some S3 blocks among inline ones
                store.append(seg, f"w{w}", n, 1, event_block(f"{w}:{n}", size), after=n - 1)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    tags = [t.decode() for t in _tags(store, seg)]
    assert sorted(tags) == sorted(f"{w}:{n}" for w in range(writers) for n in range(per_writer))
    for w in range(writers):
        assert [t for t in tags if t.startswith(f"{w}:")] == [f"{w}:{n}" for n in range(per_writer)]
    entries = index_entries(seg)
    assert len(entries) < writers * per_writer  # inline runs of several writers share one entry
    assert sum(e.size for e in entries) == models.SegmentMeta.get(seg, "m").length


def test_pipelined_blocks_arriving_out_of_order_commit_in_order(store, seg):
    blocks = [event_block(f"p{n}", 12 + n) for n in range(4)]
    results: dict[int, object] = {}

    def send(n: int) -> None:
        for _ in range(20):  # as the SDK does: a block refused as OutOfOrder is sent again
            try:
                results[n] = store.append(seg, "wp", n, 1, blocks[n], after=n - 1)
                return
            except OutOfOrder as e:
                results[n] = e
            except BaseException as e:  # noqa: BLE001 - reported below
                results[n] = e
                return

    threads = [threading.Thread(target=send, args=(n,)) for n in (3, 1, 2, 0)]
    for t in threads:
        t.start()
        time.sleep(0.01)  # later blocks first: they wait for their predecessors' items
    for t in threads:
        t.join()
    assert _tags(store, seg) == [b"p0", b"p1", b"p2", b"p3"], results
    assert [results[n].offset for n in range(4)] == [0, 12, 25, 39]


def test_a_batch_takes_each_writers_state_from_its_blocks_copy_not_a_read(store, seg):
    """An appender reads its writer's state and puts a copy in its block's item; the batch commits on the
    copy (its put of the new state is conditioned on the copy's last event number), so a lone append
    reads writer states once, with the lease, not again in the batch round."""
    store.append(seg, "wc", 0, 1, event_block("c0", 20))
    state_reads: list[tuple[str, list[str]]] = []  # each read naming a writer-state partition
    state_partition = re.compile(rf"{re.escape(seg)}#\d+#w\d+")

    def record(original, client, operation, params):
        if operation in ("GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"):
            named = sorted(set(state_partition.findall(json.dumps(params))))
            if named:
                state_reads.append((operation, named))
        return original(client, operation, params)

    with _api_calls_through(record):
        done = store.append(seg, "wc", 1, 1, event_block("c1", 20), after=0)
    assert (done.offset, done.duplicate) == (20, False)
    assert state_reads == [("BatchGetItem", [f"{seg}#{_created(seg)}#w{_writer_shard('wc')}"])]
    state = WriterState.get(f"{seg}#{_created(seg)}#w{_writer_shard('wc')}", writer_key("wc"), consistent_read=True)
    assert (state.first, state.last, state.offset) == (1, 1, 20) and state.recent == [[0, 0, 0], [1, 1, 20]]


def test_a_copy_that_no_longer_holds_commits_nothing_out_of_order(store, seg):
    """A block whose copy of its writer's state is not the state stored (here a forged one) makes the
    batch's transaction refuse; the next round reads the states, leaves that block waiting for its
    predecessor, and commits the rest."""
    store.append(seg, "wx", 0, 1, event_block("x0", 20))
    created = _created(seg)
    forged = PendingBlock(pending_pk(seg, created, "wx", 5, SHARDS), pending_sk("wx", 5), writer="wx", first=5, last=5,
                          size=20, data=event_block("x5", 20), token=7, since_ms=now_ms(),
                          seen={"f": 4, "l": 4, "o": 0, "t": now_ms()}, expires_at=now_ms() // 1000 + 600)
    forged.save()
    with inject_crash(None) as calls:
        done = store.append(seg, "wy", 0, 1, event_block("y0", 20))
    assert (done.offset, done.duplicate) == (20, False)
    assert calls.all_calls.count("TransactWriteItems") == 2  # the forged copy's batch refused, then without it
    assert _tags(store, seg) == [b"x0", b"y0"]
    assert PendingBlock.get(forged.pk, forged.sk, consistent_read=True).pending


def test_a_twins_late_copy_of_a_committed_conditional_block_is_not_refused(store, seg):
    """A twin request of a conditional block read its writer's state before the block committed, and
    puts the block again after, with that older copy. On the copy alone its offset is taken, so a batch
    would refuse it and its appender answer OffsetMismatch for bytes that are in; the batch reads the
    states first, which show the block committed, and leaves it to its appender (a duplicate)."""
    store.append(seg, "wt", 0, 1, payload("a", 10), raw=True)
    created = _created(seg)
    read_by_the_twin = WriterState.get(writer_pk(seg, created, "wt", SHARDS), writer_key("wt"),
                                       consistent_read=True).as_state()
    assert store.append(seg, "wt", 1, 1, payload("b", 5), expected_offset=10, raw=True).offset == 10
    twin = PendingBlock(pending_pk(seg, created, "wt", 1, SHARDS), pending_sk("wt", 1), writer="wt", first=1, last=1,
                        size=5, data=payload("b", 5), raw=True, token=7, since_ms=now_ms(), expected_offset=10,
                        seen=read_by_the_twin, expires_at=now_ms() // 1000 + 600)
    twin.save()
    assert store.append(seg, "wo", 0, 1, payload("c", 5), raw=True).offset == 15
    left = PendingBlock.get(twin.pk, twin.sk, consistent_read=True)
    assert left.refused_at is None and left.offset is None
    assert read_all(store, seg) == payload("a", 10) + payload("b", 5) + payload("c", 5)


def test_a_block_whose_predecessor_never_comes_is_out_of_order_and_leaves_nothing(store, seg):
    with pytest.raises(OutOfOrder) as refused:
        store.append(seg, "w", 1, 1, event_block("second", 300), after=0)
    assert refused.value.details == {"last_event_number": -1, "awaiting_event_number": 0}
    assert object_keys(store, seg) == set()  # its object went with the refusal
    assert store.append(seg, "w", 0, 1, event_block("first", 10), after=-1).offset == 0
    assert store.append(seg, "w", 1, 1, event_block("second", 300), after=0).offset == 10


def test_twin_requests_of_one_block_append_it_once(store, seg):
    for n in range(6):
        block = event_block(f"dup{n}", 30 if n % 2 else 200)
        acks: list = []
        barrier = threading.Barrier(2)

        def send(b=block, k=n, acks=acks, barrier=barrier) -> None:
            barrier.wait()
            for _ in range(5):
                try:
                    acks.append(store.append(seg, "wd", k, 1, b))
                    return
                except WriteConflict:
                    # Nothing of this request was appended: its twin withdrew its item (pending past a
                    # lease, as a dead request's would be, on a loaded machine). Sent again, as the SDK does.
                    continue
                except BaseException as e:  # noqa: BLE001 - shown by the assertion below
                    acks.append(e)
                    return

        threads = [threading.Thread(target=send) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(acks) == 2 and acks[0].offset == acks[1].offset is not None, acks
        assert sorted(a.duplicate for a in acks) == [False, True]
    assert _tags(store, seg) == [f"dup{n}".encode() for n in range(6)]


@pytest.mark.parametrize("size", [20, 300], ids=["inline", "object"])
def test_a_crash_before_each_write_of_an_append_never_blocks_others_and_the_resend_appends_once(store, unique, size):
    """The appender dies before its k-th write (S3 put, its item's put, the lease, the batch, its item's
    delete): another writer still commits (taking over the lease once it runs out, and committing the
    dead appender's block if it is pending), and the resend appends the block exactly once."""
    block = event_block("victim", size)
    seen: list[str] = []
    k = 0
    while True:
        k += 1
        assert k < 10, "the append never completed"
        seg = f"{unique}/k{k}/0"
        store.create(seg, sublogs=True)
        store.append(seg, "w0", 0, 1, event_block("first", 12))
        with inject_crash(k) as injector:
            try:
                done = store.append(seg, "wa", 0, 1, block)
            except SimulatedCrash:
                done = None
        if done is not None:
            assert (done.offset, done.duplicate) == (12, False)
            break
        seen.append(injector.crashed_before)
        other = store.append(seg, "wb", 0, 1, event_block("other", 15))
        retry = store.append(seg, "wa", 0, 1, block)
        assert {other.offset, retry.offset} == {12, 12 + 15} or (retry.offset, other.offset) == (12, 12 + size)
        assert sorted(_tags(store, seg)) == [b"first", b"other", b"victim"]
        # A crash between the S3 put and the item's leaves an orphan, which the sweep removes later.
        named = {e.object_key for e in index_entries(seg) if e.object_key is not None}
        assert named <= object_keys(store, seg) and len(object_keys(store, seg) - named) <= 1
    expected = ["PutItem", "PutItem", "TransactWriteItems", "DeleteItem"]  # its block, the lease, the batch, its block
    assert seen == (expected if size == 20 else ["PutObject", *expected])


@pytest.mark.parametrize("size", [20, 300], ids=["inline", "object"])
def test_a_lost_answer_at_each_write_of_an_append_still_appends_once(store, unique, size):
    lost: list[str] = []
    for k in range(1, 10):
        seg = f"{unique}/l{k}/0"
        store.create(seg, sublogs=True)
        store.append(seg, "w0", 0, 1, event_block("first", 12))
        with lose_answer(k) as seen:
            done = store.append(seg, "wa", 0, 1, event_block("victim", size))
        assert (done.offset, done.duplicate) == (12, False)
        assert _tags(store, seg) == [b"first", b"victim"]
        if len(seen) < k:
            break
        lost.append(seen[k - 1])
    assert lost[-4:] == ["PutItem", "PutItem", "TransactWriteItems", "DeleteItem"]


def test_a_batcher_that_dies_holding_the_lease_is_taken_over(store, seg):
    def die_before_the_batch(operation: str, _n: int) -> None:
        if operation == "TransactWriteItems":
            raise SimulatedCrash("the batcher died after taking the lease")

    with inject_crash(None, hook=die_before_the_batch), pytest.raises(SimulatedCrash):
        store.append(seg, "wa", 0, 1, event_block("a", 20))
    dead = _lease(seg)
    assert dead.batcher is not None
    done = store.append(seg, "wb", 0, 1, event_block("b", 20))  # waits out the lease, then batches both
    assert now_ms() >= dead.until
    assert done.offset in (0, 20) and sorted(_tags(store, seg)) == [b"a", b"b"]
    assert store.append(seg, "wa", 0, 1, event_block("a", 20)).duplicate


def test_sealing_refuses_a_pending_block_and_withdraws_it(store, seg):
    store.append(seg, "w", 0, 1, event_block("kept", 20))
    # A block left pending by an appender that died after its put: the seal comes first.
    with inject_crash(2), pytest.raises(SimulatedCrash):
        store.append(seg, "dead", 0, 1, event_block("late", 300))
    assert store.seal(seg) == 20
    with pytest.raises(SegmentSealed):
        store.append(seg, "w", 1, 1, event_block("more", 20))
    with pytest.raises(SegmentSealed):
        store.append(seg, "dead", 0, 1, event_block("late", 300))  # its resend
    assert store.append(seg, "w", 0, 1, event_block("kept", 20)).duplicate  # an acknowledged one still is
    assert read_all(store, seg) == event_block("kept", 20)
    assert models.SegmentMeta.get(seg, "m").length == 20


def test_conditional_appends_commit_only_at_their_offset(store, seg):
    store.append(seg, "w", 0, 1, payload("x", 10), raw=True)
    assert store.append(seg, "w", 1, 1, payload("y", 5), expected_offset=10, raw=True).offset == 10
    with pytest.raises(OffsetMismatch) as refused:
        store.append(seg, "w", 2, 1, payload("z", 5), expected_offset=10, raw=True)
    assert refused.value.details["length"] == 15
    assert store.append(seg, "w", 2, 1, payload("z", 5), expected_offset=15, raw=True).offset == 15
    assert read_all(store, seg) == payload("x", 10) + payload("y", 5) + payload("z", 5)


def test_a_merge_commits_between_batches(store, seg, unique):
    txn = f"{unique}/txn/0"
    store.create(txn)
    store.append(txn, "t", 0, 1, event_block("txn", 30))
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(w: int) -> None:
        n = 0
        try:
            while not stop.is_set() and n < 15:
                store.append(seg, f"w{w}", n, 1, event_block(f"{w}:{n}", 20), after=n - 1)
                n += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    at = store.merge(seg, txn)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    data = read_all(store, seg)
    assert data[at:at + 30] == event_block("txn", 30)
    assert _tags(store, seg).count(b"txn") == 1


def test_a_merge_that_died_after_its_claim_is_helped_through_by_the_batch_that_meets_it(store, seg, unique):
    txn = f"{unique}/txn/0"
    store.create(txn)
    store.append(txn, "t", 0, 1, event_block("txn", 30))
    store.append(seg, "w", 0, 1, event_block("before", 20))
    with inject_crash(3), pytest.raises(SimulatedCrash):  # the source's seal, the claim, then its transaction
        store.merge(seg, txn)
    assert models.SegmentMeta.get(seg, "m", consistent_read=True).length == 20  # claimed at 20, not committed
    assert store.append(seg, "w", 1, 1, event_block("after", 20), after=0).offset == 50
    assert _tags(store, seg) == [b"before", b"txn", b"after"]
    assert store.merge(seg, txn) == 20  # the finisher's retry finds it merged


def test_tiering_packs_batch_entries_and_reads_stay_the_same(store, seg):
    for n in range(30):
        store.append(seg, f"w{n % 3}", n // 3, 1, event_block(f"t{n}", 30))
    before = read_all(store, seg)
    store.tier(seg)
    assert any(e.sk.startswith("c#") for e in SegmentItem.query(seg, consistent_read=True))
    assert read_all(store, seg) == before


def test_the_orphan_sweep_keeps_a_pending_blocks_object_until_the_seal_and_deleting_removes_every_sub_log_item(
        deployment, unique):
    models.bind(deployment)
    store = SegmentStore(deployment, replace(SETTINGS, orphan_grace_ms=0, orphan_sweep_ms=0))
    seg = f"{unique}/s/0"
    store.create(seg, sublogs=True)
    store.append(seg, "w", 0, 1, event_block("one", 300))  # an S3 block: the sweep is due at once
    with inject_crash(3), pytest.raises(SimulatedCrash):  # dies after its item's put: pending, with its object
        store.append(seg, "dead", 0, 1, event_block("late", 300))
    store.tier(seg)  # open: a batch may still commit the pending block, whose item names its object
    assert len(object_keys(store, seg)) == 2
    store.seal(seg)
    store.tier(seg)  # sealed: nothing commits any more, so the pending block's object is an orphan
    assert len(object_keys(store, seg)) == 1
    created = models.SegmentMeta.get(seg, "m").created_ms
    assert any(isinstance(i, WriterState) for i in _sublog_items(seg, created))
    store.delete(seg)
    assert _sublog_items(seg, created) == [] and object_keys(store, seg) == set()
