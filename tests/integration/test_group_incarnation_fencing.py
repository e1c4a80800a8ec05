"""A reader group's acknowledgements are of the group that made them, never of one created again under
its name (issue 53), through controlplane.reader_groups on the session's moto.

A checkpoint's cuts are published after the state's write, as a request of their own; an operator may
delete the group and create it again in between. The new group starts at the head (nothing read), so
the deleted group's publish, landing late, must not become its acknowledged cut: the next retention
cycle would truncate events the new group's readers have yet to read. The same for a MANUAL group's
application holding an SDK handle of the deleted group, and for a stalled write of the deleted group's
state onto a new group's record that reached the version it read.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from lambda_events import handler_modules, invoke

from controlplane.models import reader_group_pk
from controlplane.reader_groups import groups as groups_module
from controlplane.reader_groups.state import read_record
from controlplane.reader_items import ReaderItemRecord, reader_sk
from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import ReaderGroupNotFound, WriteConflict, from_wire
from rillet.framing import frame
from rillet.models import (
    ReaderGroupConfig,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamDataRetention,
    StreamRange,
)
from rillet.names import segment_name
from rillet.reader_group import ReaderGroup
from rillet.stream_cut import StreamCut

EVENT = frame(b"e" * 96)  # 100 bytes
AUTO = StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT
MANUAL = StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture
def controller(deployment):
    return Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))


def stream_of_ten_events(controller: Controller, scope: str) -> int:
    """A one-segment stream that any subscriber holds (minimum 0 bytes) with 10 events: its segment id."""
    controller.streams.create_scope(scope)
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)
    controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1),
                                                                     retention_policy=policy))
    (segment,) = [s.segment_id for s in controller.streams.current_segments(scope, "s")]
    for number in range(10):
        controller.segments.append(segment_name(scope, "s", segment), "w", number, 1, EVENT)
    return segment


def config(scope: str, retention: StreamDataRetention) -> ReaderGroupConfig:
    return ReaderGroupConfig(streams=[StreamRange(scope=scope, stream="s")], automatic_checkpoint_interval_ms=0,
                             retention_type=retention)


def acknowledged(controller: Controller, scope: str) -> dict[int, int]:
    (subscriber,) = controller.retention.subscribers(scope, "s")
    return {int(sid): int(offset) for sid, _, _, offset in subscriber.cut}


def head(controller: Controller, scope: str) -> dict[int, int]:
    return {p.segment.segment_id: p.offset for p in controller.streams.head(scope, "s")}


def test_a_deleted_groups_late_checkpoint_publish_is_not_the_new_groups_cut(controller, unique):
    segment = stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", config(unique, AUTO))
    groups.add_reader(unique, "g", "r1")
    groups.sync(unique, "g", "r1", SyncRequest())
    groups.initiate_checkpoint(unique, "g", "cp")

    publish, replaced = groups.subscriptions.publish_checkpoint, []

    def recreated_first(*args, **kwargs):
        """The operator deletes the group and creates it again between the state's write and its publish."""
        if not replaced:
            assert groups.delete(unique, "g") is True
            assert groups.create(unique, "g", config(unique, AUTO)) is True
            replaced.append(acknowledged(controller, unique))
        return publish(*args, **kwargs)

    groups.subscriptions.publish_checkpoint = recreated_first
    passed = SyncRequest(positions=[SegmentOffset(stream=f"{unique}/s", segment_id=segment, offset=1000)],
                         checkpoint="cp")
    groups.sync(unique, "g", "r1", passed)
    assert replaced == [{segment: 0}]  # the new group started at the head, and the publish came after

    assert acknowledged(controller, unique) == {segment: 0}
    controller.retention.cycle(unique, "s", now=1_000)
    assert head(controller, unique) == {segment: 0}  # the new group's readers still have all 10 events


def test_a_manual_cut_from_a_handle_of_the_deleted_group_is_refused(controller, deployment, monkeypatch, unique):
    """Through the SDK and the real controller handler, called in process: the handle learnt its group's
    incarnation when it was opened, and its cut after a delete and create again is ReaderGroupNotFound."""
    segment = stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "m", config(unique, MANUAL))
    module = handler_modules(deployment, monkeypatch)["controller_api"]

    def call(method: str, path: str, json_body=None):
        status, _, answer = invoke(module, method, path, json.dumps(json_body).encode() if json_body is not None
                                   else b"", **{"content-type": "application/json"})
        if status != 200:
            raise from_wire(status, answer)
        return answer

    handle = ReaderGroup(SimpleNamespace(controller=SimpleNamespace(transport=SimpleNamespace(json=call))), unique, "m")
    first = handle.info().incarnation
    assert first is not None and handle.incarnation == first
    cut = StreamCut.of(unique, "s", controller.streams.resolve_cut(unique, "s", {segment: 300}))
    handle.update_retention_stream_cut(cut)
    assert acknowledged(controller, unique) == {segment: 300}

    assert groups.delete(unique, "m") is True
    assert groups.create(unique, "m", config(unique, MANUAL)) is True
    assert handle.info().incarnation not in (None, first)
    assert handle.incarnation == first  # a handle stays the group it opened
    later = StreamCut.of(unique, "s", controller.streams.resolve_cut(unique, "s", {segment: 1000}))
    with pytest.raises(ReaderGroupNotFound):
        handle.update_retention_stream_cut(later)
    assert acknowledged(controller, unique) == {segment: 0}
    controller.retention.cycle(unique, "s", now=1_000)
    assert head(controller, unique) == {segment: 0}

    # a handle of the new group acknowledges for it
    fresh = ReaderGroup(handle.connection, unique, "m")
    fresh.update_retention_stream_cut(later)
    assert acknowledged(controller, unique) == {segment: 1000}


def test_a_deleted_groups_state_write_does_not_land_on_a_new_group_at_its_version(controller, unique):
    """The lease job's expire_readers reads the group (version 1) and stalls; the group is deleted and
    created again with another configuration, at version 1 too. The stalled write of the deleted group's
    state is refused, and the retry works on the new group, whose configuration stays its own."""
    stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", config(unique, StreamDataRetention.NONE))
    recreated = config(unique, StreamDataRetention.NONE).model_copy(update={"reader_lease_ms": 30_000})
    write, stalled = groups._write, []

    def recreated_first(scope, group, record, state, leaving):
        if not stalled:
            assert groups.delete(unique, "g") is True
            assert groups.create(unique, "g", recreated) is True
            assert read_record(unique, "g").version == record.version
        try:
            write(scope, group, record, state, leaving)
            stalled.append("written")
        except WriteConflict:
            stalled.append("refused")
            raise

    groups._write = recreated_first
    assert groups.expire_readers(unique, "g") == []
    assert stalled == ["refused", "written"]  # the retry read the new group
    assert groups.info(unique, "g").config.reader_lease_ms == 30_000


def test_a_deleted_groups_stalled_item_write_leaves_the_new_readers_item(controller, unique, monkeypatch):
    """r1's sync reads its item (version 1) and stalls before renewing it; the group is deleted and
    created again, and the new group's r1 renews its own item, at version 1 too. The stalled write is
    refused: the new r1's renewal (its join id) stays, so its lease is not lost to a deleted group."""
    now = [1_800_000_000_000]
    monkeypatch.setattr(groups_module, "_now", lambda: now[0])
    stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    lease = config(unique, StreamDataRetention.NONE).reader_lease_ms

    def renewed(reader: str) -> ReaderItemRecord:
        """``reader`` joins and renews its lease in its own item a quarter lease later (its version 1)."""
        groups.add_reader(unique, "g", reader)
        groups.sync(unique, "g", reader, SyncRequest())
        now[0] += lease // 4
        groups.sync(unique, "g", reader, SyncRequest())
        return ReaderItemRecord.get(reader_group_pk(unique, "g"), reader_sk(reader), consistent_read=True)

    groups.create(unique, "g", config(unique, StreamDataRetention.NONE))
    old = renewed("r1")
    write, stalled, new = groups.items.write, [], []

    def recreated_first(scope, group, reader, read, *args, **kwargs):
        if not stalled:
            stalled.append(read.version)
            assert groups.delete(unique, "g") is True
            assert groups.create(unique, "g", config(unique, StreamDataRetention.NONE)) is True
            new.append(renewed("r1"))
            assert new[0].version == read.version == old.version
        return write(scope, group, reader, read, *args, **kwargs)

    now[0] += lease // 4
    groups.items.write = recreated_first
    groups.sync(unique, "g", "r1", SyncRequest())
    kept = ReaderItemRecord.get(reader_group_pk(unique, "g"), reader_sk("r1"), consistent_read=True)
    assert stalled == [old.version] and kept.join == new[0].join != old.join
