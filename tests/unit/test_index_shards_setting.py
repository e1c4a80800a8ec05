"""The index shard count is a deployment setting (dataplane/shards.py): standalone runs one shard, AWS 16,
and a count may be raised on a running deployment but not lowered."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dataplane.shards import every_shard, shard_key


def _shards_in_a_fresh_process(value: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RILLET_INDEX_SHARDS": value}
    code = ("from dataplane.shards import SHARDS; from controlplane.streams import RETENTION_BUCKETS; "
            "print(SHARDS, RETENTION_BUCKETS)")
    return subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=60)


def test_the_shard_count_and_the_retention_buckets_follow_the_setting():
    done = _shards_in_a_fresh_process("1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]


@pytest.mark.parametrize("value", ["0", "65", "sixteen", "-1"])
def test_a_shard_count_out_of_range_is_refused_at_start_up(value):
    done = _shards_in_a_fresh_process(value)
    assert done.returncode != 0 and "RILLET_INDEX_SHARDS must be a whole number from 1 to 64" in done.stderr


def test_a_job_with_more_shards_reads_every_item_written_with_fewer():
    """Raising the count is safe: each item written under the old count is under a key the jobs still read."""
    for fewer, more in [(1, 16), (4, 16), (16, 32)]:
        for n in range(200):
            assert shard_key("due", f"segment-{n}", fewer) in every_shard("due", more)
