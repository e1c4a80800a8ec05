"""Pure parts of the transaction workflow: the commit plan (merge or roll, and the ids of the segments
a roll creates), lease checks and the settings read from the environment. No AWS: the plan is
computed against a stub of the metadata store."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from controlplane.transactions import TransactionTasks, TxnSettings, _overlapping
from rillet.errors import InvalidArgument, LeaseTooLarge
from rillet.keyspace import segment_epoch, segment_id, segment_number
from rillet.models import SegmentRange


class StubStore:
    def __init__(self, epochs: dict[int, list[list]]) -> None:
        self.epochs = epochs

    def get_epoch(self, scope: str, stream: str, epoch: int):
        return SimpleNamespace(segments=self.epochs[epoch])


def tasks(epochs: dict[int, list[list]], settings: TxnSettings | None = None) -> TransactionTasks:
    streams = SimpleNamespace(store=StubStore(epochs), segments=None)
    return TransactionTasks(streams, settings)


def txn(txn_id: str, epoch: int, segments: list[list]) -> SimpleNamespace:
    return SimpleNamespace(txn_id=txn_id, epoch=epoch, segments=segments)


EPOCH0 = [[segment_id(0, 0), 0.0, 0.5], [segment_id(0, 1), 0.5, 1.0]]
EPOCH1 = [[segment_id(1, 2), 0.0, 0.25], [segment_id(1, 3), 0.25, 0.5], [segment_id(0, 1), 0.5, 1.0]]


def test_transactions_of_the_current_epoch_merge():
    t = tasks({0: EPOCH0})
    record = SimpleNamespace(current_epoch=0, segment_count=2, scope="sc", stream="s")
    plan, allocated = t._plan(record, [txn("a", 0, EPOCH0), txn("b", 0, EPOCH0)])
    assert plan == [{"txn": "a", "mode": "merge"}, {"txn": "b", "mode": "merge"}]
    assert allocated == 0


def test_a_transaction_of_an_older_epoch_rolls_into_two_new_epochs():
    t = tasks({0: EPOCH0, 1: EPOCH1})
    record = SimpleNamespace(current_epoch=1, segment_count=4, scope="sc", stream="s")
    plan, allocated = t._plan(record, [txn("old", 0, EPOCH0)])
    (step,) = plan
    assert (step["mode"], step["previous"], step["rolled_epoch"], step["epoch"]) == ("roll", 1, 2, 3)
    # the rolled segments: the transaction's key ranges, numbered on from the stream's count, each
    # remembering the transaction segment's parent
    assert step["rolled"] == [[segment_id(2, 4), 0.0, 0.5, segment_id(0, 0)],
                              [segment_id(2, 5), 0.5, 1.0, segment_id(0, 1)]]
    # the duplicates: the current epoch's key ranges again
    assert step["duplicates"] == [[segment_id(3, 6), 0.0, 0.25], [segment_id(3, 7), 0.25, 0.5],
                                  [segment_id(3, 8), 0.5, 1.0]]
    assert allocated == 5
    ids = [s[0] for s in step["rolled"]] + [s[0] for s in step["duplicates"]]
    assert len(set(ids)) == len(ids)
    assert [segment_epoch(i) for i in ids] == [2, 2, 3, 3, 3]
    assert [segment_number(i) for i in ids] == [4, 5, 6, 7, 8]


def test_after_a_roll_every_later_transaction_of_the_plan_rolls_too():
    """The first roll moves the epoch on, so a transaction of the (old) current epoch rolls as well,
    on top of the first roll's duplicates; a transaction's segments never merge into sealed parents."""
    t = tasks({0: EPOCH0, 1: EPOCH1})
    record = SimpleNamespace(current_epoch=1, segment_count=4, scope="sc", stream="s")
    plan, allocated = t._plan(record, [txn("old", 0, EPOCH0), txn("new", 1, EPOCH1)])
    first, second = plan
    assert second["mode"] == "roll"
    assert (second["previous"], second["rolled_epoch"], second["epoch"]) == (3, 4, 5)
    assert [s[3] for s in second["rolled"]] == [s[0] for s in EPOCH1]
    assert [s[1:] for s in second["duplicates"]] == [s[1:] for s in first["duplicates"]]
    assert allocated == 5 + 3 + 3
    ids = [s[0] for step in plan for s in step["rolled"] + step["duplicates"]]
    assert len(set(ids)) == len(ids)


def test_lease_bounds():
    t = tasks({}, TxnSettings(min_lease_ms=100, max_lease_ms=1_000))
    assert t._check_lease(100) == 100 and t._check_lease(1_000) == 1_000
    with pytest.raises(LeaseTooLarge) as e:
        t._check_lease(1_001)
    assert e.value.code == "LeaseTooLarge" and e.value.details == {"max_lease_ms": 1_000}
    assert isinstance(e.value, InvalidArgument)  # a 4xx caller mistake
    with pytest.raises(InvalidArgument) as e:
        t._check_lease(99)
    assert e.value.code == "InvalidArgument"


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("RILLET_TXN_MAX_LEASE_MS", "5000")
    monkeypatch.setenv("RILLET_TXN_MAX_EXECUTION_MS", "60000")
    monkeypatch.setenv("RILLET_TXN_UNKNOWN", "1")
    settings = TxnSettings.from_env()
    assert (settings.max_lease_ms, settings.max_execution_ms) == (5_000, 60_000)
    assert settings.min_lease_ms == TxnSettings().min_lease_ms


def test_overlapping():
    a = SegmentRange(segment_id=1, low=0.0, high=0.5)
    others = [SegmentRange(segment_id=2, low=0.0, high=0.25), SegmentRange(segment_id=3, low=0.25, high=0.5),
              SegmentRange(segment_id=4, low=0.5, high=1.0)]
    assert _overlapping(a, others) == [2, 3]
    assert _overlapping(others[2], [a]) == []  # touching ends do not overlap
