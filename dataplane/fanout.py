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

ERROR_PREFIX = "error: "  # an item outcome that says its work raised: not done, or done without an answer


def fan_out(work: Callable[[T], R], items: list[T], workers: int,
            on_error: Callable[[T, Exception], R] | None = None) -> tuple[list[R], float]:
    """``work`` of each item, ``workers`` at a time, results in the items' order, and the wall time in
    seconds. The first item runs alone in the calling thread, so the botocore clients it needs (whose
    creation is not thread-safe; using one is) exist before the threads share them. With ``on_error``,
    an item whose work raises has ``on_error(item, error)`` as its result and the others go on (one
    throttled item must not cost the run every other item); without it the first error is raised."""
    started = time.perf_counter()
    if not items:
        return [], 0.0
    one = work if on_error is None else _outcome_of(work, on_error)
    first = one(items[0])
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items) - 1)), thread_name_prefix="fan-out") as pool:
        results = [first, *pool.map(one, items[1:])]
    return results, time.perf_counter() - started


def _outcome_of(work: Callable[[T], R], on_error: Callable[[T, Exception], R]) -> Callable[[T], R]:
    def one(item: T) -> R:
        try:
            return work(item)
        except Exception as e:  # noqa: BLE001 - the item's outcome; the caller reports it and asks again
            return on_error(item, e)
    return one


def error_outcome(error: BaseException) -> str:
    """``error: <code>`` of an item whose work raised: the Rillet error code, else the AWS error code
    (PynamoDB keeps botocore's error as ``cause``), else the exception's type. The outcome is unknown (a
    write may have landed), so the item is asked again, never counted as failed for good."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:  # bounded: each link of the chain once
        seen.add(id(current))
        code = getattr(current, "code", None)
        if isinstance(code, str) and code:
            return ERROR_PREFIX + code
        response = getattr(current, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code"):
            return ERROR_PREFIX + str(response["Error"]["Code"])
        cause = getattr(current, "cause", None)
        current = cause if isinstance(cause, BaseException) else current.__cause__ or current.__context__
    return ERROR_PREFIX + type(error).__name__


def per_second(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0
