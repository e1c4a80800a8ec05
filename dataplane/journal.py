"""The journal model of a segment, beneath its paths (append_path, read_index, storage_writer and the
lifecycle in segment_store): the items of a segment's partition, the settings, and the chain of index
items every path reads.

Invariants the rest of the code relies on (docs/dataplane.md lists each record's with its guard):

* Bytes below the head record's length never change; a reader sees them in offset order.
* The committed bytes form a chain of index items: from the one covering the start offset, each
  next one starts where the previous ends, up to the length. Chain items are ``e#`` entries and
  ``c#`` chunks (tiered runs of inline entries); chunks never overlap (tiering passes are fenced).
* A stale appender (one acting on an old head record) can still claim a key that tiering or
  truncation freed, at no cost to the append path. Such a key lies inside a chunk or below the start,
  so its claim is garbage by position: readers ignore ``e#`` entries that start inside a chunk, and
  never read below the start. Garbage is deleted later, index item only, each delete conditioned on
  the exact item read; payload (objects, merged segments) is released only through the chain.

Why chunks have their own key range rather than replacing the first entry of their run: a reader
asked for an arbitrary offset must find the entry that holds it. With chunks among the entries, a
stale claim can sit at the nearest key below the offset inside a chunk, and telling it apart would
mean walking back, possibly over every entry down to the start. With a separate range, the chunk
that may hold an offset is one query away (skipped when the head record shows no chunk can be there),
and an ``e#`` entry is garbage exactly when it starts inside a chunk.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from pynamodb.exceptions import DeleteError, DoesNotExist, TransactWriteError
from pynamodb.expressions.condition import Condition

from dataplane.deployment import Deployment
from dataplane.models import (
    BYTES,
    CHUNK_PREFIX,
    ENTRY_PREFIX,
    EVENTS,
    META_KEY,
    IndexEntry,
    SegmentMeta,
    chunk_key,
    entry_key,
)
from dataplane.shards import shard_key
from rillet.errors import (
    InvalidArgument,
    SegmentNotFound,
    StreamRecreated,
)

MERGE_KEY = "_merge"  # the writer name of a merge's index entry (no writer id can start with "_")
BATCH_KEY = "_batch"  # the writer name of a sub-log batch's index entries (dataplane/sublog_path.py)


TIER_PREFIX = "due"  # the tiering index's partition keys: due#<n> (dataplane.shards)


def tier_shard(segment: str) -> str:
    """The tiering index partition of ``segment``'s head record while it is due."""
    return shard_key(TIER_PREFIX, segment)


_CONDITION_FAILED = "ConditionalCheckFailedException"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class StoreSettings:
    """Tunables of the segment store (see docs/dataplane.md for how the defaults were chosen)."""

    inline_max: int = 3 * 1024  # blocks up to this size are kept inline in the index entry
    chunk_target: int = 8 * 1024 * 1024  # tiering packs inline ranges into S3 chunks of this size
    tier_min_age_ms: int = 60_000  # entries younger than this are never rewritten (see module doc)
    tier_max_age_ms: int = 15 * 60_000  # inline bytes older than this are tiered even if few
    # How long a block waits for its writer's previous block before it answers OutOfOrder (the writer
    # sends it again while that block is in flight): long enough for a commit under way, short enough
    # that no invocation idles.
    order_wait_ms: int = 100
    order_poll_ms: int = 10  # the first wait; later ones grow by half
    # An appender that finds another one's claim at the tail pauses and reads the head record again,
    # rather than race the claim's owner to commit it: that owner advances within a round trip, and every
    # racer would pay a write and reads for nothing. Only a claim still at the tail after a pause is helped
    # through (its owner may have died). The pause is a random part of the round trip its claim just took
    # (at least ``contention_pause_ms``), doubling with each round it loses, up to the maximum;
    # once it has lost twice, about the time the appenders ahead of it in the segment's queue take
    # (dataplane/append_path.py), up to the same maximum.
    contention_pause_ms: int = 5
    contention_pause_max_ms: int = 1000
    # How old an unnamed block object must be before it is deleted as an orphan: its request must be
    # over. The append function's timeout is 30 s (infra/terraform/lambda.tf); twenty times that covers
    # a request in flight when the function is stopped and skew between S3's clock and ours.
    orphan_grace_ms: int = 10 * 60_000
    # How long after an S3 block's append an open segment's objects are next looked over for orphans
    # (objects of appends that died between their PutObject and their commit; a sealed segment is
    # looked over once, after sealing). A look lists the segment's objects and reads its index, so it
    # runs at most this often per segment, and only for segments that appended S3 blocks since.
    orphan_sweep_ms: int = 24 * 3_600_000
    # How many writers the head record lists (every append reads and rewrites it, so its size sets the
    # cost of an append); the others' last blocks are WriterState items, read only when such a writer
    # appends. Eight entries keep the head record near 1 KB: about 1 write unit per rewrite.
    head_writers: int = 8
    # A writer id unused for this long may be forgotten (its WriterState item expires): a resend of a
    # block first sent longer ago than this, from a writer id the segment does not know, is refused with
    # WriterExpired rather than appended a second time. Kafka expires idle producer ids the same way.
    writer_expiry_ms: int = 7 * 24 * 3_600_000
    # Sub-log mode (dataplane/sublog_path.py) for the segments created from now on of streams that do not
    # choose their own (StreamConfiguration.sublog_shards): the shards each one's appends spread over (0:
    # the chain of claims, which costs a lone writer 3 requests an append where sub-logs cost about 7 +
    # shards, and takes tens of appends a second where sub-logs take a thousand). A batcher's lease: how
    # long it holds the segment unless it hands it on, before an appender takes over: what a batcher's
    # death (its function stopped) stalls the segment for. Well above a batch's round trips (tens of ms),
    # or waiting appenders take it from slow batchers (harmless, as a batch is not conditioned on it, but
    # every take is a write, of the lease's own item). Waiting appenders look again (head, writer state
    # and lease) every fifth of it.
    sublog_shards: int = 0
    sublog_lease_ms: int = 500
    # How long a sub-log appender waits for a batch at most before it withdraws its block and answers
    # WriteConflict (retryable): below the append function's 30 s timeout.
    sublog_wait_ms: int = 10_000

    @classmethod
    def from_env(cls) -> StoreSettings:
        """The settings of a deployed function: ``RILLET_WRITER_EXPIRY_HOURS`` (at least 1) sets the
        writer expiry window, ``RILLET_SUBLOG_SHARDS`` (0 to 64) the sub-log mode of the segments created
        from now on of streams that do not choose their own."""
        changes = {}
        hours = os.environ.get("RILLET_WRITER_EXPIRY_HOURS")
        if hours is not None:
            if not hours.isdigit() or int(hours) < 1:
                raise ValueError(f"RILLET_WRITER_EXPIRY_HOURS must be a whole number of hours >= 1, not {hours!r}")
            changes["writer_expiry_ms"] = int(hours) * 3_600_000
        shards = os.environ.get("RILLET_SUBLOG_SHARDS")
        if shards is not None:
            if not shards.isdigit() or int(shards) > 64:
                raise ValueError(f"RILLET_SUBLOG_SHARDS must be a whole number from 0 to 64, not {shards!r}")
            changes["sublog_shards"] = int(shards)
        return cls(**changes)


# DynamoDB's TTL deletes an expired item some time after it expires, never before; the margin covers
# the skew between the functions' clocks and DynamoDB's.
_EXPIRY_MARGIN_MS = 3_600_000


@dataclass(frozen=True)
class AppendResult:
    offset: int | None  # None only for a duplicate of an older block than the writer's last one
    length: int  # the segment length right after the block
    duplicate: bool = False  # an earlier request appended (claimed) the block: this one only acknowledges it


@dataclass(frozen=True)
class _Block:
    """What an append or a merge wants placed at the tail."""

    size: int
    writer: str
    first: int = 0
    last: int = 0
    data: bytes | None = None
    object_key: str | None = None
    source: str | None = None
    raw: bool = False  # bytes of a byte stream, not framed events
    age_ms: int | None = field(default=None, compare=False)  # since the writer first sent it (None: unknown)
    incarnation: int | None = field(default=None, compare=False)  # of a claim read back (see IndexEntry)
    token: int | None = None  # an inline block's request token (see IndexEntry.token)

    @property
    def content(self) -> str:
        return BYTES if self.raw else EVENTS

    def to_entry(self, segment: str, offset: int, incarnation: int) -> IndexEntry:
        return IndexEntry(segment, entry_key(offset), offset=offset, size=self.size, data=self.data,
                          object_key=self.object_key, source=self.source, writer=self.writer,
                          first=self.first, last=self.last, created_ms=now_ms(), raw=self.raw or None,
                          incarnation=incarnation, token=self.token)


def _same_incarnation(item: IndexEntry | _Block, incarnation: int | None) -> bool:
    """Whether an index item belongs to the segment's ``incarnation`` (None: not checked, as for merged
    transaction segments, whose names carry a random transaction id and are never created again)."""
    return incarnation is None or item.incarnation is None or int(item.incarnation) == incarnation


def _holds(size: int, data: bytes | None, object_key: str | None, source: str | None) -> Condition:
    """A condition true only while the item still holds exactly these bytes (inline, object or segment):
    deletes are conditioned on it, so none removes an entry that changed since it was read."""
    condition = IndexEntry.size == size
    for attribute, value in ((IndexEntry.data, data), (IndexEntry.object_key, object_key),
                             (IndexEntry.source, source)):
        condition &= attribute.does_not_exist() if value is None else attribute == value
    return condition


def _unchanged(entry: IndexEntry) -> Condition:
    """True only while the item is still exactly ``entry`` as read: what every delete of an index item
    is conditioned on."""
    return (_holds(entry.size, entry.data, entry.object_key, entry.source)
            & (IndexEntry.offset == entry.offset) & (IndexEntry.created_ms == entry.created_ms))


class _IndexGap(RuntimeError):
    """No index entry covers an offset below the length: only a concurrent truncation causes that."""


def _failed_condition(error: Exception) -> bool:
    return getattr(error, "cause_response_code", None) == _CONDITION_FAILED


def _cancelled_by_condition(error: TransactWriteError) -> bool:
    return any(r is not None and r.code == "ConditionalCheckFailed" for r in error.cancellation_reasons or [])


def validate_segment_name(name: str) -> str:
    if not name or len(name) > 512 or not all(c.isalnum() or c in "./-_" for c in name):
        raise InvalidArgument(f"invalid segment name {name!r}")
    return name


class SegmentJournal:
    """What every path of a segment shares: its deployment, settings, head record and index chain."""

    def __init__(self, deployment: Deployment, settings: StoreSettings | None = None) -> None:
        self.deployment = deployment
        self.settings = settings or StoreSettings.from_env()

    def _meta(self, segment: str) -> SegmentMeta:
        try:
            return SegmentMeta.get(segment, META_KEY, consistent_read=True)
        except DoesNotExist:
            raise SegmentNotFound(f"segment {segment} does not exist") from None

    @staticmethod
    def _check_incarnation(segment: str, meta: SegmentMeta, incarnation: int | None) -> None:
        """StreamRecreated if the caller's position was taken on another incarnation of the stream than
        the one ``meta`` (the head record just read) belongs to. Costs no request."""
        current = meta.stream_incarnation
        if incarnation is not None and current is not None and int(current) != incarnation:
            raise StreamRecreated(f"segment {segment} belongs to incarnation {int(current)} of its stream, "
                                  f"created after the incarnation {incarnation} this position was taken on "
                                  "(the stream was deleted and created again)",
                                  expected=incarnation, current=int(current))

    @staticmethod
    def _object_prefix(segment: str) -> str:
        return f"segments/{segment}/"

    def _delete_object(self, key: str) -> None:
        self.deployment.s3.delete_object(Bucket=self.deployment.bucket, Key=key)

    def _delete_objects(self, prefix: str) -> None:
        s3, bucket = self.deployment.s3, self.deployment.bucket
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})

    def _index_items(self, segment: str, prefix: str, below: int | None = None) -> list[IndexEntry]:
        """Every ``e#`` or ``c#`` item of the segment (only those whose offset is below ``below``)."""
        upper = (entry_key if prefix == ENTRY_PREFIX else chunk_key)(below - 1) if below is not None else prefix + "~"
        if below is not None and below <= 0:
            return []
        return list(IndexEntry.query(segment, IndexEntry.sk.between(prefix, upper), consistent_read=True))

    def _delete_unchanged(self, entry: IndexEntry) -> bool:
        """Delete the item only if it is still exactly ``entry``; False if it changed or is gone."""
        try:
            entry.delete(condition=_unchanged(entry))
            return True
        except DeleteError as e:
            if _failed_condition(e):
                return False
            raise

    def _remove_other_incarnations(self, segment: str, items: list[IndexEntry]) -> None:
        """Delete index items of an earlier life of the segment's name (stale appenders' claims that landed
        after it was deleted), each only if unchanged. An incarnation is over for good once a head record
        read after the item shows another one or none (a name created again gets a new created_ms), so
        the head record is read again here, after the items; if it shows the items' own incarnation, the
        caller's view was the stale one and nothing is deleted."""
        try:
            current = int(self._meta(segment).created_ms)
        except SegmentNotFound:
            current = None
        for item in items:
            if item.incarnation is not None and (current is None or int(item.incarnation) != current):
                self._delete_unchanged(item)

    def _covering(self, segment: str, start: int, end: int, chunked: bool = True,
                  incarnation: int | None = None) -> list[tuple[IndexEntry, int, int]]:
        """The entries holding [start, end) in order, each with the sub-range it contributes."""
        return self._scan(segment, start, end, chunked, incarnation)[0]

    def _scan(self, segment: str, start: int, end: int, chunked: bool = True,
              incarnation: int | None = None) -> tuple[list[tuple[IndexEntry, int, int]], list[IndexEntry]]:
        """The chain of entries holding [start, end) (as ``_covering``), and the garbage met on the way:
        ``e#`` entries that start inside a chunk (stale claims, or entries a tiering pass has not
        deleted yet), and items of another ``incarnation`` than the head record's the caller read (stale
        claims that landed after an earlier segment of the name was deleted; only
        ``_remove_other_incarnations`` may delete those). ``chunked=False`` skips the chunk query where
        ``_may_have_chunks`` says none can be.

        The ``e#`` entries are read before the chunks. A stale claim can only land on a key that tiering
        freed after saving the chunk around it, so the chunk query, made later, sees that chunk; and a
        chunk saved meanwhile holds the same bytes as the entries it replaces, which are deleted only
        after it is saved, so tiering never opens a gap under a scan. A gap means a truncation
        released the range meanwhile.
        """
        expected = start
        garbage: dict[str, IndexEntry] = {}
        parts: list[tuple[IndexEntry, int, int]] = []
        for _attempt in range(8):
            entries, chunks = [], []
            for item in self._entries_from(segment, expected, end, incarnation) + (
                    self._chunks_over(segment, expected, end) if chunked else []):
                if _same_incarnation(item, incarnation):
                    (chunks if item.sk.startswith(CHUNK_PREFIX) else entries).append(item)
                else:
                    garbage[item.sk] = item

            def in_chunk(entry: IndexEntry) -> bool:
                return any(c.offset <= entry.offset < c.end for c in chunks)  # noqa: B023 - used at once

            garbage.update((e.sk, e) for e in entries if in_chunk(e))
            live = sorted([e for e in entries if not in_chunk(e)] + chunks, key=lambda e: e.offset)
            for entry in live:
                if entry.end <= expected:
                    continue
                if entry.offset > expected:
                    break  # a gap: look it up again
                hi = min(entry.end, end)
                parts.append((entry, expected, hi))
                expected = hi
                if expected >= end:
                    return parts, list(garbage.values())
        raise _IndexGap(f"index of {segment} has no entry covering offset {expected}")

    def _chunks_over(self, segment: str, start: int, end: int) -> list[IndexEntry]:
        """The chunks overlapping [start, end), in offset order. Chunks never overlap each other (the
        tiering fence), so the backward scan stops at the first one that ends at or below ``start``."""
        found = []
        for chunk in IndexEntry.query(segment, IndexEntry.sk.between(CHUNK_PREFIX, chunk_key(end - 1)),
                                      scan_index_forward=False, consistent_read=True, page_size=8):
            if chunk.end <= start:
                break
            found.append(chunk)
        return found[::-1]

    def _entries_from(self, segment: str, offset: int, end: int | None = None,
                      incarnation: int | None = None) -> list[IndexEntry]:
        """Entries in offset order from the one covering ``offset`` (if any), stopping before ``end``.

        Sequential readers usually ask for an offset where an entry starts, which takes one query;
        an offset inside an entry takes a second one to find that entry: the nearest key below of the
        ``incarnation`` (a stale claim of another one may sit inside the entry that holds the offset).
        """
        upper = entry_key(end - 1) if end is not None else ENTRY_PREFIX + "~"
        forward = list(IndexEntry.query(segment, IndexEntry.sk.between(entry_key(offset), upper),
                                        consistent_read=True))
        if offset > 0 and (not forward or forward[0].offset > offset):
            before = IndexEntry.query(segment, IndexEntry.sk.between(ENTRY_PREFIX, entry_key(offset)),
                                      scan_index_forward=False, page_size=2, consistent_read=True)
            nearest = next((e for e in before if _same_incarnation(e, incarnation)), None)
            if nearest is not None and nearest.end > offset:
                forward.insert(0, nearest)
        return forward
