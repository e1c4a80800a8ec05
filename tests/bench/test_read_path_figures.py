"""The read path's benchmarks run, and the request counts behind their cost targets hold (issue 27):
an idle reader sends only tail checks, one per backoff period for all its segments, and a catch-up read
GETs each object that holds the bytes once, none through the function."""

from __future__ import annotations

import pytest
from test_benchmark_figures import _run

from rillet.segments import TailBackoff

pytestmark = pytest.mark.timeout(300)


def test_an_idle_reader_sends_one_backed_off_tail_check_for_all_its_segments():
    result = _run("idle_reader", "idle_reader.run(seconds=8, idle_s=3, probes=1, settle_s=4)")
    for idle in result["idle"]:
        assert set(idle["requests_by_kind"]) == {"tails"}, idle  # no reads, no long polls
        # One check per max_s (a 4-segment reader too), give or take the window's edges.
        assert idle["function_requests_per_s"] <= 1 / TailBackoff.max_s + 1 / idle["seconds"], idle
        assert idle["dynamodb_by_operation"].get("BatchGetItem", 0) == idle["requests_by_kind"]["tails"]
    assert result["idle"][0]["dollars_per_day"]["lambda_duration"] < 0.002  # modeled: 5 ms per check
    assert len(result["wake_latency_s"]) == 1


def test_a_catch_up_read_gets_each_object_holding_the_bytes_once():
    read = _run("data_path", "data_path.run(total_mb=8)")["read"]
    assert read["gets"] == read["objects"] > 0
    assert read["per_mb"]["lambda_invocations"] * 8 <= read["objects"] / 4 + 3  # a locations answer per 4 objects
