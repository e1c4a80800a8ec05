"""Sub-log refusals that are final, and appends held to the incarnation they began with (issue 53), on
moto: each test stages one race at an exact request and checks that it fired.

- A conditional block refused by a batch whose appender died before withdrawing it: the resend is
  OffsetMismatch (not a WriteConflict for the refused item's whole TTL), and the item is removed, by the
  resend or by a later batch.
- A batch never hands its lease to a block it refuses in the same round.
- An S3 block that waited on its upload, or a batcher that paused for a claim, across a delete and
  create again of the segment commits nothing into the new incarnation.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from dataplane_model import SimulatedCrash, inject_crash, payload, read_all
from this_thread import patch_in_this_thread

from dataplane import models
from dataplane.journal import MERGE_KEY
from dataplane.models import IndexEntry, PendingBlock, SegmentMeta, entry_key
from dataplane.segment_store import SegmentStore, StoreSettings, now_ms
from dataplane.sublog_path import _lease_free, lease_pk, pending_pk, pending_sk
from rillet.errors import OffsetMismatch, SegmentNotFound, WriteConflict

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


def _created(seg: str) -> int:
    return int(SegmentMeta.get(seg, "m").created_ms)


def _item(seg: str, writer: str, last: int) -> PendingBlock | None:
    try:
        return PendingBlock.get(pending_pk(seg, _created(seg), writer, last, SHARDS), pending_sk(writer, last),
                                consistent_read=True)
    except PendingBlock.DoesNotExist:
        return None


def _refused_by_a_dead_appender(store: SegmentStore, seg: str, writer: str, data: bytes, expected: int) -> None:
    """Append ``data`` at ``expected`` (not the length): its batch refuses it, and its appender dies
    before its withdrawal (a DeleteItem), so the refused item stays."""

    def die_at_the_withdrawal(operation: str, _n: int) -> None:
        if operation == "DeleteItem":
            raise SimulatedCrash("the appender died before withdrawing its refused block")

    with inject_crash(None, hook=die_at_the_withdrawal) as injector, pytest.raises(SimulatedCrash):
        store.append(seg, writer, 0, 1, data, expected_offset=expected, raw=True)
    assert "UpdateItem" in injector.mutating_calls  # the batch's refusal
    left = _item(seg, writer, 0)
    assert left is not None and left.refused_at is not None and left.offset is None


def test_the_resend_of_a_block_refused_after_its_appender_died_is_offset_mismatch_and_clears_it(store, seg):
    """Without the fix every resend took the refused item for a live twin and answered WriteConflict
    (retryable), for the item's TTL of an hour: a byte-stream writer stuck on one block."""
    store.append(seg, "w", 0, 1, payload("x", 10), raw=True)
    _refused_by_a_dead_appender(store, seg, "bw", payload("late", 5), expected=0)

    with pytest.raises(OffsetMismatch) as resent:
        store.append(seg, "bw", 0, 1, payload("late", 5), expected_offset=0, raw=True)
    assert resent.value.details["length"] == 10
    assert _item(seg, "bw", 0) is None  # the refusal is over: removed by the resend that met it
    # The writer's next block carries the same block number (ByteStreamWriter after an OffsetMismatch).
    assert store.append(seg, "bw", 0, 1, payload("next", 5), expected_offset=10, raw=True).offset == 10
    assert read_all(store, seg) == payload("x", 10) + payload("next", 5)


def test_an_unconditional_block_of_the_same_number_replaces_a_dead_appenders_refused_block(store, seg):
    store.append(seg, "w", 0, 1, payload("x", 10), raw=True)
    _refused_by_a_dead_appender(store, seg, "bw", payload("late", 5), expected=3)
    done = store.append(seg, "bw", 0, 1, payload("next", 7), raw=True)
    assert (done.offset, done.duplicate) == (10, False)
    assert read_all(store, seg) == payload("x", 10) + payload("next", 7)


def test_a_batch_withdraws_a_refused_block_whose_appender_is_gone(deployment, unique):
    """Nobody resends the refused block: a batch removes it once its appender's wait is long over
    (twice ``sublog_wait_ms``), as it does a dead appender's pending block, so no round reads it until
    its TTL."""
    models.bind(deployment)
    store = SegmentStore(deployment, replace(SETTINGS, sublog_wait_ms=300))
    seg = f"{unique}/s/0"
    store.create(seg, sublogs=True)
    store.append(seg, "w", 0, 1, payload("x", 10), raw=True)
    _refused_by_a_dead_appender(store, seg, "bw", payload("late", 5), expected=0)
    time.sleep(0.7)
    assert _item(seg, "bw", 0) is not None
    store.append(seg, "w", 1, 1, payload("y", 5), raw=True)
    assert _item(seg, "bw", 0) is None


def test_a_batch_never_hands_its_lease_to_a_block_it_refuses(store, seg):
    """A conditional block at a wrong offset waits beside the batcher's own block: the batch commits
    the batcher's block and refuses the other. Handed the lease, the refused block's appender would
    answer OffsetMismatch without batching or giving the lease up, and the segment would stall a lease."""
    store.append(seg, "w", 0, 1, payload("x", 10), raw=True)
    created = _created(seg)
    # A live appender's conditional block, put just before the batcher's (its appender polls it).
    waiting = PendingBlock(pending_pk(seg, created, "bw", 0, SHARDS), pending_sk("bw", 0), writer="bw", first=0,
                           last=0, size=5, data=payload("c", 5), raw=True, token=11, since_ms=now_ms(),
                           new_writer=True, expected_offset=3, expires_at=now_ms() // 1000 + 600)
    waiting.save()
    assert store.append(seg, "w", 1, 1, payload("y", 5), raw=True).offset == 10
    refused = PendingBlock.get(waiting.pk, waiting.sk, consistent_read=True)
    assert int(refused.refused_at) == 10  # refused in the round that committed the batcher's block
    assert refused.batcher is None
    lease = models.BatchLease.get(lease_pk(seg, created), "lease", consistent_read=True)
    assert _lease_free(lease)


def test_a_refused_block_handed_the_lease_by_a_racing_batch_gives_the_lease_up(store, seg):
    """Another batcher (a slow one whose lease was taken over) read the block as pending and hands it the
    lease in the very moment this batcher refuses it: its appender answers OffsetMismatch and frees the
    lease it will not use, rather than leave the segment without a batcher until the lease runs out."""
    store.append(seg, "w", 0, 1, payload("x", 10), raw=True)
    created = _created(seg)
    handed: list[str] = []

    def hand_over_before_the_refusal(operation: str, _n: int) -> None:
        if operation == "UpdateItem" and not handed:
            handed.append("other")
            models.BatchLease(lease_pk(seg, created), "lease", batcher="other", until=now_ms() + 60_000,
                              expires_at=now_ms() // 1000 + 600).save()
            mine = _item(seg, "bw", 0)
            mine.update(actions=[PendingBlock.batcher.set("other")])

    with inject_crash(None, hook=hand_over_before_the_refusal), pytest.raises(OffsetMismatch):
        store.append(seg, "bw", 0, 1, payload("c", 5), expected_offset=3, raw=True)
    assert handed == ["other"]
    assert _item(seg, "bw", 0) is None
    assert _lease_free(models.BatchLease.get(lease_pk(seg, created), "lease", consistent_read=True))


def test_an_s3_block_that_waited_on_its_upload_across_a_delete_and_create_again_is_stored_once(store, unique):
    """A pipelined S3 block on the chain reads the head record again after its upload. The name was
    deleted and created again meanwhile, in sub-log mode: the block belongs to no other life of the
    name, so it is SegmentNotFound, not committed through the chain into the new segment, whose
    sub-log de-duplication would not see it and store its resend a second time."""
    seg = f"{unique}/s/0"
    store.create(seg)  # the chain
    block = payload("big", 300)
    created_again: list[int] = []

    def delete_and_create_again(operation: str, _n: int) -> None:
        if operation == "PutObject" and not created_again:
            created_again.append(0)
            store.delete(seg, _created(seg))
            time.sleep(0.002)  # a new creation time
            store.create(seg, sublogs=True)
            created_again[0] = _created(seg)

    with inject_crash(None, hook=delete_and_create_again), pytest.raises(SegmentNotFound):
        store.append(seg, "w", 0, 1, block, after=-1)
    assert created_again and created_again[0] == _created(seg)
    assert SegmentMeta.get(seg, "m").sublog_shards == SHARDS
    assert SegmentMeta.get(seg, "m").length == 0
    resent = store.append(seg, "w", 0, 1, block, after=-1)
    assert (resent.offset, resent.duplicate) == (0, False)
    assert read_all(store, seg) == block


def test_a_batcher_that_paused_for_a_claim_across_a_delete_and_create_again_does_not_commit_it(
        store, seg, unique, monkeypatch):
    """A merge finisher that read the segment before its deletion puts its claim at ``e#0`` after it; a
    batcher of the deleted incarnation meets the claim (its transaction refused) and pauses for its
    owner. The name is created again meanwhile, at the same length: helping the claim through would
    commit the deleted incarnation's transaction into the new segment."""
    source = f"{unique}/tx/0"
    store.create(source)
    store.append(source, "t", 0, 1, payload("tx", 20))
    assert store.seal(source) == 20
    old = _created(seg)
    staged: list[str] = []

    def delete_then_the_stale_claim(operation: str, _n: int) -> None:
        if operation == "TransactWriteItems" and not staged:
            staged.append("deleted")
            store.delete(seg, old)
            IndexEntry(seg, entry_key(0), offset=0, size=20, source=source, writer=MERGE_KEY, created_ms=now_ms(),
                       incarnation=old).save()

    real_sleep = time.sleep

    def create_again_during_the_pause(seconds: float) -> None:
        if staged == ["deleted"] and seconds == SETTINGS.contention_pause_ms / 1000:
            staged.append("created again")
            real_sleep(0.002)
            store.create(seg, sublogs=True)
        real_sleep(seconds)

    patch_in_this_thread(monkeypatch, time, "sleep", create_again_during_the_pause)
    # The deletion removed the batcher's own pending block: it is not appended, whichever it answers.
    with inject_crash(None, hook=delete_then_the_stale_claim), pytest.raises((SegmentNotFound, WriteConflict)):
        store.append(seg, "w", 0, 1, payload("a", 10))
    assert staged == ["deleted", "created again"]
    head = SegmentMeta.get(seg, "m")
    assert int(head.created_ms) != old
    assert int(head.length) == 0
    assert SegmentMeta.get(source, "m").merged_into is None
