"""Write-sharded partition keys for the sparse "due" indexes (DynamoDB's write-sharding pattern).

An index whose partition key is one constant ("due", "open", "1") puts every segment, transaction or
stream of the deployment in one partition, which takes about 1,000 write units a second; an index
that throttles pushes back on the base table's writes. So each item goes under ``<prefix>#<n>``, with
``n`` a stable hash of the item's own key, and a job reads all ``n`` (in parallel). The hottest
partition then takes 1/SHARDS of the index's writes (docs/limits.md states each index's figure).

An item written before its index was sharded still carries the bare ``<prefix>`` value; the jobs read
that key too, so a deployment upgrades in place. Nothing writes it any more: once a read finds it empty,
a process reads it again only every ``BARE_KEY_RECHECK_S`` (a component of the previous release may
still write one while an upgrade rolls out), so an idle tick costs one query per shard, not one more.

The shard count is a deployment setting (``RILLET_INDEX_SHARDS``, default 16), the same for every
component. It may be raised (a job then reads every old shard too) but never lowered: items under a
shard above the new count would no longer be read. Standalone sets 1: moto has no partitions to
spread, and it answers every index query by scanning the whole table, so 17 queries a tick where 2
do the work would make an idle laptop stack's jobs cost in proportion to its streams.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar


def _shards() -> int:
    configured = os.environ.get("RILLET_INDEX_SHARDS", "16")
    if not configured.isdigit() or not 1 <= int(configured) <= 64:
        raise ValueError(f"RILLET_INDEX_SHARDS must be a whole number from 1 to 64, got {configured!r}")
    return int(configured)


SHARDS = _shards()  # per index: SHARDS x 1,000 write units a second before any one partition throttles
BARE_KEY_RECHECK_S = 600.0
T = TypeVar("T")
# When a read last found an index's bare key empty, by (endpoint, table, prefix): bounded by the
# indexes of the deployments a process reads (seven per deployment).
_bare_key_empty_at: dict[tuple[str | None, str, str], float] = {}


def shard_key(prefix: str, item_key: str, shards: int = SHARDS) -> str:
    """The index partition key of the item whose own key is ``item_key``: stable across processes
    (crc32, not Python's salted hash), so every writer of the item puts it under the same shard."""
    return f"{prefix}#{zlib.crc32(item_key.encode()) % shards}"


def every_shard(prefix: str, shards: int = SHARDS) -> list[str]:
    """Every partition key of the index: the shards, and the bare prefix of items written before it."""
    return [prefix] + [f"{prefix}#{n}" for n in range(shards)]


def query_every_shard(prefix: str, query: Callable[[str], Iterable[T]], model: type, shards: int = SHARDS) -> list[T]:
    """``query`` of each partition key of the index of ``model``'s table, the shards in parallel (each
    is a request, and a job's tick should cost a few round trips, not one per shard), results in shard
    order; the bare key as the module doc says. The first queries run in the calling thread, so the
    connection's botocore client (whose creation is not thread-safe) exists before the threads share it."""
    first, *rest = every_shard(prefix, shards)
    index = (getattr(model.Meta, "host", None), model.Meta.table_name, prefix)
    found: list[T] = []
    empty_at = _bare_key_empty_at.get(index)
    if empty_at is None or time.monotonic() - empty_at >= BARE_KEY_RECHECK_S:
        found = list(query(first))
        if not found:
            _bare_key_empty_at[index] = time.monotonic()
    first_shard, *others = rest
    found += query(first_shard)
    if not others:
        return found
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="shard-query") as pool:
        return found + [item for items in pool.map(lambda key: list(query(key)), others) for item in items]
