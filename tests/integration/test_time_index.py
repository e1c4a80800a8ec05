"""dataplane.time_index: how far a segment's index proves its bytes were appended before a time,
with block times exact and after tiering packed blocks into chunks."""

from __future__ import annotations

import time

from dataplane_model import payload

from dataplane import models
from dataplane.segment_store import SegmentStore, StoreSettings
from dataplane.time_index import appended_before


def _moment() -> int:
    """A time after everything appended so far and before everything appended from now on."""
    moment = int(time.time() * 1000) + 1
    while time.time() * 1000 < moment:
        pass
    return moment


def _append(store: SegmentStore, segment: str, first: int, count: int) -> None:
    for number in range(first, first + count):
        store.append(segment, "w", number, 1, payload(f"b{number}", 20))


def test_block_times_give_the_exact_position_and_chunks_an_earlier_one(deployment, unique):
    models.bind(deployment)
    store = SegmentStore(deployment, StoreSettings(inline_max=64, chunk_target=150, tier_min_age_ms=0))
    segment = f"{unique}/s/0"
    store.create(segment)
    _append(store, segment, 0, 3)
    middle = _moment()
    _append(store, segment, 3, 3)

    assert appended_before(segment, 0, 120, middle) == 60  # the first three 20-byte blocks, exactly
    assert appended_before(segment, 0, 120, 0) == 0
    assert appended_before(segment, 0, 120, _moment()) == 120

    assert store.tier(segment) == 120  # one chunk, tiered after `middle`: its blocks' times are gone
    assert appended_before(segment, 0, 120, middle) == 0  # earlier, never later
    after_tiering = _moment()
    _append(store, segment, 6, 2)
    assert appended_before(segment, 0, 160, after_tiering) == 120  # the chunk was tiered before it
    assert appended_before(segment, 60, 160, after_tiering) == 120  # from a truncated start too
