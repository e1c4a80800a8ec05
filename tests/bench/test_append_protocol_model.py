"""bench.append_protocol_model: the model of today's chain agrees with what bench.segment_contention
measures, and it says the sub-log layout meets issue 40's target where the chain cannot. A model's
figures, asserted so that a change to it that breaks either shows (the simulation is seeded)."""

from __future__ import annotations

import pytest
from test_benchmark_figures import _run


def test_the_chain_of_one_appender_commits_one_block_per_three_round_trips_as_measured():
    # bench.segment_contention --request-ms 10 (about 15 ms a request): 20.9 appends a second, 3.00 requests
    one = _run("append_protocol_model", "append_protocol_model.run('chain', 1, rtt_ms=15, seconds=10)")
    assert one["appends_per_s"] == pytest.approx(1000 / (3 * 15), rel=0.1)
    assert one["requests_per_append"] == pytest.approx(3, abs=0.05)  # less those still in flight at the end


def test_sub_logs_commit_a_thousand_appends_a_second_from_a_hundred_writers_under_half_a_partition():
    """At 5 ms a request (DynamoDB's usual in-region latency); at 10 ms the model gives some 930, since
    a batch of one-block writers holds at most 49 (docs/benchmarks.md)."""
    chain, sublog, slower = _run("append_protocol_model", "[append_protocol_model.run(p, 100, rtt_ms=ms, seconds=10) "
                                                          "for p, ms in (('chain', 5), ('sublog', 5), ('sublog', 10))]")
    assert chain["appends_per_s"] < 100  # one block per three round trips, whatever the appenders
    assert sublog["appends_per_s"] >= 1000 and slower["appends_per_s"] >= 800
    assert sublog["segment_share"] <= 0.5, sublog  # of the partition's read and write units a second
    assert sublog["shard_share"] <= 0.6, sublog  # the hottest of the 32 sub-log partitions
    assert sublog["appends_per_batch"] > 20
    assert sublog["p99_ms"] < 2.5 * sublog["p50_ms"] < chain["p99_ms"] / 10  # appenders served in the order they came
