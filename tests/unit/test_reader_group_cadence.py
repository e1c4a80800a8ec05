"""The SDK's sync cadence (rillet.reader_group.SyncCadence, issue 27): a group reader syncs at the
group's refresh time while something changes, backs off while nothing does, and never waits longer
than a sixth of its lease (the controller renews the lease from syncs)."""

from __future__ import annotations

from rillet.reader_group import SyncCadence


def test_the_cadence_backs_off_while_nothing_changes_and_returns_at_once_when_something_does():
    cadence = SyncCadence(refresh_s=3.0, lease_s=60.0)
    assert cadence.after_sync(True, holding=True) == 3.0
    assert [cadence.after_sync(False, holding=True) for _ in range(4)] == [6.0, 10.0, 10.0, 10.0]
    assert cadence.after_sync(True, holding=True) == 3.0


def test_a_reader_without_segments_asks_for_work_sooner_and_backs_off_too():
    cadence = SyncCadence(refresh_s=3.0, lease_s=60.0)
    assert cadence.after_sync(True, holding=False) == 0.5
    assert [cadence.after_sync(False, holding=False) for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_no_backoff_past_the_refresh_time_when_the_lease_is_short():
    cadence = SyncCadence(refresh_s=0.1, lease_s=0.3)
    assert cadence.after_sync(True, holding=True) == 0.1
    assert [cadence.after_sync(False, holding=True) for _ in range(3)] == [0.1, 0.1, 0.1]
