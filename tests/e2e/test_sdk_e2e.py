"""The SDK against the standalone stack over HTTP: scopes, streams, queries and typed errors."""

from __future__ import annotations

import pytest

import rillet
from rillet import (
    IllegalState,
    InvalidArgument,
    RetentionPolicy,
    ScalingPolicy,
    ScopeNotEmpty,
    ScopeNotFound,
    StreamConfiguration,
    StreamNotFound,
    StreamState,
)
from rillet.keyspace import covers_exactly, hash_routing_key


def test_scope_lifecycle(manager, unique):
    assert manager.create_scope(unique) is True
    assert manager.create_scope(unique) is False
    assert manager.check_scope_exists(unique)
    assert unique in [s.scope for s in manager.list_scopes()]
    assert manager.delete_scope(unique) is True
    assert manager.delete_scope(unique) is False
    assert not manager.check_scope_exists(unique)
    assert unique not in [s.scope for s in manager.list_scopes()]


def test_stream_lifecycle(manager, unique):
    m, scope = manager, unique
    m.create_scope(scope)
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3), tags=frozenset({"red", "blue"}))
    assert m.create_stream(scope, "s1", config) is True
    assert m.create_stream(scope, "s1", config) is False
    assert m.create_stream(scope, "s2", StreamConfiguration(tags=frozenset({"blue"}))) is True

    assert sorted(m.list_streams(scope)) == ["s1", "s2"]
    assert list(m.list_streams(scope, tag="red")) == ["s1"]
    assert sorted(m.list_streams(scope, tag="blue")) == ["s1", "s2"]
    assert list(m.list_streams(scope, tag="green")) == []
    assert m.get_stream_tags(scope, "s1") == {"red", "blue"}
    assert m.check_stream_exists(scope, "s1")

    info = m.get_stream_info(scope, "s1")
    assert (info.scope, info.stream, info.state, info.current_epoch) == (scope, "s1", StreamState.ACTIVE, 0)
    assert info.configuration == config
    assert [s.segment_id for s in info.current_segments] == [0, 1, 2]
    assert covers_exactly([s.key_range for s in info.current_segments], 0.0, 1.0)
    assert [(p.segment, p.offset) for p in info.head] == [(s, 0) for s in info.current_segments]
    assert [(p.segment, p.offset) for p in info.tail] == [(s, 0) for s in info.current_segments]

    # Segment queries through the controller client.
    c = m.controller
    assert c.current_segments(scope, "s1") == info.current_segments
    assert c.segments_at(scope, "s1", 0) == info.current_segments
    assert c.head(scope, "s1") == info.head
    for key in ("alpha", "beta", "gamma", "delta"):
        segment = c.segment_for_key(scope, "s1", key)
        assert segment in info.current_segments
        assert segment.low <= hash_routing_key(key) < segment.high
    assert c.successors(scope, "s1", 0) == []
    assert c.predecessors(scope, "s1", 2) == []

    # Update: the configuration and the tag index change together.
    new = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3), tags=frozenset({"green"}),
                              retention_policy=RetentionPolicy.by_size(1024, 4096))
    assert m.update_stream(scope, "s1", new) == StreamState.ACTIVE
    assert m.get_stream_info(scope, "s1").configuration == new
    assert list(m.list_streams(scope, tag="green")) == ["s1"]
    assert list(m.list_streams(scope, tag="red")) == []

    # The state barrier, over the wire.
    with pytest.raises(IllegalState):
        m.delete_stream(scope, "s1")  # not sealed
    assert m.seal_stream(scope, "s1") == StreamState.SEALED
    assert m.seal_stream(scope, "s1") == StreamState.SEALED  # idempotent
    with pytest.raises(IllegalState):
        m.update_stream(scope, "s1", config)
    assert m.get_stream_info(scope, "s1").state == StreamState.SEALED
    assert m.delete_stream(scope, "s1") is True
    assert not m.check_stream_exists(scope, "s1")
    with pytest.raises(StreamNotFound):
        m.get_stream_info(scope, "s1")

    with pytest.raises(ScopeNotEmpty):
        m.delete_scope(scope)  # s2 is still there
    m.seal_stream(scope, "s2")
    m.delete_stream(scope, "s2")
    assert list(m.list_streams(scope)) == []
    assert m.delete_scope(scope) is True


def test_invalid_names_are_rejected_before_sending(manager, unique, stack):
    manager.create_scope(unique)
    before = dict(stack.invocations.invocations)
    for bad in ("_internal", "has space", "", "x" * 251, "ünï"):
        with pytest.raises(InvalidArgument):
            manager.create_stream(unique, bad)
    with pytest.raises(InvalidArgument):
        manager.create_scope("bad scope")
    with pytest.raises(InvalidArgument):
        manager.list_streams("bad scope")
    assert stack.invocations.invocations == before  # no request reached the controller


def test_the_server_validates_names_too(manager, unique):
    """A client that skips the SDK's checks is refused by the server with the same typed error."""
    manager.create_scope(unique)
    with pytest.raises(InvalidArgument):
        manager.controller.create_stream(unique, "_internal", StreamConfiguration())
    assert list(manager.list_streams(unique)) == []


def test_typed_not_found_errors_over_the_wire(manager, unique):
    with pytest.raises(ScopeNotFound):
        manager.create_stream(unique, "s", StreamConfiguration())
    with pytest.raises(ScopeNotFound):
        list(manager.list_streams(unique))
    manager.create_scope(unique)
    with pytest.raises(StreamNotFound) as raised:
        manager.get_stream_info(unique, "missing")
    assert raised.value.status == 404 and "missing" in raised.value.message
    with pytest.raises(StreamNotFound):
        manager.seal_stream(unique, "missing")
    assert not manager.check_stream_exists(unique, "missing")


def test_the_sdk_is_importable_as_documented():
    assert rillet.StreamManager is not None
    assert rillet.segment_id(1, 2) == (1 << 32) | 2


def test_change_stream_configuration_changes_only_what_it_names(manager, unique):
    """Issue 30: a partial change keeps what it does not name (update_stream replaces everything)."""
    manager.create_scope(unique)
    retention = rillet.RetentionPolicy.by_time(7 * 86_400_000)
    manager.create_stream(unique, "s", StreamConfiguration(retention_policy=retention, tags=frozenset({"a"}),
                                                           scaling_policy=ScalingPolicy.by_event_rate(100, 2, 1)))
    info = manager.change_stream_configuration(unique, "s", rillet.StreamConfigurationChange(add_tags={"b"}))
    assert info.configuration.tags == {"a", "b"}
    assert info.configuration.retention_policy == retention
    assert info.configuration.scaling_policy == ScalingPolicy.by_event_rate(100, 2, 1)
    removed = manager.change_stream_configuration(unique, "s", rillet.StreamConfigurationChange(retention_policy=None))
    assert removed.configuration.retention_policy is None and removed.configuration.tags == {"a", "b"}
    assert manager.get_stream_info(unique, "s").configuration == removed.configuration
