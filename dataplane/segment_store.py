"""The segment store: append-only segments on a DynamoDB index (Tier 1) and S3 objects (Tier 2).

Split along its paths as Pravega splits its segment store, each path a module over the shared journal
model (dataplane/journal.py: the items, the chain of index items, the invariants):

* dataplane/append_path.py: appends and merges (claim, then advance: the commit protocol);
* dataplane/read_index.py: reads, read plans, locations and tail checks;
* dataplane/storage_writer.py: tiering into S3 chunks, release below the start, orphan objects;
* here: the lifecycle (create, info, seal, truncate, delete) and ``SegmentStore``, all of them.
"""

from __future__ import annotations

import time  # noqa: F401 - the append path's waits sleep through it; tests patch segment_store.time.sleep
from dataclasses import dataclass

from pynamodb.exceptions import DeleteError, PutError, UpdateError

from dataplane.append_path import AppendPath, AppendResult
from dataplane.journal import (
    MERGE_KEY,
    StoreSettings,
    _failed_condition,
    now_ms,
    tier_shard,
    validate_segment_name,
)
from dataplane.models import (
    CHUNK_PREFIX,
    ENTRY_PREFIX,
    META_KEY,
    WRITER_PREFIX,
    SegmentMeta,
    WriterState,
)
from dataplane.rates import Rates
from dataplane.read_index import (
    MAX_LOCATE_BYTES,
    LocateResult,
    Location,
    PlanPart,
    ReadIndex,
    ReadResult,
    SegmentTail,
)
from dataplane.scale_signals import (
    APPEND_REQUEST_SPLIT,
    ScaleThresholds,
    append_request_split,
    first_check_ms,
    scale_shard,
    unmark_actions,
)
from dataplane.storage_writer import StorageWriter
from rillet.errors import (
    InvalidArgument,
    SegmentNotFound,
    WriteConflict,
)

# What other modules import from here: the store, and the model of its answers and settings.
__all__ = ["MAX_LOCATE_BYTES", "MERGE_KEY", "AppendResult", "LocateResult", "Location", "PlanPart", "ReadResult",
           "SegmentInfo", "SegmentStore", "SegmentTail", "StoreSettings", "now_ms", "validate_segment_name"]


@dataclass(frozen=True)
class SegmentInfo:
    name: str
    start_offset: int
    length: int
    sealed: bool
    created_ms: int
    event_rates: tuple[float, ...]
    byte_rates: tuple[float, ...]
    stream_incarnation: int | None = None  # the created_ms of the stream record it was created for (None: not recorded)
    append_rates: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)  # append requests a second, as the other rates
    scale_at: int | None = None  # when auto-scaling is due to look at it (None: not a candidate)
    append_split: float = APPEND_REQUEST_SPLIT  # append requests a second that make it hot, by its mode
    waiting_rates: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)  # appends waiting behind others, on average


class SegmentStore(AppendPath, ReadIndex, StorageWriter):
    """A segment's lifecycle, and every path of it (one object per function instance)."""

    def create(self, segment: str, stream_incarnation: int | None = None,
               scaling: ScaleThresholds | None = None, sublogs: bool = False,
               sublog_shards: int | None = None) -> bool:
        """Create an empty segment of the stream incarnation ``stream_incarnation`` (its record's
        ``created_ms``); returns False if it already existed (creation is idempotent). A segment of an
        auto-scaled stream gets the stream's ``scaling`` thresholds and its first scale mark
        (dataplane/scale_signals.py). With ``sublogs`` (a stream's segment, not a transaction's), the
        segment is in sub-log mode for its life if its stream's ``sublog_shards`` says so, or, where the
        stream leaves it (None), the deployment's (``StoreSettings.sublog_shards``).

        A head left under the name by an older incarnation (a finisher that stalled across a delete and
        create again of the stream: nothing refers to it, and nothing of it can be read) is deleted and
        the segment created anew; one of a newer incarnation is StreamRecreated, as the caller is then
        the stale one."""
        validate_segment_name(segment)
        for _ in range(3):
            try:
                created = now_ms()
                head = SegmentMeta(segment, META_KEY, created_ms=created, stream_incarnation=stream_incarnation)
                if scaling is not None:
                    head.scaling, head.scale_shard = scaling.to_item(), scale_shard(segment)
                    head.scale_at = first_check_ms(created)
                shards = self.settings.sublog_shards if sublog_shards is None else sublog_shards
                if sublogs and shards:
                    head.sublog_shards = shards
                head.save(condition=SegmentMeta.pk.does_not_exist())
                return True
            except PutError as e:
                if not _failed_condition(e):
                    raise
            try:
                meta = self._meta(segment)
            except SegmentNotFound:
                continue  # deleted meanwhile: create it again
            found = meta.stream_incarnation
            if stream_incarnation is None or found is None or int(found) >= stream_incarnation:
                self._check_incarnation(segment, meta, stream_incarnation)
                return False
            self.delete(segment, int(meta.created_ms))  # an older incarnation's leftover: ours is new
        raise WriteConflict(f"segment {segment} is being created and deleted concurrently; try again")

    def info(self, segment: str) -> SegmentInfo:
        meta = self._meta(segment)
        rates = Rates.from_item(meta.rates.as_dict() if meta.rates else None, now_ms()).decayed(now_ms())
        return SegmentInfo(segment, meta.start, meta.length, meta.sealed, meta.created_ms, rates.events, rates.bytes,
                           None if meta.stream_incarnation is None else int(meta.stream_incarnation),
                           rates.appends, None if meta.scale_at is None else int(meta.scale_at),
                           append_request_split(meta.sublog_shards), rates.waiting)

    def seal(self, segment: str, incarnation: int | None = None, stream_incarnation: int | None = None) -> int:
        """Seal the segment and return its final length (idempotent). With ``incarnation`` (the head
        record's ``created_ms``), only that incarnation: a name created again is SegmentNotFound, so a
        caller that read the old one never seals the new one. With ``stream_incarnation``, only a segment
        of that incarnation of its stream (or one that records none): a workflow of a stream deleted and
        created again never seals the new stream's segment of the same name."""
        # No append commits any more: a grace period later, the next tiering pass deletes the objects
        # that failed or crashed appends left under the segment's prefix (_remove_orphans). Set even
        # where an S3 block's append booked a later look; the pass comes at ``tier_at`` (kept when set,
        # as a blind update cannot take a minimum), at the latest a sweep period after that append.
        # A sealed segment never scales: it leaves the scale-candidates index in the same update.
        orphans_after = now_ms() + self.settings.orphan_grace_ms
        condition = SegmentMeta.pk.exists()
        if incarnation is not None:
            condition &= SegmentMeta.created_ms == incarnation
        if stream_incarnation is not None:
            condition &= SegmentMeta.stream_incarnation.does_not_exist() \
                | (SegmentMeta.stream_incarnation == stream_incarnation)
        try:
            meta = SegmentMeta(segment, META_KEY)
            meta.update(actions=[SegmentMeta.sealed.set(True),
                                 SegmentMeta.orphans_after.set(orphans_after),
                                 SegmentMeta.tier_shard.set(tier_shard(segment)),
                                 SegmentMeta.tier_at.set(SegmentMeta.tier_at | orphans_after),
                                 *unmark_actions()],
                        condition=condition)
            return meta.length
        except UpdateError as e:
            if _failed_condition(e):
                raise SegmentNotFound(f"segment {segment} does not exist"
                                      + ("" if incarnation is None else f" as incarnation {incarnation}")
                                      + ("" if stream_incarnation is None
                                         else f" in stream incarnation {stream_incarnation}")) from e
            raise

    def truncate(self, segment: str, offset: int, incarnation: int | None = None) -> None:
        """Make ``offset`` the segment's start; later reads below it fail with Truncated.

        Only moves forward and never past the tail. Bytes below the new start are released right
        away; a crash part-way leaves index entries below the start that the next truncation or
        tiering pass releases (see ``_release_below``). With ``incarnation``, only that incarnation:
        nothing happens to a name created again.
        """
        meta = self._meta(segment)
        if incarnation is not None and int(meta.created_ms) != incarnation:
            return  # deleted and created again: the new incarnation is not this truncation's
        if offset < meta.start:
            return  # already truncated further: truncation only moves forward
        if offset > meta.length:
            raise InvalidArgument(f"cannot truncate {segment} at {offset}: beyond its length {meta.length}")
        try:
            meta.update(actions=[SegmentMeta.start.set(offset)],
                        condition=(SegmentMeta.start <= offset) & (SegmentMeta.created_ms == meta.created_ms))
        except UpdateError as e:
            if not _failed_condition(e):
                raise
        self._release_below(segment)

    def delete(self, segment: str, incarnation: int | None = None) -> None:
        """Delete the segment, its index, its objects and the segments merged into it (idempotent).

        The segment is sealed first so that no append commits while its index is being removed.
        With ``incarnation`` (the head record's ``created_ms`` the caller read), only that incarnation
        goes: nothing happens if the head is another one or gone, and afterwards only its own index
        items, writer states and the objects they name are removed, and the head only if still its.
        (Without it, everything under the name goes, including the prefix's orphan objects: callers
        that may race a re-create pass the incarnation.)
        """
        if incarnation is not None:
            try:
                if int(self._meta(segment).created_ms) != incarnation:
                    return  # deleted and created again: the new incarnation is not ours to delete
            except SegmentNotFound:
                return  # an earlier attempt deleted it
        try:
            self.seal(segment, incarnation)
            sealed = self._meta(segment)
        except SegmentNotFound:
            if incarnation is not None:
                return  # created again between the read and the seal
            sealed = None  # an earlier attempt got as far as deleting the head record
        if sealed is not None and sealed.sublog_shards and sealed.sealed \
                and (incarnation is None or int(sealed.created_ms) == incarnation):
            # Sealed: no batch commits any more, so no pending block will. (Not a head created again
            # since the seal: an unsealed one is another incarnation's.)
            self._delete_sublogs(segment, int(sealed.created_ms), int(sealed.sublog_shards))
        items = self._index_items(segment, ENTRY_PREFIX) + self._index_items(segment, CHUNK_PREFIX)
        if incarnation is not None:
            items = [item for item in items
                     if item.incarnation is not None and int(item.incarnation) == incarnation]
        for item in items:
            if item.source:
                self.delete(item.source)
            elif item.object_key and incarnation is not None:
                self._delete_object(item.object_key)
            self._delete_unchanged(item)
        for state in WriterState.query(segment, WriterState.sk.startswith(WRITER_PREFIX), consistent_read=True):
            if incarnation is not None and state.incarnation != incarnation:
                continue  # a later incarnation's writer
            unchanged = WriterState.last == state.last
            if incarnation is not None:
                unchanged &= WriterState.incarnation == incarnation
            try:  # sealed: no append of this incarnation saves writer state any more
                state.delete(condition=unchanged)
            except DeleteError as e:
                if not _failed_condition(e):
                    raise
        if incarnation is None:
            self._delete_objects(self._object_prefix(segment))
        condition = SegmentMeta.sealed == True
        if incarnation is not None:
            condition &= SegmentMeta.created_ms == incarnation
        try:
            SegmentMeta(segment, META_KEY).delete(condition=condition)
        except DeleteError as e:
            if not _failed_condition(e):
                raise  # else an earlier attempt deleted it, or the name was created again
