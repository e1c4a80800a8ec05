"""Conditional writes under real races: threads released together by a barrier against moto.

The moto server serializes requests, so its conditional writes are atomic as in DynamoDB; what is
tested here is that Rillet's conditions are the right ones.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from controlplane.models import StreamRecord
from rillet.errors import IllegalState, ScopeNotEmpty, ScopeNotFound, StreamNotFound, WriteConflict
from rillet.keyspace import covers_exactly
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState
from rillet.names import segment_name

pytestmark = pytest.mark.usefixtures("fast_botocore_sessions")  # speed only; see tests/conftest.py

N = 8


def run_together(n: int, body) -> list:
    """Run ``body(i, barrier)`` in ``n`` threads; each returns a value or its exception."""
    barrier = threading.Barrier(n, timeout=60)
    results: list = [None] * n

    def target(i: int) -> None:
        try:
            results[i] = body(i, barrier)
        except Exception as e:  # noqa: BLE001 - the outcome is what the test inspects
            results[i] = e

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return results


@pytest.fixture
def scope(controller, unique) -> str:
    controller.streams.create_scope(unique)
    return unique


def test_versioned_update_race_has_exactly_one_winner(controller, scope):
    store = controller.store
    controller.streams.create_stream(scope, "s", StreamConfiguration())
    before = store.get_stream(scope, "s")

    def body(i, barrier):
        record = store.get_stream(scope, "s")  # everybody reads the same version ...
        barrier.wait()  # ... and then they all write at once
        store.update(record, [StreamRecord.state.set(StreamState.UPDATING.value),
                              StreamRecord.workflow.set({"name": "update", "by": i})], "conflict")
        return "won"

    results = run_together(N, body)
    winners = [i for i, r in enumerate(results) if r == "won"]
    assert len(winners) == 1, results
    losers = [r for r in results if r != "won"]
    assert len(losers) == N - 1
    assert all(isinstance(r, WriteConflict) for r in losers), losers
    assert all(r.message == "conflict" for r in losers)
    after = store.get_stream(scope, "s")
    assert after.version == before.version + 1
    assert after.state == StreamState.UPDATING.value
    assert after.workflow == {"name": "update", "by": winners[0]}


def test_concurrent_update_stream_calls_have_one_winner_and_no_lost_update(controller, scope):
    """Different configurations at once: the state barrier lets one through; losers fail typed."""
    tasks = controller.streams
    tasks.create_stream(scope, "s", StreamConfiguration())

    def body(i, barrier):
        barrier.wait()
        tasks.update_stream(scope, "s", StreamConfiguration(tags=frozenset({f"by-{i}"})))
        return i

    results = run_together(N, body)
    winners = [r for r in results if isinstance(r, int)]
    failures = [r for r in results if not isinstance(r, int)]
    assert winners, results
    assert all(isinstance(r, (WriteConflict, IllegalState)) for r in failures), failures
    record = controller.store.get_stream(scope, "s")
    assert record.state == StreamState.ACTIVE.value and record.workflow is None
    # The configuration in force is one that a successful call asked for, and its tag copy agrees.
    tags = tasks.stream_info(scope, "s").configuration.tags
    assert tags in [frozenset({f"by-{i}"}) for i in winners]
    listed_under = {i for i in range(N) if "s" in tasks.list_streams(scope, tag=f"by-{i}")[0]}
    assert {f"by-{i}" for i in listed_under} == set(tags)  # the listing's copy of the tags agrees


def test_concurrent_creates_of_one_stream(controller, scope):
    """Exactly one caller creates the stream (True); every other one is told it exists (False)."""
    tasks = controller.streams
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3))

    def body(i, barrier):
        barrier.wait()
        return tasks.create_stream(scope, "s", config)

    results = run_together(N, body)
    assert Counter(map(repr, results)) == Counter({"True": 1, "False": N - 1}), results
    record = controller.store.get_stream(scope, "s")
    assert record.state == StreamState.ACTIVE.value and record.workflow is None and record.pending is None
    current = tasks.current_segments(scope, "s")
    assert [s.segment_id for s in current] == [0, 1, 2]
    assert covers_exactly([s.key_range for s in current], 0.0, 1.0)
    for s in current:
        assert controller.segments.info(segment_name(scope, "s", s.segment_id)).length == 0


def test_concurrent_creates_of_different_streams_all_succeed(controller, scope):
    tasks = controller.streams

    def body(i, barrier):
        barrier.wait()
        return tasks.create_stream(scope, f"s{i}", StreamConfiguration())

    assert run_together(N, body) == [True] * N
    names, _ = tasks.list_streams(scope)
    assert sorted(names) == sorted(f"s{i}" for i in range(N))


def test_delete_scope_racing_stream_creates_leaves_no_orphan(controller, scope):
    """Either the scope is deleted and no stream was created in it, or the delete failed because a
    stream got in first; never a stream in a scope that no longer exists."""
    tasks, store = controller.streams, controller.store

    def body(i, barrier):
        barrier.wait()
        if i == 0:
            return ("delete", tasks.delete_scope(scope))
        return ("create", tasks.create_stream(scope, f"s{i}", StreamConfiguration()))

    results = run_together(N, body)
    created = [f"s{i}" for i, r in enumerate(results) if r == ("create", True)]
    delete = results[0]
    for i, r in enumerate(results[1:], start=1):  # a losing create fails typed, nothing else
        assert r == ("create", True) or isinstance(r, (IllegalState, ScopeNotFound, WriteConflict)), (i, r)
    if delete == ("delete", True):
        assert created == []
        with pytest.raises(ScopeNotFound):
            store.get_scope(scope)
        assert not store.scope_has_streams(scope)
    else:
        assert isinstance(delete, ScopeNotEmpty), delete
        assert store.get_scope(scope).state == "ACTIVE"
    for name in created:
        assert store.get_stream(scope, name).state == StreamState.ACTIVE.value
    for i in range(1, N):
        if f"s{i}" not in created:
            with pytest.raises(StreamNotFound):
                store.get_stream(scope, f"s{i}")
