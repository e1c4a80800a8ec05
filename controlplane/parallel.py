"""Work over many independent items (streams, shards) a few at a time, for background jobs whose items
are each a few round trips to AWS: I/O bound, so threads multiply a job's throughput."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

WORKERS = 8  # items in flight at once per job process: 8 x a few requests, well within a botocore pool


def in_parallel(work: Callable[[T], R], items: list[T], workers: int = WORKERS) -> list[R]:
    """``work`` of each item, results in the items' order: the first in the calling thread (so the
    botocore clients, whose creation is not thread-safe, exist before the threads share them), the
    rest ``workers`` at a time."""
    if not items:
        return []
    first = work(items[0])
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rillet-job") as pool:
        return [first, *pool.map(work, items[1:])]
