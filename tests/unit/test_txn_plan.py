"""Pure parts of the transaction workflow: reference epochs and how a transaction's segments map onto
the segments it commits into, lease checks and the settings read from the environment. No AWS."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from controlplane.transactions import TransactionTasks, TxnSettings
from controlplane.txn_commits import _overlapping, _reference_of, _same_ranges
from rillet.errors import InvalidArgument, LeaseTooLarge
from rillet.keyspace import segment_id
from rillet.models import SegmentRange


def tasks(settings: TxnSettings | None = None) -> TransactionTasks:
    return TransactionTasks(SimpleNamespace(store=None, segments=None), settings)


EPOCH0 = [[segment_id(0, 0), 0.0, 0.5], [segment_id(0, 1), 0.5, 1.0]]
DUPLICATE = [[segment_id(3, 7), 0.0, 0.5], [segment_id(3, 8), 0.5, 1.0]]


def test_an_epoch_made_by_a_scale_is_its_own_reference_and_a_duplicate_names_the_one_it_copies():
    assert _reference_of(SimpleNamespace(epoch=1, reference_epoch=None)) == 1
    assert _reference_of(SimpleNamespace(epoch=3, reference_epoch=0)) == 0


def test_a_transactions_segments_map_onto_the_duplicates_by_key_range():
    assert _same_ranges(EPOCH0, DUPLICATE) == [(segment_id(0, 0), segment_id(3, 7)),
                                               (segment_id(0, 1), segment_id(3, 8))]
    assert _same_ranges(EPOCH0, EPOCH0) == [(segment_id(0, 0),) * 2, (segment_id(0, 1),) * 2]


def test_lease_bounds():
    t = tasks(TxnSettings(min_lease_ms=100, max_lease_ms=1_000))
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
