"""The append path of a segment: an append or a merge claims the tail, then advances the head record.

How an append commits (one S3 PUT for a large block, then three small DynamoDB requests):

1. A block larger than ``inline_max`` is put to S3 under a key of the request's own (writer id,
   first event number, a random token), so no resend can change the object of an acknowledged block,
   and a request that ends up not appending its block can delete its object. (A retry of a block the
   head record already shows as appended is acknowledged without a PUT.)
2. Read the head record (consistently), and for a writer it does not list (it lists the few most
   recently active), the writer's own state item. De-duplicate: a block whose event numbers the
   writer already appended is acknowledged with its original offset.
3. *Claim* the tail: put the index entry at ``e#<length>`` on the condition that no entry exists there.
   It carries the head record's ``created_ms``, the segment's incarnation (a name deleted and created
   again is another incarnation, whose reads, advances and tiering ignore the claim).
4. *Advance*: update the head record on the condition that its length is still ``length``, it is not
   sealed and it is the same incarnation, setting the new length, the writer's last block, the rates
   and, when they cross an auto-scaling threshold, the segment's scale mark (dataplane/scale_signals.py);
   and for an appender holding a ticket (below), the queue's ``served``.

The head record's length is the commit point: entries at or beyond it are claims, not data. If step 3
finds another writer's claim, the appender pauses (its owner commits it within a round trip; see
``StoreSettings.contention_pause_ms``) and reads the head record again; a claim still there after a
pause it completes (step 4) on its owner's behalf, then tries again at the new tail. So a crashed
appender never blocks the segment, concurrent writers always make progress (each round commits one
block), and the losers of a round do not each pay a write racing a live owner. No multi-item
transaction is needed, which keeps an append at about 2 write units and 1 read unit.

An appender that loses the tail a second time takes a ticket: an atomic add on the head record's
``tickets``, which answers how many tickets were taken and the last one served (a ticket holder's
advance sets ``served`` to its own). It then pauses about as long as the appenders ahead of it take to
commit, rather than read the head record and try a claim once per commit it waits through: with 64
appenders on one segment that halves the requests per committed append (docs/benchmarks.md). A ticket
only sets pauses: no one waits for a ticket holder, and an append whose add fails goes on without one.
``served`` is the last holder's to commit, not the highest: a holder that dies, is refused, or commits
late leaves it behind, and the pauses of the next holders too long (at most ``contention_pause_max_ms``
and a quarter each), until one of them commits its own claim and sets it again.
"""

from __future__ import annotations

import random
import secrets
import time
from dataclasses import replace

from botocore.exceptions import ClientError
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.transactions import TransactWrite

from dataplane.journal import (
    _CONDITION_FAILED,
    _EXPIRY_MARGIN_MS,
    BATCH_KEY,
    MERGE_KEY,
    AppendResult,
    _Block,
    _cancelled_by_condition,
    _failed_condition,
    _holds,
    _same_incarnation,
    now_ms,
    tier_shard,
)
from dataplane.models import (
    BYTES,
    ENTRY_PREFIX,
    META_KEY,
    IndexEntry,
    SegmentMeta,
    WriterState,
    entry_key,
    writer_key,
)
from dataplane.rates import Rates
from dataplane.scale_signals import append_actions
from dataplane.sublog_path import SublogAppends
from rillet.errors import (
    InvalidArgument,
    OffsetMismatch,
    OutOfOrder,
    SegmentNotFound,
    SegmentSealed,
    StreamKindMismatch,
    TooLarge,
    WriterExpired,
)
from rillet.framing import MAX_BLOCK_SIZE
from rillet.names import validate_writer_id

# What an append answers when it knows its block is not appended by this request and will not be.
_REFUSALS = (SegmentSealed, StreamKindMismatch, OutOfOrder, OffsetMismatch, InvalidArgument, SegmentNotFound,
             WriterExpired)


_UNREAD = object()  # no writer state read yet


def _last_event(state: dict | None) -> int:
    """The writer's last appended event number (-1: none known)."""
    return int(state["l"]) if state else -1


def _block_of(entry: IndexEntry) -> _Block:
    return _Block(size=entry.size, writer=entry.writer, first=entry.first or 0, last=entry.last or 0,
                  data=entry.data, object_key=entry.object_key, source=entry.source, raw=bool(entry.raw),
                  incarnation=None if entry.incarnation is None else int(entry.incarnation),
                  token=None if entry.token is None else int(entry.token))


_RELEASED = object()  # what _put_unless_taken met was gone when read


def _put_unless_taken(entry: IndexEntry) -> IndexEntry | object | None:
    """Put ``entry`` unless its key holds one. None: put; else the entry there, which DynamoDB hands
    back with the refusal (``ReturnValuesOnConditionCheckFailure``: no read, no read units), or
    _RELEASED if it was deleted before a fallback read. PynamoDB's ``save`` drops the refused item, so
    this one put goes through its model's botocore client."""
    table = IndexEntry._get_connection()
    try:
        table.connection.client.put_item(
            TableName=table.table_name, Item=entry.serialize(), ConditionExpression="attribute_not_exists(#pk)",
            ExpressionAttributeNames={"#pk": IndexEntry.pk.attr_name}, ReturnValuesOnConditionCheckFailure="ALL_OLD")
        return None
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != _CONDITION_FAILED:
            raise PutError("Failed to put item", e) from e
        if e.response.get("Item"):
            return IndexEntry.from_raw_data(e.response["Item"])
    try:  # a service that does not hand the item back
        return IndexEntry.get(entry.pk, entry.sk, consistent_read=True)
    except DoesNotExist:
        return _RELEASED


class AppendPath(SublogAppends):
    """Appends and merges (see the module docstring; a segment in sub-log mode: dataplane/sublog_path.py)."""

    def append(self, segment: str, writer: str, first_event: int, event_count: int, data: bytes,
               expected_offset: int | None = None, after: int | None = None, raw: bool = False,
               block_age_ms: int | None = None) -> AppendResult:
        """Append a block of events atomically; see the module docstring for the protocol.

        ``raw`` says the block is bytes of a byte stream rather than framed events. A segment's first
        append pins which of the two it holds; a block of the other kind gets StreamKindMismatch.

        ``after`` is the writer's event number that must be appended before this block (-1: this is
        the writer's first block here). A block whose predecessor has not committed yet waits for it
        briefly (``order_wait_ms``), then answers OutOfOrder with ``awaiting_event_number``; the
        writer sends it again while the predecessor is in flight. So a writer may have several blocks
        in flight and they still commit in order.

        ``block_age_ms`` is how long ago the writer first sent this block. From a writer id the segment
        does not know (never seen, or expired: see ``StoreSettings.writer_expiry_ms``), a block older
        than the expiry window gets WriterExpired: it may have been appended before the id expired.
        """
        if not data:
            raise InvalidArgument("an append carries at least one byte")
        if len(data) > MAX_BLOCK_SIZE:
            raise TooLarge(f"append block of {len(data)} bytes exceeds {MAX_BLOCK_SIZE} bytes")
        if first_event < 0 or event_count < 1:
            raise InvalidArgument("event numbers are >= 0 and a block holds at least one event")
        validate_writer_id(writer)
        block = _Block(size=len(data), writer=writer, first=first_event, last=first_event + event_count - 1,
                       raw=raw, age_ms=block_age_ms)
        if after is not None and after != first_event - 1:
            raise InvalidArgument(f"the block after event {after} must start at event {after + 1}")
        meta = self._meta(segment)  # also fails fast on unknown segments
        if len(data) <= self.settings.inline_max:
            block = replace(block, data=data, token=secrets.randbits(32))
        if meta.sublog_shards:
            return self._append_sublog(meta, block, after, expected_offset,
                                       upload=lambda b: replace(b, object_key=self._upload(segment, b, data)))
        if block.data is None:
            done = self._already_placed(meta, self._writer_state(meta, block), block)
            if done is not None:
                return done  # a retry of an acknowledged block: no PUT needed
            key = self._upload(segment, block, data)
            block = replace(block, object_key=key)
            try:
                # A pipelined block may have waited on the upload: it reads the head record again, but of
                # the incarnation it began with (a name deleted and created again meanwhile, maybe in
                # sub-log mode, whose de-duplication would not see a block the chain put there).
                result = self._place(segment, block, expected_offset, after, None if after is not None else meta,
                                     incarnation=int(meta.created_ms))
            except _REFUSALS:
                self._delete_object(key)
                raise
            if result.duplicate:
                self._delete_object(key)  # another request placed the block
            return result
        return self._place(segment, block, expected_offset, after, meta)

    def _upload(self, segment: str, block: _Block, data: bytes) -> str:
        """Put a large block's bytes to S3 under a key of this request's alone: no resend can overwrite
        the object of committed data, and only this request ever creates an item naming it, so once its
        block cannot commit from this object, nothing can, and the object may go."""
        key = f"{self._object_prefix(segment)}b/{block.writer}/{block.first:020d}-{secrets.token_hex(8)}"
        self.deployment.s3.put_object(Bucket=self.deployment.bucket, Key=key, Body=data)
        return key

    def merge(self, target: str, source: str) -> int:
        """Append all of ``source`` to ``target`` atomically and return the offset it landed at.

        ``source`` is sealed first. No payload is copied: the target gets one index entry that refers
        to the source segment, which therefore lives as long as that entry does. An empty source is
        deleted instead of merged. Idempotent, whatever runs concurrently: the merge commits in one
        transaction that advances the target and marks the source merged (at that offset), on the
        condition that the source is not marked yet, so no finisher of a commit, however late, can
        append a source twice (see ``_advance``).
        """
        smeta = self._meta(source)
        if smeta.merged_into is not None:
            if smeta.merged_into != target:
                raise InvalidArgument(f"{source} was merged into {smeta.merged_into}, not {target}")
            return smeta.merged_offset
        length = self.seal(source)
        if length == 0:
            # Nothing to append; a zero-byte entry would sit exactly where the target's next append
            # claims. The empty source goes away instead (a retry then finds it gone).
            self.delete(source)
            return self._meta(target).length
        return self._place(target, _Block(size=length, writer=MERGE_KEY, source=source), None).offset

    def _place(self, segment: str, block: _Block, expected_offset: int | None, after: int | None = None,
               meta: SegmentMeta | None = None, incarnation: int | None = None) -> AppendResult:
        """Claim and commit the block at the tail (see the module docstring), in the segment's incarnation
        ``meta`` shows, else ``incarnation`` (None: the first head read's): a head record of another is
        SegmentNotFound.

        When it refuses the block (one of ``_REFUSALS``) or answers a duplicate, no claim of this
        request is left that could still commit: a claim it made either was released, or can never
        pass an advance's condition (the segment is sealed, the length moved past it, or the writer's
        last event moved past the block's predecessor), which also stops helpers from committing it.
        """
        owned_at = None  # where this request's own claim put the block
        paused_for, lost = None, 0  # the other claim this request last paused for; rounds lost
        contended_since = None  # when this request first found another's claim at the tail (for the waiting rate)
        ticket = None  # this request's place in the segment's queue, once it has lost the tail twice
        if meta is not None:
            incarnation = int(meta.created_ms)  # of the segment this request appends to
        waiting_since, waited, waited_length = None, None, None
        poll_s = self.settings.order_poll_ms / 1000  # backs off: a slow predecessor costs few reads
        while True:
            if block.source is not None:
                # Another finisher of the same commit may have merged the source since we began: its mark
                # on the source says where, whatever was merged into the target after it.
                merged = self._merged_at(segment, block, owned_at, incarnation)
                if merged is not None:
                    return merged
            meta = meta or self._head_of(segment, incarnation, block, owned_at)
            incarnation = int(meta.created_ms)
            # Read after the head record (see _writer_state). While waiting for a predecessor the head
            # record is polled, and the writer's own item read again only once the segment grew: the
            # predecessor's commit lists the writer in the head record, but other writers committing
            # after it may move it out again before the next poll.
            unchanged = waiting_since is not None and meta.length == waited_length
            state = self._writer_state(meta, block, waited if unchanged else _UNREAD)
            done = self._already_placed(meta, state, block)
            if done is not None:
                if owned_at is not None and done.offset == owned_at:
                    if not self._freed_under(meta, owned_at):
                        # Our claim, which another appender helped through: appended by this request.
                        return replace(done, duplicate=False)
                    # Our claim landed, from a stale head record, on the key of the block's committed
                    # copy (a twin request's) after truncation or tiering freed it: garbage. Removed,
                    # and append() deletes its object, which nothing else names.
                    self._release_claim(segment, owned_at, block, incarnation)
                    return done
                if owned_at is not None:
                    # Another request of the same block committed it elsewhere: our claim is garbage.
                    self._release_claim(segment, owned_at, block, incarnation)
                return done
            if owned_at is not None and meta.length > owned_at:
                # The tail moved past our claim without committing it: the claim was made from a stale
                # head record at an offset whose entry tiering had already folded into a chunk. Remove
                # it, so that no reader ever meets it inside the committed range, and claim again.
                self._release_claim(segment, owned_at, block, incarnation)
                owned_at = None
            if meta.sealed and owned_at is not None:
                self._release_claim(segment, owned_at, block, incarnation)  # at the final length: it never commits
            self._check_open(segment, meta, block)
            if owned_at is None:
                self._check_not_expired(segment, state, block)
            if after is not None and _last_event(state) < after:
                # The writer's previous block is still on its way (a pipelined writer): wait for it.
                waiting_since, waited, waited_length = waiting_since or time.monotonic(), state, meta.length
                if time.monotonic() - waiting_since > self.settings.order_wait_ms / 1000:
                    raise OutOfOrder(f"writer {block.writer}'s event {after} is not appended to {segment} yet: "
                                     f"send this block again once it is",
                                     last_event_number=_last_event(state), awaiting_event_number=after)
                time.sleep(poll_s)
                poll_s *= 1.5
                meta = None
                continue
            if expected_offset is not None and expected_offset != meta.length:
                raise OffsetMismatch(f"expected offset {expected_offset} but the segment's length is {meta.length}",
                                     length=meta.length)
            self._check_event_order(state, block)
            tail = meta.length
            meta_read, meta = meta, None  # the next round reads the head record again
            claiming = time.monotonic()
            claimed = self._claim(segment, tail, block, incarnation)
            if claimed is block:
                owned_at = tail
            elif claimed is not None and (tail, claimed) != paused_for:
                # Another request's claim: its owner commits it within a round trip. Pause and read the
                # head record again; help only a claim that is still there after a pause (see StoreSettings).
                paused_for, lost = (tail, claimed), lost + 1
                contended_since = contended_since or claiming
                claim_ms = (time.monotonic() - claiming) * 1000
                if ticket is None and lost >= 2:
                    ticket = self._take_ticket(meta_read)
                ahead = None if ticket is None else ticket - int(meta_read.served or 0) - 1
                time.sleep(self._pause_s(lost, claim_ms, ahead))
                continue
            mine = claimed is block
            waited_s = time.monotonic() - contended_since if mine and contended_since is not None else 0.0
            if claimed is not None and self._advance(meta_read, tail, claimed, ticket=ticket if mine else None,
                                                     waited_s=waited_s) and mine:
                return AppendResult(tail, tail + block.size)

    @staticmethod
    def _check_open(segment: str, meta: SegmentMeta, block: _Block) -> None:
        """SegmentSealed or StreamKindMismatch if ``meta`` refuses the block."""
        if meta.sealed:
            raise SegmentSealed(f"segment {segment} is sealed at length {meta.length}", length=meta.length)
        if meta.content is not None and meta.content != block.content:
            held, sent = ("raw bytes", "framed events") if meta.content == BYTES else ("framed events", "raw bytes")
            raise StreamKindMismatch(f"segment {segment} holds {held}; this append sends {sent}",
                                     segment_kind="bytes" if meta.content == BYTES else "events")

    def _help_claim(self, meta: SegmentMeta, tail: int, claim: IndexEntry) -> None:
        """Commit another request's claim at the tail on its owner's behalf (a sub-log batcher met it)."""
        self._advance(meta, tail, _block_of(claim))

    @staticmethod
    def _take_ticket(meta: SegmentMeta) -> int | None:
        """Take the next ticket of the segment's queue (one atomic add on the head record, whose answer
        refreshes ``meta``, the last ticket served with it). None when the add fails, whatever the
        reason (the segment is gone, which the next head read says; a transaction on the head record,
        such as a merge's, under way; throttling): a ticket only sets pauses, so the append goes on
        without one."""
        try:
            meta.update(actions=[SegmentMeta.tickets.add(1)], condition=SegmentMeta.pk.exists())
        except UpdateError:
            return None
        return int(meta.tickets)

    def _pause_s(self, lost: int, claim_ms: float, ahead: int | None) -> float:
        """How long a request that lost the tail pauses before it reads the head record again.

        Without a ticket, or when its ticket says it is next (``ahead`` <= 0): a random part of the round
        trip its claim just took (at least ``contention_pause_ms``), doubling with each round lost (full
        jitter, so that the losers spread out). With ``ahead`` appenders before it in the
        queue: about the time they take to commit, one head read, claim and advance each, or
        ``contention_pause_max_ms`` if less, within a quarter either way (so that holders far back do
        not all wake together at the maximum), so that it reads the head record about once per turn
        rather than once per commit it waits through."""
        round_trip_ms = max(self.settings.contention_pause_ms, claim_ms)
        if ahead is not None and ahead > 0:
            turn_ms = min(self.settings.contention_pause_max_ms, ahead * 3 * round_trip_ms)
            return turn_ms * random.uniform(0.75, 1.25) / 1000
        wanted = random.uniform(0, round_trip_ms / 2 * 2 ** min(lost - 1, 10))
        return min(self.settings.contention_pause_max_ms, wanted) / 1000

    def _head_of(self, segment: str, incarnation: int | None, block: _Block, owned_at: int | None) -> SegmentMeta:
        """The head record, read again during an append: the segment must still be the one the request
        began with (``incarnation``). If it was deleted, or deleted and created again, the request's
        claim (if any) is removed, and it answers SegmentNotFound: its block belongs to no other life
        of the name."""
        try:
            meta = self._meta(segment)
        except SegmentNotFound:
            meta = None
        if meta is not None and incarnation in (None, int(meta.created_ms)):
            return meta
        if owned_at is not None:
            self._release_claim(segment, owned_at, block, incarnation)
        raise SegmentNotFound(f"segment {segment} was deleted while this append was under way")

    def _freed_under(self, meta: SegmentMeta, offset: int) -> bool:
        """Whether the key at ``offset`` (below the length) is one that truncation (below ``released``)
        or tiering (inside a chunk) freed: an entry there now is a stale claim, or a committed one of
        ours that was released or tiered since (its object already deleted; only the duplicate flag
        then errs). No request unless a chunk reaches the offset, which a fresh claim's rarely does."""
        return offset < meta.released or (
            (meta.chunk_end or 0) > offset
            and any(_same_incarnation(c, int(meta.created_ms)) for c in self._chunks_over(meta.pk, offset, offset + 1)))

    def _writer_state(self, meta: SegmentMeta, block: _Block, unlisted: object = _UNREAD) -> dict | None:
        """The writer's last block on the segment as of ``meta``: from the head record, or, for a writer
        it does not list, from the writer's own item (one more read).

        The item is read after the head record, so it is exact whenever the advance conditioned on
        that head record's length succeeds: a writer leaves the head record only in an advance, which
        first saves its item, and no advance can happen between the two reads and a successful one.
        ``unlisted``, unless _UNREAD, is the answer for a writer the head record does not list, read
        earlier (such an answer may be old: only good for deciding to wait).
        """
        if block.source is not None:
            return None  # a merge is de-duplicated by its source's mark (_merged_at), not by writer state
        listed = meta.writers.as_dict().get(block.writer) if meta.writers else None
        if listed:
            return listed
        if unlisted is not _UNREAD:
            return unlisted
        try:
            item = WriterState.get(meta.pk, writer_key(block.writer), consistent_read=True)
        except DoesNotExist:
            return None
        return item.as_state() if item.incarnation == meta.created_ms else None

    def _check_not_expired(self, segment: str, state: dict | None, block: _Block) -> None:
        if state is None and block.source is None and block.age_ms is not None \
                and block.age_ms > self.settings.writer_expiry_ms:
            raise WriterExpired(
                f"writer {block.writer} is unknown to {segment} and this block was first sent "
                f"{block.age_ms} ms ago, beyond the writer expiry window of {self.settings.writer_expiry_ms} ms: "
                f"it may have been appended before the writer id expired, so it is not appended again",
                expiry_ms=self.settings.writer_expiry_ms)

    def _already_placed(self, meta: SegmentMeta, state: dict | None, block: _Block) -> AppendResult | None:
        if not state:
            return None
        if block.last <= int(state["l"]):
            if (int(state["f"]), int(state["l"])) == (block.first, block.last):
                return AppendResult(int(state["o"]), meta.length, duplicate=True)
            # An older block of the writer (a pipelined writer retrying a lost answer): look it up.
            return AppendResult(self._find_block(meta, block), meta.length, duplicate=True)
        return None

    def _find_block(self, meta: SegmentMeta, block: _Block, depth: int = 64) -> int | None:
        """Where an earlier block of a writer starts, from the most recent index entries (None when it
        is too old to find, e.g. folded into a chunk)."""
        entries = IndexEntry.query(meta.pk, IndexEntry.sk.between(ENTRY_PREFIX, entry_key(max(0, meta.length - 1))),
                                   scan_index_forward=False, limit=depth, consistent_read=True)
        for entry in entries:
            if (entry.writer, entry.first, entry.last) == (block.writer, block.first, block.last) \
                    and _same_incarnation(entry, int(meta.created_ms)):
                if self._chunks_over(meta.pk, entry.offset, entry.offset + 1):
                    continue  # a stale claim inside a chunk, not where the block was committed
                return int(entry.offset)
        return None

    @staticmethod
    def _check_event_order(state: dict | None, block: _Block) -> None:
        if block.source is None and state and block.first != int(state["l"]) + 1:
            raise InvalidArgument(
                f"writer {block.writer} must continue at event number {int(state['l']) + 1}, got {block.first}",
                expected_event_number=int(state["l"]) + 1)

    def _claim(self, segment: str, tail: int, block: _Block, incarnation: int) -> _Block | None:
        """Put our entry at ``tail`` unless one is there; return whichever block now sits there.

        ``block`` itself comes back only if this request's put made the claim; an equal block claimed
        by an earlier request (a retry racing its original, or one that crashed) comes back as a copy,
        so that exactly one request reports a block as appended (``duplicate=False``). A claim of
        another incarnation there is removed once the head record shows it stale (None comes back).
        """
        existing = _put_unless_taken(block.to_entry(segment, tail, incarnation))
        if existing is None:
            return block
        if existing is _RELEASED:
            return None  # the claim was released meanwhile; the next round claims again
        if (block.object_key is not None and existing.object_key == block.object_key) \
                or (block.token is not None and existing.token == block.token):
            # Our own put, applied by an attempt whose answer was lost (botocore sent it again, and the
            # resend met it): the object key or the token is this request's alone. Taken for a twin's
            # claim, the block would be answered as a duplicate (and append() would delete the object
            # the committed entry names).
            return block
        if not _same_incarnation(existing, incarnation):
            self._remove_other_incarnations(segment, [existing])
            return None  # the next round reads the head record again and claims again
        if existing.writer == BATCH_KEY:
            # A sub-log batch, which commits with its advance: the head record moved past it, and the next
            # round reads it and claims again.
            return None
        return _block_of(existing)

    def _advance(self, meta: SegmentMeta, tail: int, block: _Block, ticket: int | None = None,
                 waited_s: float = 0.0) -> bool:
        """Commit the block claimed at ``tail``: the head record's length moves past it. ``ticket``: the
        appender's own place in the queue, which it marks served (see _pause_s); ``waited_s``: how long
        it waited behind other appenders' claims (the segment's waiting rate, dataplane/rates.py)."""
        now = now_ms()
        events = block.last - block.first + 1 if block.source is None else 0
        actions = [SegmentMeta.length.set(tail + block.size)]
        actions += self._growth_actions(meta, now, events, block.size, inline=block.size if block.data is not None else 0,
                                        s3=block.data is None and block.source is None, appends=1,
                                        content=block.content, waited_s=waited_s)
        if block.source is None:
            actions.append(SegmentMeta.writers[block.writer].set({"f": block.first, "l": block.last, "o": tail, "t": now}))
            order = SegmentMeta.writers[block.writer].does_not_exist() | (
                SegmentMeta.writers[block.writer]["l"] == block.first - 1)
        else:
            order = SegmentMeta.pk.exists()  # a merge's order is its source's mark, checked in the same transaction
        leaving = self._writer_to_move_out(meta, block)
        if leaving is not None:
            name, state = leaving
            self._save_writer_state(meta, name, state)  # before it leaves the head record: see _writer_state
            actions.append(SegmentMeta.writers[name].remove())
            order &= SegmentMeta.writers[name]["l"] == int(state["l"])
        if ticket is not None:
            actions.append(SegmentMeta.served.set(ticket))
        # Part of the advance's one condition, so pinning and checking the kind costs no request.
        same_kind = SegmentMeta.content.does_not_exist() | (SegmentMeta.content == block.content)
        # The incarnation, so that a name deleted and created again (at the same length) never commits
        # a claim made for its earlier life.
        condition = (SegmentMeta.length == tail) & (SegmentMeta.sealed == False) & order & same_kind \
            & (SegmentMeta.created_ms == meta.created_ms)
        try:
            if block.source is None:
                meta.update(actions=actions, condition=condition)
            else:
                self._commit_merge(meta, tail, block, actions, condition)
            return True
        except UpdateError as e:
            if not _failed_condition(e):
                raise
        except TransactWriteError as e:
            if not _cancelled_by_condition(e):
                raise
        try:
            fresh = self._meta(meta.pk)
        except SegmentNotFound:
            return False  # deleted: the appender's next head read says so and removes its claim
        if fresh.length == tail and not fresh.sealed and fresh.created_ms == meta.created_ms:
            # The claim breaks the writer's event order (only a misbehaving writer causes that) or is of
            # the other kind: release it so the tail is free again.
            self._release_claim(meta.pk, tail, block, int(meta.created_ms))
        return False

    def _growth_actions(self, meta: SegmentMeta, now: int, events: int, size: int, inline: int, s3: bool,
                        appends: int, content: str, waited_s: float = 0.0) -> list:
        """What an advance by ``appends`` appends of ``size`` bytes (``inline`` of them in index entries;
        ``s3``: some in S3 objects), which waited ``waited_s`` in all behind other appenders, sets besides
        the length: the rates, the scale mark, the kind, and when tiering or the orphan sweep is next due."""
        before = Rates.from_item(meta.rates.as_dict() if meta.rates else None, now).decayed(now)
        rates = before.record(now, events, size, appends, waited_s)
        actions = [SegmentMeta.rates.set(rates.to_item())]
        # A scale candidate's mark, when this append's rates cross a threshold (scale_signals): in this
        # same update, and only then, so the scale-candidates index is written once per crossing.
        actions += append_actions(meta, before, rates, now)
        if meta.content is None:
            actions.append(SegmentMeta.content.set(content))  # the first append pins the kind
        due = []  # when the storage writer's next pass over the segment is wanted
        if inline:
            due.append(now if meta.inline_bytes + inline >= self.settings.chunk_target
                       else now + self.settings.tier_max_age_ms)
            actions.append(SegmentMeta.inline_bytes.add(inline))
        if s3 and meta.orphans_after is None:
            # An S3 block: the pass that looks for orphan objects (_remove_orphans) comes a sweep period
            # later, once per period whatever the number of appends, so an append that died between its
            # PutObject and its commit leaks its object for at most that long, sealed or not.
            orphans_after = now + self.settings.orphan_sweep_ms
            due.append(orphans_after)
            actions.append(SegmentMeta.orphans_after.set(orphans_after))
        if due and (meta.tier_at is None or min(due) < meta.tier_at):
            # Only when the due time moves earlier: the tiering index (keys only) is written when its keys
            # change, so an append to a segment that is due already writes nothing to it.
            actions += [SegmentMeta.tier_shard.set(tier_shard(meta.pk)), SegmentMeta.tier_at.set(min(due))]
        return actions

    @staticmethod
    def _commit_merge(meta: SegmentMeta, tail: int, block: _Block, actions: list, condition: Condition) -> None:
        """Advance the target past a merge claim and mark the source merged at ``tail``, in one
        transaction, provided the source is sealed and not marked yet. The mark is the merge's commit
        point: a finisher that read the source before another one merged it cannot append it again,
        whatever the target's tail holds by then (a single "last merge" slot on the target could not
        tell that once a later source was merged). Two writes for each transaction segment merged; no
        cost to appends."""
        source = SegmentMeta(block.source, META_KEY)
        with TransactWrite(connection=SegmentMeta._get_connection().connection,
                           client_request_token=secrets.token_hex(16)) as transaction:
            transaction.update(meta, actions=actions, condition=condition)
            transaction.update(source, actions=[SegmentMeta.merged_into.set(meta.pk), SegmentMeta.merged_offset.set(tail)],
                               condition=(SegmentMeta.sealed == True) & SegmentMeta.merged_into.does_not_exist())

    def _merged_at(self, segment: str, block: _Block, owned_at: int | None,
                   incarnation: int | None) -> AppendResult | None:
        """Where the merge ``block`` committed, once its source is marked merged (None: not yet). A claim
        of this request elsewhere can never commit (the mark is the commit's condition): it is removed."""
        try:
            source = self._meta(block.source)
        except SegmentNotFound:
            if owned_at is not None:
                self._release_claim(segment, owned_at, block, incarnation)
            raise
        if source.merged_into is None:
            return None
        at = int(source.merged_offset)
        if owned_at is not None and owned_at != at:
            self._release_claim(segment, owned_at, block, incarnation)
        if source.merged_into != segment:
            raise InvalidArgument(f"{block.source} was merged into {source.merged_into}, not {segment}")
        return AppendResult(at, at + block.size, duplicate=owned_at != at)

    def _writer_to_move_out(self, meta: SegmentMeta, block: _Block) -> tuple[str, dict] | None:
        """The least recently active writer, when the head record is full and ``block``'s writer is not
        in it (merges are not writers)."""
        listed = meta.writers.as_dict() if meta.writers else {}
        if block.writer in listed or block.source is not None or len(listed) < self.settings.head_writers:
            return None
        return min(listed.items(), key=lambda item: (int(item[1]["t"]), item[0]))

    def _save_writer_state(self, meta: SegmentMeta, writer: str, state: dict) -> None:
        """Save the writer's last block to its own item, unless the item already holds a later one of
        this incarnation of the segment (a request acting on an old head record must not move a
        writer's state back; an item a stale appender left after the segment was deleted is replaced)."""
        expires_at = (int(state["t"]) + self.settings.writer_expiry_ms + _EXPIRY_MARGIN_MS) // 1000
        item = WriterState(meta.pk, writer_key(writer), incarnation=int(meta.created_ms), first=int(state["f"]),
                           last=int(state["l"]), offset=int(state["o"]), time_ms=int(state["t"]), expires_at=expires_at)
        try:
            item.save(condition=WriterState.last.does_not_exist() | (WriterState.last <= int(state["l"]))
                      | (WriterState.incarnation != int(meta.created_ms)))
        except PutError as e:
            if not _failed_condition(e):
                raise  # else the item holds a later block: this head record is old and its advance fails

    def _release_claim(self, segment: str, offset: int, block: _Block, incarnation: int | None) -> None:
        if incarnation is None:
            return  # no head record read yet: no claim made
        try:
            IndexEntry(segment, entry_key(offset)).delete(
                condition=(IndexEntry.writer == block.writer) & (IndexEntry.first == block.first)
                & _holds(block.size, block.data, block.object_key, block.source)
                & (IndexEntry.incarnation.does_not_exist() | (IndexEntry.incarnation == incarnation)))
        except DeleteError as e:
            if not _failed_condition(e):
                raise
