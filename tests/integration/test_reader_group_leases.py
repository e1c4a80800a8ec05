"""Reader leases through the control plane's domain functions (controlplane.reader_groups on moto).

A reader that dies without reader_offline is taken offline once its lease (here 5 s) has passed:
lazily by another reader's sync, or by the lease job's ``expire_readers`` on the groups the deadlines
index lists as due. Its segments go back at its last reported positions, a checkpoint it held up
completes, and if it comes back it gets ReaderNotInReaderGroup.
"""

from __future__ import annotations

import time

import pytest

from controlplane.models import ReaderGroupRecord, ReaderLeaseRecord, reader_group_pk
from controlplane.reader_groups import LEASE_KEY
from controlplane.reader_groups.leases import LEASE_SHARD
from dataplane.shards import shard_key
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import ReaderNotInReaderGroup
from rillet.models import ReaderGroupConfig, ScalingPolicy, StreamConfiguration, StreamRange

LEASE_MS = 5_000  # 2 s once passed between two add_reader calls of a loaded full run, taking r1 offline


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture
def group(controller, unique):
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    config = ReaderGroupConfig(streams=[StreamRange(scope=unique, stream="s")], automatic_checkpoint_interval_ms=0,
                               group_refresh_time_ms=100, reader_lease_ms=LEASE_MS)
    controller.reader_groups.create(unique, "g", config)
    return controller.reader_groups, unique


def held(assignment) -> dict[int, int]:
    return {a.segment.segment_id: a.offset for a in assignment.segments}


def report(stream: str, offsets: dict[int, int], **kwargs) -> SyncRequest:
    return SyncRequest(positions=[SegmentOffset(stream=stream, segment_id=s, offset=o) for s, o in offsets.items()],
                       **kwargs)


def wait_past_lease() -> None:
    time.sleep(LEASE_MS / 1000 + 0.05)


def test_another_readers_sync_takes_a_dead_reader_offline_after_its_lease(group):
    groups, scope = group
    stream = f"{scope}/s"
    groups.add_reader(scope, "g", "r1")
    groups.add_reader(scope, "g", "r2")
    (s1,) = held(groups.sync(scope, "g", "r1", SyncRequest()))
    (s2,) = held(groups.sync(scope, "g", "r2", SyncRequest()))
    groups.sync(scope, "g", "r1", report(stream, {s1: 40}))  # r1's last word, then it is killed
    wait_past_lease()
    assert held(groups.sync(scope, "g", "r2", report(stream, {s2: 7}))) == {s1: 40, s2: 7}
    assert groups.info(scope, "g").online_readers == ["r2"]
    with pytest.raises(ReaderNotInReaderGroup) as raised:
        groups.sync(scope, "g", "r1", report(stream, {s1: 50}))
    assert raised.value.status == 409
    assert held(groups.sync(scope, "g", "r2", SyncRequest())) == {s1: 40, s2: 7}


def test_the_lease_job_takes_dead_readers_offline_and_completes_their_checkpoint(group):
    groups, scope = group
    stream = f"{scope}/s"
    groups.add_reader(scope, "g", "r1")
    groups.add_reader(scope, "g", "r2")
    (s1,) = held(groups.sync(scope, "g", "r1", report(stream, {})))
    (s2,) = held(groups.sync(scope, "g", "r2", report(stream, {})))
    groups.sync(scope, "g", "r2", report(stream, {s2: 9}))
    groups.initiate_checkpoint(scope, "g", "cp")
    groups.sync(scope, "g", "r1", report(stream, {s1: 30}, checkpoint="cp"))
    assert not groups.checkpoint(scope, "g", "cp").complete  # r2 never passes: it was killed
    groups.sync(scope, "g", "r1", report(stream, {s1: 35}))  # r1 reads on, then is killed too
    wait_past_lease()

    assert (scope, "g") in groups.groups_due_for_lease_check(limit=1000)
    assert groups.expire_readers(scope, "g") == ["r1", "r2"]
    info = groups.checkpoint(scope, "g", "cp")
    assert info.complete
    assert {p.segment.segment_id: p.offset for p in info.cuts[0].positions} == {s1: 30, s2: 9}
    assert groups.info(scope, "g").online_readers == []
    # no reader online: the group leaves the deadlines index, and a second run finds nothing to do
    assert (scope, "g") not in groups.groups_due_for_lease_check(limit=1000)
    lease = ReaderLeaseRecord.get(reader_group_pk(scope, "g"), LEASE_KEY, consistent_read=True)
    assert lease.deadline_ms is None and lease.deadline_shard is None
    assert groups.expire_readers(scope, "g") == []

    groups.add_reader(scope, "g", "r3")
    assert held(groups.sync(scope, "g", "r3", SyncRequest())) == {s1: 35, s2: 9}
    for dead in ("r1", "r2"):
        with pytest.raises(ReaderNotInReaderGroup):
            groups.sync(scope, "g", dead, SyncRequest())
    lease = ReaderLeaseRecord.get(reader_group_pk(scope, "g"), LEASE_KEY, consistent_read=True)
    assert lease.deadline_ms is not None  # r3's join announced its lease


def test_deleting_a_group_removes_its_lease_record_and_the_job_forgets_an_orphan(group):
    groups, scope = group
    groups.add_reader(scope, "g", "r1")
    assert groups.delete(scope, "g")
    with pytest.raises(ReaderLeaseRecord.DoesNotExist):
        ReaderLeaseRecord.get(reader_group_pk(scope, "g"), LEASE_KEY, consistent_read=True)
    # a late write of the lease record (a sync that lost the race with the delete) is cleaned up
    ReaderLeaseRecord(reader_group_pk(scope, "g"), LEASE_KEY, scope=scope, group="g", group_version=7,
                      deadline_ms=1, deadline_shard=shard_key(LEASE_SHARD, f"{scope}/g")).save()
    assert (scope, "g") in groups.groups_due_for_lease_check(limit=1000)
    assert groups.expire_readers(scope, "g") == []
    assert (scope, "g") not in groups.groups_due_for_lease_check(limit=1000)


def test_a_join_whose_controller_dies_right_after_storing_it_is_still_known_to_the_lease_job(group, monkeypatch):
    """The join is stored, then the controller dies before it could do anything else (the SDK saw an
    error and never used the reader). The lease job must still find the reader once its lease is over
    (the group has no other reader whose sync would take it offline)."""
    groups, scope = group
    stored = ReaderGroupRecord.update

    def update_then_die(self, *args, **kwargs):
        stored(self, *args, **kwargs)
        raise ConnectionResetError("the controller died")

    monkeypatch.setattr(ReaderGroupRecord, "update", update_then_die)
    with pytest.raises(ConnectionResetError):
        groups.add_reader(scope, "g", "r1")
    monkeypatch.setattr(ReaderGroupRecord, "update", stored)
    assert groups.info(scope, "g").online_readers == ["r1"]
    wait_past_lease()
    assert (scope, "g") in groups.groups_due_for_lease_check(limit=1000)
    assert groups.expire_readers(scope, "g") == ["r1"]
