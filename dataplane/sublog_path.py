"""Sub-log mode: a segment that many writers append to at once commits their blocks a batch at a time.

On the chain (dataplane/append_path.py) every append claims the tail and advances the head record, so
a segment commits one block per three round trips whatever the number of writers, and every loser of
a round pays for it. In sub-log mode (``SegmentMeta.sublog_shards``, fixed when the segment is created:
its stream's ``StreamConfiguration.sublog_shards``, or ``StoreSettings.sublog_shards`` for a stream
that leaves it to the deployment) each appender writes its block where it meets no other, and one
appender at a time, the *batcher*, commits every waiting block in one transaction:

1. Read the head record and the writer's state (a ``WriterState`` in the writer's own shard
   ``<segment>#<incarnation>#w<n>``): de-duplicate, check expiry and event order as the chain does.
   A block larger than ``inline_max`` is put to S3 first, under a key of the request's own.
2. Put the block as a ``PendingBlock`` in shard ``<segment>#<incarnation>#p<n>`` (n: a hash of the
   writer and the block's last event number, so one busy writer's blocks spread too), with a copy of
   the writer's state as read, unless its key is taken: taken by this request's own put (its token),
   it is the put's lost answer; by a twin request of the same block, this one waits for that block and
   answers a duplicate.
3. Wait: poll the item (eventually consistent, in its shard) until a batch sets its offset, then delete
   it and answer. The batcher is whoever holds the segment's lease (a ``BatchLease`` item of its own,
   off the head record's partition, read with the writer's state): an appender that finds it free
   takes it, with one conditional put.
4. Batch: read the head and the lease (one BatchGetItem) and every pending shard, in parallel. Take
   each writer's state from its blocks' copies (the freshest, if a waiting block follows it); only
   writers with no such copy have their states read (one BatchGetItem). Choose the oldest blocks whose
   predecessors are committed or chosen, and commit them in one TransactWriteItems:
   - the head record's advance past them all, conditioned on its length, on not being sealed and on
     the incarnation;
   - the lease: renewed, handed on to the oldest block left (whose item is marked) or made free;
   - their index entries: each run of inline blocks one entry (writer ``BATCH_KEY``), each S3 block
     one of its own, so reads, tiering and truncation treat them as any entry;
   - each block's item: its offset set and its bytes removed, conditioned on its still pending, so no
     block commits twice;
   - each writer's state, conditioned on its last event number being the predecessor's and on its
     offset being the one read (the two name a state: each batch raises the first, and no offset is
     used twice), so a copy that no longer holds refuses the batch, and the next round reads the
     states. A round on copies acts only on a clean choice: a refusal of a conditional block, or a
     choice of nothing, waits for a round that read the states.
   A transaction is all or nothing, and botocore's resend of it carries the same client token, so it
   applies once. One refused names the actions that failed: the blocks and writers concerned are left
   out and the rest is sent again. After a lost answer the batcher waits on its item like any appender:
   the item says whether the batch applied.

A batcher goes on batching until its own block commits. An appender whose block waited a fifth of a
lease reads the head record, its writer's state and the lease again: it takes over a lease that ran
out (its batcher died), answers
SegmentSealed (withdrawing its block) if the segment was sealed, and OutOfOrder if its predecessor
never came. Every withdrawal is a delete conditioned on the block still pending, so it never removes a
committed block. A conditional block refused by a batch is withdrawn by its appender or, if that died,
by the request that meets it under its key (answering OffsetMismatch) or a later batch. Merges (transaction commits) keep the chain's claim and advance: both condition on
the head's length, so they serialize with batches.

Cost: a lone writer pays about seven requests plus one query per shard an append, against the chain's
three, so sub-logs are for segments many writers share (docs/dataplane.md, "Sub-logs").
"""

from __future__ import annotations

import secrets
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError
from pynamodb.exceptions import (
    DeleteError,
    DoesNotExist,
    PutError,
    PynamoDBException,
    TransactWriteError,
    UpdateError,
)
from pynamodb.transactions import TransactWrite

from dataplane.deployment import batch_get
from dataplane.journal import (
    _CONDITION_FAILED,
    _EXPIRY_MARGIN_MS,
    BATCH_KEY,
    AppendResult,
    SegmentJournal,
    _Block,
    _failed_condition,
    now_ms,
)
from dataplane.models import (
    BYTES,
    EVENTS,
    META_KEY,
    RECENT_BLOCKS,
    BatchLease,
    IndexEntry,
    PendingBlock,
    SegmentItem,
    SegmentMeta,
    WriterState,
    entry_key,
    writer_key,
)
from rillet.errors import (
    OffsetMismatch,
    OutOfOrder,
    SegmentNotFound,
    SegmentSealed,
    WriteConflict,
)

_MAX_ACTIONS = 100  # DynamoDB's limit on a TransactWriteItems
_ENTRY_MAX_BYTES = 300 * 1024  # the inline bytes of one batch entry (an item holds at most 400 KB)
_PENDING_TTL_S = 3_600  # a dead appender's item goes after this (TTL); a live one waits sublog_wait_ms at most
_MAX_POLL_S = 0.02  # a poll is half a read unit in the block's shard; the next batcher learns its turn by one
# What a request that tells nothing raises (throttled, 5xx, a reset, a timeout): a wait goes on after it.
_TRANSIENT = (PynamoDBException, BotoCoreError, ClientError)
_ROUNDS = 8  # rounds that did not commit the batcher's own block before it gives the lease up
_AGAIN = object()  # what a batch round answers when the next round should read everything again
_LEASE_KEY = "lease"  # the sort key of a segment's BatchLease item
# A batch round's reads, in parallel: each is a round trip, and the round waits for all (the head with
# the lease, and the pending shards).
_SHARD_QUERIES = ThreadPoolExecutor(max_workers=10, thread_name_prefix="sublog-shards")


def _shard(key: str, shards: int) -> int:
    return zlib.crc32(key.encode()) % shards  # stable across processes, unlike hash()


def shard_pk(segment: str, incarnation: int, kind: str, n: int) -> str:
    """The partition key of a segment's ``n``-th shard of pending blocks (``kind`` "p") or writer states
    ("w"): every read and write of sub-log items builds its key here."""
    return f"{segment}#{incarnation}#{kind}{n}"


def pending_pk(segment: str, incarnation: int, writer: str, last: int, shards: int) -> str:
    return shard_pk(segment, incarnation, "p", _shard(f"{writer}#{last}", shards))


def writer_pk(segment: str, incarnation: int, writer: str, shards: int) -> str:
    return shard_pk(segment, incarnation, "w", _shard(writer, shards))


def lease_pk(segment: str, incarnation: int) -> str:
    return f"{segment}#{incarnation}#lease"


def pending_sk(writer: str, last: int) -> str:
    return f"{writer}#{last:020d}"


@dataclass(frozen=True)
class _Watch:
    """The pending item an appender waits on: its own (``mine``), or a twin request's of the same block."""

    pk: str
    sk: str
    token: int
    mine: bool

    def is_item(self, item: PendingBlock) -> bool:
        return (item.pk, item.sk) == (self.pk, self.sk) and int(item.token) == self.token


class SublogAppends(SegmentJournal):
    """Appends to a segment in sub-log mode (see the module docstring). The chain's checks, and its help
    for a merge claim met at the tail, come from AppendPath, which this is a base of."""

    def _append_sublog(self, meta: SegmentMeta, block: _Block, after: int | None, expected_offset: int | None,
                       upload) -> AppendResult:
        """Append ``block`` to the sub-log segment ``meta`` describes. ``upload`` puts a large block's
        bytes to S3 and returns the block naming its object (called once the block is known to be new)."""
        segment, incarnation, shards = meta.pk, int(meta.created_ms), int(meta.sublog_shards)
        token = block.token if block.token is not None else secrets.randbits(32)
        deadline = time.monotonic() + self.settings.sublog_wait_ms / 1000  # the whole append's wait
        try:
            for attempt in range(4):  # again when a twin request's item we waited on was withdrawn
                if attempt:
                    meta = self._meta(segment)
                    if int(meta.created_ms) != incarnation:
                        raise SegmentNotFound(f"segment {segment} was deleted while this append was under way")
                state, lease = self._state_and_lease(segment, incarnation, block.writer, shards)
                done = self._sublog_duplicate(meta, state, block)
                if done is None:
                    self._check_open(segment, meta, block)
                    self._check_not_expired(segment, state, block)
                    if after is not None and _last_event(state) < after:
                        state = self._await_predecessor(meta, block, after)
                        done = self._sublog_duplicate(meta, state, block)  # a twin's copy may have come with it
                if done is None:
                    if after is None or _last_event(state) >= after:
                        self._check_event_order(state, block)
                    if block.data is None and block.object_key is None:
                        block = upload(block)
                    # A block that names a predecessor never starts its writer, whatever state was read.
                    new_writer = state is None and (after is None or after < 0)
                    done = self._put_pending(meta, block, token, new_writer, expected_offset, state)
                    if not isinstance(done, AppendResult):
                        done = self._await_batch(meta, lease, block, done, after, expected_offset, deadline)
                if done is not None:
                    if done.duplicate and block.object_key is not None:
                        self._delete_object(block.object_key)  # another request's copy was committed
                    return done
        except (SegmentSealed, SegmentNotFound, OutOfOrder, OffsetMismatch, WriteConflict):
            if block.object_key is not None:
                self._delete_object(block.object_key)  # withdrawn: nothing names it
            raise
        raise WriteConflict(f"twin requests of writer {block.writer}'s block {block.first}..{block.last} keep "
                            "withdrawing it; send it again")

    def _await_predecessor(self, meta: SegmentMeta, block: _Block, after: int) -> dict | None:
        """The writer's state once the block's predecessor (event ``after``) is committed or pending; a
        predecessor still nowhere after ``order_wait_ms`` is OutOfOrder, as on the chain (the writer sends
        the block again once that one is in)."""
        segment, incarnation, shards = meta.pk, int(meta.created_ms), int(meta.sublog_shards)
        deadline = time.monotonic() + self.settings.order_wait_ms / 1000
        poll_s = self.settings.order_poll_ms / 1000
        while True:
            if self._is_pending(segment, incarnation, block.writer, after, shards):
                return self._sublog_state(segment, incarnation, block.writer, shards)
            state = self._sublog_state(segment, incarnation, block.writer, shards)  # after: it may have just committed
            if _last_event(state) >= after:
                return state
            if time.monotonic() > deadline:
                raise OutOfOrder(f"writer {block.writer}'s event {after} is not appended to {segment} yet: send "
                                 "this block again once it is", last_event_number=_last_event(state),
                                 awaiting_event_number=after)
            time.sleep(poll_s)
            poll_s *= 1.5

    @staticmethod
    def _state_and_lease(segment: str, incarnation: int, writer: str, shards: int) -> tuple[dict | None,
                                                                                           BatchLease | None]:
        """The writer's state and the segment's lease, in one request (BatchGetItem, consistent)."""
        state, lease = None, None
        for item in batch_get(SegmentItem, [(writer_pk(segment, incarnation, writer, shards), writer_key(writer)),
                                            (lease_pk(segment, incarnation), _LEASE_KEY)], consistent_read=True):
            if isinstance(item, WriterState) and int(item.incarnation) == incarnation:
                state = item.as_state()
            elif isinstance(item, BatchLease):
                lease = item
        return state, lease

    def _sublog_state(self, segment: str, incarnation: int, writer: str, shards: int) -> dict | None:
        try:
            item = WriterState.get(writer_pk(segment, incarnation, writer, shards), writer_key(writer),
                                   consistent_read=True)
        except DoesNotExist:
            return None
        return item.as_state() if int(item.incarnation) == incarnation else None

    def _sublog_duplicate(self, meta: SegmentMeta, state: dict | None, block: _Block) -> AppendResult | None:
        """The answer to a block the writer's state shows committed already (None: it is new)."""
        if not state or block.last > int(state["l"]):
            return None
        if (int(state["f"]), int(state["l"])) == (block.first, block.last):
            return AppendResult(int(state["o"]), int(meta.length), duplicate=True)
        # An older block (a pipelined writer's resend): the writer's recent blocks say where, or its item,
        # until its appender deletes it.
        for first, last, offset in state.get("r", []):
            if (first, last) == (block.first, block.last):
                return AppendResult(offset, int(meta.length), duplicate=True)
        try:
            item = PendingBlock.get(pending_pk(meta.pk, int(meta.created_ms), block.writer, block.last,
                                               int(meta.sublog_shards)),
                                    pending_sk(block.writer, block.last), consistent_read=True)
            offset = item.offset if int(item.first) == block.first else None
        except DoesNotExist:
            offset = None
        return AppendResult(None if offset is None else int(offset), int(meta.length), duplicate=True)

    def _put_pending(self, meta: SegmentMeta, block: _Block, token: int, new_writer: bool,
                     expected_offset: int | None, seen: dict | None) -> _Watch | AppendResult:
        """Put the block's item, with the writer's state as read (``seen``), unless its key is taken: the
        item to wait on, or the answer when a twin request's copy is committed there already."""
        segment, incarnation, shards = meta.pk, int(meta.created_ms), int(meta.sublog_shards)
        pk, sk = pending_pk(segment, incarnation, block.writer, block.last, shards), pending_sk(block.writer, block.last)
        item = PendingBlock(pk, sk, writer=block.writer, first=block.first, last=block.last, size=block.size,
                            data=block.data, object_key=block.object_key, raw=block.raw or None, token=token,
                            since_ms=now_ms(), new_writer=new_writer or None, expected_offset=expected_offset,
                            seen=seen, expires_at=now_ms() // 1000 + _PENDING_TTL_S)
        table = PendingBlock._get_connection()
        for _ in range(2):  # again once, after clearing a refused twin's item from the key
            try:  # through botocore, as append_path._put_unless_taken: PynamoDB's save drops the refused item
                table.connection.client.put_item(
                    TableName=table.table_name, Item=item.serialize(), ConditionExpression="attribute_not_exists(#pk)",
                    ExpressionAttributeNames={"#pk": PendingBlock.pk.attr_name},
                    ReturnValuesOnConditionCheckFailure="ALL_OLD")
                return _Watch(pk, sk, token, mine=True)
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") != _CONDITION_FAILED:
                    raise PutError("Failed to put item", e) from e
                raw = e.response.get("Item")
            try:
                existing = PendingBlock.from_raw_data(raw) if raw else PendingBlock.get(pk, sk, consistent_read=True)
            except DoesNotExist:
                return _Watch(pk, sk, token, mine=False)  # withdrawn meanwhile: the wait finds it gone, and we put again
            if int(existing.token) == token:
                return _Watch(pk, sk, token, mine=True)  # our own put, applied by an attempt whose answer was lost
            if existing.offset is not None:
                offset = int(existing.offset) if int(existing.first) == block.first else None
                return AppendResult(offset, int(meta.length), duplicate=True)
            if existing.refused_at is None:
                return _Watch(pk, sk, int(existing.token), mine=False)
            self._clear_refusal(existing, expected_offset, int(meta.length))
        return _Watch(pk, sk, int(existing.token), mine=False)  # refused once more: the wait finds it gone

    @staticmethod
    def _clear_refusal(item: PendingBlock, expected_offset: int | None, length: int) -> None:
        """A twin request's item that a batch refused: its appender died before withdrawing it, or is
        about to answer a client that has sent this request instead. The refusal is final (no batch
        commits a refused item), so this request removes it, conditioned on the refusal it read, and
        answers OffsetMismatch too if its own expected offset is not the length as known now: the larger
        of the refusal's and its own head read's ``length``, both read during this request (lengths only
        grow). Else it returns, and the caller puts its own block (an unconditional one of the same
        events, or the length reached the offset since)."""
        _delete_if(item, PendingBlock.offset.does_not_exist() & (PendingBlock.token == item.token)
                   & (PendingBlock.refused_at == item.refused_at))
        known = max(int(item.refused_at), length)
        if expected_offset is not None and expected_offset != known:
            raise OffsetMismatch(f"expected offset {expected_offset} but the segment's length was {known}",
                                 length=known)

    def _await_batch(self, meta: SegmentMeta, lease: BatchLease | None, block: _Block, watch: _Watch,
                     after: int | None, expected_offset: int | None, deadline: float) -> AppendResult | None:
        """Wait until a batch commits the watched item, batching while this request holds the lease; the
        answer, or None when a twin's item was withdrawn (the caller puts its own again). A request that
        tells nothing (throttled, 5xx, reset) does not end the wait: only the deadline does."""
        segment, check_s = meta.pk, self.settings.sublog_lease_ms / 5000  # a look a fifth of a lease
        started = time.monotonic()
        try:
            token = self._take_lease(meta) if _lease_free(lease) else None
        except _TRANSIENT:
            token = None  # whether it was taken or not, the lease runs out
        handed_used = None
        check_at, poll_s = started + check_s, self.settings.order_poll_ms / 2000
        while True:
            try:
                if token is not None:
                    done = self._batch(meta, token, watch, block)
                    if done is not None:
                        return done
                    token = None
                item = self._read_watched(watch)
                if item is None:
                    if watch.mine:
                        raise WriteConflict(f"writer {block.writer}'s pending block {block.first}..{block.last} of "
                                            f"{segment} was removed while waiting; send it again")
                    return None
                if item.offset is not None:
                    if watch.mine and item.batcher is not None and item.batcher != handed_used:
                        self._release_lease(meta, item.batcher)  # handed to us, unused: the next one takes it at once
                    return self._committed(watch, int(item.offset), int(item.first), block)
                if item.refused_at is not None:
                    if not watch.mine:
                        self._clear_refusal(item, expected_offset, int(meta.length))
                        return None
                    if item.batcher is not None and item.batcher != handed_used:
                        # Handed the lease by a batch that raced another batcher's refusal: unused, it
                        # would stall the segment until it ran out.
                        self._release_lease(meta, item.batcher)
                    self._withdraw(watch)
                    raise OffsetMismatch(f"expected offset {int(item.expected_offset)} but the segment's length "
                                         f"was {int(item.refused_at)}", length=int(item.refused_at))
                if watch.mine and item.batcher is not None and item.batcher != handed_used:
                    token = handed_used = item.batcher  # the last batcher handed its lease to this block's appender
                    continue
                now = time.monotonic()
                if now >= check_at and now <= deadline:
                    check_at = now + check_s
                    fresh = self._recheck(meta, block, watch, after, now - started)
                    if isinstance(fresh, AppendResult):
                        return fresh
                    meta, lease = fresh
                    if not watch.mine and now_ms() - int(item.since_ms) > self.settings.sublog_lease_ms \
                            and self._withdraw(watch):
                        # A twin's block still pending a lease after its put: its request is likely dead,
                        # and its block may never be batchable (a predecessor withdrawn since). Withdrawn
                        # (only while pending), its key takes ours; a live twin answers WriteConflict, as
                        # nothing of it was appended.
                        return None
                    token = self._take_lease(meta) if _lease_free(lease) else None
                    if token is not None:
                        continue
            except _TRANSIENT:
                pass  # the wait goes on: the next round asks again
            if time.monotonic() > deadline:
                done = self._withdraw_or_answer(watch, block)  # a twin's too: it must not commit after this answer
                if done is not None:
                    return done
                raise WriteConflict(f"writer {block.writer}'s block was not committed to {segment} within "
                                    f"{self.settings.sublog_wait_ms} ms; send it again")
            time.sleep(poll_s)
            poll_s = min(poll_s * 1.5, _MAX_POLL_S)

    @staticmethod
    def _read_watched(watch: _Watch, consistent: bool = False) -> PendingBlock | None:
        """The watched item, or None once it is gone. Anything but the watched item, as found by an
        eventually consistent read, is read again consistently before it counts: a lagging replica may
        not have our put yet, or may still hold a twin's item that was replaced by ours."""
        for read_consistent in ((True,) if consistent else (False, True)):
            try:
                item = PendingBlock.get(watch.pk, watch.sk, consistent_read=read_consistent)
            except DoesNotExist:
                continue
            if int(item.token) == watch.token:
                return item
        return None

    @staticmethod
    def _committed(watch: _Watch, offset: int, first: int, block: _Block) -> AppendResult:
        """The answer for a watched item a batch committed. Our own item is deleted: its bytes are in the
        batch's entry, and the writer's state de-duplicates from now on."""
        if watch.mine:
            try:
                PendingBlock(watch.pk, watch.sk).delete(
                    condition=PendingBlock.offset.exists() & (PendingBlock.token == watch.token))
            except _TRANSIENT:
                pass  # gone already, or left to its TTL: the block is committed either way
        if first != block.first:
            return AppendResult(None, offset + block.size, duplicate=True)  # not this very block: no offset to tell
        return AppendResult(offset, offset + block.size, duplicate=not watch.mine)

    def _recheck(self, meta: SegmentMeta, block: _Block, watch: _Watch, after: int | None,
                 waited_s: float) -> tuple[SegmentMeta, BatchLease | None] | AppendResult:
        """What a block that waited a fifth of a lease finds out: the head record, then the writer's state
        and the lease (consistent). Raises, after withdrawing the block, if it can no longer commit; the
        answer if it or a twin's copy committed meanwhile; else the fresh head record and lease."""
        segment, incarnation, shards = meta.pk, int(meta.created_ms), int(meta.sublog_shards)
        try:
            fresh = self._meta(segment)
        except SegmentNotFound:
            fresh = None
        state, lease = self._state_and_lease(segment, incarnation, block.writer, shards)
        copy = self._sublog_duplicate(fresh or meta, state, block)
        if copy is not None:  # the block, or a twin request's copy of it, committed
            return self._withdraw_or_answer(watch, block) or copy
        refusal = None
        if fresh is None or int(fresh.created_ms) != incarnation:
            refusal = SegmentNotFound(f"segment {segment} was deleted while this append was under way")
        elif fresh.sealed:
            refusal = SegmentSealed(f"segment {segment} is sealed at length {fresh.length}", length=fresh.length)
        elif after is not None and waited_s > self.settings.order_wait_ms / 1000:
            last = _last_event(state)
            if last < after and not self._is_pending(segment, incarnation, block.writer, after, shards):
                refusal = OutOfOrder(f"writer {block.writer}'s event {after} is not appended to {segment} yet: "
                                     "send this block again once it is", last_event_number=last,
                                     awaiting_event_number=after)
        if refusal is None:
            return fresh, lease
        # A twin's block too: its request may be dead, and its block must not commit after this answer.
        done = self._withdraw_or_answer(watch, block)
        if done is not None:
            return done
        raise refusal

    @staticmethod
    def _is_pending(segment: str, incarnation: int, writer: str, last: int, shards: int) -> bool:
        try:
            item = PendingBlock.get(pending_pk(segment, incarnation, writer, last, shards), pending_sk(writer, last),
                                    consistent_read=True)
        except DoesNotExist:
            return False
        return item.pending

    def _withdraw_or_answer(self, watch: _Watch, block: _Block) -> AppendResult | None:
        """Withdraw our pending block: None once withdrawn, or the answer if a batch committed it first."""
        if self._withdraw(watch):
            return None
        item = self._read_watched(watch, consistent=True)  # the refusal's reason, as it is now
        if item is not None and item.offset is not None:
            return self._committed(watch, int(item.offset), int(item.first), block)
        return None

    @staticmethod
    def _withdraw(watch: _Watch) -> bool:
        """Delete our item unless a batch committed it; False if one did (or it is gone)."""
        try:
            PendingBlock(watch.pk, watch.sk).delete(
                condition=PendingBlock.offset.does_not_exist() & (PendingBlock.token == watch.token))
            return True
        except DeleteError as e:
            if not _failed_condition(e):
                raise
            return False

    def _delete_sublogs(self, segment: str, incarnation: int, shards: int) -> None:
        """Delete a sealed segment's pending blocks (with the objects of those never committed) and its
        writers' states, each only if unchanged."""
        for n in range(shards):
            for item in PendingBlock.query(shard_pk(segment, incarnation, "p", n), consistent_read=True):
                if item.object_key is not None and item.offset is None:
                    self._delete_object(item.object_key)
                _delete_if(item, PendingBlock.token == item.token)
            for state in WriterState.query(shard_pk(segment, incarnation, "w", n), consistent_read=True):
                _delete_if(state, WriterState.last == state.last)
        lease = self._lease(segment, incarnation)
        if lease is not None:
            _delete_if(lease, (BatchLease.expires_at == lease.expires_at)
                       & (BatchLease.until.does_not_exist() if lease.until is None else BatchLease.until == lease.until))

    @staticmethod
    def _lease(segment: str, incarnation: int) -> BatchLease | None:
        try:
            return BatchLease.get(lease_pk(segment, incarnation), _LEASE_KEY, consistent_read=True)
        except DoesNotExist:
            return None

    def _lease_item(self, meta: SegmentMeta, token: str | None, now: int) -> BatchLease:
        """The segment's lease as ``token`` holds it from ``now`` (None: free)."""
        return BatchLease(lease_pk(meta.pk, int(meta.created_ms)), _LEASE_KEY, batcher=token,
                          until=None if token is None else now + self.settings.sublog_lease_ms,
                          expires_at=now // 1000 + _PENDING_TTL_S)

    def _take_lease(self, meta: SegmentMeta) -> str | None:
        """The lease, if free or run out (a put conditioned on it), or None. A sealed segment's is taken
        in vain: the round that reads the head gives it up."""
        token, now = secrets.token_hex(8), now_ms()
        try:
            self._lease_item(meta, token, now).save(
                # Ours already: botocore's resend of a take whose answer was lost.
                condition=BatchLease.batcher.does_not_exist() | (BatchLease.until < now) | (BatchLease.batcher == token))
            return token
        except PutError as e:
            if not _failed_condition(e):
                raise
            return None

    def _release_lease(self, meta: SegmentMeta, token: str) -> None:
        """Give the lease up, if still ours; a request that tells nothing leaves it to run out."""
        try:
            self._lease_item(meta, None, now_ms()).save(condition=BatchLease.batcher == token)
        except _TRANSIENT:
            pass

    def _batch(self, meta: SegmentMeta, token: str, watch: _Watch, block: _Block) -> AppendResult | None:
        """Batch while this request holds the lease, until its watched block commits: its answer, or
        None (the lease lost or left, or a transaction's answer lost: the caller's wait tells)."""
        for n in range(_ROUNDS):
            try:
                done = self._batch_round(meta, token, watch, block, copies=n == 0)
            except _TRANSIENT:
                continue  # a request that told nothing (a lost transaction's answer too): the next round reads all
            if done is not _AGAIN:
                return done
        self._release_lease(meta, token)
        return None

    def _batch_round(self, meta: SegmentMeta, token: str, watch: _Watch, block: _Block,
                     copies: bool) -> AppendResult | None | object:
        """One round: the answer (our block committed), None (stop: the lease lost or left, the segment
        sealed or gone, our block no longer pending), or _AGAIN. With ``copies``, the writers' states
        are taken from the blocks' copies where those explain them, and only a clean choice is acted on:
        a round after one that did not commit reads them all, so a copy that was no longer true costs a
        round, at most a refused transaction, and never refuses or holds back a block by itself."""
        segment, incarnation, shards = meta.pk, int(meta.created_ms), int(meta.sublog_shards)
        head = _SHARD_QUERIES.submit(self._head_and_lease, segment, incarnation)  # with the shards': one round trip
        waiting = self._pending(segment, incarnation, shards)
        pending = [p for p in waiting if p.refused_at is None]
        meta, held = head.result()
        if meta is None or meta.sealed or int(meta.created_ms) != incarnation or held is None or held.batcher != token:
            return None
        if not any(watch.is_item(p) for p in pending):
            self._release_lease(meta, token)
            return None  # committed, refused or withdrawn: the wait reads which
        states, unknown = _copied_states(pending) if copies else ({}, {p.writer for p in pending})
        states.update(self._writer_states(segment, incarnation, shards, unknown))
        chosen, refusals = self._choose(meta, pending, states)
        if copies and (refusals or not chosen):
            # Told by the copies alone: a twin's late copy of a committed block would be refused, or a
            # block would wait for a predecessor that a copy does not show. The next round reads the states.
            return _AGAIN
        # The head was read beside the shards: a block expecting more than it showed may have been put
        # after a later length was read, so the length is read again before that one is refused (and
        # only if the segment is still this incarnation: a name created again meanwhile is no reason to
        # refuse; the blocks' waits find it deleted).
        length = int(meta.length)
        if any(int(p.expected_offset) > length for p in refusals):
            try:
                fresh = self._meta(segment)
            except SegmentNotFound:
                return None
            if int(fresh.created_ms) != incarnation:
                return None
            length = int(fresh.length)
        for item in refusals:
            if int(item.expected_offset) != length:
                self._refuse(item, length)
        if not chosen:
            if refusals:
                return _AGAIN
            self._release_lease(meta, token)  # our block waits for its predecessor: the next batcher's
            return None
        offsets = _offsets(int(meta.length), chosen)
        ours = next((i for i, p in enumerate(chosen) if watch.is_item(p)), None)
        chosen_keys = {(p.pk, p.sk) for p in chosen}
        # The lease goes only to a block whose appender still waits (it gives up after sublog_wait_ms),
        # never to one refused in this round (its appender answers OffsetMismatch and batches nothing);
        # a dead appender's block that no batch can take, or that a batch refused, is withdrawn after
        # twice that, or it would be read by every round until its TTL.
        alive_since = now_ms() - self.settings.sublog_wait_ms
        passed_over = chosen_keys | {(p.pk, p.sk) for p in refusals}
        rest = [p for p in pending if (p.pk, p.sk) not in passed_over and int(p.since_ms) > alive_since]
        for dead in waiting:
            if (dead.pk, dead.sk) not in chosen_keys and int(dead.since_ms) < alive_since - self.settings.sublog_wait_ms:
                self._withdraw(_Watch(dead.pk, dead.sk, int(dead.token), mine=False))
        applied = self._commit(meta, token, chosen, offsets, states, hand_to=None if ours is None else
                               (rest[0] if rest else False))
        if applied and ours is not None:
            return self._committed(watch, offsets[ours], int(chosen[ours].first), block)
        return _AGAIN  # refused, or its answer lost: the next round reads whether it applied

    def _pending(self, segment: str, incarnation: int, shards: int) -> list[PendingBlock]:
        """Every block of the segment no batch committed, oldest first: pending ones, and refused ones
        not withdrawn yet (a round withdraws those of dead appenders). Bounded by the appenders waiting
        (each waits ``sublog_wait_ms`` at most, with one block) and dead appenders' blocks (until a round
        withdraws them, or their TTL)."""

        def shard(n: int) -> list[PendingBlock]:
            return list(PendingBlock.query(shard_pk(segment, incarnation, "p", n), consistent_read=True,
                                           filter_condition=PendingBlock.offset.does_not_exist()))

        found = [p for items in _SHARD_QUERIES.map(shard, range(shards)) for p in items]
        return sorted(found, key=lambda p: (int(p.since_ms), p.pk, p.sk))

    @staticmethod
    def _head_and_lease(segment: str, incarnation: int) -> tuple[SegmentMeta | None, BatchLease | None]:
        """The head record (None: the segment is gone) and the segment's lease, in one BatchGetItem."""
        meta, lease = None, None
        for item in batch_get(SegmentItem, [(segment, META_KEY), (lease_pk(segment, incarnation), _LEASE_KEY)],
                                          consistent_read=True):
            if isinstance(item, SegmentMeta):
                meta = item
            elif isinstance(item, BatchLease):
                lease = item
        return meta, lease

    @staticmethod
    def _writer_states(segment: str, incarnation: int, shards: int, writers: set[str]) -> dict[str, dict]:
        """The writers' states (``WriterState.as_state``) as stored, read consistently in one request."""
        keys = [(writer_pk(segment, incarnation, w, shards), writer_key(w)) for w in sorted(writers)]
        found = batch_get(WriterState, keys, consistent_read=True)
        return {s.sk[len(writer_key("")):]: s.as_state() for s in found if int(s.incarnation) == incarnation}

    def _choose(self, meta: SegmentMeta, pending: list[PendingBlock],
                states: dict[str, dict]) -> tuple[list[PendingBlock], list[PendingBlock]]:
        """The blocks of the next batch, in offset order, and the conditional blocks to refuse.

        A writer's blocks go in event order, each after its predecessor (committed, in the writer's
        state, or chosen before it); a writer with no state starts only at a block whose appender found
        none. Writers go in the order of their oldest block, as many as one transaction takes. A
        conditional block goes alone, and only at its expected offset (else it is refused). The orphan
        sweep keeps the objects pending blocks name, so a block of a request that is over may commit."""
        kind = meta.content or (BYTES if pending and pending[0].raw else EVENTS)
        by_writer: dict[str, list[PendingBlock]] = {}
        for p in pending:
            if (BYTES if p.raw else EVENTS) == kind:
                by_writer.setdefault(p.writer, []).append(p)
        chosen: list[PendingBlock] = []
        refusals: list[PendingBlock] = []
        writers = 0
        for writer, items in by_writer.items():
            state = states.get(writer)
            expect = None if state is None else int(state["l"]) + 1
            run: list[PendingBlock] = []
            for p in sorted(items, key=lambda p: int(p.first)):
                if expect is None and not p.new_writer:
                    break
                if expect is not None and int(p.first) != expect:
                    if int(p.first) < expect:
                        continue  # a twin's copy of committed events: its appender answers a duplicate
                    break
                if p.expected_offset is not None:
                    if run or chosen:
                        break
                    if int(p.expected_offset) != int(meta.length):
                        refusals.append(p)
                        break
                    return [p], refusals  # alone, at its offset
                run.append(p)
                expect = int(p.last) + 1
            # The head record's update, the lease, a successor's mark, and a state per writer besides the blocks'.
            while run and 3 + writers + 1 + _actions(chosen + run) > _MAX_ACTIONS:
                run.pop()
            if run:
                chosen += run
                writers += 1
        return chosen, refusals

    @staticmethod
    def _refuse(item: PendingBlock, length: int) -> None:
        try:
            item.update(actions=[PendingBlock.refused_at.set(length)],
                        condition=PendingBlock.offset.does_not_exist() & PendingBlock.refused_at.does_not_exist()
                        & (PendingBlock.token == item.token))
        except UpdateError as e:
            if not _failed_condition(e):
                raise

    def _commit(self, meta: SegmentMeta, token: str, chosen: list[PendingBlock], offsets: list[int],
                states: dict[str, dict], hand_to: PendingBlock | bool | None) -> bool | None:
        """One transaction committing ``chosen`` at ``offsets`` (from the head's length): True if applied,
        False if refused (the caller reads everything again), None if its answer was lost. ``hand_to``:
        None keeps the lease (the batcher's own block is not in it), False removes it, a pending block
        gets it (its item is marked)."""
        segment, incarnation, shards = meta.pk, int(meta.created_ms), int(meta.sublog_shards)
        now, tail = now_ms(), int(meta.length)
        end = offsets[-1] + int(chosen[-1].size)
        kind = BYTES if chosen[0].raw else EVENTS
        entries = _entries(segment, incarnation, chosen, offsets, now)
        actions = self._growth_actions(meta, now, events=sum(int(p.last) - int(p.first) + 1 for p in chosen),
                                       size=end - tail, inline=sum(int(p.size) for p in chosen if p.object_key is None),
                                       s3=any(p.object_key for p in chosen), appends=len(chosen), content=kind)
        actions.append(SegmentMeta.length.set(end))
        handed = secrets.token_hex(8)
        lease = self._lease_item(meta, token if hand_to is None else None if hand_to is False else handed, now)
        # Not conditioned on the lease: a batcher whose round outlasted its lease may still commit, if no
        # other batch came first (the length), so two batchers at worst waste a transaction, and a slow
        # round never loses to a thief as slow as itself without end. The lease only says who batches
        # (this batch's put of it leaves one holder: a thief's next round finds another token).
        condition = (SegmentMeta.length == tail) & (SegmentMeta.sealed == False) \
            & (SegmentMeta.created_ms == meta.created_ms) \
            & (SegmentMeta.content.does_not_exist() | (SegmentMeta.content == kind))
        first_of: dict[str, PendingBlock] = {}
        last_of: dict[str, tuple[PendingBlock, int]] = {}
        recent: dict[str, list[list[int]]] = {w: list(s.get("r", [])) for w, s in states.items()}
        for p, offset in zip(chosen, offsets):
            first_of.setdefault(p.writer, p)
            last_of[p.writer] = (p, offset)
            recent.setdefault(p.writer, []).append([int(p.first), int(p.last), offset])
        try:
            with TransactWrite(connection=SegmentMeta._get_connection().connection,
                               client_request_token=secrets.token_hex(16)) as transaction:
                transaction.update(SegmentMeta(segment, meta.sk), actions=actions, condition=condition)
                for entry in entries:
                    transaction.save(entry, condition=IndexEntry.pk.does_not_exist())
                for p, offset in zip(chosen, offsets):
                    transaction.update(PendingBlock(p.pk, p.sk),
                                       actions=[PendingBlock.offset.set(offset), PendingBlock.data.remove()],
                                       condition=PendingBlock.offset.does_not_exist()
                                       & PendingBlock.refused_at.does_not_exist() & (PendingBlock.token == p.token))
                for writer, (p, offset) in last_of.items():
                    state = WriterState(writer_pk(segment, incarnation, writer, shards), writer_key(writer),
                                        incarnation=incarnation, first=int(p.first), last=int(p.last), offset=offset,
                                        time_ms=now, recent=[[int(x) for x in b] for b in recent[writer][-RECENT_BLOCKS:]],
                                        expires_at=(now + self.settings.writer_expiry_ms + _EXPIRY_MARGIN_MS) // 1000)
                    # On the state read, or a block's copy of it: its last event number and offset name it
                    # (each batch raises the first, and no offset is a block's twice in an incarnation, so
                    # a state made again after its TTL is told apart too).
                    previous = WriterState.last.does_not_exist() if writer not in states \
                        else (WriterState.last == int(first_of[writer].first) - 1) \
                        & (WriterState.offset == int(states[writer]["o"]))
                    transaction.save(state, condition=previous)
                transaction.save(lease)  # a put, after the entries: see the cancellation reasons below
                if isinstance(hand_to, PendingBlock):
                    transaction.update(PendingBlock(hand_to.pk, hand_to.sk), actions=[PendingBlock.batcher.set(handed)],
                                       condition=PendingBlock.offset.does_not_exist() & (PendingBlock.token == hand_to.token))
            return True
        except TransactWriteError as e:
            reasons = e.cancellation_reasons
            if not reasons:
                return None
        # PynamoDB sends a transaction's puts before its updates, whatever the order they were added in:
        # the entries come first.
        for entry, reason in zip(entries, reasons[:len(entries)]):
            if reason is not None and reason.code == "ConditionalCheckFailed":
                self._meet_claim(meta, int(entry.offset))
        return False

    def _meet_claim(self, meta: SegmentMeta, offset: int) -> None:
        """An index entry was where a batch's entry goes: a merge's claim at the tail (helped through, as
        the chain does, after a pause for its owner), or a stale claim of another incarnation (removed)."""
        try:
            claim = IndexEntry.get(meta.pk, entry_key(offset), consistent_read=True)
        except DoesNotExist:
            return
        if claim.incarnation is not None and int(claim.incarnation) != int(meta.created_ms):
            self._remove_other_incarnations(meta.pk, [claim])
            return
        if offset != int(meta.length) or claim.writer == BATCH_KEY:
            return
        time.sleep(self.settings.contention_pause_ms / 1000)
        fresh = self._meta(meta.pk)
        # The claim is of the incarnation read before the pause: a name deleted and created again
        # meanwhile, at that length, must not commit it.
        if int(fresh.length) == offset and int(fresh.created_ms) == int(meta.created_ms):
            self._help_claim(fresh, offset, claim)


def pending_object_keys(segment: str, incarnation: int, shards: int) -> set[str]:
    """The objects the items in the segment's pending shards name, whatever their state: the orphan
    sweep keeps them (dataplane/storage_writer.py)."""

    def shard(n: int) -> set[str]:
        return {p.object_key for p in PendingBlock.query(shard_pk(segment, incarnation, "p", n), consistent_read=True,
                                                         filter_condition=PendingBlock.object_key.exists())}

    return set().union(*_SHARD_QUERIES.map(shard, range(shards)))


def _delete_if(item: PendingBlock | WriterState | BatchLease, condition) -> None:
    try:
        item.delete(condition=condition)
    except DeleteError as e:
        if not _failed_condition(e):
            raise


def _last_event(state: dict | None) -> int:
    return -1 if state is None else int(state["l"])


def _copied_states(pending: list[PendingBlock]) -> tuple[dict[str, dict], set[str]]:
    """The states of the writers whose waiting blocks follow what their appenders read (the freshest
    copy of a writer's state among its blocks, or none found by a block that starts its writer), and the
    writers whose states must be read instead: no copy (an item put before copies), or none they follow
    (a pipelined writer whose copies are all older than its oldest waiting block's predecessor)."""
    by_writer: dict[str, list[PendingBlock]] = {}
    for p in pending:
        by_writer.setdefault(p.writer, []).append(p)
    copied: dict[str, dict] = {}
    unknown: set[str] = set()
    for writer, items in by_writer.items():
        seen = [_as_state(p.seen.as_dict()) for p in items if p.seen is not None]
        freshest = max(seen, key=lambda state: state["l"], default=None)
        if freshest is not None and any(int(p.first) == freshest["l"] + 1 for p in items):
            copied[writer] = freshest
        elif freshest is None and any(p.new_writer for p in items):
            continue  # no state: the block that starts its writer goes first, if there is still none
        else:
            unknown.add(writer)
    return copied, unknown


def _as_state(seen: dict) -> dict:
    """A block's copy of its writer's state, as ``WriterState.as_state`` gives it (DynamoDB's numbers as int)."""
    state = {key: int(seen[key]) for key in ("f", "l", "o", "t")}
    if seen.get("r"):
        state["r"] = [[int(x) for x in block] for block in seen["r"]]
    return state


def _lease_free(lease: BatchLease | None) -> bool:
    return lease is None or lease.batcher is None or int(lease.until or 0) < now_ms()


def _offsets(tail: int, chosen: list[PendingBlock]) -> list[int]:
    offsets = []
    for p in chosen:
        offsets.append(tail)
        tail += int(p.size)
    return offsets


def _actions(items: list[PendingBlock]) -> int:
    """The transaction actions of these blocks and their entries (writers' states not counted)."""
    entries, run = 0, 0
    for p in items:
        if p.object_key is not None:
            entries, run = entries + 1, 0
        elif run == 0 or run + int(p.size) > _ENTRY_MAX_BYTES:
            entries, run = entries + 1, int(p.size)
        else:
            run += int(p.size)
    return len(items) + entries


def _entries(segment: str, incarnation: int, chosen: list[PendingBlock], offsets: list[int],
             now: int) -> list[IndexEntry]:
    """The batch's index entries: each run of inline blocks one entry (up to _ENTRY_MAX_BYTES), each S3
    block its own."""
    entries: list[IndexEntry] = []
    run: list[tuple[PendingBlock, int]] = []

    def flush() -> None:
        if run:
            data = b"".join(bytes(p.data) for p, _ in run)
            entries.append(IndexEntry(segment, entry_key(run[0][1]), offset=run[0][1], size=len(data), data=data,
                                      writer=BATCH_KEY, created_ms=now, raw=run[0][0].raw or None,
                                      incarnation=incarnation))
            run.clear()

    for p, offset in zip(chosen, offsets):
        if p.object_key is not None:
            flush()
            entries.append(IndexEntry(segment, entry_key(offset), offset=offset, size=int(p.size),
                                      object_key=p.object_key, writer=BATCH_KEY, created_ms=now,
                                      raw=p.raw or None, incarnation=incarnation))
        else:
            if run and sum(int(q.size) for q, _ in run) + int(p.size) > _ENTRY_MAX_BYTES:
                flush()
            run.append((p, offset))
    flush()
    return entries
