"""bench.segment_contention runs, and concurrent appenders on one segment do not multiply what a
committed append costs (issue 40): a loser pauses for a live claim instead of racing to commit it.

Only request counts are asserted, with room for a loaded machine: before the pause, 8 appenders cost
about 5 times the requests per append of one (15.3 to 15.8 against 3.0); since, 2.1 to 2.3 times.

64 appenders (three appends each) cost 11.7 to 12.6 requests per append on a quiet machine, 15.4 to
16.8 with two other processes busy on its two cores, and 16.5 and 20.2 in CI runs (the second beside the
other worker's heaviest tests); before the ticketless pause was shortened and tickets came, 20.0 to
26.3 quiet and 42.4 to 45.0 loaded. The bound was 24; on 2026-12-07 this machine measured 35.0 to 42.2 with
b9760cf's own data plane as well as with the day's (one process, nothing else running: the machine moved, not
the code), so the bound is 48 until that is understood; a loser that polled the head record without pausing
costs over a hundred. (A bound relative to the
same bench without tickets, in one sitting, does not hold at no added latency: there tickets save only
5 to 15 per cent; see docs/benchmarks.md.)"""

from __future__ import annotations

import pytest
from test_benchmark_figures import _run

pytestmark = pytest.mark.timeout(300)


def test_eight_appenders_on_one_segment_cost_at_most_three_times_the_requests_per_append_of_one():
    one, eight = _run("segment_contention", "segment_contention.run((1, 8), 64)")["rows"]
    assert one["appends"] == eight["appends"] == 64  # every append committed once (the bench checks the length)
    assert one["requests"] == pytest.approx(3.0, abs=0.1)  # the head record, the claim, the advance
    assert eight["requests"] <= 3 * one["requests"], eight


def test_sixty_four_appenders_wait_their_turn_rather_than_poll_the_head_record():
    (many,) = _run("segment_contention", "segment_contention.run((64,), 192)")["rows"]
    assert many["appends"] == 192
    assert many["requests"] <= 48, many
