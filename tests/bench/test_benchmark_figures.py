"""The benchmarks run (so `make bench` cannot rot unnoticed), and the request counts behind the cost
targets hold. Only counts are asserted: timings on a shared machine are for the benchmarks to print.

Each benchmark runs in its own interpreter, as `python -m bench...` does: some import the Lambda
handlers, which bind the models to their deployment for the whole process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)


def _run(module: str, expression: str) -> object:
    """The JSON of ``expression``, evaluated after ``from bench import <module>`` in a new interpreter."""
    code = f"import json; from bench import {module}; print(json.dumps({expression}))"
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_append_costs_one_put_and_three_dynamodb_requests():
    result = _run("append_breakdown", "append_breakdown.run(blocks=2)")
    assert result["requests_per_block"] == {"dynamodb GetItem": 1, "dynamodb PutItem": 1,
                                            "dynamodb UpdateItem": 1, "s3 PutObject": 1}
    assert 0 < result["parts_ms"]["AWS calls, DynamoDB"] < result["parts_ms"]["AWS calls, all"] < result["handler_ms"]


def test_the_paced_data_path_stays_under_a_cent_per_gigabyte():
    """1 KiB events at 1 MB/s into one segment with the cost profile: the issue's cost target.

    A block holds what gathers while the budget (1.2 s) less the writer's smoothed round trip runs, so
    its size follows the rate reached and the round trip, which a loaded machine lowers and lengthens.
    What does not depend on the machine is asserted: at most one block per hold (the budget less the
    longest smoothed round trip the writer had, at least a quarter second: with no budget left a block
    waits for the one in flight), plus the first two blocks (before a round trip is measured there is no
    hold: the first leaves at once, the second when the first is answered) and the closing flush; and the cost of a GB sent in blocks of 1 MB (the block the cost
    profile sends at 1 MB/s), from the requests each block made here."""
    result = _run("data_path", "data_path.run(total_mb=4, rate_mb_s=1.0)")
    write, read = result["write"], result["read"]
    puts_per_mb = write["per_mb"]["s3_put"]
    hold_s = max(0.25, write["budget_s"] - write["longest_round_trip_s"])
    assert 0 < puts_per_mb * 4 <= write["seconds"] / hold_s + 3, (puts_per_mb, write)
    # Everything but Lambda's billed duration follows from request counts; the duration is measured
    # time, which a loaded machine inflates, so it gets the rest of the budget rather than an assertion.
    dollars = write["dollars_per_gb"]
    per_gb_in_1_mb_blocks = (dollars["total"] - dollars["lambda_duration"]) / puts_per_mb
    assert per_gb_in_1_mb_blocks <= 0.008
    # Each read request fetches each block it overlaps once: a block split between two reads is
    # fetched by both, so at most one GET per block plus one per read request.
    reads = read["per_mb"]
    assert 0 < reads["s3_get"] <= puts_per_mb + reads["lambda_invocations"] and reads["dynamodb_write_units"] == 0


def test_a_quiet_retention_cycle_costs_at_most_ten_requests_per_stream():
    per_stream = _run("retention_cycle", "(lambda r: sum(r['requests'].values()) / r['streams'])"
                                         "(retention_cycle.run(streams=40))")
    assert 0 < per_stream <= 10


def test_control_operations_cost_a_bounded_number_of_requests():
    counts = _run("control_ops", "{name: sum(c.values()) for name, c in control_ops.run()}")
    assert counts["create scope"] == 1
    assert counts["current segments"] <= 3 and counts["stream info"] <= 8
    assert all(0 < n <= 60 for n in counts.values()), counts
