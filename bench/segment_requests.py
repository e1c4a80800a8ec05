"""AWS requests per segment-store operation: appends (inline and S3-sized), reads of a segment written
in large blocks, of an untiered one written in small appends, and of the same after tiering, and a
tiering pass. Shows what the chunk key range and the tiering fence cost (docs/dataplane.md).

    python -m bench.segment_requests
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Callable

import botocore.client

from bench.stack import moto_stack
from dataplane.segment_store import SegmentStore
from rillet.framing import frame


def _count(action: Callable[[], object], times: int = 1) -> dict[str, float]:
    counts: collections.Counter[str] = collections.Counter()
    original = botocore.client.BaseClient._make_api_call

    def counted(client, operation, params):
        counts[operation] += 1
        return original(client, operation, params)

    botocore.client.BaseClient._make_api_call = counted
    try:
        for _ in range(times):
            action()
    finally:
        botocore.client.BaseClient._make_api_call = original
    return {op: n / times for op, n in sorted(counts.items())}


def run(small_appends: int = 400, small_size: int = 1000, large_blocks: int = 8, large_size: int = 1 << 20) -> dict:
    with moto_stack(bind=True) as (_, deployment):
        store = SegmentStore(deployment)
        scope = "bench" + uuid.uuid4().hex[:8]
        large, small = f"{scope}/large/0", f"{scope}/small/0"
        store.create(large)
        store.create(small)
        block = frame(b"x" * (large_size - 4))
        numbers = iter(range(10**9))
        result = {"append S3-sized block": _count(lambda: store.append(large, "w", next(numbers), 1, block), large_blocks)}
        event = frame(b"y" * (small_size - 4))
        numbers = iter(range(10**9))
        result["append inline block"] = _count(lambda: store.append(small, "w", next(numbers), 1, event), small_appends)
        result["read 1 MiB, large blocks"] = _count(lambda: store.read(large, large_size, large_size))
        result["read 64 KiB, untiered inline"] = _count(lambda: store.read(small, 0, 1 << 16))
        store.seal(small)
        result["tiering pass (sealed segment)"] = _count(lambda: store.tier(small))
        result["read 64 KiB, tiered"] = _count(lambda: store.read(small, 0, 1 << 16))
        mid_entry = small_size * ((small_appends - 1) // 2) + small_size // 3  # inside the middle append's entry
        result["read 64 KiB, tiered, mid-entry"] = _count(lambda: store.read(small, mid_entry, 1 << 16))
        return {"small_appends": small_appends, "small_size": small_size, "requests": result}


def report(result: dict) -> str:
    lines = [f"segment store requests ({result['small_appends']} inline appends of {result['small_size']} B; "
             + "default settings, chunk target 8 MiB)"]
    for name, counts in result["requests"].items():
        lines.append(f"  {name:<32} " + ", ".join(f"{op} {n:g}" for op, n in counts.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
