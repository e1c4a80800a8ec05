"""Exactly once in the segment store across concurrent merge finishers and re-created segment names
(issue 25): each test stages one interleaving with real SegmentStore instances on moto, by running
the other party's steps inside a named step of the first (a wrapped method), so the order is exact."""

from __future__ import annotations

import pytest
from dataplane_model import (
    event_block,
    head,
    index_entries,
    lose_answer,
    parse_events,
    read_all,
    small_store,
)

from dataplane.segment_store import SegmentStore
from rillet.errors import SegmentNotFound


@pytest.fixture
def store(deployment) -> SegmentStore:
    return small_store(deployment)


def _events(store: SegmentStore, seg: str) -> list[bytes]:
    return [event for _, event in parse_events(read_all(store, seg, store.info(seg).start_offset))]


def _pause_at(store: SegmentStore, segment: str, run_then) -> None:
    """Make ``store`` run ``run_then()`` once, just before its first head-record read of ``segment``."""
    real_meta = SegmentStore._meta
    fired: list[bool] = []

    def meta(name: str):
        if name == segment and not fired:
            fired.append(True)
            run_then()
        return real_meta(store, name)

    store._meta = meta  # this instance only


# -- defect 1: a committed transaction's events stored twice ----------------------------------------


def _transaction(store: SegmentStore, name: str, tag: str, count: int) -> list[bytes]:
    store.create(name)
    events = [event_block(f"{tag}{i}", 40 + 30 * i) for i in range(count)]  # inline and object blocks
    for i, block in enumerate(events):
        store.append(name, "txw", i, 1, block)
    return [parse_events(block)[0][1] for block in events]


def test_two_finishers_of_one_batch_store_each_transaction_once(deployment, store, unique):
    """Finisher A reads T1's head record (not merged yet); before A reads the target's head record,
    finisher B merges T1 and then T2, so the target's last merge names T2. A must still see that T1 is
    merged: the target holds T1 once, then T2, and truncating past T1 leaves every read working."""
    target, t1, t2 = f"{unique}/s/0", f"{unique}/txn/1", f"{unique}/txn/2"
    store.create(target)
    base = event_block("base", 50)
    store.append(target, "w", 0, 1, base)
    first, second = _transaction(store, t1, "one", 3), _transaction(store, t2, "two", 2)
    finisher_a, finisher_b = small_store(deployment), small_store(deployment)

    def b_finishes_the_batch() -> None:
        finisher_b.merge(target, t1)
        finisher_b.merge(target, t2)

    _pause_at(finisher_a, target, b_finishes_the_batch)
    at_a = finisher_a.merge(target, t1)
    at_b = finisher_b.merge(target, t1)  # a third call of the batch's first step: only acknowledges
    assert at_a == at_b == len(base)
    assert _events(store, target) == [parse_events(base)[0][1]] + first + second
    assert (head(t1).merged_into, head(t1).merged_offset) == (target, len(base))
    assert sum(1 for e in index_entries(target) if e.source == t1) == 1

    length = store.info(target).length
    store.truncate(target, head(t2).merged_offset)  # past T1: its segment goes
    with pytest.raises(SegmentNotFound):
        store.info(t1)
    assert read_all(store, target, head(t2).merged_offset) == read_all(store, t2)
    assert store.info(target).length == length


def test_a_finisher_that_claimed_before_the_other_merged_leaves_no_claim(deployment, store, unique):
    """A claims the target's tail for T1 with a head record read before B merged T1 and T2: A's claim
    meets B's committed entry or lands at a free tail; either way T1 is stored once and A's claim, if
    any, is gone."""
    target, t1, t2 = f"{unique}/s/0", f"{unique}/txn/1", f"{unique}/txn/2"
    store.create(target)
    first, second = _transaction(store, t1, "one", 2), _transaction(store, t2, "two", 1)
    finisher_a, finisher_b = small_store(deployment), small_store(deployment)
    real_claim = SegmentStore._claim
    fired: list[bool] = []

    def claim_after_b(segment, tail, block):
        if not fired:
            fired.append(True)
            finisher_b.merge(target, t1)
            finisher_b.merge(target, t2)
        return real_claim(finisher_a, segment, tail, block)

    finisher_a._claim = claim_after_b
    assert finisher_a.merge(target, t1) == 0
    assert _events(store, target) == first + second
    assert [e.source for e in index_entries(target)] == [t1, t2]


def test_a_lost_answer_of_the_merge_commit_is_recognised(store, unique):
    """The merge's commit (target advanced, source marked, in one transaction) is applied but its answer
    is lost and the resend refused: the finisher recognises its own commit and answers its offset."""
    target, t1 = f"{unique}/s/0", f"{unique}/txn/1"
    store.create(target)
    first = _transaction(store, t1, "one", 2)
    with lose_answer(3) as seen:  # seal, claim, commit
        at = store.merge(target, t1)
    assert seen[:3] == ["UpdateItem", "PutItem", "TransactWriteItems"]
    assert at == 0 and _events(store, target) == first
    assert [e.source for e in index_entries(target)] == [t1]
    assert store.merge(target, t1) == 0

