"""Writer de-duplication state that does not grow the head record (issue 12).

The head record lists only the few most recently active writers; the others' last blocks live in
their own items. So the head record, which every append reads and rewrites, stays the same size and
an append costs the same requests whatever the number of writer ids that ever appended, while every
de-duplication answer stays what it was. An idle writer's item expires (DynamoDB TTL); a resend older
than the window from a forgotten id is refused with WriterExpired instead of appended twice.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from dataplane_model import inject_crash, payload
from interleave import Actor, explore
from this_thread import patch_in_this_thread

from dataplane import models, segment_store
from dataplane.models import META_KEY, SegmentMeta, WriterState, writer_key
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.errors import OutOfOrder, WriterExpired
from rillet.framing import frame

HEAD_WRITERS = 2  # small, so that a few writers already move some out
SETTINGS = StoreSettings(head_writers=HEAD_WRITERS, writer_expiry_ms=3_600_000, order_wait_ms=50)
# 25 times the head record's 8 listed writers: past that the figures cannot move (1,000 took 46 s of a
# CI run, 10,000 166 s); python -m bench.writer_count prints 10, 1,000 and 10,000.
WRITER_COUNT = 200
HEAD_LIMIT = 1024  # bytes: a rewrite of the head record costs one write unit


def _cost_model():
    """bench/cost.py, the one definition of DynamoDB's item size (tests/bench shadows the package name)."""
    path = Path(__file__).resolve().parents[2] / "bench" / "cost.py"
    spec = importlib.util.spec_from_file_location("rillet_bench_cost", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


item_size = _cost_model().item_size


@pytest.fixture
def store(deployment) -> SegmentStore:
    models.bind(deployment)
    return SegmentStore(deployment, SETTINGS)


def _item_size(segment: str, sort_key: str) -> int:
    return item_size(SegmentMeta._get_connection().get_item(segment, sort_key, consistent_read=True)["Item"])


def _stored_state(segment: str, writer: str) -> dict | None:
    try:
        return WriterState.get(segment, writer_key(writer), consistent_read=True).as_state()
    except WriterState.DoesNotExist:
        return None


def test_an_append_costs_the_same_after_many_writers(deployment, unique):
    """After 10, 100 and 200 writer ids: the head record's size and an append's requests stay the same
    (with every writer listed in the head record, it had grown to 39 KB after 300 writers)."""
    models.bind(deployment)
    store = SegmentStore(deployment)  # the default head record size
    segment = f"{unique}/s/0"
    store.create(segment)
    event = frame(b"e" * 200)
    figures = {}
    for i in range(WRITER_COUNT):
        writer = f"{i:08d}{'w' * 24}"  # as long as the SDK's writer ids (32 characters)
        if i + 1 in (10, 100, WRITER_COUNT):
            with inject_crash(None) as calls:
                store.append(segment, writer, 0, 1, event)
            head = _item_size(segment, META_KEY)
            state = max((_item_size(segment, writer_key(f"{j:08d}{'w' * 24}")) for j in range(2)), default=0)
            figures[i + 1] = (tuple(calls.all_calls), head, state)
        else:
            store.append(segment, writer, 0, 1, event)
    operations = {calls for calls, _, _ in figures.values()}
    assert len(operations) == 1, f"an append's requests changed with the writer count: {figures}"
    assert operations.pop() == ("GetItem", "GetItem", "PutItem", "PutItem", "UpdateItem")
    for count, (_, head, state) in figures.items():
        assert head <= HEAD_LIMIT and 0 < state <= HEAD_LIMIT, f"after {count} writers: {figures}"
    assert store.info(segment).length == WRITER_COUNT * len(event)


def test_a_writer_moved_out_of_the_head_record_is_still_deduplicated(store, unique):
    segment = f"{unique}/s/0"
    store.create(segment)
    first = store.append(segment, "a", 0, 2, frame(b"a0") + frame(b"a1"))
    for writer in ("b", "c", "d"):
        store.append(segment, writer, 0, 1, frame(writer.encode()))
    assert "a" not in SegmentMeta.get(segment, META_KEY, consistent_read=True).writers.as_dict()
    assert _stored_state(segment, "a") == {"f": 0, "l": 1, "o": first.offset, "t": _stored_state(segment, "a")["t"]}

    again = store.append(segment, "a", 0, 2, frame(b"a0") + frame(b"a1"), after=-1)
    assert (again.offset, again.duplicate) == (first.offset, True)
    length = store.info(segment).length
    with pytest.raises(OutOfOrder):  # its next block must follow event 1, which the item remembers
        store.append(segment, "a", 3, 1, frame(b"a3"), after=2)
    nxt = store.append(segment, "a", 2, 1, frame(b"a2"), after=1)
    assert (nxt.offset, nxt.duplicate) == (length, False)
    assert "a" in SegmentMeta.get(segment, META_KEY, consistent_read=True).writers.as_dict()


def test_reads_of_blocks_of_writers_moved_out_are_not_taken_for_stale_claims(store, unique):
    segment = f"{unique}/s/0"
    store.create(segment)
    data = b""
    for i in range(6):
        block = frame(f"event of writer {i}".encode())
        store.append(segment, f"w{i}", 0, 1, block)
        data += block
    for offset in (0, len(frame(b"event of writer 0"))):
        assert store.read(segment, offset).data == data[offset:]


def test_a_resend_from_a_forgotten_writer_older_than_the_window_is_refused(store, unique):
    segment = f"{unique}/s/0"
    store.create(segment)
    store.append(segment, "a", 0, 1, frame(b"a0"), block_age_ms=0)
    for writer in ("b", "c"):
        store.append(segment, writer, 0, 1, frame(writer.encode()))
    WriterState(segment, writer_key("a")).delete()  # what DynamoDB's TTL does once "a" is idle too long
    length = store.info(segment).length

    with pytest.raises(WriterExpired) as refused:
        store.append(segment, "a", 0, 1, frame(b"a0"), after=-1, block_age_ms=SETTINGS.writer_expiry_ms + 1)
    assert refused.value.status == 409 and refused.value.details["expiry_ms"] == SETTINGS.writer_expiry_ms
    big = payload("large", SETTINGS.inline_max + 1)  # its object is removed with the refusal
    with pytest.raises(WriterExpired):
        store.append(segment, "a", 1, 1, frame(big), block_age_ms=SETTINGS.writer_expiry_ms + 1)
    assert store.info(segment).length == length
    keys = deployment_keys(store, segment)
    assert not [k for k in keys if "/b/a/" in k], keys

    # A writer the segment still knows is de-duplicated whatever the block's age.
    again = store.append(segment, "b", 0, 1, frame(b"b"), block_age_ms=SETTINGS.writer_expiry_ms * 10)
    assert again.duplicate
    # Inside the window, an unknown id is a new writer (the SDK starts a new id after an hour idle).
    assert not store.append(segment, "z", 0, 1, frame(b"z"), block_age_ms=SETTINGS.writer_expiry_ms).duplicate


def deployment_keys(store: SegmentStore, segment: str) -> list[str]:
    listed = store.deployment.s3.list_objects_v2(Bucket=store.deployment.bucket, Prefix=f"segments/{segment}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def test_deleting_a_segment_deletes_its_writer_state(store, unique):
    segment = f"{unique}/s/0"
    store.create(segment)
    for writer in ("a", "b", "c", "d"):
        store.append(segment, writer, 0, 1, frame(writer.encode()))
    assert _stored_state(segment, "a") is not None
    store.delete(segment)
    assert list(SegmentMeta._get_connection().query(segment)["Items"]) == []


def test_writer_state_left_by_a_deleted_segment_of_the_same_name_is_no_state(store, unique):
    """A stale appender of a deleted segment can save a writer's state after the delete removed the
    others (it read the head record before the seal). A segment created again under the name must not
    take that item for its own writer's history: a fresh block would be acknowledged as a duplicate
    and lost, and the item could not be replaced when the writer is moved out."""
    segment = f"{unique}/s/0"
    store.create(segment)
    created = SegmentMeta.get(segment, META_KEY, consistent_read=True).created_ms
    WriterState(segment, writer_key("b"), incarnation=created - 1, first=0, last=5, offset=0, time_ms=created - 1,
                expires_at=created // 1000 + 3600).save()  # what the stale appender left

    fresh = store.append(segment, "b", 0, 1, frame(b"b0"), after=-1)
    assert (fresh.offset, fresh.duplicate) == (0, False)
    assert store.read(segment, 0).data == frame(b"b0")
    for writer in ("c", "d"):  # the head record lists 2: "b" is moved out, its item replaced
        store.append(segment, writer, 0, 1, frame(writer.encode()))
    assert _stored_state(segment, "b")["l"] == 0
    assert store.append(segment, "b", 0, 1, frame(b"b0"), after=-1).duplicate
    assert not store.append(segment, "b", 1, 1, frame(b"b1"), after=0).duplicate


def test_a_block_waiting_for_its_predecessor_sees_it_after_other_writers_moved_the_writer_out(store, unique,
                                                                                          monkeypatch):
    """The predecessor commits while its successor waits, and before the next poll enough other writers
    commit to move the writer out of the head record again: the waiting block finds the writer's item
    (the segment grew) and is appended, rather than refused OutOfOrder."""
    segment = f"{unique}/s/0"
    store.create(segment)
    real_sleep, others_done = segment_store.time.sleep, []

    def predecessor_and_others_commit(seconds: float) -> None:
        if not others_done:
            others_done.append(True)
            store.append(segment, "a", 0, 1, frame(b"a0"), after=-1)
            for writer in ("c", "d"):  # the head record lists 2
                store.append(segment, writer, 0, 1, frame(writer.encode()))
            assert "a" not in SegmentMeta.get(segment, META_KEY, consistent_read=True).writers.as_dict()
        real_sleep(seconds)

    patch_in_this_thread(monkeypatch, segment_store.time, "sleep", predecessor_and_others_commit)
    result = store.append(segment, "a", 1, 1, frame(b"a1"), after=0)
    assert others_done and not result.duplicate
    assert store.read(segment, result.offset).data == frame(b"a1")


def test_every_interleaving_of_a_resend_and_writers_moving_it_out(store, unique):
    """Writer "a" resends its committed block while two new writers append (each moving the least
    recently active writer out of the full head record): in every interleaving (one preemption) the
    resend is answered as the duplicate it is, and every writer's state is its last block."""
    cases = []

    def make() -> list[Actor]:
        segment = f"{unique}/i{len(cases)}/0"
        store.create(segment)
        acked = {w: store.append(segment, w, 0, 1, frame(w.encode() * 3)).offset for w in ("a", "b")}
        cases.append((segment, acked))
        return [Actor("resend", lambda: store.append(segment, "a", 0, 1, frame(b"aaa"))),
                Actor("c", lambda: store.append(segment, "c", 0, 1, frame(b"ccc"))),
                Actor("d", lambda: store.append(segment, "d", 0, 1, frame(b"ddd")))]

    def check(actors: list[Actor], schedule: list[str]) -> None:
        segment, acked = cases[-1]
        for actor in actors:
            assert actor.error is None, f"{actor.name} failed with {actor.error!r} in {schedule}"
        resend = next(a for a in actors if a.name == "resend").result
        assert (resend.offset, resend.duplicate) == (acked["a"], True), schedule
        meta = SegmentMeta.get(segment, META_KEY, consistent_read=True)
        assert meta.length == 4 * len(frame(b"aaa")), f"a block was appended twice in {schedule}"
        listed = meta.writers.as_dict()
        assert len(listed) <= HEAD_WRITERS
        for writer in "abcd":
            state = listed.get(writer) or _stored_state(segment, writer)
            assert state is not None and int(state["l"]) == 0, f"{writer} lost its state in {schedule}"
        offsets = {a.name: a.result.offset for a in actors if a.name in "cd"} | acked
        for writer, offset in offsets.items():
            assert store.read(segment, offset, len(frame(b"aaa"))).data == frame(writer.encode() * 3), schedule

    assert explore(make, check, max_switches=1) > 20
