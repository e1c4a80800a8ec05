"""Helpers shared by the data-plane tests: an in-memory model of a segment, crash injection, payloads.

The model is deliberately simple (a bytearray plus a start offset): every read the segment store
answers must equal the slice of the model, and every read below the start must raise Truncated.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import botocore.client

from dataplane import models
from dataplane.models import CHUNK_PREFIX, ENTRY_PREFIX, META_KEY, IndexEntry, SegmentMeta
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.errors import Truncated
from rillet.framing import frame, unframe

# Requests that change state in DynamoDB or S3; a crash is injected before one of them.
MUTATING = frozenset({
    "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems",
    "PutObject", "DeleteObject", "DeleteObjects", "CopyObject",
})


class SimulatedCrash(BaseException):
    """The process died here: not an Exception, so no ``except Exception`` in the code swallows it."""


@dataclass
class CrashInjector:
    """Raises SimulatedCrash before the ``crash_at``-th mutating AWS request of the armed thread."""

    crash_at: int | None = None
    thread: int | None = None  # only requests from this thread count (None: the thread that armed it)
    mutating_calls: list[str] = field(default_factory=list)
    crashed_before: str | None = None
    all_calls: list[str] = field(default_factory=list)
    # Called before each mutating request of the armed thread with (operation, its number from 1):
    # a way to run something else at an exact point of a multi-step operation.
    hook: Callable[[str, int], None] | None = None

    def before(self, operation: str) -> None:
        if threading.get_ident() != self.thread:
            return
        self.all_calls.append(operation)
        if operation not in MUTATING:
            return
        self.mutating_calls.append(operation)
        if self.hook is not None:
            self.hook(operation, len(self.mutating_calls))
        if self.crash_at is not None and len(self.mutating_calls) == self.crash_at:
            self.crashed_before = operation
            raise SimulatedCrash(f"crash before mutating call #{self.crash_at} ({operation})")


@contextmanager
def inject_crash(crash_at: int | None, hook: Callable[[str, int], None] | None = None) -> Iterator[CrashInjector]:
    """Patch botocore so that the current thread 'dies' before its ``crash_at``-th mutating request.

    ``crash_at=None`` only records the requests (and runs ``hook``). Other threads' requests pass
    through untouched.
    """
    injector = CrashInjector(crash_at=crash_at, thread=threading.get_ident(), hook=hook)

    def patched(original, client, operation_name, api_params):
        injector.before(operation_name)
        return original(client, operation_name, api_params)

    with _api_calls_through(patched):
        yield injector


@contextmanager
def lose_answer(at: int) -> Iterator[list[str]]:
    """Patch botocore so that the current thread's ``at``-th mutating request is applied but its answer
    lost: it is sent again, as botocore's retries do after a timeout or a reset, and the caller gets
    the second attempt's answer. Yields the operations seen (mutating ones), to tell when ``at`` was
    past the last one."""
    thread, seen = threading.get_ident(), []

    def patched(original, client, operation_name, api_params):
        if threading.get_ident() == thread and operation_name in MUTATING:
            seen.append(operation_name)
            if len(seen) == at:
                original(client, operation_name, copy.deepcopy(api_params))  # botocore may consume a body
        return original(client, operation_name, api_params)

    with _api_calls_through(patched):
        yield seen


@contextmanager
def _api_calls_through(patched: Callable) -> Iterator[None]:
    """Every botocore API call goes through ``patched(original, client, operation, params)`` meanwhile."""
    original = botocore.client.BaseClient._make_api_call
    botocore.client.BaseClient._make_api_call = lambda client, name, params: patched(original, client, name, params)
    try:
        yield
    finally:
        botocore.client.BaseClient._make_api_call = original


INLINE_MAX = 64  # blocks up to this size stay inline in small_store: tests mix inline and S3-object blocks


def small_store(deployment, **overrides) -> SegmentStore:
    """A segment store with small blocks and chunks and no tiering age, so a few appends exercise tiering."""
    models.bind(deployment)
    settings = {"inline_max": INLINE_MAX, "chunk_target": 150, "tier_min_age_ms": 0}
    settings.update(overrides)
    return SegmentStore(deployment, StoreSettings(**settings))


def payload(tag: str, size: int) -> bytes:
    """Deterministic bytes of exactly ``size`` that start with ``tag`` (when it fits)."""
    head = tag.encode()
    filler = hashlib.sha256(head).digest()
    body = (head + b"|" + filler * (size // len(filler) + 1))[:size]
    return body


def event_block(tag: str, size: int) -> bytes:
    """One framed event of ``size`` bytes in total (frame header included) whose payload starts with tag."""
    assert size > 4
    return frame(payload(tag, size - 4))


def parse_events(data: bytes) -> list[tuple[int, bytes]]:
    events, consumed = unframe(data)
    assert consumed == len(data), f"{len(data) - consumed} trailing bytes are not a whole frame"
    return [(e.position, e.payload) for e in events]


@dataclass
class SegmentModel:
    """What a segment must contain: its bytes and its start offset."""

    data: bytearray = field(default_factory=bytearray)
    start: int = 0

    @property
    def length(self) -> int:
        return len(self.data)

    def append(self, block: bytes) -> int:
        offset = len(self.data)
        self.data += block
        return offset

    def truncate(self, offset: int) -> None:
        self.start = max(self.start, offset)

    def expected(self, offset: int, max_bytes: int) -> bytes:
        return bytes(self.data[offset:offset + max_bytes])


def read_all(store: SegmentStore, segment: str, offset: int = 0, chunk: int = 1 << 30) -> bytes:
    """Every byte from ``offset`` to the current length, in reads of at most ``chunk`` bytes."""
    out = bytearray()
    length = store.info(segment).length
    while offset < length:
        r = store.read(segment, offset, chunk)
        assert r.offset == offset and r.next_offset == offset + len(r.data) and r.data
        out += r.data
        offset = r.next_offset
    return bytes(out)


def segment_events(store: SegmentStore, segment: str) -> list[bytes]:
    """Every event of a segment, from its start offset to its current length, in offset order."""
    return [event for _, event in parse_events(read_all(store, segment, store.info(segment).start_offset))]


def index_entries(segment: str) -> list[IndexEntry]:
    """The segment's raw index entries and chunks (stale ones included), in offset order."""
    return sorted((e for prefix in (ENTRY_PREFIX, CHUNK_PREFIX)
                   for e in IndexEntry.query(segment, IndexEntry.sk.startswith(prefix), consistent_read=True)),
                  key=lambda e: e.offset)


def head(segment: str) -> SegmentMeta:
    return SegmentMeta.get(segment, META_KEY, consistent_read=True)


def object_keys(store: SegmentStore, segment: str) -> set[str]:
    s3 = store.deployment.s3
    keys: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=store.deployment.bucket,
                                                             Prefix=f"segments/{segment}/"):
        keys.update(o["Key"] for o in page.get("Contents", []))
    return keys


def assert_clean_tiling(segment: str, start: int, length: int) -> list[IndexEntry]:
    """The index holds no stale entries: the live entries tile [start', length) without overlap."""
    entries = [e for e in index_entries(segment) if e.offset < length]
    for a, b in itertools.pairwise(entries):
        assert a.end == b.offset, f"entries {a.offset}+{a.size} and {b.offset}+{b.size} overlap or leave a gap"
    if entries:
        assert entries[0].offset <= start < entries[0].end or entries[0].offset == start == length
        assert entries[-1].end == length
    return entries


def check_reads(store: SegmentStore, segment: str, model: SegmentModel, offsets: list[int],
                sizes: tuple[int, ...] = (1, 100, 1 << 30)) -> None:
    """Reads from each offset with each size equal the model; below the start they raise Truncated."""
    for offset in offsets:
        for size in sizes:
            if offset < model.start:
                try:
                    store.read(segment, offset, size)
                except Truncated as e:
                    assert e.details.get("start_offset") == model.start
                    continue
                raise AssertionError(f"a read at {offset} below the start {model.start} did not raise Truncated")
            if offset > model.length:
                continue
            r = store.read(segment, offset, size)
            want = model.expected(offset, size)
            assert r.data == want, f"read({offset}, {size}) returned {len(r.data)} bytes that differ from the model"
            assert r.next_offset == offset + len(want)
            assert r.length == model.length and r.start_offset == model.start
