"""The storage writer of a segment: tiering packs committed inline entries into S3 chunks, and release
deletes what lies below the start offset (objects, merged segments, index items) and the objects no
append committed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from dataplane.fanout import fan_out, per_second
from dataplane.journal import (
    TIER_PREFIX,
    SegmentJournal,
    _cancelled_by_condition,
    _failed_condition,
    _IndexGap,
    _same_incarnation,
    _unchanged,
    now_ms,
    tier_shard,
)
from dataplane.models import (
    CHUNK_PREFIX,
    ENTRY_PREFIX,
    META_KEY,
    IndexEntry,
    SegmentMeta,
    chunk_key,
    entry_key,
)
from dataplane.shards import query_every_shard
from dataplane.sublog_path import pending_object_keys
from rillet.errors import (
    SegmentNotFound,
)

DELETE_BATCH = 100  # index items deleted per TransactWriteItems (its limit: 100 actions)
TIER_WORKERS = 8  # segments a tiering run passes over at once (under PynamoDB's 10 pooled connections)
TIER_RUN_LIMIT = 1_000  # due segments one tiering run takes (docs/limits.md: the ceiling it sets)


@dataclass(frozen=True)
class TierPass:
    """What one tiering pass over a segment did."""

    bytes_moved: int
    deletes: int  # index items deleted: tiered entries, garbage, and items released below the start


@dataclass(frozen=True)
class TieringRun:
    """What a run over many segments did, and how fast: the figure to compare with the inline append rate."""

    passes: dict[str, TierPass]
    seconds: float

    @property
    def bytes_moved(self) -> int:
        return sum(p.bytes_moved for p in self.passes.values())

    @property
    def deletes(self) -> int:
        return sum(p.deletes for p in self.passes.values())

    def summary(self) -> str:
        return (f"tiered {len(self.passes)} segment(s) in {self.seconds:.2f} s: {self.deletes} deletes "
                f"({per_second(self.deletes, self.seconds):,.0f}/s), {self.bytes_moved} bytes "
                f"({per_second(self.bytes_moved, self.seconds):,.0f} B/s)")


class StorageWriter(SegmentJournal):
    """Tiering and release of a segment's payload."""

    def segments_due_for_tiering(self, limit: int = TIER_RUN_LIMIT) -> list[str]:
        """The segments whose tiering pass is due, earliest first: one query per shard of the index
        (``limit`` each, so at most ``limit`` from every shard before the cut)."""
        now = now_ms()
        due = query_every_shard(TIER_PREFIX, lambda key: SegmentMeta.tiering.query(
            key, SegmentMeta.tier_at <= now, limit=limit), SegmentMeta)
        return [m.pk for m in sorted(due, key=lambda m: m.tier_at)[:limit]]

    def tier_many(self, segments: list[str], workers: int = TIER_WORKERS) -> TieringRun:
        """A pass over each segment, ``workers`` segments at once: a pass is a chain of round trips on one
        segment's partition, so passes over different segments overlap (each segment's own pass stays
        serial: its steps are ordered, and its partition takes about 1,000 write units a second)."""
        passes, seconds = fan_out(self.tier_pass, segments, workers)
        return TieringRun(dict(zip(segments, passes, strict=True)), seconds)

    def tier(self, segment: str) -> int:
        """One pass over the segment (:meth:`tier_pass`); returns the number of bytes moved."""
        return self.tier_pass(segment).bytes_moved

    def tier_pass(self, segment: str) -> TierPass:
        """Move committed inline entries into S3 chunks of about ``chunk_target`` bytes.

        The pass first bumps the head record's tiering epoch, then scans; it saves each chunk (at
        ``c#<offset>``) in one transaction with a check that the epoch is still its own, so a pass
        that a newer one overtook saves nothing more and chunks never overlap. Each step is safe to
        repeat: put the chunk object (deterministic key), save the chunk entry, delete the run's
        entries (each only if unchanged), then adjust the head record's inline byte count. A crash
        between steps leaves entries inside the chunk, which readers skip and the next pass deletes,
        like stale claims. Entries go in batches (:meth:`_delete_all_unchanged`).
        """
        try:
            meta = self._meta(segment)
            meta.update(actions=[SegmentMeta.tier_epoch.add(1)], condition=SegmentMeta.pk.exists())
        except (SegmentNotFound, UpdateError) as e:
            if isinstance(e, UpdateError) and not _failed_condition(e):
                raise
            return TierPass(0, 0)  # deleted
        epoch = meta.tier_epoch
        try:
            parts, garbage = self._scan(segment, meta.start, meta.length, True, int(meta.created_ms)) \
                if meta.length > meta.start else ([], [])
        except _IndexGap:
            return TierPass(0, 0)  # a truncation released the range meanwhile; the segment stays due
        if meta.sealed:  # a claim at the final length never commits: its appender died before removing it
            garbage += list(IndexEntry.query(meta.pk, IndexEntry.sk.between(entry_key(meta.length), ENTRY_PREFIX + "~"),
                                             consistent_read=True))
        stale = [item for item in garbage if not _same_incarnation(item, int(meta.created_ms))]
        if stale:
            self._remove_other_incarnations(segment, stale)
        # Only the items: a garbage item's object may be another entry's too.
        deletes = self._delete_all_unchanged([e for e in garbage if _same_incarnation(e, int(meta.created_ms))])
        entries = [entry for entry, _, _ in parts]
        horizon = now_ms() - self.settings.tier_min_age_ms
        moved = 0
        chunk_end = meta.chunk_end or 0
        tiered: set[str] = set()
        for run in self._inline_runs(entries, meta, horizon):
            run_deletes = self._tier_run(segment, run, epoch, chunk_end, int(meta.created_ms))
            if run_deletes is None:
                return TierPass(moved, deletes)  # a newer pass took over; it finishes the job
            deletes += run_deletes
            moved += run[-1].end - run[0].offset
            chunk_end = max(chunk_end, run[-1].end)
            tiered.update(e.sk for e in run)
        remaining = [e for e in entries if e.data is not None and e.sk not in tiered]
        actions = [SegmentMeta.inline_bytes.set(sum(e.size for e in remaining))]
        due = []  # when the segment needs its next pass
        if remaining:
            oldest = min(e.created_ms for e in remaining)
            due.append(max(now_ms(), oldest + self.settings.tier_min_age_ms)
                       if meta.sealed or oldest + self.settings.tier_max_age_ms <= now_ms()
                       else oldest + self.settings.tier_max_age_ms)
        if meta.orphans_after is not None:
            if meta.orphans_after <= now_ms():
                # Sealed, no pending block can commit any more: their objects are orphans too.
                pending_shards = 0 if meta.sealed else int(meta.sublog_shards or 0)
                self._remove_orphans(segment, epoch, int(meta.created_ms), pending_shards)
                actions.append(SegmentMeta.orphans_after.remove())
            else:
                due.append(meta.orphans_after)
        if due:  # under its shard (a head record due since before the index was sharded moves there)
            actions += [SegmentMeta.tier_at.set(min(due)), SegmentMeta.tier_shard.set(tier_shard(segment))]
        else:
            actions += [SegmentMeta.tier_at.remove(), SegmentMeta.tier_shard.remove()]
        try:
            # Only if no append committed since the scan: an inline append meanwhile has added its bytes
            # and kept the segment due; overwriting that would drop it from the tiering index for good.
            # And only if no newer pass began, whose count this one would overwrite; nor a sealing, whose
            # look for orphans (after this pass's listing) removing orphans_after would cancel.
            meta.update(actions=actions,
                        condition=(SegmentMeta.length == meta.length) & (SegmentMeta.tier_epoch == epoch)
                        & (SegmentMeta.created_ms == meta.created_ms) & (SegmentMeta.sealed == meta.sealed))
        except UpdateError as e:
            if not _failed_condition(e):
                raise
        deletes += self._release_below(segment)
        return TierPass(moved, deletes)

    def _inline_runs(self, entries: list[IndexEntry], meta: SegmentMeta, horizon: int) -> Iterator[list[IndexEntry]]:
        """Maximal runs of adjacent inline entries old enough to tier, each at most ``chunk_target``."""
        run: list[IndexEntry] = []
        size = 0
        for entry in entries:
            eligible = entry.data is not None and (meta.sealed or entry.created_ms <= horizon)
            if run and (not eligible or size + entry.size > self.settings.chunk_target):
                yield run
                run, size = [], 0
            if eligible:
                run.append(entry)
                size += entry.size
        if run:
            yield run

    def _tier_run(self, segment: str, run: list[IndexEntry], epoch: int, chunk_end: int,
                  incarnation: int) -> int | None:
        """Pack one run into a chunk; returns how many of its entries it deleted, None if a newer tiering
        pass began (nothing was saved)."""
        first, last = run[0], run[-1]
        # The key names the pass's epoch: only this pass ever saves a chunk item naming the object, and
        # only while the epoch is its own, so an object it could not save is nobody's. It names the
        # segment's incarnation too, whose epochs count anew: no key is ever used twice, so a URL presigned
        # for a chunk of a deleted segment never serves the bytes of one created again under the name.
        key = f"{self._object_prefix(segment)}c/{first.offset:020d}-{last.end:020d}-{epoch}-{incarnation}"
        self.deployment.s3.put_object(Bucket=self.deployment.bucket, Key=key, Body=b"".join(e.data for e in run))
        chunk = IndexEntry(segment, chunk_key(first.offset), offset=first.offset, size=last.end - first.offset,
                           object_key=key, created_ms=now_ms(), incarnation=incarnation)
        # The epoch of this incarnation: a segment created again under the name counts its epochs anew.
        fenced = (SegmentMeta.tier_epoch == epoch) & (SegmentMeta.created_ms == incarnation)
        try:
            with TransactWrite(connection=IndexEntry._get_connection().connection) as transaction:
                if chunk.end > chunk_end:
                    transaction.update(SegmentMeta(segment, META_KEY), actions=[SegmentMeta.chunk_end.set(chunk.end)],
                                       condition=fenced)
                else:
                    transaction.condition_check(SegmentMeta, segment, META_KEY, condition=fenced)
                transaction.save(chunk, condition=IndexEntry.pk.does_not_exist())
        except TransactWriteError as e:
            if not _cancelled_by_condition(e):
                raise
            # Refused, or a resend of our transaction that an earlier attempt applied (its answer lost):
            # then the chunk item names our key, which nothing else ever names.
            if self._saved_object_key(segment, chunk.sk) != key:
                self._delete_object(key)
                return None
        return self._delete_all_unchanged(run)

    def _delete_all_unchanged(self, items: list[IndexEntry]) -> int:
        """Delete each item only if it is still exactly as read, up to DELETE_BATCH in one
        TransactWriteItems; returns how many were deleted.

        Not BatchWriteItem: its deletes take no condition, and an unconditional delete could remove an
        item that changed since it was read, such as a committed entry of the segment deleted and created
        again under the name meanwhile. A transaction costs twice a delete's write units, for a hundredth
        of the round trips. One that a changed or vanished item refused (a concurrent pass deleted it,
        or a resend found its own deletes applied) is done again item by item, each delete conditioned
        the same way. The request token makes botocore's resend of an applied batch succeed.
        """
        deleted = 0
        connection = IndexEntry._get_connection().connection
        for i in range(0, len(items), DELETE_BATCH):
            batch = items[i:i + DELETE_BATCH]
            if len(batch) == 1:
                deleted += self._delete_unchanged(batch[0])
                continue
            try:
                with TransactWrite(connection=connection, client_request_token=uuid.uuid4().hex) as transaction:
                    for item in batch:
                        transaction.delete(item, condition=_unchanged(item))
                deleted += len(batch)
            except TransactWriteError as e:
                if not any(r is not None and r.code in ("ConditionalCheckFailed", "TransactionConflict")
                           for r in e.cancellation_reasons or []):
                    raise
                deleted += sum(self._delete_unchanged(item) for item in batch)
        return deleted

    @staticmethod
    def _saved_object_key(segment: str, sk: str) -> str | None:
        try:
            return IndexEntry.get(segment, sk, consistent_read=True).object_key
        except DoesNotExist:
            return None

    def _remove_orphans(self, segment: str, epoch: int, incarnation: int, sublog_shards: int = 0) -> int:
        """Delete the objects under the segment's prefix that no index item names and none ever will;
        returns how many. Runs when ``orphans_after`` is due, in the pass with ``epoch``: once after
        sealing, and on an open segment a sweep period after an S3 block's append (``orphan_sweep_ms``).

        A block object's key is unique to the request that put it, and only that request creates
        items naming it; past ``orphan_grace_ms`` that request is over, so the items naming the object
        can only go, never come. A chunk object's key names its pass's epoch, and a pass saves chunks
        only while the epoch is its own; every earlier pass's is below ``epoch``, and a pass of another
        incarnation (``incarnation`` is the segment's) saves nothing at all. So an object of either kind
        that no item names after the listing is nobody's, whatever runs concurrently.

        In sub-log mode a pending block's item names its object too, and a batcher may commit it after
        its request is over (dataplane/sublog_path.py). Those items are read before the index: an item
        committed in between has its entry by then (the batch is one transaction), and one put after
        the read belongs to a request still under way, whose object is younger than the grace.
        """
        s3, bucket, prefix = self.deployment.s3, self.deployment.bucket, self._object_prefix(segment)
        horizon = time.time() - self.settings.orphan_grace_ms / 1000
        candidates = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix):]
                request_over = name.startswith("b/") and obj["LastModified"].timestamp() < horizon
                pass_over = name.startswith("c/") and _chunk_pass_over(name, epoch, incarnation)
                if request_over or pass_over:
                    candidates.append(obj["Key"])
        if not candidates:
            return 0
        named = pending_object_keys(segment, incarnation, sublog_shards) if sublog_shards else set()
        named |= {item.object_key for prefix_ in (ENTRY_PREFIX, CHUNK_PREFIX)
                  for item in self._index_items(segment, prefix_)}
        orphans = [key for key in candidates if key not in named]
        for i in range(0, len(orphans), 1000):  # DeleteObjects takes up to 1,000 keys
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in orphans[i:i + 1000]],
                                                      "Quiet": True})
        return len(orphans)

    def _release_below(self, segment: str) -> int:
        """Release what lies wholly below the start offset: objects, merged segments, index items.

        Payload goes first, and only that of committed entries, found by following the chain up from
        the head record's ``released`` offset (below it, payload is already gone). Then ``released``
        moves up, and only then are the index items below it deleted, each only if unchanged. So a
        key below the start is free only below ``released``, and a stale claim that lands there
        later is deleted without its object, which the block's committed copy may still need.
        A crash anywhere leaves work that the next truncation or tiering pass finishes. Returns how
        many index items it deleted.
        """
        try:
            meta = self._meta(segment)
        except SegmentNotFound:
            return 0
        start, released, incarnation = meta.start, meta.released, int(meta.created_ms)
        chunks = self._index_items(segment, CHUNK_PREFIX, below=start)
        entries = self._index_items(segment, ENTRY_PREFIX, below=start)
        stale = [item for item in chunks + entries if not _same_incarnation(item, incarnation)]
        if stale:
            self._remove_other_incarnations(segment, stale)
            chunks = [c for c in chunks if _same_incarnation(c, incarnation)]
            entries = [e for e in entries if _same_incarnation(e, incarnation)]
        if start > released:
            def in_chunk(entry: IndexEntry) -> bool:
                return any(c.offset <= entry.offset < c.end for c in chunks)

            chain = sorted([e for e in entries if e.offset >= released and not in_chunk(e)] + chunks,
                           key=lambda e: e.offset)
            reached = released
            for entry in chain:
                if entry.end <= reached:
                    continue
                if entry.offset > reached or entry.end > start:
                    break
                if entry.source:
                    self.delete(entry.source)
                elif entry.object_key:
                    self.deployment.s3.delete_object(Bucket=self.deployment.bucket, Key=entry.object_key)
                reached = entry.end
            if reached > released:
                try:
                    meta.update(actions=[SegmentMeta.released.set(reached)],
                                condition=(SegmentMeta.released.does_not_exist() | (SegmentMeta.released < reached))
                                & (SegmentMeta.created_ms == incarnation))
                except UpdateError as e:
                    if not _failed_condition(e):
                        raise
                released = reached
        released_chunks = [chunk for chunk in chunks if chunk.end <= released]
        for chunk in released_chunks:
            # A chunk's object is its alone (named by its range). This one may have been saved after
            # the walk above (a tiering pass that read an older start): delete its object too.
            self.deployment.s3.delete_object(Bucket=self.deployment.bucket, Key=chunk.object_key)
        return self._delete_all_unchanged([entry for entry in entries if entry.offset < released] + released_chunks)


def _chunk_pass_over(name: str, epoch: int, incarnation: int) -> bool:
    """Whether the pass that put the chunk object ``c/<first>-<end>-<epoch>-<incarnation>`` is over: an
    earlier epoch, or another incarnation. (``c/<first>-<end>-<epoch>``: put before keys named the
    incarnation, by an earlier epoch of this one or of an older one, so over unless epoch-current.)"""
    fields = name[len("c/"):].split("-")
    if len(fields) == 4:
        return int(fields[3]) != incarnation or int(fields[2]) < epoch
    return len(fields) == 3 and int(fields[2]) < epoch
