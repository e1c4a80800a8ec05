"""A block's age counts the time the machine was suspended (the monotonic clock does not), and never
less than the monotonic count when the wall clock is stepped back: an age never understates, so a
resend held across a long sleep reaches the server as old as it is (see rillet.clock)."""

from __future__ import annotations

import time

from rillet.clock import Since

DAY_S = 86_400


def test_a_suspend_the_monotonic_clock_missed_still_counts():
    slept_a_week = Since(monotonic=time.monotonic(), wall=time.time() - 8 * DAY_S)
    assert slept_a_week.elapsed_s() >= 8 * DAY_S
    assert slept_a_week.elapsed_ms() >= 8 * DAY_S * 1000


def test_a_wall_clock_stepped_back_does_not_shorten_an_age():
    stepped_back = Since(monotonic=time.monotonic() - 5, wall=time.time() + 3600)
    assert 5 <= stepped_back.elapsed_s() < 6


def test_a_fresh_moment_is_about_zero():
    assert 0 <= Since().elapsed_ms() < 1000
