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

from controlplane.models import ReaderLeaseRecord, SubscriberRecord, reader_group_pk
from controlplane.reader_groups import LEASE_KEY
from controlplane.reader_groups import groups as groups_module
from controlplane.reader_groups.state import read_record
from controlplane.reader_items import ReaderItemRecord, reader_sk
from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import IllegalState, ReaderGroupNotFound, WriteConflict, from_wire
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


# -- the group's lease record: a deleted group's late announce or drop never acts on the new group's ----


def lease_of(scope: str) -> ReaderLeaseRecord:
    return ReaderLeaseRecord.get(reader_group_pk(scope, "g"), LEASE_KEY, consistent_read=True)


def dead_readers_taken_offline(groups, monkeypatch, scope: str) -> list[str]:
    """What the lease job does once every reader's lease is long over: find the due groups, and take
    the readers of ``scope``'s group offline."""
    later = groups_module._now() + 10**9
    monkeypatch.setattr(groups_module, "_now", lambda: later)
    if (scope, "g") not in groups.groups_due_for_lease_check(limit=1000):
        return []
    return groups.expire_readers(scope, "g")


def test_a_deleted_groups_late_lease_announce_does_not_replace_the_new_groups(controller, monkeypatch, unique):
    """The deleted group's last change (its only reader leaves: no deadline, at version 3) stalls between
    its record write and its lease announce; the group is created again and a reader joins (version 2).
    The late announce is of a higher version, but of the deleted group: the new group's deadline stays,
    and the lease job takes its dead reader offline."""
    stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", config(unique, StreamDataRetention.NONE))
    groups.add_reader(unique, "g", "r1")
    announce, stalled = groups_module.announce_lease, []

    def recreated_first(*args):
        if not stalled:
            stalled.append(args[-2])  # the version the late announce decides
            assert groups.delete(unique, "g") is True
            assert groups.create(unique, "g", config(unique, StreamDataRetention.NONE)) is True
            groups.add_reader(unique, "g", "n1")
            stalled.append(lease_of(unique).group_version)
        announce(*args)

    monkeypatch.setattr(groups_module, "announce_lease", recreated_first)
    groups.reader_offline(unique, "g", "r1", None)
    assert stalled == [3, 2]  # the late announce's version is past the new group's

    lease = lease_of(unique)
    assert lease.deadline_ms is not None and lease.deadline_ms == groups.state(unique, "g").lease_deadline_ms
    assert dead_readers_taken_offline(groups, monkeypatch, unique) == ["n1"]
    assert lease_of(unique).create_id == read_record(unique, "g").create_id


def test_a_deleted_groups_late_lease_drop_leaves_the_new_groups(controller, monkeypatch, unique):
    """The delete stalls before dropping the lease record of its group's last version (2); the group is
    created again and a reader joins, announcing version 2 too. The late drop leaves it."""
    stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", config(unique, StreamDataRetention.NONE))
    groups.add_reader(unique, "g", "r1")
    drop, stalled = groups_module.drop_lease, []

    def recreated_first(*args):
        assert groups.create(unique, "g", config(unique, StreamDataRetention.NONE)) is True
        groups.add_reader(unique, "g", "n1")
        stalled.append((args[-1], lease_of(unique).group_version))
        drop(*args)

    monkeypatch.setattr(groups_module, "drop_lease", recreated_first)
    assert groups.delete(unique, "g") is True
    assert stalled == [(2, 2)]  # the late drop's version reaches the new group's

    assert dead_readers_taken_offline(groups, monkeypatch, unique) == ["n1"]
    assert lease_of(unique).create_id == read_record(unique, "g").create_id


def test_the_lease_jobs_orphan_drop_leaves_a_group_created_since_it_looked(controller, monkeypatch, unique):
    """The lease job finds no group under the name, then the name is created and a reader joins before
    it drops the lease record it takes for an orphan: the new group's record stays."""
    stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    drop, created = groups_module.drop_orphan_lease, []

    def created_first(*args):
        assert groups.create(unique, "g", config(unique, StreamDataRetention.NONE)) is True
        groups.add_reader(unique, "g", "n1")
        created.append(lease_of(unique).group_version)
        drop(*args)

    monkeypatch.setattr(groups_module, "drop_orphan_lease", created_first)
    assert groups.expire_readers(unique, "g") == []
    assert created == [2]  # the new group's join announced before the drop
    assert dead_readers_taken_offline(groups, monkeypatch, unique) == ["n1"]


@pytest.mark.parametrize("leftover", ["a deleted group's", None], ids=["another incarnation", "previous release"])
def test_a_new_groups_first_announce_replaces_a_deleted_groups_leftover_lease_record(controller, monkeypatch,
                                                                                    unique, leftover):
    """A deleted group's lease record of a higher version, without a deadline, was left under the name
    (a late announce landing after the delete dropped the record; or one a previous release wrote, which
    names no incarnation). The new group's first join replaces it rather than waiting for its versions
    to pass 50, and the lease job finds its dead reader."""
    stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", config(unique, StreamDataRetention.NONE))
    ReaderLeaseRecord(reader_group_pk(unique, "g"), LEASE_KEY, scope=unique, group="g", create_id=leftover,
                      group_version=50).save()
    groups.add_reader(unique, "g", "n1")

    lease = lease_of(unique)
    assert lease.deadline_ms is not None and lease.deadline_ms == groups.state(unique, "g").lease_deadline_ms
    assert dead_readers_taken_offline(groups, monkeypatch, unique) == ["n1"]
    assert lease_of(unique).create_id == read_record(unique, "g").create_id


# -- subscriptions a previous release wrote without the incarnation ------------------------------------


def checkpoint_at(groups, scope: str, segment: int, offset: int) -> None:
    """The group's only reader passes a checkpoint at ``offset``: its cut is published."""
    groups.add_reader(scope, "g", "r1")
    groups.sync(scope, "g", "r1", SyncRequest())
    groups.initiate_checkpoint(scope, "g", "cp")
    groups.sync(scope, "g", "r1", SyncRequest(positions=[SegmentOffset(stream=f"{scope}/s", segment_id=segment,
                                                                       offset=offset)], checkpoint="cp"))


def test_a_subscription_rewritten_by_a_previous_release_takes_the_groups_publish_and_its_incarnation(controller,
                                                                                                     unique):
    """A previous release's reset rewrites the subscriber record with a full put that names no
    incarnation. The group's next checkpoint is still acknowledged (retention truncates to it), and the
    incarnation is written back, so a later publish of a deleted group is refused again."""
    segment = stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", config(unique, AUTO))
    (subscriber,) = controller.retention.subscribers(unique, "s")
    incarnation = read_record(unique, "g").create_id
    assert subscriber.group_incarnation == incarnation
    SubscriberRecord(subscriber.pk, subscriber.sk, group=subscriber.group, generation=subscriber.generation,
                     cut=subscriber.cut, updated_ms=subscriber.updated_ms, write_id="previous release").save()
    assert controller.retention.subscribers(unique, "s")[0].group_incarnation is None

    checkpoint_at(groups, unique, segment, 1000)
    assert acknowledged(controller, unique) == {segment: 1000}
    assert controller.retention.subscribers(unique, "s")[0].group_incarnation == incarnation
    controller.retention.cycle(unique, "s", now=1_000)
    assert head(controller, unique) == {segment: 1000}
    with pytest.raises(ReaderGroupNotFound):
        controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {segment: 1000},
                                                   "a deleted group's")


def test_a_publish_refused_for_another_incarnation_of_a_group_that_exists_is_heard(controller, unique):
    """The group's subscription names another incarnation (a deleted group's late publish wrote it into
    a subscription a previous release made). The group's checkpoint publish is refused, and the sync
    says so (IllegalState: reset the group) rather than retention silently never following it."""
    segment = stream_of_ten_events(controller, unique)
    groups = controller.reader_groups
    groups.create(unique, "g", config(unique, AUTO))
    (subscriber,) = controller.retention.subscribers(unique, "s")
    subscriber.update(actions=[SubscriberRecord.group_incarnation.set("a deleted group's")])

    with pytest.raises(IllegalState, match="another incarnation"):
        checkpoint_at(groups, unique, segment, 1000)
    assert acknowledged(controller, unique) == {segment: 0}

