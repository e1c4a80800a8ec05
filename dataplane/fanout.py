"""Background work over many independent items (segments, transactions, reader groups, workflows), a
bounded number at once: each item is a chain of round trips to AWS, so a job's throughput is its
number of items in flight over one item's latency (docs/dagster.md, docs/limits.md)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def fan_out(work: Callable[[T], R], items: list[T], workers: int) -> tuple[list[R], float]:
    """``work`` of each item, ``workers`` at a time, results in the items' order, and the wall time in
    seconds. The first item runs alone in the calling thread, so the botocore clients it needs (whose
    creation is not thread-safe; using one is) exist before the threads share them."""
    started = time.perf_counter()
    if not items:
        return [], 0.0
    first = work(items[0])
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items) - 1)), thread_name_prefix="fan-out") as pool:
        results = [first, *pool.map(work, items[1:])]
    return results, time.perf_counter() - started


def per_second(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0
