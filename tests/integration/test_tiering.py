"""Tiering: inline index entries packed into S3 chunks, read-identical at every step, crash or not."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from dataplane_model import (
    INLINE_MAX,
    SegmentModel,
    SimulatedCrash,
    assert_clean_tiling,
    check_reads,
    head,
    index_entries,
    inject_crash,
    lose_answer,
    object_keys,
    payload,
    read_all,
    small_store,
)

from dataplane import storage_writer
from dataplane.models import META_KEY, IndexEntry, SegmentMeta
from dataplane.segment_store import SegmentStore, now_ms


@pytest.fixture
def store(deployment) -> SegmentStore:
    return small_store(deployment)


def _fill(store: SegmentStore, segment: str, sizes: list[int], writer: str = "w",
          model: SegmentModel | None = None, first: int = 0) -> tuple[SegmentModel, list[int]]:
    model = model or SegmentModel()
    offsets = []
    for i, size in enumerate(sizes, start=first):
        block = payload(f"{writer}{i}", size)
        r = store.append(segment, writer, i, 1, block)
        assert r.offset == model.length
        offsets.append(model.append(block))
    return model, offsets


def _chunks(keys: set[str]) -> set[str]:
    return {k for k in keys if "/c/" in k}


def _check(store: SegmentStore, segment: str, model: SegmentModel, offsets: list[int], rng: random.Random,
           full: bool = True) -> None:
    """The whole segment reads back identical; with ``full``, so do reads from every entry boundary,
    from inside entries, and reads that end inside an entry."""
    assert read_all(store, segment) == bytes(model.data)
    if full:
        check_reads(store, segment, model, offsets, sizes=(1 << 30,))
        inside = sorted({o + 1 for o in offsets[::3]} | {rng.randrange(model.length) for _ in range(3)})
        check_reads(store, segment, model, inside, sizes=(3,))


SIZES = [30, 40, 20, 50, 300, 10, 60, 35, 45, 25, 15, 64]  # one S3-object block splits the inline runs


def test_tier_packs_inline_entries_into_chunks(store, unique):
    seg = f"{unique}/s/0"
    store.create(seg)
    rng = random.Random(5)
    model, offsets = _fill(store, seg, SIZES)
    before = index_entries(seg)
    meta = head(seg)
    inline = sum(s for s in SIZES if s <= INLINE_MAX)
    assert meta.inline_bytes == inline and meta.tier_at is not None
    assert seg in store.segments_due_for_tiering(limit=10_000)  # more inline bytes than a chunk
    assert not _chunks(object_keys(store, seg))

    moved = store.tier(seg)
    assert moved == inline
    after = assert_clean_tiling(seg, 0, model.length)
    assert len(after) < len(before)
    assert all(e.data is None for e in after)
    chunk_keys = {e.object_key for e in after if "/c/" in (e.object_key or "")}
    assert chunk_keys and chunk_keys == _chunks(object_keys(store, seg))
    for e in after:
        if e.object_key in chunk_keys:
            assert e.size <= 150
            body = store.deployment.s3.get_object(Bucket=store.deployment.bucket, Key=e.object_key)["Body"].read()
            assert body == bytes(model.data[e.offset:e.end])
    meta = head(seg)
    # Nothing inline is left; the segment's S3 blocks booked its look for orphans, a sweep period on.
    assert meta.inline_bytes == 0 and meta.tier_at == meta.orphans_after > now_ms()
    assert seg not in store.segments_due_for_tiering(limit=10_000)
    _check(store, seg, model, offsets, rng)

    assert store.tier(seg) == 0  # nothing left to move
    assert len(index_entries(seg)) == len(after)
    _check(store, seg, model, offsets, rng)

    # New inline appends after tiering are read together with the chunks, then tiered in turn.
    model, more = _fill(store, seg, [5, 6, 7], model=model, first=len(SIZES))
    offsets += more
    _check(store, seg, model, offsets, rng)
    assert store.tier(seg) == 18
    _check(store, seg, model, offsets, rng)
    assert_clean_tiling(seg, 0, model.length)


def test_tier_leaves_young_entries_alone_unless_sealed(deployment, unique):
    store = small_store(deployment, tier_min_age_ms=60_000)
    seg = f"{unique}/s/0"
    store.create(seg)
    model, _ = _fill(store, seg, [30, 40, 20])
    entries = index_entries(seg)
    assert store.tier(seg) == 0
    assert [(e.offset, e.data) for e in index_entries(seg)] == [(e.offset, e.data) for e in entries]
    assert head(seg).tier_at is not None  # still scheduled
    store.seal(seg)
    assert store.tier(seg) == 90  # a sealed segment takes no more appends: tier everything
    assert all(e.data is None for e in index_entries(seg))
    assert read_all(store, seg) == bytes(model.data)


def _clone(template: str, name: str) -> None:
    """A copy of ``template``'s head record and index under ``name`` (object entries share its objects)."""
    meta = head(template)
    SegmentMeta(name, META_KEY, length=meta.length, start=meta.start, sealed=meta.sealed, created_ms=meta.created_ms,
                writers=meta.writers.as_dict(), inline_bytes=meta.inline_bytes, tier_shard=meta.tier_shard,
                tier_at=meta.tier_at).save()
    with IndexEntry.batch_write() as batch:
        for e in index_entries(template):
            batch.save(IndexEntry(name, e.sk, offset=e.offset, size=e.size, data=e.data, object_key=e.object_key,
                                  object_offset=e.object_offset, source=e.source, writer=e.writer, first=e.first,
                                  last=e.last, created_ms=e.created_ms))


@contextmanager
def _reading(store: SegmentStore, seg: str, expected: bytes, seed: int) -> Iterator[None]:
    """A thread reading random ranges of ``expected`` (the segment's bytes) while the body runs."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        r = random.Random(seed)
        try:
            while not stop.is_set():
                offset = r.randrange(len(expected))
                got = store.read(seg, offset, r.choice([1, 50, 1 << 30])).data
                assert got and got == expected[offset:offset + len(got)], f"read at {offset} differs"
                time.sleep(0.005)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors


@pytest.mark.parametrize("shape", ["several-runs", "one-long-run"])
def test_crash_at_each_step_of_tiering(deployment, unique, shape, monkeypatch):
    """Kill tier() before its k-th write for k = 1, 2, ... until it completes: after every crash the
    segment reads the same (no gap, no duplicate) — also for readers running during the pass — and a
    second pass completes and leaves a clean index."""
    if shape == "several-runs":
        store, sizes = small_store(deployment), SIZES
    else:  # 30 entries in one run, deleted 7 a batch: a crash between any two of its batches
        store, sizes = small_store(deployment, chunk_target=10_000), [5 + i % 7 for i in range(30)]
        monkeypatch.setattr(storage_writer, "DELETE_BATCH", 7)
    rng = random.Random(7)
    template = f"{unique}/template/0"
    store.create(template)
    model, offsets = _fill(store, template, sizes)
    k = 0
    crashes_before: list[str] = []
    while True:
        k += 1
        assert k < 40, "tier() never completed"
        seg = f"{unique}/k{k}/0"
        _clone(template, seg)  # the same appends, without paying for them again
        # A reader runs while tier() does (and dies).
        with _reading(store, seg, bytes(model.data), seed=k), inject_crash(k) as injector:
            try:
                store.tier(seg)
                completed = True
            except SimulatedCrash:
                completed = False
        if completed:
            _check(store, seg, model, offsets, rng, full=False)
            assert_clean_tiling(seg, 0, model.length)
            break
        crashes_before.append(injector.crashed_before)
        _check(store, seg, model, offsets, rng)
        store.tier(seg)  # a later pass finishes the job
        _check(store, seg, model, offsets, rng, full=False)
        entries = assert_clean_tiling(seg, 0, model.length)
        assert all(e.data is None for e in entries)
        assert head(seg).inline_bytes == 0
        referenced = {e.object_key for e in entries if e.object_key}
        assert _chunks(object_keys(store, seg)) >= _chunks(referenced)
        # A chunk object the crashed pass put (its epoch is in its key) is removed by the first pass
        # after sealing, and no other.
        sweeper = small_store(deployment, orphan_grace_ms=0)
        sweeper.seal(seg)
        sweeper.tier(seg)
        assert _chunks(object_keys(store, seg)) == _chunks(referenced)
    assert k > 2
    # Chunk entries are saved in a transaction fenced by the pass's epoch; the run's entries are
    # deleted in transactions of many, each delete only if unchanged (BatchWriteItem cannot condition one).
    assert {"PutObject", "TransactWriteItems", "UpdateItem"} <= set(crashes_before)
    if shape == "one-long-run":
        assert crashes_before.count("TransactWriteItems") >= 4  # the chunk, then batches of the deletes


def test_a_lost_answer_at_each_step_of_tiering(deployment, unique):
    """Each write of a tiering pass applied but its answer lost (botocore sends it again and returns
    the second answer): the pass completes, the segment reads the same, and the index is clean, with
    every chunk it names in S3. A chunk transaction whose resend finds its own chunk saved must not
    take that for a newer pass's and delete the object its chunk names."""
    store, sizes = small_store(deployment), SIZES
    template = f"{unique}/template/0"
    store.create(template)
    model, offsets = _fill(store, template, sizes)
    k, lost = 0, []
    while True:
        k += 1
        seg = f"{unique}/k{k}/0"
        _clone(template, seg)
        with lose_answer(k) as seen:
            store.tier(seg)
        if len(seen) < k:
            break  # every write of the pass has had its answer lost once
        lost.append(seen[k - 1])
        check_reads(store, seg, model, offsets, sizes=(1 << 30,))
        entries = assert_clean_tiling(seg, 0, model.length)
        assert all(e.data is None for e in entries)
        assert _chunks({e.object_key for e in entries if e.object_key}) <= object_keys(store, seg)
    assert "TransactWriteItems" in lost


def test_reads_and_appends_concurrent_with_tiering(store, unique):
    seg = f"{unique}/s/0"
    store.create(seg)
    model, _ = _fill(store, seg, [20 + (i * 13) % 45 for i in range(40)])
    fixed = bytes(model.data)
    late = [payload(f"late{i}", 10 + (i * 7) % 50) for i in range(15)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        r = random.Random(seed)
        try:
            while not stop.is_set():
                offset = r.randrange(len(fixed))
                got = store.read(seg, offset, r.choice([1, 64, 1 << 30])).data
                assert got[:len(fixed) - offset] == fixed[offset:offset + len(got)], f"read at {offset} differs"
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def appender() -> None:
        try:
            for i, block in enumerate(late):
                store.append(seg, "late", i, 1, block)
                time.sleep(0.01)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(2)] + [threading.Thread(target=appender)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            store.tier(seg)
    finally:
        threads[-1].join(60)
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    for block in late:
        model.append(block)
    assert read_all(store, seg) == bytes(model.data)
    store.tier(seg)
    assert read_all(store, seg) == bytes(model.data)
    entries = assert_clean_tiling(seg, 0, model.length)
    assert all(e.data is None for e in entries)


def test_an_append_racing_the_end_of_a_tiering_pass_stays_scheduled(store, unique):
    """An inline append that commits while tier() finishes must not be forgotten by the tiering
    index: otherwise an idle segment keeps its inline bytes in DynamoDB for ever."""
    seg = f"{unique}/s/0"
    store.create(seg)
    model, _ = _fill(store, seg, [30, 40, 20])

    raced = []

    def hook(operation: str, n: int) -> None:
        if operation == "UpdateItem" and n > 1 and not raced:  # the pass's last write, not its epoch bump
            raced.append(True)
            t = threading.Thread(target=store.append, args=(seg, "racer", 0, 1, payload("racer", 25)))
            t.start()
            t.join()

    with inject_crash(None, hook=hook):
        assert store.tier(seg) == 90
    assert raced
    model.append(payload("racer", 25))
    assert read_all(store, seg) == bytes(model.data)
    meta = head(seg)
    inline_left = sum(e.size for e in index_entries(seg) if e.data is not None)
    assert inline_left == 25
    assert meta.tier_at is not None and meta.tier_shard is not None, "the segment fell out of the tiering index"
    assert seg in store.segments_due_for_tiering(limit=10_000) or meta.tier_at > time.time() * 1000
    store.tier(seg)
    assert all(e.data is None for e in index_entries(seg))
    assert head(seg).inline_bytes == 0 and read_all(store, seg) == bytes(model.data)
