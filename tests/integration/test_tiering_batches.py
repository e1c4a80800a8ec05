"""Tiering at the journal's pace: entries deleted in conditioned batches, many segments a run, and no
byte a reader could miss meanwhile (issue 39)."""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import botocore.client
from dataplane_model import SegmentModel, assert_clean_tiling, index_entries, payload, read_all, small_store

from dataplane.models import ENTRY_PREFIX

APPENDS = 130  # two delete batches a segment: 100 and 30


@contextmanager
def _requests() -> Iterator[collections.Counter[str]]:
    """Counts every AWS request meanwhile, by operation (all threads)."""
    counts: collections.Counter[str] = collections.Counter()
    original = botocore.client.BaseClient._make_api_call
    lock = threading.Lock()

    def counted(client, operation, params):
        with lock:
            counts[operation] += 1
        return original(client, operation, params)

    botocore.client.BaseClient._make_api_call = counted
    try:
        yield counts
    finally:
        botocore.client.BaseClient._make_api_call = original


def _fill(store, segment: str, count: int) -> SegmentModel:
    store.create(segment)
    model = SegmentModel()
    for i in range(count):
        block = payload(f"{segment}-{i}", 20 + i % 30)
        store.append(segment, "w", i, 1, block)
        model.append(block)
    return model


def test_a_tiering_run_deletes_in_batches_over_several_segments_and_leaves_no_gap(deployment, unique):
    store = small_store(deployment, chunk_target=1 << 20)  # each segment's entries pack into one chunk
    segments = [f"{unique}/s{n}/0" for n in range(3)]
    models = {segment: _fill(store, segment, APPENDS) for segment in segments}
    stop, errors = threading.Event(), []

    def reader(seed: int) -> None:  # reads while the run deletes: every byte is always there
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                segment = rng.choice(segments)
                expected = bytes(models[segment].data)
                offset = rng.randrange(len(expected))
                got = store.read(segment, offset, 1 << 30).data
                assert got == expected[offset:offset + len(got)] and got, f"{segment} at {offset}"
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    readers = [threading.Thread(target=reader, args=(seed,)) for seed in range(2)]
    for thread in readers:
        thread.start()
    try:
        with _requests() as counts:
            run = store.tier_many(segments, workers=3)
    finally:
        stop.set()
        for thread in readers:
            thread.join(30)
    assert not errors, errors

    assert run.deletes == 3 * APPENDS
    assert run.bytes_moved == sum(m.length for m in models.values())
    assert counts["DeleteItem"] == 0 and counts["BatchWriteItem"] == 0
    assert counts["TransactWriteItems"] == 3 * (1 + 2)  # per segment: its chunk, then two delete batches
    assert "deletes" in run.summary() and "B/s" in run.summary()
    for segment, model in models.items():
        assert read_all(store, segment) == bytes(model.data)
        assert all(e.data is None for e in assert_clean_tiling(segment, 0, model.length))


def test_a_batch_deletes_only_items_still_as_read(deployment, unique):
    """One item of the batch changed and one vanished since they were read: the transaction is refused,
    and the items are deleted one by one, each on its own condition, so the changed one stays."""
    store = small_store(deployment)
    segment = f"{unique}/s/0"
    _fill(store, segment, 12)
    read = [e for e in index_entries(segment) if e.sk.startswith(ENTRY_PREFIX)]
    changed, vanished = read[3], read[7]
    replacement = index_entries(segment)[3]
    replacement.created_ms = changed.created_ms + 1
    replacement.save()
    vanished.delete()

    with _requests() as counts:
        assert store._delete_all_unchanged(read) == len(read) - 2
    assert counts["TransactWriteItems"] == 1 and counts["DeleteItem"] == len(read)
    assert [e.sk for e in index_entries(segment)] == [changed.sk]


def test_a_batch_read_before_the_segment_was_created_again_deletes_nothing_of_the_new_one(deployment, unique):
    """What an unconditional batch delete would risk: the name deleted and created again, and the new
    segment's committed entries at the keys the batch read."""
    store = small_store(deployment)
    segment = f"{unique}/s/0"
    _fill(store, segment, 10)
    read = [e for e in index_entries(segment) if e.sk.startswith(ENTRY_PREFIX)]
    store.delete(segment)
    model = _fill(store, segment, 10)

    assert store._delete_all_unchanged(read) == 0
    assert read_all(store, segment) == bytes(model.data)
