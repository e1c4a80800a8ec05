"""Deleting a key-value table when finishers run late or twice, in-process on moto: a delete finisher
(a retried request or the sweeper) that resumes after another one finished, and perhaps after the
name was created again, never touches the new table, and a finisher that loses the race is done, not
an error."""

from __future__ import annotations

import pytest

from controlplane.kvt_records import KeyValueTableRecord, tables_pk
from controlplane.kvtables import KeyValueTables
from controlplane.sweeper import Sweeper
from rillet.kvt_models import KeyValueTableConfiguration, TableKey, TableUpdate, UpdateType

CONFIG = KeyValueTableConfiguration(partition_count=2, primary_key_length=1, secondary_key_length=1)


@pytest.fixture
def tables(controller, unique) -> KeyValueTables:
    controller.streams.create_scope(unique)
    return KeyValueTables(controller.store)


def _put(tables: KeyValueTables, scope: str, primary: bytes, secondaries: list[bytes]) -> None:
    tables.update(scope, "t", [TableUpdate(type=UpdateType.PUT, key=TableKey(primary=primary, secondary=s),
                                           value=primary + s) for s in secondaries])


def _values(tables: KeyValueTables, scope: str) -> list[bytes]:
    return [e.value for e in tables.iterate(scope, "t", None, True, 100, None).entries]


def _deleting(tables: KeyValueTables, scope: str) -> KeyValueTableRecord:
    """The record as a delete finisher reads it: DELETING, after the first step of a delete."""
    record = tables._get(scope, "t")
    record.update(actions=[KeyValueTableRecord.state.set("DELETING")])
    return tables._get(scope, "t")


def test_a_late_finisher_leaves_a_table_created_again_alone_even_at_the_same_version(tables, unique):
    tables.create(unique, "t", CONFIG)
    _put(tables, unique, b"a", [b"1", b"2"])
    late = _deleting(tables, unique)  # version 2
    tables.finish_delete(late)
    tables.create(unique, "t", CONFIG)
    _put(tables, unique, b"b", [b"1"])
    tables.seal(unique, "t")  # the new table is at version 2 too: the version alone cannot tell them apart
    tables.finish_delete(late)
    assert tables.info(unique, "t").state.value == "SEALED"
    assert _values(tables, unique) == [b"b1"]


def test_a_second_finisher_of_the_same_delete_is_done_not_an_error(tables, unique):
    tables.create(unique, "t", CONFIG)
    _put(tables, unique, b"a", [b"1"])
    first = _deleting(tables, unique)
    second = tables._get(unique, "t")  # a retried request reads the same DELETING record
    tables.finish_delete(first)
    tables.finish_delete(second)
    assert not list(KeyValueTableRecord.query(tables_pk(unique)))


def test_the_sweeper_finishes_only_the_incarnation_it_found_deleting(controller, tables, unique):
    tables.create(unique, "t", CONFIG)
    _put(tables, unique, b"a", [b"1"])
    tables.delete(unique, "t")
    tables.create(unique, "t", CONFIG)
    _put(tables, unique, b"b", [b"1"])
    found = _deleting(tables, unique)  # as pending_workflows would list it ...
    found.update(actions=[KeyValueTableRecord.state.set("ACTIVE")])  # ... then it turned ACTIVE again
    tables.resume_delete(unique, "t", found.incarnation)
    assert _values(tables, unique) == [b"b1"]
    tables.resume_delete(unique, "t", "an-earlier-incarnation")
    assert _values(tables, unique) == [b"b1"]
    # The incarnation that is DELETING is finished, entries and record.
    tables.delete(unique, "t")  # interrupted after its first step would leave it to the sweeper
    assert not list(KeyValueTableRecord.query(tables_pk(unique)))
    assert all(o.outcome == "completed" for o in Sweeper(controller.streams, grace_ms=0).sweep()
               if o.subject == f"{unique}/t")
