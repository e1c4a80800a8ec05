"""Scopes on the metadata table (moto): create, list, describe, delete, and the DELETING barrier."""

from __future__ import annotations

import pytest

from controlplane.models import ScopeRecord
from rillet.errors import IllegalState, InvalidArgument, ScopeNotEmpty, ScopeNotFound, StreamNotFound
from rillet.models import StreamConfiguration

pytestmark = pytest.mark.usefixtures("fast_botocore_sessions")  # speed only; see tests/conftest.py


def _all_scopes(tasks, limit=100):
    names, token = [], None
    while True:
        page, token = tasks.list_scopes(limit=limit, token=token)
        names += [s.scope for s in page]
        if not token:
            return names


def test_create_is_idempotent_and_describable(controller, unique):
    tasks = controller.streams
    assert tasks.create_scope(unique) is True
    assert tasks.create_scope(unique) is False
    info = tasks.get_scope(unique)
    assert info.scope == unique
    assert info.created_at_ms > 0
    assert controller.store.get_scope(unique).state == "ACTIVE"


def test_list_scopes_pages_through_all_of_them(controller, unique):
    tasks = controller.streams
    names = [f"{unique}-{i}" for i in range(5)]
    for name in names:
        tasks.create_scope(name)
    listed = _all_scopes(tasks, limit=2)  # several pages, each with a next token
    assert set(names) <= set(listed)
    assert len(listed) == len(set(listed))  # no scope twice across pages


def test_delete_empty_scope(controller, unique):
    tasks = controller.streams
    tasks.create_scope(unique)
    assert tasks.delete_scope(unique) is True
    with pytest.raises(ScopeNotFound):
        tasks.get_scope(unique)
    assert unique not in _all_scopes(tasks)
    assert tasks.delete_scope(unique) is False  # missing -> False, not an error
    assert tasks.create_scope(unique) is True  # the name can be used again


def test_delete_missing_scope_returns_false(controller, unique):
    assert controller.streams.delete_scope(unique) is False


def test_delete_non_empty_scope_fails_and_leaves_it_active(controller, unique):
    tasks = controller.streams
    tasks.create_scope(unique)
    tasks.create_stream(unique, "s1", StreamConfiguration())
    with pytest.raises(ScopeNotEmpty):
        tasks.delete_scope(unique)
    record = controller.store.get_scope(unique)
    assert record.state == "ACTIVE"
    assert record.pending is None and record.pending_since is None  # the attempt left no workflow behind
    # Still usable: streams can be created in it.
    assert tasks.create_stream(unique, "s2", StreamConfiguration()) is True


def test_scope_becomes_deletable_after_its_streams_are_deleted(controller, unique):
    tasks = controller.streams
    tasks.create_scope(unique)
    tasks.create_stream(unique, "s1", StreamConfiguration())
    tasks.seal_stream(unique, "s1")
    tasks.delete_stream(unique, "s1")
    assert tasks.delete_scope(unique) is True


def test_create_stream_in_a_scope_being_deleted_is_illegal(controller, unique):
    tasks, store = controller.streams, controller.store
    tasks.create_scope(unique)
    record = store.get_scope(unique)
    store.update(record, [ScopeRecord.state.set("DELETING")], "test")  # a delete in flight
    with pytest.raises(IllegalState):
        tasks.create_stream(unique, "s1", StreamConfiguration())
    with pytest.raises(StreamNotFound):
        store.get_stream(unique, "s1")  # nothing was written


def test_create_stream_in_a_missing_scope(controller, unique):
    with pytest.raises(ScopeNotFound):
        controller.streams.create_stream(unique, "s1", StreamConfiguration())
    with pytest.raises(ScopeNotFound):
        controller.streams.list_streams(unique)


@pytest.mark.parametrize("name", ["_internal", "a b", "", "x" * 256, "ünï"])
def test_invalid_scope_names(controller, name):
    with pytest.raises(InvalidArgument):
        controller.streams.create_scope(name)
