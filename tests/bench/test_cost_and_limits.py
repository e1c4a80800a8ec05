"""The writer-count, throughput and record-size benchmarks run in their quick modes, and their
figures have the shape and sense the docs rely on (docs/benchmarks.md, docs/limits.md; bench.append_cost
has test_append_cost.py). Counts and sizes only: timings on a shared machine are for the benchmarks to print.

Each runs in its own interpreter, as ``python -m bench...`` does (see test_benchmark_figures.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(600)


def _run(module: str, expression: str) -> object:
    code = f"import json; from bench import {module}; print(json.dumps({expression}))"
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_append_costs_the_same_after_60_writer_ids_as_after_10():
    result = _run("writer_count", "writer_count.run((10, 60))")  # the head record lists 8: 60 is well past it
    assert [r["writers"] for r in result["rows"]] == [10, 60]
    for row in result["rows"]:
        assert 0 < row["head_record_bytes"] < 400 * 1024
        for kind in ("new writer", "recent writer", "oldest writer"):
            assert row[kind]["requests"] >= 3 and row[kind]["write_units"] >= 2 and row[kind]["read_units"] >= 1
    # Flat: an append costs the same requests and units, and the head record is as small, after 60
    # writer ids as after 10 (the head record lists only the most recently active writers).
    few, many = result["rows"]
    assert few["head_record_bytes"] < 1024 and many["head_record_bytes"] < 1024  # decayed rates vary by a few bytes
    for kind in ("new writer", "recent writer", "oldest writer"):
        assert many[kind] == few[kind], kind


def test_the_throughput_benchmark_writes_through_every_segment_count():
    result = _run("segment_throughput", "segment_throughput.run((1, 4), 2, 400)")
    assert [r["segments"] for r in result["rows"]] == [1, 4]
    for row in result["rows"]:
        assert row["events"] == 2 * 1024 and row["events_per_s"] > 0 and row["append_invocations"] >= row["segments"]
    assert result["raw_put_item_per_s"] > 0


def test_every_growing_record_is_measured_below_the_item_limit_and_grows_with_width():
    result = _run("record_sizes", "record_sizes.run((10, 100))")
    sizes = {(r["record"], r["at"]): r["bytes"] for r in result["rows"]}
    assert all(isinstance(s, int) and 0 < s < result["item_limit"] for s in sizes.values()), sizes
    for record in ("epoch record", "transaction record", "retention-set record (each)", "writer time mark (each)"):
        narrow, wide = sizes[(record, "10 segments")], sizes[(record, "100 segments")]
        assert 10 * 90 < wide - narrow < 50 * 90, (record, narrow, wide)  # 10 to 50 bytes per segment
