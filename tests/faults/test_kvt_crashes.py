"""Invariant 6 for key-value tables: a crash before any mutating request of a table workflow leaves a
state that the sweeper, or the same request again, completes.

As in test_workflow_crashes.py: for k = 1, 2, ... the workflow runs with the process "dying" right
before its k-th mutating AWS request; recovery then runs, and the end state must be the uncrashed
one. The loop ends at the first k the workflow survives, so every gap between steps is covered.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from crash import CrashInjector, SimulatedCrash

from controlplane.kvt_records import EntryRecord, KeyValueTableRecord
from controlplane.kvtables import KeyValueTables
from controlplane.service import Controller
from controlplane.streams import now_ms
from controlplane.sweeper import Sweeper
from rillet.errors import IllegalState, KeyValueTableNotFound, ScopeNotEmpty
from rillet.kvt_models import KeyValueTableConfiguration, TableKey, TableUpdate, UpdateType

CONFIG = KeyValueTableConfiguration(partition_count=3, primary_key_length=2, secondary_key_length=1)
TABLE = "kv"


@pytest.fixture
def controller(isolated_deployment) -> Controller:
    return Controller.for_deployment(isolated_deployment("kvtcrash"))


def _fill(tables: KeyValueTables, scope: str) -> None:
    """Entries in every partition, several per primary key."""
    for p in range(12):
        primary = p.to_bytes(2, "big")
        tables.update(scope, TABLE, [TableUpdate(type=UpdateType.PUT, key=TableKey(primary=primary, secondary=bytes([s])),
                                                 value=b"v" * 10) for s in range(3)])


def _entries_left(scope: str) -> int:
    """Entries of every table ever named TABLE in ``scope`` (their keys start alike whatever the incarnation)."""
    return sum(1 for _ in EntryRecord.scan(EntryRecord.pk.startswith(f"kvt#{scope}/{TABLE}/")))


def _pending(c: Controller, scope: str) -> list:
    return [i for i in c.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == scope]


def _run_crashing(c: Controller, crash: CrashInjector, setup: Callable[[str], None], run: Callable[[str], object],
                  recover: Callable[[str], None], done: Callable[[str], None]) -> int:
    """Crash before each mutating request of ``run`` in turn; returns how many requests it needs."""
    for k in range(1, 50):
        scope = "c" + uuid.uuid4().hex[:10]
        c.streams.create_scope(scope)
        setup(scope)
        crash.arm(k)
        try:
            run(scope)
        except SimulatedCrash:
            recover(scope)
            done(scope)
            assert not _pending(c, scope), f"crash at {k}: a workflow was left pending"
            continue
        crash.disarm()
        done(scope)
        return k - 1
    raise AssertionError("the workflow never finished")


@pytest.mark.parametrize("recovery", ["sweeper", "retry"])
def test_delete_survives_a_crash_between_any_two_steps(controller, crash, recovery):
    tables = KeyValueTables(controller.store)

    def setup(scope: str) -> None:
        tables.create(scope, TABLE, CONFIG)
        _fill(tables, scope)

    def recover(scope: str) -> None:
        if recovery == "sweeper":
            Sweeper(controller.streams, grace_ms=0).sweep()
            try:
                untouched = tables.info(scope, TABLE)
            except KeyValueTableNotFound:
                return
            # a crash before the first step: nothing to sweep, the table is whole; the caller retries
            assert untouched.state.value == "ACTIVE" and _entries_left(scope) == 36
            tables.delete(scope, TABLE)
        else:
            assert tables.delete(scope, TABLE) in (True, False)

    def done(scope: str) -> None:
        with pytest.raises(KeyValueTableNotFound):
            tables.info(scope, TABLE)
        assert _entries_left(scope) == 0
        assert controller.streams.delete_scope(scope)  # nothing of the table is left to hold the scope

    steps = _run_crashing(controller, crash, setup, lambda scope: tables.delete(scope, TABLE), recover, done)
    assert steps >= 3  # mark DELETING, delete entries (a batch per partition), delete the record


def test_a_crash_before_create_or_seal_leaves_nothing_half_done(controller, crash):
    tables = KeyValueTables(controller.store)

    def create_done(scope: str) -> None:
        assert tables.info(scope, TABLE).state.value == "ACTIVE"

    steps = _run_crashing(controller, crash, lambda scope: None, lambda scope: tables.create(scope, TABLE, CONFIG),
                          lambda scope: tables.create(scope, TABLE, CONFIG), create_done)
    assert steps == 1

    def seal_done(scope: str) -> None:
        assert tables.info(scope, TABLE).state.value == "SEALED"
        with pytest.raises(IllegalState):
            tables.update(scope, TABLE, [TableUpdate(type=UpdateType.PUT, key=TableKey(primary=b"ab", secondary=b"c"),
                                                     value=b"x")])

    steps = _run_crashing(controller, crash, lambda scope: tables.create(scope, TABLE, CONFIG),
                          lambda scope: tables.seal(scope, TABLE), lambda scope: tables.seal(scope, TABLE), seal_done)
    assert steps == 1


def test_an_atomic_update_is_all_or_nothing_across_a_crash(controller, crash):
    tables = KeyValueTables(controller.store)
    keys = [TableKey(primary=b"pk", secondary=bytes([s])) for s in range(5)]

    def run(scope: str) -> None:
        tables.update(scope, TABLE, [TableUpdate(type=UpdateType.INSERT, key=k, value=b"new") for k in keys],
                      request_id="r-" + scope)

    def done(scope: str) -> None:
        entries = tables.get(scope, TABLE, keys)
        assert all(e is not None and e.value == b"new" for e in entries)

    steps = _run_crashing(controller, crash, lambda scope: tables.create(scope, TABLE, CONFIG), run, run, done)
    assert steps == 1


def test_a_scope_with_a_table_is_not_empty(controller):
    tables = KeyValueTables(controller.store)
    scope = "c" + uuid.uuid4().hex[:10]
    controller.streams.create_scope(scope)
    tables.create(scope, TABLE, CONFIG)
    with pytest.raises(ScopeNotEmpty):
        controller.streams.delete_scope(scope)
    assert controller.store.get_scope(scope).state == "ACTIVE"  # the refused delete put it back
    assert tables.create(scope, "another", CONFIG)  # so tables can still be created in it
    assert tables.delete(scope, TABLE) and tables.delete(scope, "another")
    assert controller.streams.delete_scope(scope)
    assert not any(True for _ in KeyValueTableRecord.query(f"kvts#{scope}"))


def test_a_repeated_update_answers_the_versions_it_stored(controller):
    """After an unknown outcome the SDK repeats an update with its request id: DynamoDB applies it at
    most once (the id is the transaction's token), and the answer names the versions that were stored."""
    tables = KeyValueTables(controller.store)
    scope = "c" + uuid.uuid4().hex[:10]
    controller.streams.create_scope(scope)
    tables.create(scope, TABLE, CONFIG)
    changes = [TableUpdate(type=UpdateType.PUT, key=TableKey(primary=b"pk", secondary=bytes([s])), value=b"v")
               for s in range(3)]
    first = tables.update(scope, TABLE, changes, request_id="retried-1")
    again = tables.update(scope, TABLE, changes, request_id="retried-1")
    assert first == again
    assert [e.version for e in tables.get(scope, TABLE, [c.key for c in changes])] == first
    assert tables.update(scope, TABLE, changes, request_id="another") != first
