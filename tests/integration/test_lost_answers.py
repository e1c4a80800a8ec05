"""A lost answer at each step of the segment store's multi-step operations.

``lose_answer(k)`` applies the k-th mutating AWS request of an operation, then sends it again and hands
the caller the second answer: what botocore's retry does when the first answer is lost to a read
timeout or a reset. The second attempt finds its own effect already there (a conditional request is
refused, a delete finds nothing), and must not be taken for someone else's action. For each operation
and k = 1, 2, ... until k passes its last request: the operation completes with the right result, the
segments read back exactly as a simple model says, the index is clean, every object an index item
names exists, and nothing is left behind that the operation should have released.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from dataplane_model import (
    INLINE_MAX,
    SegmentModel,
    assert_clean_tiling,
    check_reads,
    head,
    index_entries,
    lose_answer,
    object_keys,
    payload,
    read_all,
    small_store,
)

from dataplane.models import IndexEntry, SegmentItem, SegmentMeta
from dataplane.segment_store import MERGE_KEY, SegmentStore
from rillet.errors import SegmentNotFound, SegmentSealed

MAX_STEPS = 80  # no operation here makes that many writes: a loop that gets there never ends


@pytest.fixture
def store(deployment) -> SegmentStore:
    return small_store(deployment)


def _each_lost_answer(run: Callable[[int], list[str]]) -> list[str]:
    """``run(k)`` for k = 1, 2, ...: it prepares, runs the operation inside ``lose_answer(k)`` and
    returns the writes that saw, then checks. Stops once k passes the operation's last write; returns
    the operations whose answers were lost, in order."""
    lost: list[str] = []
    for k in range(1, MAX_STEPS):
        seen = run(k)
        if len(seen) < k:
            return lost
        lost.append(seen[k - 1])
    raise AssertionError(f"the operation still made a write at step {MAX_STEPS}")


def _append(store: SegmentStore, seg: str, model: SegmentModel, writer: str, number: int, size: int) -> int:
    block = payload(f"{seg}:{writer}{number}", size)
    r = store.append(seg, writer, number, 1, block)
    assert r.offset == model.length and not r.duplicate
    return model.append(block)


def _named(seg: str) -> set[str]:
    return {e.object_key for e in index_entries(seg) if e.object_key}


def _check(store: SegmentStore, seg: str, model: SegmentModel, offsets: list[int]) -> None:
    """The segment reads as the model (whole, and from a sample of offsets: entry starts, inside
    entries, below the start); its index tiles it; its objects are exactly those its index names (none
    missing, none left over)."""
    assert read_all(store, seg, model.start) == bytes(model.data[model.start:])
    sample = set(offsets[::3]) | {model.start, model.length} | {o + 3 for o in offsets[1::3]}
    check_reads(store, seg, model, sorted(o for o in sample if o <= model.length), sizes=(1 << 30,))
    check_reads(store, seg, model, [model.start + 1, offsets[-1]], sizes=(2,))
    assert_clean_tiling(seg, model.start, model.length)
    assert object_keys(store, seg) == _named(seg)


def _gone(store: SegmentStore, seg: str) -> None:
    with pytest.raises(SegmentNotFound):
        store.info(seg)
    assert list(SegmentItem.query(seg, consistent_read=True)) == []
    assert object_keys(store, seg) == set()


def _source(store: SegmentStore, name: str, sizes: list[int]) -> SegmentModel:
    """A transaction segment: one writer's blocks, inline and in objects."""
    store.create(name)
    model = SegmentModel()
    for i, size in enumerate(sizes):
        _append(store, name, model, "t", i, size)
    return model


@dataclass
class _Template:
    """A segment built once by appends (and a merge, and tiering), copied for each run: the operations
    under test release what they find, so each run needs its own."""

    seg: str
    model: SegmentModel
    offsets: list[int]
    source: str | None


def _rich(store: SegmentStore, seg: str, *, tiered: bool, merged: bool, writers: int = 1) -> _Template:
    """A segment of inline and object entries, with a merged transaction segment (inline and object
    too) among them and, when ``tiered``, its inline runs packed into chunks; ``writers`` writers take
    turns."""
    store.create(seg)
    model, offsets = SegmentModel(), []
    sizes = [30, 200, 40, 50, 300]
    for i, size in enumerate(sizes):
        offsets.append(_append(store, seg, model, f"w{i % writers}", i // writers, size))
    source = None
    if merged:
        source = seg.replace("/s/", "/txn/")
        source_model = _source(store, source, [25, 150])
        offset = store.merge(seg, source)
        assert offset == model.length
        offsets.append(model.append(bytes(source_model.data)))
    for i, size in enumerate([45, 250, 15], start=len(sizes)):
        offsets.append(_append(store, seg, model, f"w{i % writers}", i // writers, size))
    if tiered:
        assert store.tier(seg) > 0
        assert any(e.sk.startswith("c#") for e in index_entries(seg))
    _check(store, seg, model, offsets)
    return _Template(seg, model, offsets, source)


def _copy(store: SegmentStore, template: _Template, k: int) -> tuple[str, SegmentModel, str | None]:
    """Copies of the template segment and of its merged segment, items and objects, under names of
    run ``k``; returns the names and a fresh model."""
    names = {template.seg: f"{template.seg}-{k}"}
    if template.source is not None:
        names[template.source] = f"{template.source}-{k}"
    s3, bucket = store.deployment.s3, store.deployment.bucket

    def rename(value: str | None) -> str | None:
        if value is None:
            return None
        for old, new in names.items():
            if value == old:
                return new
            if value.startswith(f"segments/{old}/"):
                return f"segments/{new}/" + value[len(f"segments/{old}/"):]
        return value

    for old, new in names.items():
        for key in object_keys(store, old):
            s3.copy_object(Bucket=bucket, Key=rename(key), CopySource={"Bucket": bucket, "Key": key})
        with SegmentItem.batch_write() as batch:
            for item in SegmentItem.query(old, consistent_read=True):
                item.pk = new
                if isinstance(item, IndexEntry):
                    item.object_key, item.source = rename(item.object_key), rename(item.source)
                elif isinstance(item, SegmentMeta):
                    item.merged_into = rename(item.merged_into)
                    merge = item.writers.as_dict().get(MERGE_KEY) if item.writers else None
                    if merge is not None:
                        item.writers[MERGE_KEY] = {**merge, "src": rename(merge["src"])}
                batch.save(item)
    model = SegmentModel(bytearray(template.model.data), template.model.start)
    return names[template.seg], model, names.get(template.source)


# -- truncate --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["entries", "tiered-and-merged"])
def test_a_lost_answer_at_each_step_of_truncate(store, unique, shape):
    """The start update, the object deletes, the ``released`` update, the index deletes (entries and
    chunks), and the deletion of a merged segment released with them."""

    template = _rich(store, f"{unique}/s/0", tiered=shape != "entries", merged="merged" in shape)
    offsets = template.offsets
    cut = offsets[-2] + 7  # inside the 250-byte block: every entry below it goes

    def run(k: int) -> list[str]:
        seg, model, source = _copy(store, template, k)
        with lose_answer(k) as seen:
            store.truncate(seg, cut)
        model.truncate(cut)
        _check(store, seg, model, offsets)
        assert head(seg).released == index_entries(seg)[0].offset == offsets[-2]  # nothing below is left
        if source is not None:
            _gone(store, source)
        store.truncate(seg, cut)  # a retry by the caller changes nothing
        assert read_all(store, seg, cut) == bytes(model.data[cut:]) and object_keys(store, seg) == _named(seg)
        return seen

    lost = _each_lost_answer(run)
    assert {"UpdateItem", "DeleteObject"} <= set(lost)
    assert {"TransactWriteItems", "DeleteItem"} & set(lost)  # the index deletes: a batch of them, or one alone
    if shape == "tiered-and-merged":
        assert "DeleteObjects" in lost  # the merged segment's objects


# -- seal and delete -------------------------------------------------------------------------------


def test_a_lost_answer_when_sealing(store, unique):
    def run(k: int) -> list[str]:
        seg = f"{unique}/s/{k}"
        store.create(seg)
        model = SegmentModel()
        offsets = [_append(store, seg, model, "w", i, size) for i, size in enumerate([30, 200])]
        with lose_answer(k) as seen:
            length = store.seal(seg)
        assert length == model.length and store.info(seg).sealed
        with pytest.raises(SegmentSealed):
            store.append(seg, "w", 2, 1, payload("late", 20))
        assert store.read(seg, model.length).end_of_segment
        assert store.seal(seg) == model.length  # a retry by the caller
        _check(store, seg, model, offsets)
        return seen

    assert _each_lost_answer(run) == ["UpdateItem"]


@pytest.mark.parametrize("shape", ["entries", "tiered-and-merged"])
def test_a_lost_answer_at_each_step_of_delete(deployment, unique, shape):
    """Sealing, the index deletes (with the merged segment's whole deletion), the writer state items of
    writers the head record no longer lists, the objects, the head record."""
    store = small_store(deployment, head_writers=2)

    template = _rich(store, f"{unique}/s/0", tiered=shape != "entries", merged="merged" in shape, writers=4)

    def run(k: int) -> list[str]:
        seg, _, source = _copy(store, template, k)
        assert any(item.sk.startswith("w#") for item in SegmentItem.query(seg, consistent_read=True))
        with lose_answer(k) as seen:
            store.delete(seg)
        _gone(store, seg)
        if source is not None:
            _gone(store, source)
        store.delete(seg)  # a retry by the caller
        _gone(store, seg)
        return seen

    lost = _each_lost_answer(run)
    assert {"UpdateItem", "DeleteItem", "DeleteObjects"} <= set(lost)


# -- merge -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("source_sizes", [[25, 150, 40], []], ids=["filled", "empty"])
def test_a_lost_answer_at_each_step_of_merge(store, unique, source_sizes):
    """A transaction segment merged into its target, as a commit does: sealing the source, claiming and
    advancing the target's tail, recording the merge on the source (an empty source is deleted)."""

    def run(k: int) -> list[str]:
        target, source = f"{unique}/s/{k}", f"{unique}/txn/{k}"
        store.create(target)
        model = SegmentModel()
        offsets = [_append(store, target, model, "w", i, size) for i, size in enumerate([30, 200])]
        source_model = _source(store, source, source_sizes)
        with lose_answer(k) as seen:
            at = store.merge(target, source)
        assert at == model.length
        if source_sizes:
            offsets.append(model.append(bytes(source_model.data)))
            assert (head(source).merged_into, head(source).merged_offset) == (target, at)
            assert head(source).sealed
            _check(store, source, source_model, [0])
        else:
            _gone(store, source)
        _check(store, target, model, offsets)
        if source_sizes:
            assert store.merge(target, source) == at  # a retry by the caller (the controller's commit)
        else:
            with pytest.raises(SegmentNotFound):  # as without a lost answer: the commit takes it as done
                store.merge(target, source)
        assert read_all(store, target) == bytes(model.data)
        offsets.append(_append(store, target, model, "w", 2, 20))  # the target goes on
        _check(store, target, model, offsets)
        return seen

    lost = _each_lost_answer(run)
    assert "UpdateItem" in lost
    if source_sizes:
        assert "PutItem" in lost  # the claim of the target's tail


# -- append ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_writers", [8, 1], ids=["writer-listed", "moves-a-writer-out"])
@pytest.mark.parametrize("size", [30, 200], ids=["inline", "object"])
def test_a_lost_answer_at_each_step_of_append(deployment, unique, size, head_writers):
    """An inline block (claim, advance) and a block larger than inline_max (its object first); with a
    full head record, the advance first saves the writer it moves out to that writer's own item."""
    store = small_store(deployment, head_writers=head_writers)

    def run(k: int) -> list[str]:
        seg = f"{unique}/s/{k}"
        store.create(seg)
        model = SegmentModel()
        offsets = [_append(store, seg, model, "x", 0, 30), _append(store, seg, model, "w", 0, 200),
                   _append(store, seg, model, "x", 1, 40)]
        block = payload(f"{seg}:lost", size)
        with lose_answer(k) as seen:
            r = store.append(seg, "w", 1, 1, block, after=0)
        assert (r.offset, r.length) == (model.length, model.length + size)
        # The one request that appended the block says so, also when the lost answer was its claim's: the
        # resend is refused by the claim itself, which the request tells apart from a twin request's by
        # its object's key (a block in an object) or its token (an inline block).
        assert not r.duplicate
        offsets.append(model.append(block))
        _check(store, seg, model, offsets)
        again = store.append(seg, "w", 1, 1, block, after=0)  # a retry by the caller
        assert (again.offset, again.duplicate) == (r.offset, True)
        assert object_keys(store, seg) == _named(seg)  # the retry's own object went again
        offsets.append(_append(store, seg, model, "w", 2, 20))
        _check(store, seg, model, offsets)
        return seen

    lost = _each_lost_answer(run)
    assert lost[-1] == "UpdateItem" and "PutItem" in lost  # the advance, the claim
    if size > INLINE_MAX:
        assert lost[0] == "PutObject"
    if head_writers == 1:
        assert lost.count("PutItem") == 2  # the claim, the state of the writer moved out
