"""The index shard count is a deployment setting (dataplane/shards.py): standalone runs one shard, AWS 16,
and a count may be raised on a running deployment but not lowered."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dataplane import shards
from dataplane.shards import every_shard, query_every_shard, shard_key


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


class _Index:
    """A table's index as query_every_shard sees it: items by partition key, and the keys each read asked."""

    class Meta:
        host, table_name = None, "unit-bare-key"

    def __init__(self) -> None:
        self.items: dict[str, list[str]] = {}
        self.asked: list[str] = []

    def query(self, key: str) -> list[str]:
        self.asked.append(key)
        return list(self.items.get(key, []))


def test_the_bare_key_is_read_until_found_empty_then_only_every_recheck_interval(monkeypatch):
    """Items written before an index was sharded are still found; once none is left an idle read costs one
    query per shard, and the bare key is looked at again after BARE_KEY_RECHECK_S (a component of the
    previous release may write one while an upgrade rolls out)."""
    index = _Index()
    index.Meta.table_name = f"unit-bare-key-{os.getpid()}-{id(index)}"
    index.items = {"due": ["old"], "due#1": ["new"]}
    assert query_every_shard("due", index.query, index, shards=2) == ["old", "new"]
    assert index.asked == ["due", "due#0", "due#1"]
    del index.items["due"]  # the old item's job moved it to its shard
    for _ in range(2):
        index.asked.clear()
        assert query_every_shard("due", index.query, index, shards=2) == ["new"]
    assert index.asked == ["due#0", "due#1"]  # found empty on the read before: not asked again
    index.items["due"] = ["written by the previous release"]
    monkeypatch.setattr(shards, "BARE_KEY_RECHECK_S", 0.0)
    assert query_every_shard("due", index.query, index, shards=2) == ["written by the previous release", "new"]
