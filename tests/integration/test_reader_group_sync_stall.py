"""A reader's sync that stalls before writing its item is never told it holds a segment an expiry gave
away (issue 53), through controlplane.reader_groups on the session's moto.

r1's sync reads the group while its lease has a little left (2.65 s of a 4 s lease gone: under the
three quarters at which a sync re-reads the record after renewing), then stalls 1.4 s (GC, throttling
retries, a slow request) before its item's write. Meanwhile r2's sync finds r1's lease ended, takes it
offline and takes its segment. r1's sync must then answer ReaderNotInReaderGroup, not "you hold it".
Time is simulated (the module's clock is replaced) and the stall is injected into r1's item write
only, so nothing depends on how fast the machine is.
"""

from __future__ import annotations

import pytest

from controlplane.reader_groups import groups as module
from rillet.api import SyncRequest
from rillet.errors import ReaderNotInReaderGroup
from rillet.models import ReaderGroupConfig, ScalingPolicy, StreamConfiguration, StreamRange

LEASE_MS = 4_000


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture
def clock(monkeypatch):
    now = [1_800_000_000_000]
    monkeypatch.setattr(module, "_now", lambda: now[0])
    return now


def held(assignment) -> list[int]:
    return sorted(a.segment.segment_id for a in assignment.segments)


def test_a_sync_stalled_past_its_lease_is_not_told_it_holds_a_segment_an_expiry_gave_away(controller, unique,
                                                                                           clock):
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    groups = controller.reader_groups
    groups.create(unique, "g", ReaderGroupConfig(streams=[StreamRange(scope=unique, stream="s")],
                                                 automatic_checkpoint_interval_ms=0, group_refresh_time_ms=500,
                                                 reader_lease_ms=LEASE_MS))
    groups.add_reader(unique, "g", "r1")
    groups.add_reader(unique, "g", "r2")
    (mine,) = held(groups.sync(unique, "g", "r1", SyncRequest()))
    assert len(held(groups.sync(unique, "g", "r2", SyncRequest()))) == 1
    joined = clock[0]
    clock[0] = renewed = joined + 1_100
    groups.sync(unique, "g", "r1", SyncRequest())  # r1 renews in its item (over a quarter lease since its join)
    clock[0] = joined + 2_700
    groups.sync(unique, "g", "r2", SyncRequest())  # a fold: the group's deadline is r1's lease end now

    write, stalls, taken = groups.items.write, [], []

    def stalled(scope, group, reader, *args, **kwargs):
        if reader == "r1" and not stalls:
            stalls.append(clock[0])
            clock[0] += 1_400  # r1's lease (from its renewal) ends meanwhile
            taken.append(held(groups.sync(unique, "g", "r2", SyncRequest())))
        return write(scope, group, reader, *args, **kwargs)

    groups.items.write = stalled
    clock[0] = renewed + 2_650  # over a quarter lease since r1's renewal (so it renews), under three quarters
    with pytest.raises(ReaderNotInReaderGroup):  # not "you hold it": r2 holds it now
        groups.sync(unique, "g", "r1", SyncRequest())
    assert stalls == [renewed + 2_650]  # the stall happened, in r1's renewal
    assert taken == [[0, 1]] and mine in taken[0]  # r2's sync during it took r1's segment
    assert groups.info(unique, "g").online_readers == ["r2"]
