"""Rule-based property test: any interleaving of appends (from several writers, inline and S3-sized,
with exact resends), appenders crashing after their claim, appenders acting on an old head record
(dying before they remove their misplaced claim), tiering (whole or crashed part-way), truncation and
reads leaves the segment equal to a trivial model: a bytearray and a start offset."""

from __future__ import annotations

import uuid

import pytest
from dataplane_model import SegmentModel, SimulatedCrash, inject_crash, payload
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from dataplane import models
from dataplane.models import META_KEY, SegmentMeta
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.errors import Truncated

INLINE_MAX = 48
WRITERS = ("wa", "wb", "wc")
READ_SIZES = (1, 5, 48, 200, 1 << 30)
# (writer, block size crossing the inline threshold, events in the block)
SIZE = st.one_of(st.integers(1, INLINE_MAX), st.integers(1, INLINE_MAX), st.integers(INLINE_MAX + 1, 3 * INLINE_MAX))
BLOCK = st.tuples(st.sampled_from(WRITERS), SIZE, st.integers(1, 3))


class SegmentMachine(RuleBasedStateMachine):
    store: SegmentStore  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.segment = f"h{uuid.uuid4().hex[:12]}/s/0"
        assert self.store.create(self.segment)
        self.model = SegmentModel()
        self.blocks: dict[str, list[tuple[int, int, bytes, int]]] = {w: [] for w in WRITERS}  # first, count, data, offset
        self.counter = 0
        self.pending: tuple[str, int, int, bytes] | None = None  # a block claimed by an appender that crashed
        self.old_heads: list[SegmentMeta] = []  # the head record before each append

    def _next_event(self, writer: str) -> int:
        if self.pending is not None and self.pending[0] == writer:
            return self.pending[1] + self.pending[2]
        blocks = self.blocks[writer]
        return blocks[-1][0] + blocks[-1][1] if blocks else 0

    @initialize(blocks=st.lists(BLOCK, min_size=3, max_size=8), tier=st.booleans())
    def start_with_data(self, blocks: list[tuple[str, int, int]], tier: bool) -> None:
        for block in blocks:
            self.append_one(*block)
        if tier:
            self.store.tier(self.segment)

    @rule(blocks=st.lists(BLOCK, min_size=1, max_size=4))
    def append(self, blocks: list[tuple[str, int, int]]) -> None:
        for block in blocks:
            self.append_one(*block)

    def append_one(self, writer: str, size: int, count: int) -> None:
        if self.pending is not None and self.pending[0] == writer:
            self.retry_crashed()  # a writer retries its crashed block before it sends the next one
        self.counter += 1
        data = payload(f"{writer}-{self.counter}", size)
        first = self._next_event(writer)
        self.old_heads.append(SegmentMeta.get(self.segment, META_KEY, consistent_read=True))
        r = self.store.append(self.segment, writer, first, count, data)
        if self.pending is not None:  # this append first completed the crashed claim at the tail
            self._commit_pending()
        assert not r.duplicate and r.offset == self.model.length
        self.model.append(data)
        assert r.length == self.model.length
        self.blocks[writer].append((first, count, data, r.offset))

    def _commit_pending(self) -> None:
        writer, first, count, data = self.pending
        self.pending = None
        self.blocks[writer].append((first, count, data, self.model.append(data)))

    @precondition(lambda self: self.pending is None)
    @rule(block=BLOCK)
    def crash_append(self, block: tuple[str, int, int]) -> None:
        """The appender dies after its claim, before advancing the head record."""
        writer, size, count = block
        self.counter += 1
        data = payload(f"{writer}-{self.counter}-crashed", size)
        first = self._next_event(writer)
        original = SegmentStore._advance

        def advance(*args, **kwargs):
            raise SimulatedCrash("after the claim")

        SegmentStore._advance = advance
        try:
            with pytest.raises(SimulatedCrash):
                self.store.append(self.segment, writer, first, count, data)
        finally:
            SegmentStore._advance = original
        self.pending = (writer, first, count, data)

    @precondition(lambda self: self.pending is None and self.old_heads)
    @rule(pick=st.integers(0, 100), size=SIZE)
    def stale_append(self, pick: int, size: int) -> None:
        """A new writer appends from an old head record. Its claim lands on a key that tiering or
        truncation freed, or it helps and claims again until it commits at the tail; it dies before it
        removes a misplaced claim, which must stay invisible."""
        old = self.old_heads[pick % len(self.old_heads)]
        self.counter += 1
        writer, data = f"ws{self.counter}", payload(f"stale-{self.counter}", size)
        stale = _OldHeadStore(self.store, old)
        original = SegmentStore._release_claim

        def release(*args):
            raise SimulatedCrash("before removing the misplaced claim")

        SegmentStore._release_claim = release
        try:
            r = stale.append(self.segment, writer, 0, 1, data)
        except SimulatedCrash:
            r = None
        finally:
            SegmentStore._release_claim = original
        if r is not None:
            assert r.offset == self.model.append(data)
        if self.model.start <= old.length < self.model.length:  # where its claim may have landed
            assert self.store.read(self.segment, old.length).data == self.model.expected(old.length, 1 << 30)

    @precondition(lambda self: self.pending is not None)
    @rule()
    def retry_crashed(self) -> None:
        writer, first, count, data = self.pending
        r = self.store.append(self.segment, writer, first, count, data)
        # The crashed request made the claim, so the retry that completes it reports a duplicate.
        assert r.offset == self.model.length and r.duplicate
        self._commit_pending()
        assert r.length == self.model.length

    @rule(k=st.integers(1, 12))
    def crash_tier(self, k: int) -> None:
        """tier() dies before its k-th write (or completes, if it makes fewer)."""
        with inject_crash(k):
            try:
                self.store.tier(self.segment)
            except SimulatedCrash:
                pass

    @precondition(lambda self: any(self.blocks.values()))
    @rule(pick=st.integers(0, 2))
    def resend_last(self, pick: int) -> None:
        writers = [w for w in WRITERS if self.blocks[w]]
        writer = writers[pick % len(writers)]
        first, count, data, offset = self.blocks[writer][-1]
        r = self.store.append(self.segment, writer, first, count, data)
        assert r.duplicate and r.offset == offset and r.length == self.model.length

    @precondition(lambda self: any(len(b) > 1 for b in self.blocks.values()))
    @rule(pick=st.integers(0, 100))
    def resend_older(self, pick: int) -> None:
        writers = [w for w in WRITERS if len(self.blocks[w]) > 1]
        writer = writers[pick % len(writers)]
        first, count, data, offset = self.blocks[writer][pick % (len(self.blocks[writer]) - 1)]
        r = self.store.append(self.segment, writer, first, count, data)
        # Its original offset while its index entry is recent; None once tiering folded it into a chunk.
        assert r.duplicate and r.offset in (offset, None) and r.length == self.model.length

    @rule()
    def tier(self) -> None:
        self.store.tier(self.segment)

    def _block_offsets(self) -> list[int]:
        return sorted({o for blocks in self.blocks.values() for *_, o in blocks} | {self.model.length})

    @precondition(lambda self: self.model.length > 0)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.sampled_from(self._block_offsets()), label="offset")
        self.store.truncate(self.segment, offset)  # backwards is a no-op
        self.model.truncate(offset)

    @rule(data=st.data(), size=st.sampled_from(READ_SIZES))
    def read(self, data: st.DataObject, size: int) -> None:
        offsets = self._block_offsets()
        offset = data.draw(st.one_of(st.sampled_from(offsets), st.sampled_from([o + 1 for o in offsets]),
                                     st.integers(0, self.model.length)), label="offset")
        offset = min(offset, self.model.length)
        if offset < self.model.start:
            with pytest.raises(Truncated):
                self.store.read(self.segment, offset, size)
            return
        r = self.store.read(self.segment, offset, size)
        assert r.data == self.model.expected(offset, size)
        assert (r.start_offset, r.length) == (self.model.start, self.model.length)

    @invariant()
    def head_matches(self) -> None:
        info = self.store.info(self.segment)
        assert (info.start_offset, info.length) == (self.model.start, self.model.length)

    def teardown(self) -> None:
        r = self.store.read(self.segment, self.model.start)
        assert r.data == bytes(self.model.data[self.model.start:])
        self.store.delete(self.segment)


class _OldHeadStore(SegmentStore):
    """A store whose first head-record read returns an old copy (an appender that read it long ago)."""

    def __init__(self, store: SegmentStore, old_head: SegmentMeta) -> None:
        super().__init__(store.deployment, store.settings)
        self._old_head: SegmentMeta | None = old_head

    def _meta(self, segment: str) -> SegmentMeta:
        old, self._old_head = self._old_head, None
        return old if old is not None else super()._meta(segment)


def test_segment_store_matches_a_bytearray_model(deployment):
    models.bind(deployment)
    SegmentMachine.store = SegmentStore(deployment, StoreSettings(
        inline_max=INLINE_MAX, chunk_target=120, tier_min_age_ms=0))
    run_state_machine_as_test(SegmentMachine, settings=settings(
        max_examples=25, stateful_step_count=12, deadline=None, derandomize=True, database=None,
        # No shrinking: against moto it can take minutes; the failing sequence is printed unshrunk.
        phases=(Phase.explicit, Phase.generate),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
