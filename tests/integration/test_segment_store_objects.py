"""S3 objects of the segment store: reads whose object S3 refuses (403 without ListBucket), and
objects that failed appends leave behind."""

from __future__ import annotations

from dataclasses import replace

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from dataplane_model import SimulatedCrash, index_entries, inject_crash, object_keys, payload, read_all
from interleave import Actor, explore

from dataplane import models
from dataplane.models import IndexEntry, entry_key
from dataplane.segment_store import SegmentStore, StoreSettings, now_ms
from rillet.errors import OffsetMismatch, OutOfOrder, SegmentSealed, Truncated

SETTINGS = StoreSettings(inline_max=64, chunk_target=10_000, tier_min_age_ms=0)
# Tests run the orphan removal only once every request they made is over.
NO_GRACE = StoreSettings(inline_max=64, chunk_target=10_000, tier_min_age_ms=0,
                         orphan_grace_ms=0)


@pytest.fixture
def store(deployment) -> SegmentStore:
    models.bind(deployment)
    return SegmentStore(deployment, SETTINGS)


@pytest.fixture
def refused_gets(store):
    """Make S3 answer GetObject with ``code`` (after running ``before``), as real S3 does for a
    missing key when the caller lacks s3:ListBucket: 403 AccessDenied."""
    events = store.deployment.s3.meta.events
    installed = []

    def install(code: str, status: int, before=lambda: None):
        def refuse(**_):
            before()
            return AWSResponse("https://s3", status, {}, None), {
                "Error": {"Code": code, "Message": "refused"}, "ResponseMetadata": {"HTTPStatusCode": status}}

        events.register("before-call.s3.GetObject", refuse)
        installed.append(refuse)

    yield install
    for handler in installed:
        events.unregister("before-call.s3.GetObject", handler)


def _segment(store: SegmentStore, name: str, blocks: int = 4) -> tuple[list[int], bytes]:
    store.create(name)
    offsets, data = [], b""
    for i in range(blocks):
        block = payload(f"b{i}", 200)  # above inline_max: each block is an S3 object
        offsets.append(store.append(name, "w", i, 1, block).offset)
        data += block
    return offsets, data


@pytest.mark.parametrize("code,status", [("AccessDenied", 403), ("NoSuchKey", 404)])
def test_an_object_refused_after_a_truncation_released_it_reads_as_truncated(store, unique, refused_gets, code,
                                                                            status):
    seg = f"{unique}/s/0"
    offsets, _ = _segment(store, seg)
    refused_gets(code, status, before=lambda: store.truncate(seg, offsets[2]))
    with pytest.raises(Truncated) as refused:
        store.read(seg, 0)
    assert refused.value.details == {"start_offset": offsets[2]}


@pytest.mark.parametrize("code,status", [("AccessDenied", 403), ("NoSuchKey", 404)])
def test_an_object_refused_above_the_start_stays_an_error(store, unique, refused_gets, code, status):
    """A genuine permission problem (or a missing object of live data) is not dressed up as a
    truncation: the caller sees an error, a 500 on the read API."""
    seg = f"{unique}/s/0"
    _segment(store, seg)
    refused_gets(code, status)
    with pytest.raises(ClientError) as refused:
        store.read(seg, 0)
    assert refused.value.response["Error"]["Code"] == code
    assert not isinstance(refused.value, Truncated)



def _named(segment: str) -> set[str]:
    return {e.object_key for e in index_entries(segment) if e.object_key}


def test_a_refused_append_removes_its_own_object(store, unique):
    """Out of order, offset mismatch, sealed, a duplicate of a placed block: the request put its
    object first and removes it itself; every committed byte still reads back."""
    seg = f"{unique}/s/0"
    _, data = _segment(store, seg)
    with pytest.raises(OffsetMismatch):
        store.append(seg, "w", 4, 1, payload("late", 200), expected_offset=1)
    with pytest.raises(OutOfOrder):
        store.append(seg, "w", 6, 1, payload("early", 200), after=5)
    assert object_keys(store, seg) == _named(seg)
    store.seal(seg)
    with pytest.raises(SegmentSealed):
        store.append(seg, "x", 0, 1, payload("sealed", 200))
    assert object_keys(store, seg) == _named(seg)
    assert len(_named(seg)) == 4
    assert read_all(store, seg) == data


def test_a_crash_between_put_and_claim_leaves_an_object_the_pass_after_sealing_removes(deployment, unique):
    models.bind(deployment)
    store = SegmentStore(deployment, NO_GRACE)
    seg = f"{unique}/s/0"
    _, data = _segment(store, seg)
    block = payload("crash", 200)
    with inject_crash(2), pytest.raises(SimulatedCrash):  # dies after its PutObject, before its claim
        store.append(seg, "w", 4, 1, block)
    assert store.append(seg, "w", 4, 1, block).offset == len(data)  # the writer resends: its own object
    data += block
    assert len(object_keys(store, seg)) == len(_named(seg)) + 1
    store.tier(seg)  # not sealed: the look the S3 appends booked is a sweep period away
    assert len(object_keys(store, seg)) == len(_named(seg)) + 1
    store.seal(seg)
    # Sealing makes the look due (no grace here); the pass comes at the time the appends booked (a
    # blind update cannot move tier_at earlier), or at once where none was booked.
    assert models.SegmentMeta.get(seg, "m", consistent_read=True).orphans_after <= now_ms()
    store.tier(seg)
    assert object_keys(store, seg) == _named(seg)
    assert read_all(store, seg) == data
    assert seg not in store.segments_due_for_tiering(limit=10_000)


def test_an_open_segment_loses_an_orphan_a_sweep_period_after_an_s3_append(deployment, unique):
    """Never sealed, a segment still gets rid of the object of an append that died between its PutObject
    and its claim: an S3 block's append books a look a sweep period later (one per period, whatever the
    number of appends), and the tiering pass then removes what no index item names."""
    models.bind(deployment)
    store = SegmentStore(deployment, replace(NO_GRACE, orphan_sweep_ms=60_000))
    seg = f"{unique}/s/0"
    before = now_ms()
    _, data = _segment(store, seg)
    booked = models.SegmentMeta.get(seg, "m", consistent_read=True).orphans_after
    assert before + 60_000 <= booked <= now_ms() + 60_000
    block = payload("crash", 200)
    with inject_crash(2), pytest.raises(SimulatedCrash):  # dies after its PutObject, before its claim
        store.append(seg, "w", 4, 1, block)
    assert store.append(seg, "w", 4, 1, block).offset == len(data)  # the writer resends: its own object
    data += block
    assert models.SegmentMeta.get(seg, "m", consistent_read=True).orphans_after == booked
    assert seg not in store.segments_due_for_tiering(limit=10_000)
    store.tier(seg)  # the look is not due yet
    assert len(object_keys(store, seg)) == len(_named(seg)) + 1

    # The sweep period passes (moved forward here rather than waited for).
    models.SegmentMeta(seg, "m").update(actions=[models.SegmentMeta.orphans_after.set(now_ms()),
                                                 models.SegmentMeta.tier_at.set(now_ms())])
    assert seg in store.segments_due_for_tiering(limit=10_000)
    store.tier(seg)
    assert object_keys(store, seg) == _named(seg)
    assert read_all(store, seg) == data
    meta = models.SegmentMeta.get(seg, "m", consistent_read=True)
    assert not meta.sealed and meta.orphans_after is None
    assert seg not in store.segments_due_for_tiering(limit=10_000)
    store.append(seg, "w", 5, 1, payload("next", 200))  # the next S3 append books the next look
    assert models.SegmentMeta.get(seg, "m", consistent_read=True).orphans_after > now_ms()


def test_orphans_wait_for_the_grace_period(store, unique):
    """A young object may belong to a request still under way: the pass leaves it and the segment
    stays due until the grace period has passed."""
    seg = f"{unique}/s/0"
    _segment(store, seg)
    with inject_crash(2), pytest.raises(SimulatedCrash):
        store.append(seg, "w", 4, 1, payload("crash", 200))
    store.seal(seg)
    store.tier(seg)
    assert len(object_keys(store, seg)) == len(_named(seg)) + 1
    assert models.SegmentMeta.get(seg, "m", consistent_read=True).tier_at is not None


def test_a_crashed_tiering_pass_leaves_a_chunk_object_the_pass_after_sealing_removes(deployment, unique):
    models.bind(deployment)
    store = SegmentStore(deployment, NO_GRACE)
    seg = f"{unique}/s/0"
    store.create(seg)
    data = b""
    for i in range(5):
        block = payload(f"i{i}", 40)  # inline
        store.append(seg, "w", i, 1, block)
        data += block
    with inject_crash(3), pytest.raises(SimulatedCrash):  # epoch bump, chunk PutObject, then dies
        store.tier(seg)
    assert len(object_keys(store, seg)) == 1 and not _named(seg)
    store.seal(seg)
    store.tier(seg)  # packs the run again, as a chunk of its own epoch, and removes the first pass's
    assert object_keys(store, seg) == _named(seg) and len(_named(seg)) == 1
    assert read_all(store, seg) == data


def test_a_duplicate_request_never_removes_the_object_its_twin_commits(store, unique):
    """Two requests of one block (a resend racing its original), in every interleaving: the one that
    finds the block placed by the other removes only its own object, so the committed one stays."""
    block = payload("twin", 200)
    segments = []

    def make():
        seg = f"{unique}/s/{len(segments)}"
        segments.append(seg)
        store.create(seg)
        return [Actor("original", lambda: store.append(seg, "w", 0, 1, block)),
                Actor("resend", lambda: store.append(seg, "w", 0, 1, block))]

    def check(actors, schedule):
        seg = segments[-1]
        assert [a.error for a in actors] == [None, None], schedule
        assert sorted(a.result.duplicate for a in actors) == [False, True], schedule
        assert read_all(store, seg) == block, schedule
        assert object_keys(store, seg) == _named(seg), schedule

    assert explore(make, check, max_switches=2) > 1


@pytest.mark.parametrize("stale", ["new-writer", "retry-of-the-last-block"])
def test_a_stale_claim_on_a_key_a_racing_truncation_freed_reads_as_truncated(store, unique, deployment, stale):
    """The reader reads the head record; a truncation then releases the range and frees the key at the
    reader's offset, where a stale appender's claim lands (emulated by saving the claim item). The
    reader answers Truncated instead of the claim's bytes."""
    seg = f"{unique}/s/0"
    store.create(seg)
    offsets = [store.append(seg, "w", i, 1, payload(f"i{i}", 40)).offset for i in range(8)]  # inline
    writer, first = ("x", 0) if stale == "new-writer" else ("w", 7)
    truncator = SegmentStore(deployment, SETTINGS)
    real_meta = SegmentStore._meta
    fired = []

    def meta_then_race(segment):
        meta = real_meta(store, segment)
        if not fired:
            fired.append(True)
            truncator.truncate(segment, offsets[5])
            IndexEntry(segment, entry_key(offsets[2]), offset=offsets[2], size=40, data=b"S" * 40, writer=writer,
                       first=first, last=first, created_ms=now_ms()).save(condition=IndexEntry.pk.does_not_exist())
        return meta

    store._meta = meta_then_race  # this store instance only
    with pytest.raises(Truncated) as refused:
        store.read(seg, offsets[2], 40)
    assert refused.value.details == {"start_offset": offsets[5]}
