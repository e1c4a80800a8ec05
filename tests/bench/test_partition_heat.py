"""The partition-heat benchmark's recorder and its figures (bench/partition_heat.py, issue 38).

The recorder's judgement of an index write is checked on item images alone, then a small workload of
24 streams (no warm-up round, no Dagster ticks, no readers) is recorded: an append that makes its segment due is
an index write and the appends after it are not, no index key takes most of its index's writes, and
the same writes judged on the schema before issue 38 all meet on its single key.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/ is not an installed package
from bench import partition_heat as heat
from bench.partition_heat import IndexSpec

TIERING = IndexSpec("segments", "tiering", "ts", "ta", frozenset({"k"}))
HEAD = {"pk": {"S": "s/a/0"}, "sk": {"S": "m"}, "k": {"S": "m"}, "n": {"N": "10"}}


def _writes(spec: IndexSpec, old: dict | None, new: dict | None) -> list:
    return heat.HeatMeter._index_writes(spec, old, new, ("pk", "sk"))


def test_an_index_write_is_judged_on_the_old_and_new_item():
    due = {**HEAD, "ts": {"S": "due#3"}, "ta": {"N": "100"}}
    advanced = {**due, "n": {"N": "20"}}  # an append's advance: the index keys stay
    assert _writes(TIERING, HEAD, due) == [("due#3", 1)]  # enters
    assert _writes(TIERING, due, advanced) == []  # a name the index does not project changed
    assert _writes(TIERING.as_before(), due, advanced) == [("due", 1)]  # under ALL it is an index write
    assert _writes(TIERING, due, {**due, "ta": {"N": "200"}}) == [("due#3", 1), ("due#3", 1)]  # key moves: 2
    assert _writes(TIERING, advanced, HEAD) == [("due#3", 1)]  # leaves


@pytest.fixture(scope="module")
def recorded() -> heat.Result:
    return heat.run(streams=24, readers=0, jobs=False, warm_up=False, inline_appends=1, transactions=1, syncs=0)


def _index_writes(counter: Counter, resource: str) -> Counter:
    by_key: Counter = Counter()
    for (_, where, partition), units in counter.items():
        if where == resource:
            by_key[partition] += units
    return by_key


def test_only_the_append_that_makes_a_segment_due_writes_the_tiering_index(recorded):
    tiering = next(r for r in recorded.after if r.endswith("/tiering"))
    assert recorded.heat.index_writes[(heat.BECOMES_DUE, tiering)] == recorded.heat.work[heat.BECOMES_DUE] == 48
    assert recorded.heat.index_writes[(heat.APPEND_INLINE, tiering)] == 0
    assert recorded.heat.index_writes[(heat.APPEND_S3, tiering)] == 0


def test_no_index_key_takes_most_of_its_index_writes(recorded):
    indexes = {resource for (_, resource, _) in recorded.heat.before_writes}
    assert {"tiering", "txn-deadlines", "workflows"} <= {r.split("/")[1] for r in indexes}
    for resource in indexes:
        after = _index_writes(recorded.heat.writes, resource)
        before = _index_writes(recorded.heat.before_writes, resource)
        if sum(after.values()) < 24:
            continue
        assert max(after.values()) <= sum(after.values()) / 4, (resource, after)
        single_keys = heat.BEFORE_ISSUE_38[resource.split("/")[1]]
        if single_keys is not None:  # the retention index had its 16 buckets already
            assert set(before) <= single_keys, (resource, before)
