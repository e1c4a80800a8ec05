"""Regression tests for races of the segment store that lost or changed committed bytes, and for
stream kinds (a raw append must not poison an event stream)."""

from __future__ import annotations

import pytest
from dataplane_model import SimulatedCrash, head, index_entries, inject_crash, payload, read_all
from interleave import Actor, run_schedule

from dataplane import models
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.errors import OutOfOrder, SegmentSealed, StreamKindMismatch
from rillet.framing import frame

SETTINGS = StoreSettings(inline_max=256, chunk_target=10_000, tier_min_age_ms=0)


@pytest.fixture
def store(deployment) -> SegmentStore:
    models.bind(deployment)
    return SegmentStore(deployment, SETTINGS)


def _fill(store: SegmentStore, seg: str, blocks: int, size: int = 100) -> bytes:
    store.create(seg)
    data = b""
    for i in range(blocks):
        block = payload(f"w{i}", size)
        assert store.append(seg, "w", i, 1, block).offset == len(data)
        data += block
    return data


def test_truncation_racing_tiering_keeps_the_chunk_above_the_new_start(store, unique):
    """Case 1: tiering reads the index, truncation reads it too, tiering replaces the inline entries
    by one chunk (which reaches above the truncation point), then truncation deletes what it read.
    The chunk must survive: every byte from the new start still reads back."""
    seg = f"{unique}/s/0"
    data = _fill(store, seg, 4)
    actors = [Actor("tier", lambda: store.tier(seg)), Actor("truncate", lambda: store.truncate(seg, 200))]
    run_schedule(actors, [("tier", "PutObject"), ("truncate", "DeleteItem"), ("tier", None), ("truncate", None)])
    assert [a.error for a in actors] == [None, None]
    assert read_all(store, seg, 200) == data[200:]
    assert store.read(seg, 250, 10).data == data[250:260]


def test_a_stale_claim_inside_a_sealed_tiered_segment_is_never_read(store, unique):
    """Case 2: an appender that read the head record at length 200 claims e#200 after the segment
    was sealed and tiered into one chunk (the key is free again). Readers at committed offsets get the
    committed bytes, before its clean-up and for good if it dies before cleaning up."""
    seg = f"{unique}/s/0"
    data = _fill(store, seg, 2)
    stale = payload("stale", 180)
    appender = Actor("appender", lambda: store.append(seg, "x", 0, 1, stale),
                     crash_before=lambda op, n: op == "DeleteItem")  # dies before removing its claim
    writer = Actor("writer", lambda: [store.append(seg, "w", 2 + i, 1, payload(f"w{2 + i}", 100)) for i in range(2)])
    closer = Actor("closer", lambda: (store.seal(seg), store.tier(seg)))
    run_schedule([appender, writer, closer],
                 [("appender", "PutItem"), ("writer", None), ("closer", None), ("appender", None)])
    assert writer.error is None and closer.error is None
    data += payload("w2", 100) + payload("w3", 100)
    assert head(seg).sealed and head(seg).length == 400
    assert any(e.offset == 200 and e.size == 180 for e in index_entries(seg)), "the stale claim was not made"
    for offset in (0, 150, 200, 201, 300, 380):
        assert store.read(seg, offset, 1 << 20).data == data[offset:], f"read at {offset}"
    assert read_all(store, seg) == data
    assert [(p.offset, p.length) for p in store.plan(seg, 200, 400)] == [(200, 200)]
    store.tier(seg)  # the next pass removes the garbage
    assert not any(e.size == 180 for e in index_entries(seg))
    assert read_all(store, seg) == data


def test_a_raw_append_to_an_event_segment_is_refused(store, unique):
    """Case 6: the first append pins a segment's kind; raw bytes never land in an event segment,
    nor framed events in a byte segment."""
    events, raw = f"{unique}/events/0", f"{unique}/bytes/0"
    store.create(events)
    store.create(raw)
    store.append(events, "w", 0, 1, frame(b"hello"))
    with pytest.raises(StreamKindMismatch) as refused:
        store.append(events, "w", 1, 1, b"abc", raw=True)
    assert refused.value.status == 409
    store.append(events, "w", 1, 1, frame(b"again"))
    assert read_all(store, events) == frame(b"hello") + frame(b"again")

    store.append(raw, "b", 0, 1, b"abc", raw=True)
    with pytest.raises(StreamKindMismatch):
        store.append(raw, "b", 1, 1, frame(b"evt"))
    store.append(raw, "b", 1, 1, b"def" * 200, raw=True)  # an S3-sized block keeps the kind too
    assert read_all(store, raw) == b"abc" + b"def" * 200


def test_merge_needs_an_event_segment(store, unique):
    target, source = f"{unique}/bytes/0", f"{unique}/bytes/txn"
    store.create(target)
    store.create(source)
    store.append(target, "b", 0, 1, b"raw bytes", raw=True)
    store.append(source, "t", 0, 1, frame(b"txn event"))
    with pytest.raises(StreamKindMismatch):
        store.merge(target, source)
    assert read_all(store, target) == b"raw bytes"


def test_a_block_whose_predecessor_is_missing_is_refused_at_once(store, unique):
    """A pipelined block whose writer's previous block has not committed answers OutOfOrder after a
    few head reads (not a 10 s poll that holds the function), saying which event it waits for; sent
    again once the previous block is in, it commits behind it."""
    seg = f"{unique}/s/0"
    store.create(seg)
    with inject_crash(None) as calls, pytest.raises(OutOfOrder) as refused:
        store.append(seg, "w", 1, 1, b"second", after=0)
    assert calls.all_calls.count("GetItem") <= 8
    assert refused.value.details == {"last_event_number": -1, "awaiting_event_number": 0}
    assert store.append(seg, "w", 0, 1, b"first", after=-1).offset == 0
    assert store.append(seg, "w", 1, 1, b"second", after=0).offset == 5


@pytest.mark.parametrize("dies", [False, True], ids=["refused", "dies-before-clean-up"])
def test_a_claim_at_the_tail_of_a_segment_sealed_meanwhile_does_not_stay(store, unique, dies):
    """The appender claims the tail, the segment is sealed before its advance: it answers
    SegmentSealed and removes its claim; if it dies first, the next tiering pass of the sealed
    segment removes it. No item is left past the final length."""
    seg = f"{unique}/s/0"
    data = _fill(store, seg, 2)
    appender = Actor("appender", lambda: store.append(seg, "x", 0, 1, b"late"),
                     crash_before=(lambda op, n: op == "DeleteItem") if dies else None)
    run_schedule([appender, Actor("seal", lambda: store.seal(seg))],
                 [("appender", "UpdateItem"), ("seal", None), ("appender", None)])
    assert isinstance(appender.error, SimulatedCrash if dies else SegmentSealed)
    if dies:
        store.tier(seg)
    assert [e.offset for e in index_entries(seg) if e.offset >= 200] == []
    assert read_all(store, seg) == data
