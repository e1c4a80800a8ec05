"""The reader lease sensor and job, with Dagster's test APIs (isolated tables).

A group whose readers were killed without reader_offline (lease 2 s) is listed by the sensor once the
lease passed; the job takes them offline at their last reported positions, the checkpoint they held up
completes, a new reader gets their segments there, and a killed reader that comes back gets
ReaderNotInReaderGroup. A group whose readers sync within their lease costs nothing.
"""

from __future__ import annotations

import time

import pytest
from dagster import RunRequest, SkipReason, build_sensor_context

from dagster_project.reader_groups import expire_reader_leases_job, reader_lease_sensor
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import ReaderNotInReaderGroup
from rillet.models import ReaderGroupConfig, ScalingPolicy, StreamConfiguration, StreamRange


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


def _tick(resource):
    with build_sensor_context(resources={"rillet": resource}) as context:
        return reader_lease_sensor(context)


def test_the_sensor_takes_killed_readers_offline_and_their_segments_go_on(isolated, unique):
    _, resource = isolated
    assert isinstance(_tick(resource), SkipReason)  # no reader anywhere: one query, no run
    controller = resource.controller()
    groups = controller.reader_groups
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    stream = f"{unique}/s"

    def config(lease_ms: int) -> ReaderGroupConfig:
        return ReaderGroupConfig(streams=[StreamRange(scope=unique, stream="s")], automatic_checkpoint_interval_ms=0,
                                 group_refresh_time_ms=100, reader_lease_ms=lease_ms)

    groups.create(unique, "live", config(600_000))
    groups.create(unique, "dead", config(2_000))
    for group in ("live", "dead"):
        for reader in ("r1", "r2"):
            groups.add_reader(unique, group, reader)
    positions = {}
    for offset, reader in ((30, "r1"), (9, "r2")):
        (a,) = groups.sync(unique, "dead", reader, SyncRequest()).segments
        positions[a.segment.segment_id] = offset
        groups.sync(unique, "dead", reader, SyncRequest(positions=[
            SegmentOffset(stream=stream, segment_id=a.segment.segment_id, offset=offset)]))
    groups.initiate_checkpoint(unique, "dead", "cp")
    time.sleep(2.05)  # both readers of "dead" were killed; "live" has ten minutes

    request = _tick(resource)
    assert isinstance(request, RunRequest)
    listed = request.run_config["ops"]["expire_reader_leases"]["config"]["groups"]
    assert f"{unique}/dead" in listed and f"{unique}/live" not in listed
    result = expire_reader_leases_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource})
    assert result.success
    assert result.output_for_node("expire_reader_leases") >= 2

    assert groups.info(unique, "dead").online_readers == []
    assert groups.info(unique, "live").online_readers == ["r1", "r2"]
    # nothing is due any more ("dead" has no reader, "live" is young): the next tick launches nothing
    assert isinstance(_tick(resource), SkipReason)
    cp = groups.checkpoint(unique, "dead", "cp")
    assert cp.complete and {p.segment.segment_id: p.offset for p in cp.cuts[0].positions} == positions
    groups.add_reader(unique, "dead", "r3")
    taken = groups.sync(unique, "dead", "r3", SyncRequest()).segments
    assert {a.segment.segment_id: a.offset for a in taken} == positions
    with pytest.raises(ReaderNotInReaderGroup):
        groups.sync(unique, "dead", "r1", SyncRequest())
