"""Stream workflows and segment queries on moto: create, list, update, seal, delete, info, queries."""

from __future__ import annotations

import pytest

from controlplane.models import SegmentRecord
from controlplane.streams import now_ms
from rillet.errors import (
    IllegalState,
    InvalidArgument,
    ScopeNotFound,
    SegmentNotFound,
    StreamNotFound,
)
from rillet.framing import frame
from rillet.keyspace import KeyRange, covers_exactly, hash_routing_key, segment_id
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration, StreamState
from rillet.names import segment_name

pytestmark = pytest.mark.usefixtures("fast_botocore_sessions")  # speed only; see tests/conftest.py


@pytest.fixture
def scope(controller, unique) -> str:
    controller.streams.create_scope(unique)
    return unique


def fixed(n: int, tags=()) -> StreamConfiguration:
    return StreamConfiguration(scaling_policy=ScalingPolicy.fixed(n), tags=frozenset(tags))


def all_streams(tasks, scope, tag=None, limit=100) -> list[str]:
    names, token = [], None
    while True:
        page, token = tasks.list_streams(scope, tag=tag, limit=limit, token=token)
        names += page
        if not token:
            return sorted(names)


def pending_for(store, scope, stream):
    return [i for i in store.pending_workflows(now_ms())
            if getattr(i, "scope", None) == scope and getattr(i, "stream", None) == stream]


# -- create -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 7])
def test_create_makes_the_minimum_number_of_segments_tiling_the_key_space(controller, scope, n):
    tasks = controller.streams
    before = now_ms()
    assert tasks.create_stream(scope, "s", fixed(n)) is True
    record = controller.store.get_stream(scope, "s")
    assert record.state == StreamState.ACTIVE.value
    assert record.current_epoch == 0 and record.segment_count == n
    assert record.workflow is None and record.pending is None
    assert pending_for(controller.store, scope, "s") == []
    assert before <= record.created_ms <= now_ms()

    current = tasks.current_segments(scope, "s")
    assert [s.segment_id for s in current] == [segment_id(0, i) for i in range(n)] == list(range(n))
    assert covers_exactly([s.key_range for s in current], 0.0, 1.0)
    assert current[0].low == 0.0 and current[-1].high == 1.0
    for s in current:
        assert s.epoch == 0
        info = controller.segments.info(segment_name(scope, "s", s.segment_id))
        assert (info.length, info.sealed) == (0, False)
    # The segment records agree with the epoch record.
    records = controller.store.list_segments(scope, "s")
    assert sorted((r.segment_id, r.low, r.high) for r in records) == [(s.segment_id, s.low, s.high) for s in current]


def test_rate_policies_start_with_their_minimum(controller, scope):
    config = StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(100, 2, 4))
    controller.streams.create_stream(scope, "s", config)
    assert len(controller.streams.current_segments(scope, "s")) == 4


def test_create_is_idempotent(controller, scope):
    tasks = controller.streams
    assert tasks.create_stream(scope, "s", fixed(2, {"a"})) is True
    assert tasks.create_stream(scope, "s", fixed(2, {"a"})) is False
    # A second create with another configuration changes nothing either (Pravega: it returns false).
    assert tasks.create_stream(scope, "s", fixed(5, {"b"})) is False
    info = tasks.stream_info(scope, "s")
    assert info.configuration == fixed(2, {"a"})
    assert len(info.current_segments) == 2


def test_a_late_create_finisher_leaves_segment_records_a_scale_changed_alone(controller, scope):
    """A create request that read the stream while CREATING and resumes after the sweeper finished the
    create and a scale sealed segment 0 must not write segment 0's record back to its first form."""
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(2))
    read_while_creating = controller.store.get_stream(scope, "s")
    tasks.scale_stream(scope, "s", [0], [(0.0, 0.25), (0.25, 0.5)])
    tasks.finish_create_stream(read_while_creating)  # finds the create finished (its last step is a no-op)
    (sealed,) = controller.store.get_segments(scope, "s", [0])
    assert sealed.sealed_size == 0 and len(sealed.successors) == 2
    assert [s.segment.segment_id for s in tasks.successors(scope, "s", 0)] == list(sealed.successors)
    assert controller.segments.info(segment_name(scope, "s", 0)).sealed


def test_a_segment_record_left_by_an_older_incarnation_of_the_name_is_replaced(controller, scope):
    """A late finisher may have left items in the partition of a stream since deleted: the stream
    created anew under that name gets its own segment records."""
    leftover = SegmentRecord(segment_id=0, low=0.0, high=0.5, created_ms=1, successors=[7])
    controller.store.add_segments(scope, "t", [leftover])
    controller.streams.create_stream(scope, "t", fixed(4))
    (record,) = controller.store.get_segments(scope, "t", [0])
    assert (record.high, list(record.successors)) == (0.25, [])


def test_create_validates_names(controller, scope):
    with pytest.raises(InvalidArgument):
        controller.streams.create_stream(scope, "_internal", fixed(1))
    with pytest.raises(InvalidArgument):
        controller.streams.create_stream(scope, "s" * 251, fixed(1))
    assert controller.streams.create_stream(scope, "s" * 250, fixed(1)) is True


@pytest.mark.parametrize("name", ["a..b", ".."])
def test_a_valid_stream_name_never_leaves_a_stuck_stream(controller, scope, name):
    """Dots are legal in stream names (Pravega: [A-Za-z0-9.-]+), so a create must either work or be
    refused up front; it must not leave a CREATING record that no retry or sweeper can finish."""
    tasks = controller.streams
    try:
        created = tasks.create_stream(scope, name, fixed(2))
    except InvalidArgument:
        with pytest.raises(StreamNotFound):
            controller.store.get_stream(scope, name)
        assert pending_for(controller.store, scope, name) == []
        return
    assert created is True
    assert controller.store.get_stream(scope, name).state == StreamState.ACTIVE.value


# -- listing ----------------------------------------------------------------------------------------


def test_list_streams_and_filter_by_tag(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "a", fixed(1, {"x", "y"}))
    tasks.create_stream(scope, "b", fixed(1, {"y"}))
    tasks.create_stream(scope, "c", fixed(1))
    assert all_streams(tasks, scope) == ["a", "b", "c"]
    assert all_streams(tasks, scope, tag="x") == ["a"]
    assert all_streams(tasks, scope, tag="y") == ["a", "b"]
    assert all_streams(tasks, scope, tag="nope") == []
    # Small pages: the tag filter and paging together still find every match exactly once.
    assert all_streams(tasks, scope, tag="y", limit=1) == ["a", "b"]
    assert all_streams(tasks, scope, limit=1) == ["a", "b", "c"]


def test_listing_is_per_scope(controller, scope, unique):
    other = unique + "-other"
    controller.streams.create_scope(other)
    controller.streams.create_stream(scope, "mine", fixed(1))
    controller.streams.create_stream(other, "theirs", fixed(1))
    assert all_streams(controller.streams, scope) == ["mine"]
    assert all_streams(controller.streams, other) == ["theirs"]


# -- update -----------------------------------------------------------------------------------------


def test_update_replaces_configuration_and_tags(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(2, {"old", "keep"}))
    new = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2), tags=frozenset({"new", "keep"}),
                              retention_policy=RetentionPolicy.by_size(1000, 5000))
    tasks.update_stream(scope, "s", new)
    record = controller.store.get_stream(scope, "s")
    assert record.state == StreamState.ACTIVE.value
    assert record.workflow is None and pending_for(controller.store, scope, "s") == []
    assert tasks.stream_info(scope, "s").configuration == new
    assert all_streams(tasks, scope, tag="old") == []
    assert all_streams(tasks, scope, tag="new") == ["s"]
    assert all_streams(tasks, scope, tag="keep") == ["s"]

    tasks.update_stream(scope, "s", fixed(2))  # no tags at all
    assert tasks.stream_info(scope, "s").configuration.tags == frozenset()
    assert all_streams(tasks, scope, tag="keep") == []


def test_update_missing_stream(controller, scope):
    with pytest.raises(StreamNotFound):
        controller.streams.update_stream(scope, "nope", fixed(1))


def test_update_on_a_sealed_stream_is_illegal(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(1, {"a"}))
    tasks.seal_stream(scope, "s")
    with pytest.raises(IllegalState):
        tasks.update_stream(scope, "s", fixed(1, {"b"}))
    record = controller.store.get_stream(scope, "s")
    assert record.state == StreamState.SEALED.value
    assert tasks.stream_info(scope, "s").configuration.tags == {"a"}


# -- seal -------------------------------------------------------------------------------------------


def _fill(controller, scope, stream, sizes: dict[int, list[int]]) -> dict[int, int]:
    """Append events of the given payload sizes to segments; returns each segment's length."""
    lengths = {}
    for sid, payloads in sizes.items():
        name = segment_name(scope, stream, sid)
        for i, size in enumerate(payloads):
            controller.segments.append(name, "w", i, 1, frame(bytes([i % 251]) * size))
        lengths[sid] = controller.segments.info(name).length
    return lengths


def test_seal_records_sealed_sizes_and_seals_the_data_plane(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(3))
    lengths = _fill(controller, scope, "s", {0: [10, 20], 1: [5000], 2: []})  # 5000 bytes go to S3
    assert lengths == {0: 38, 1: 5004, 2: 0}
    tasks.seal_stream(scope, "s")
    record = controller.store.get_stream(scope, "s")
    assert record.state == StreamState.SEALED.value
    assert record.workflow is None and pending_for(controller.store, scope, "s") == []
    for segment in controller.store.list_segments(scope, "s"):
        assert segment.sealed_size == lengths[segment.segment_id]
        assert segment.sealed_epoch == 0
        assert controller.segments.info(segment_name(scope, "s", segment.segment_id)).sealed
    tasks.seal_stream(scope, "s")  # sealing again is a no-op
    assert controller.store.get_stream(scope, "s").version == record.version


def test_seal_missing_stream(controller, scope):
    with pytest.raises(StreamNotFound):
        controller.streams.seal_stream(scope, "nope")


# -- delete -----------------------------------------------------------------------------------------


def test_delete_requires_a_sealed_stream(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(2))
    with pytest.raises(IllegalState):
        tasks.delete_stream(scope, "s")
    assert controller.store.get_stream(scope, "s").state == StreamState.ACTIVE.value
    assert not controller.segments.info(segment_name(scope, "s", 0)).sealed  # untouched


def test_delete_removes_metadata_and_data(controller, scope, deployment):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(2))
    _fill(controller, scope, "s", {0: [10, 5000], 1: [7]})
    prefix = f"segments/{scope}/s/"
    assert deployment.s3.list_objects_v2(Bucket=deployment.bucket, Prefix=prefix).get("KeyCount", 0) > 0
    tasks.seal_stream(scope, "s")
    tasks.delete_stream(scope, "s")
    with pytest.raises(StreamNotFound):
        controller.store.get_stream(scope, "s")
    assert controller.store.list_segments(scope, "s") == []
    assert controller.store.list_epochs(scope, "s") == []
    for sid in (0, 1):
        with pytest.raises(SegmentNotFound):
            controller.segments.info(segment_name(scope, "s", sid))
    assert deployment.s3.list_objects_v2(Bucket=deployment.bucket, Prefix=prefix).get("KeyCount", 0) == 0
    assert all_streams(tasks, scope) == []
    with pytest.raises(StreamNotFound):
        tasks.delete_stream(scope, "s")
    # The name can be used again, from scratch.
    assert tasks.create_stream(scope, "s", fixed(1)) is True
    assert controller.segments.info(segment_name(scope, "s", 0)).length == 0


# -- info and queries -------------------------------------------------------------------------------


def test_a_late_delete_finisher_leaves_the_stream_created_again_under_the_name_alone(controller, scope):
    """A delete request that read the sealed stream resumes after another finisher deleted it and the
    name was created again: it must not seal, empty or delete the new stream."""
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(2))
    tasks.seal_stream(scope, "s")
    read_while_deleting = controller.store.get_stream(scope, "s")
    tasks.delete_stream(scope, "s")
    tasks.create_stream(scope, "s", fixed(2))
    lengths = _fill(controller, scope, "s", {0: [10], 1: [20]})
    tasks.finish_delete_stream(read_while_deleting)
    assert controller.store.get_stream(scope, "s").state == StreamState.ACTIVE.value
    assert len(controller.store.get_segments(scope, "s", [0, 1])) == 2
    for sid, length in lengths.items():
        info = controller.segments.info(segment_name(scope, "s", sid))
        assert (info.length, info.sealed) == (length, False)


def _new_incarnation_after(controller, scope, late_record):
    """Seal, delete and create the stream again, then fill it: what a late finisher holding
    ``late_record`` finds when it resumes."""
    tasks = controller.streams
    tasks.seal_stream(scope, "s")
    tasks.delete_stream(scope, "s")
    tasks.create_stream(scope, "s", fixed(1))
    return _fill(controller, scope, "s", {0: [10, 20]})


def _intact(controller, scope, lengths):
    assert controller.store.get_stream(scope, "s").state == StreamState.ACTIVE.value
    for sid, length in lengths.items():
        info = controller.segments.info(segment_name(scope, "s", sid))
        assert (info.start_offset, info.length, info.sealed) == (0, length, False)


def test_a_late_truncation_finisher_leaves_the_stream_created_again_alone(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(1))
    _fill(controller, scope, "s", {0: [10, 20]})
    tasks.truncate_stream(scope, "s", {0: 14})
    done = controller.store.get_stream(scope, "s")
    late = controller.store.get_stream(scope, "s")  # as read while the truncation was in flight
    late.state, late.workflow = StreamState.TRUNCATING.value, {"name": "truncate"}
    assert done.state == StreamState.ACTIVE.value
    lengths = _new_incarnation_after(controller, scope, late)
    tasks.finish_truncate_stream(late)
    _intact(controller, scope, lengths)


def test_late_scale_and_seal_finishers_leave_the_stream_created_again_alone(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(1))
    late_scale = controller.store.get_stream(scope, "s")
    tasks.scale_stream(scope, "s", [0], [(0.0, 0.5), (0.5, 1.0)])
    scaled = controller.store.get_stream(scope, "s")
    late_scale.state, late_scale.workflow = StreamState.SCALING.value, {
        "name": "scale", "epoch": 1, "created_ms": scaled.created_ms + 1, "seal": [0],
        "new": [s.segment_id for s in tasks.current_segments(scope, "s")], "ranges": [[0.0, 0.5], [0.5, 1.0]]}
    late_seal = controller.store.get_stream(scope, "s")
    late_seal.state, late_seal.workflow = StreamState.SEALING.value, {"name": "seal"}
    lengths = _new_incarnation_after(controller, scope, late_scale)
    tasks.finish_scale_stream(late_scale)
    tasks.finish_seal_stream(late_seal)
    _intact(controller, scope, lengths)
    (segment,) = controller.store.get_segments(scope, "s", [0])
    assert list(segment.successors) == [] and controller.store.get_stream(scope, "s").current_epoch == 0


def test_stream_info(controller, scope):
    tasks = controller.streams
    config = fixed(3, {"t"})
    tasks.create_stream(scope, "s", config)
    lengths = _fill(controller, scope, "s", {0: [3], 2: [4, 5]})
    info = tasks.stream_info(scope, "s")
    assert (info.scope, info.stream, info.state, info.current_epoch) == (scope, "s", StreamState.ACTIVE, 0)
    assert info.configuration == config
    assert [s.segment_id for s in info.current_segments] == [0, 1, 2]
    assert [(p.segment.segment_id, p.offset) for p in info.head] == [(0, 0), (1, 0), (2, 0)]
    assert [(p.segment.segment_id, p.offset) for p in info.tail] == [(0, lengths[0]), (1, 0), (2, lengths[2])]
    assert lengths[2] == 4 + 4 + 4 + 5


def test_stream_info_missing(controller, scope):
    with pytest.raises(StreamNotFound):
        controller.streams.stream_info(scope, "nope")
    with pytest.raises(StreamNotFound):
        controller.streams.stream_info(scope + "-missing-scope", "nope")


def test_segments_at_time(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(2))
    created = controller.store.get_stream(scope, "s").created_ms
    current = tasks.current_segments(scope, "s")
    assert tasks.segments_at(scope, "s", created) == current
    assert tasks.segments_at(scope, "s", now_ms() + 60_000) == current
    assert tasks.segments_at(scope, "s", 0) == current  # before creation: the first epoch
    with pytest.raises(StreamNotFound):
        tasks.segments_at(scope, "nope", 0)


def test_segment_for_key_agrees_with_hash_routing_key(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(4))
    current = tasks.current_segments(scope, "s")
    seen = set()
    for i in range(40):
        key = f"key-{i}"
        point = hash_routing_key(key)
        segment = tasks.segment_for_key(scope, "s", key)
        assert KeyRange(segment.low, segment.high).contains(point)
        assert [s for s in current if s.low <= point < s.high] == [segment]
        seen.add(segment.segment_id)
    assert seen == {0, 1, 2, 3}  # 40 keys reach every one of 4 segments


def test_successors_and_predecessors_of_epoch_zero_are_empty(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", fixed(2))
    for sid in (0, 1):
        assert tasks.successors(scope, "s", sid) == []
        assert tasks.predecessors(scope, "s", sid) == []
    with pytest.raises(StreamNotFound):
        tasks.successors(scope, "s", segment_id(0, 9))


def test_queries_on_a_missing_scope(controller, unique):
    with pytest.raises(ScopeNotFound):
        controller.streams.list_streams(unique)
    with pytest.raises(StreamNotFound):
        controller.streams.current_segments(unique, "s")


def test_creating_streams_reuses_aws_clients(controller, scope, count_aws_clients):
    """A botocore client costs a session and a service-model load (hundreds of ms of Lambda CPU);
    once warm, a create must reuse the clients it already has instead of building new ones."""
    tasks = controller.streams
    tasks.create_stream(scope, "warm", fixed(1))  # first use builds the clients
    built = count_aws_clients()
    for i in range(3):
        tasks.create_stream(scope, f"s{i}", fixed(1))
    assert built == []
