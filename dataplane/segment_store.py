"""The segment store: append-only segments on a DynamoDB index (Tier 1) and S3 objects (Tier 2).

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
   sealed and it is the same incarnation, setting the new length and the writer's last block.

The head record's length is the commit point: entries at or beyond it are claims, not data. If step 3
finds another writer's claim, the appender first completes that claim's step 4 on its behalf and
tries again at the new tail, so a crashed appender never blocks the segment and concurrent writers
always make progress (each round commits one block) instead of colliding forever. No multi-item
transaction is needed, which keeps an append at about 2 write units and 1 read unit.

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
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from botocore.exceptions import ClientError
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.transactions import TransactWrite

from dataplane.deployment import Deployment
from dataplane.models import (
    BYTES,
    CHUNK_PREFIX,
    ENTRY_PREFIX,
    EVENTS,
    META_KEY,
    WRITER_PREFIX,
    IndexEntry,
    SegmentMeta,
    WriterState,
    chunk_key,
    entry_key,
    writer_key,
)
from dataplane.rates import Rates
from rillet.errors import (
    InvalidArgument,
    OffsetMismatch,
    OutOfOrder,
    SegmentNotFound,
    SegmentSealed,
    StreamKindMismatch,
    TooLarge,
    Truncated,
    WriterExpired,
)
from rillet.framing import MAX_BLOCK_SIZE, MAX_READ_SIZE
from rillet.names import validate_writer_id

MERGE_KEY = "_merge"  # the writer name of a merge's index entry (no writer id can start with "_")
TIER_SHARD = "due"
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
    poll_interval_ms: int = 100  # long-poll cadence of tail reads
    # How long a block waits for its writer's previous block before it answers OutOfOrder (the writer
    # sends it again while that block is in flight): long enough for a commit under way, short enough
    # that no invocation idles.
    order_wait_ms: int = 100
    order_poll_ms: int = 10  # the first wait; later ones grow by half
    # How old an unnamed block object must be before it is deleted as an orphan: its request must be
    # over. The append function's timeout is 30 s (infra/terraform/lambda.tf); twenty times that covers
    # a request in flight when the function is stopped and skew between S3's clock and ours.
    orphan_grace_ms: int = 10 * 60_000
    # How many writers the head record lists (every append reads and rewrites it, so its size sets the
    # cost of an append); the others' last blocks are WriterState items, read only when such a writer
    # appends. Eight entries keep the head record near 1 KB: about 1 write unit per rewrite.
    head_writers: int = 8
    # A writer id unused for this long may be forgotten (its WriterState item expires): a resend of a
    # block first sent longer ago than this, from a writer id the segment does not know, is refused with
    # WriterExpired rather than appended a second time. Kafka expires idle producer ids the same way.
    writer_expiry_ms: int = 7 * 24 * 3_600_000

    @classmethod
    def from_env(cls) -> StoreSettings:
        """The settings of a deployed function: ``RILLET_WRITER_EXPIRY_HOURS`` (at least 1) sets the
        writer expiry window."""
        hours = os.environ.get("RILLET_WRITER_EXPIRY_HOURS")
        if hours is None:
            return cls()
        if not hours.isdigit() or int(hours) < 1:
            raise ValueError(f"RILLET_WRITER_EXPIRY_HOURS must be a whole number of hours >= 1, not {hours!r}")
        return cls(writer_expiry_ms=int(hours) * 3_600_000)


@dataclass(frozen=True)
class AppendResult:
    offset: int | None  # None only for a duplicate of an older block than the writer's last one
    length: int  # the segment length right after the block
    duplicate: bool = False  # an earlier request appended (claimed) the block: this one only acknowledges it


@dataclass(frozen=True)
class ReadResult:
    data: bytes
    offset: int
    next_offset: int
    start_offset: int
    length: int
    sealed: bool

    @property
    def end_of_segment(self) -> bool:
        return self.sealed and self.next_offset >= self.length


@dataclass(frozen=True)
class PlanPart:
    """Bytes [offset, offset + length) of a segment: in S3 at ``object_key`` + ``object_offset``, or
    (no key) inline in the index, to be read through the read API."""

    offset: int
    length: int
    object_key: str | None = None
    object_offset: int = 0


@dataclass(frozen=True)
class SegmentTail:
    """A segment's start, length and sealed flag as an eventually consistent read saw them (``found``
    False: no head record was seen, which for a segment created a moment ago can also mean not yet)."""

    name: str
    found: bool
    start_offset: int = 0
    length: int = 0
    sealed: bool = False


@dataclass(frozen=True)
class Location:
    """Bytes [offset, offset + length) of a segment: ``data`` itself (kept inline in the index), or the
    range at ``object_offset`` of the S3 object ``object_key``."""

    offset: int
    length: int
    object_key: str | None = None
    object_offset: int = 0
    data: bytes | None = None


@dataclass(frozen=True)
class LocateResult:
    """Where the bytes [offset, next_offset) are, with the segment's state as ``read`` reports it."""

    locations: list[Location]
    offset: int
    next_offset: int
    start_offset: int
    length: int
    sealed: bool

    @property
    def end_of_segment(self) -> bool:
        return self.sealed and self.next_offset >= self.length


@dataclass(frozen=True)
class SegmentInfo:
    name: str
    start_offset: int
    length: int
    sealed: bool
    created_ms: int
    event_rates: tuple[float, ...]
    byte_rates: tuple[float, ...]


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


def _block_of(entry: IndexEntry) -> _Block:
    return _Block(size=entry.size, writer=entry.writer, first=entry.first or 0, last=entry.last or 0,
                  data=entry.data, object_key=entry.object_key, source=entry.source, raw=bool(entry.raw),
                  incarnation=None if entry.incarnation is None else int(entry.incarnation),
                  token=None if entry.token is None else int(entry.token))


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


class _IndexGap(RuntimeError):
    """No index entry covers an offset below the length: only a concurrent truncation causes that."""


class _ObjectUnreadable(RuntimeError):
    """S3 refused a GET of an object the index named: gone (a truncation released it after the index
    was read), or a permission problem. Only the head record read afterwards tells which."""

    def __init__(self, error: ClientError) -> None:
        super().__init__(str(error))
        self.error = error


# What an append answers when it knows its block is not appended by this request and will not be.
_REFUSALS = (SegmentSealed, StreamKindMismatch, OutOfOrder, OffsetMismatch, InvalidArgument, SegmentNotFound,
             WriterExpired)
_UNREAD = object()  # no writer state read yet

# DynamoDB's TTL deletes an expired item some time after it expires, never before; the margin covers
# the skew between the functions' clocks and DynamoDB's.
_EXPIRY_MARGIN_MS = 3_600_000

# A GET of a missing key answers 403 AccessDenied, not 404, when the caller may not list the bucket
# (the read role may list only under segments/).
_MISSING_OBJECT_CODES = ("NoSuchKey", "404", "AccessDenied", "403")


def _last_event(state: dict | None) -> int:
    """The writer's last appended event number (-1: none known)."""
    return int(state["l"]) if state else -1


def _failed_condition(error: Exception) -> bool:
    return getattr(error, "cause_response_code", None) == _CONDITION_FAILED


def _cancelled_by_condition(error: TransactWriteError) -> bool:
    return any(r is not None and r.code == "ConditionalCheckFailed" for r in error.cancellation_reasons or [])


def validate_segment_name(name: str) -> str:
    if not name or len(name) > 512 or not all(c.isalnum() or c in "./-_" for c in name):
        raise InvalidArgument(f"invalid segment name {name!r}")
    return name


MAX_TAILS = 100  # segments per tail check: one BatchGetItem reads at most 100 items
# What one locate answer holds at most: whole S3 objects are what a reader fetches, so an answer ends
# where an index entry ends; inline bytes travel in the answer itself, so they are bounded to keep it
# far below the Function URL's 6 MB; and the parts (each a presigned URL of about 1 KB) are bounded.
MAX_LOCATE_BYTES = 64 * 1024 * 1024
MAX_LOCATE_INLINE = 1024 * 1024
MAX_LOCATE_PARTS = 256


class SegmentStore:
    def __init__(self, deployment: Deployment, settings: StoreSettings | None = None) -> None:
        self.deployment = deployment
        self.settings = settings or StoreSettings()

    # -- lifecycle ---------------------------------------------------------------------------

    def create(self, segment: str) -> bool:
        """Create an empty segment; returns False if it already existed (creation is idempotent)."""
        validate_segment_name(segment)
        try:
            SegmentMeta(segment, META_KEY, created_ms=now_ms()).save(condition=SegmentMeta.pk.does_not_exist())
            return True
        except PutError as e:
            if _failed_condition(e):
                return False
            raise

    def info(self, segment: str) -> SegmentInfo:
        meta = self._meta(segment)
        rates = Rates.from_item(meta.rates.as_dict() if meta.rates else None, now_ms()).decayed(now_ms())
        return SegmentInfo(segment, meta.start, meta.length, meta.sealed, meta.created_ms,
                           rates.events, rates.bytes)

    def seal(self, segment: str, incarnation: int | None = None) -> int:
        """Seal the segment and return its final length (idempotent). With ``incarnation`` (the head
        record's ``created_ms``), only that incarnation: a name created again is SegmentNotFound, so a
        caller that read the old one never seals the new one."""
        # No append commits any more: a grace period later, the next tiering pass deletes the objects
        # that failed or crashed appends left under the segment's prefix (_remove_orphans).
        orphans_after = now_ms() + self.settings.orphan_grace_ms
        condition = SegmentMeta.pk.exists()
        if incarnation is not None:
            condition &= SegmentMeta.created_ms == incarnation
        try:
            meta = SegmentMeta(segment, META_KEY)
            meta.update(actions=[SegmentMeta.sealed.set(True),
                                 SegmentMeta.orphans_after.set(SegmentMeta.orphans_after | orphans_after),
                                 SegmentMeta.tier_shard.set(TIER_SHARD),
                                 SegmentMeta.tier_at.set(SegmentMeta.tier_at | orphans_after)],
                        condition=condition)
            return meta.length
        except UpdateError as e:
            if _failed_condition(e):
                raise SegmentNotFound(f"segment {segment} does not exist"
                                      + ("" if incarnation is None else f" as incarnation {incarnation}")) from e
            raise

    def truncate(self, segment: str, offset: int) -> None:
        """Make ``offset`` the segment's start; later reads below it fail with Truncated.

        Only moves forward and never past the tail. Bytes below the new start are released right
        away; a crash part-way leaves index entries below the start that the next truncation or
        tiering pass releases (see ``_release_below``).
        """
        meta = self._meta(segment)
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
        except SegmentNotFound:
            if incarnation is not None:
                return  # created again between the read and the seal
            # else an earlier attempt got as far as deleting the head record
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
        condition = SegmentMeta.sealed == True  # noqa: E712 (a PynamoDB condition)
        if incarnation is not None:
            condition &= SegmentMeta.created_ms == incarnation
        try:
            SegmentMeta(segment, META_KEY).delete(condition=condition)
        except DeleteError as e:
            if not _failed_condition(e):
                raise  # else an earlier attempt deleted it, or the name was created again

    # -- append ------------------------------------------------------------------------------

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
        meta = None
        if len(data) <= self.settings.inline_max:
            block = replace(block, data=data, token=secrets.randbits(32))
        else:
            meta = self._meta(segment)  # also fails fast on unknown segments
            done = self._already_placed(meta, self._writer_state(meta, block), block)
            if done is not None:
                return done  # a retry of an acknowledged block: no PUT needed
            # The key is this request's alone: no resend can overwrite the object of committed data, and
            # only this request ever creates an index item naming it, so once its block cannot commit
            # from this object, nothing can (see _place), and the object may go.
            key = f"{self._object_prefix(segment)}b/{writer}/{first_event:020d}-{secrets.token_hex(8)}"
            self.deployment.s3.put_object(Bucket=self.deployment.bucket, Key=key, Body=data)
            block = replace(block, object_key=key)
            if after is not None:
                meta = None  # it may have waited on the upload: read the head record again
            try:
                result = self._place(segment, block, expected_offset, after, meta)
            except _REFUSALS:
                self._delete_object(key)
                raise
            if result.duplicate:
                self._delete_object(key)  # another request placed the block
            return result
        return self._place(segment, block, expected_offset, after, meta)

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
               meta: SegmentMeta | None = None) -> AppendResult:
        """Claim and commit the block at the tail (see the module docstring).

        When it refuses the block (one of ``_REFUSALS``) or answers a duplicate, no claim of this
        request is left that could still commit: a claim it made either was released, or can never
        pass an advance's condition (the segment is sealed, the length moved past it, or the writer's
        last event moved past the block's predecessor), which also stops helpers from committing it.
        """
        owned_at = None  # where this request's own claim put the block
        incarnation = None if meta is None else int(meta.created_ms)  # of the segment this request appends to
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
            if meta.sealed:
                if owned_at is not None:
                    self._release_claim(segment, owned_at, block, incarnation)  # at the final length: it never commits
                raise SegmentSealed(f"segment {segment} is sealed at length {meta.length}", length=meta.length)
            if meta.content is not None and meta.content != block.content:
                held, sent = ("raw bytes", "framed events") if meta.content == BYTES else ("framed events", "raw bytes")
                raise StreamKindMismatch(f"segment {segment} holds {held}; this append sends {sent}",
                                         segment_kind="bytes" if meta.content == BYTES else "events")
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
            claimed = self._claim(segment, tail, block, incarnation)
            if claimed is block:
                owned_at = tail
            if claimed is not None and self._advance(meta_read, tail, claimed) and claimed is block:
                return AppendResult(tail, tail + block.size)

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
        try:
            block.to_entry(segment, tail, incarnation).save(condition=IndexEntry.pk.does_not_exist())
            return block
        except PutError as e:
            if not _failed_condition(e):
                raise
        try:
            existing = IndexEntry.get(segment, entry_key(tail), consistent_read=True)
        except DoesNotExist:
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
        return _block_of(existing)

    def _advance(self, meta: SegmentMeta, tail: int, block: _Block) -> bool:
        """Commit the block claimed at ``tail``: the head record's length moves past it."""
        now = now_ms()
        events = block.last - block.first + 1 if block.source is None else 0
        rates = Rates.from_item(meta.rates.as_dict() if meta.rates else None, now).record(now, events, block.size)
        actions = [SegmentMeta.length.set(tail + block.size), SegmentMeta.rates.set(rates.to_item())]
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
        if meta.content is None:
            actions.append(SegmentMeta.content.set(block.content))  # the first append pins the kind
        # Part of the advance's one condition, so pinning and checking the kind costs no request.
        same_kind = SegmentMeta.content.does_not_exist() | (SegmentMeta.content == block.content)
        if block.data is not None:
            due = now if meta.inline_bytes + block.size >= self.settings.chunk_target else now + self.settings.tier_max_age_ms
            actions += [SegmentMeta.inline_bytes.add(block.size), SegmentMeta.tier_shard.set(TIER_SHARD),
                        SegmentMeta.tier_at.set(due if meta.tier_at is None else min(due, meta.tier_at))]
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

    # -- read --------------------------------------------------------------------------------

    def read(self, segment: str, offset: int, max_bytes: int = MAX_READ_SIZE, wait_ms: int = 0) -> ReadResult:
        """Read up to ``max_bytes`` from ``offset``; at the tail, wait up to ``wait_ms`` for data."""
        if offset < 0 or max_bytes < 1:
            raise InvalidArgument("offset must be >= 0 and max_bytes >= 1")
        max_bytes = min(max_bytes, MAX_READ_SIZE)
        meta = self._meta(segment)
        deadline = time.monotonic() + wait_ms / 1000.0
        while offset == meta.length and offset >= meta.start and not meta.sealed and time.monotonic() < deadline:
            time.sleep(min(self.settings.poll_interval_ms / 1000.0, max(0.0, deadline - time.monotonic())))
            meta = self._meta(segment)
        if offset < meta.start:
            raise Truncated(f"offset {offset} of {segment} is below its start offset {meta.start}",
                            start_offset=meta.start)
        if offset > meta.length:
            raise InvalidArgument(f"offset {offset} is beyond the length {meta.length} of {segment}",
                                  length=meta.length)
        end = min(meta.length, offset + max_bytes)
        try:
            data = self._read_range(segment, offset, end, self._may_have_chunks(meta, offset), meta) if end > offset else b""
        except (_IndexGap, _ObjectUnreadable) as gone:
            # A truncation released the range after the head record was read: say so, typed. Otherwise
            # (a permission problem, a missing object above the start) it stays an error.
            self._raise_if_gone(segment, offset, meta)
            if isinstance(gone, _ObjectUnreadable):
                raise gone.error from None
            raise
        return ReadResult(data, offset, end, meta.start, meta.length, meta.sealed)

    def tails(self, segments: list[str]) -> list[SegmentTail]:
        """Each segment's start, length and sealed flag, in the order asked, from one eventually
        consistent BatchGetItem of the head records (half a read unit each): the cheap check a waiting
        reader makes. It may lag a commit by a moment; readers read by offset, so a late answer only
        delays them, never misleads them."""
        if len(segments) > MAX_TAILS:
            raise InvalidArgument(f"at most {MAX_TAILS} segments per tail check, got {len(segments)}")
        for name in segments:
            validate_segment_name(name)
        wanted = list(dict.fromkeys(segments))
        seen = {meta.pk: meta for meta in SegmentMeta.batch_get(
            [(name, META_KEY) for name in wanted], consistent_read=False,
            attributes_to_get=[SegmentMeta.pk, SegmentMeta.sk, SegmentMeta.kind, SegmentMeta.length,
                               SegmentMeta.start, SegmentMeta.sealed])} if wanted else {}
        return [SegmentTail(name, True, int(seen[name].start), int(seen[name].length), bool(seen[name].sealed))
                if name in seen else SegmentTail(name, False) for name in segments]

    def locate(self, segment: str, offset: int, max_bytes: int = MAX_LOCATE_BYTES,
               max_inline: int = MAX_LOCATE_INLINE, max_parts: int = MAX_LOCATE_PARTS) -> LocateResult:
        """Where the bytes from ``offset`` are, for a reader that fetches S3 objects itself: like ``read``
        (same checks, same answer at the tail), but answering locations rather than bytes.

        The answer ends where an index entry ends (unless the first entry alone exceeds ``max_bytes``),
        so a reader fetches each object once, whole, and the next answer starts at the next object;
        adjacent ranges of one object are one location. It also ends before ``max_inline`` inline bytes
        or ``max_parts`` locations are exceeded (always at least one location)."""
        if offset < 0 or max_bytes < 1:
            raise InvalidArgument("offset must be >= 0 and max_bytes >= 1")
        max_bytes = min(max_bytes, MAX_LOCATE_BYTES)
        meta = self._meta(segment)
        if offset < meta.start:
            raise Truncated(f"offset {offset} of {segment} is below its start offset {meta.start}",
                            start_offset=meta.start)
        if offset > meta.length:
            raise InvalidArgument(f"offset {offset} is beyond the length {meta.length} of {segment}",
                                  length=meta.length)
        end = min(meta.length, offset + max_bytes)
        locations: list[Location] = []
        if end > offset:
            try:
                covering = self._covering(segment, offset, end, self._may_have_chunks(meta, offset),
                                          int(meta.created_ms))
                self._check_committed(segment, offset, end, covering, meta)
                leaves = list(self._leaves(covering))
            except _IndexGap:
                self._raise_if_gone(segment, offset, meta)
                raise
            locations = self._bounded(leaves, end, max_inline, max_parts)
        next_offset = locations[-1].offset + locations[-1].length if locations else offset
        return LocateResult(locations, offset, next_offset, meta.start, meta.length, meta.sealed)

    def _leaves(self, covering: list[tuple[IndexEntry, int, int]], shift: int = 0) -> Iterator[tuple[Location, int]]:
        """The locations of a covering, merged segments expanded, each with the end of the entry it is
        part of (in the outer segment's offsets)."""
        for entry, lo, hi in covering:
            if entry.source is not None:
                yield from self._leaves(self._covering(entry.source, lo - entry.offset, hi - entry.offset),
                                        shift + entry.offset)
            elif entry.data is not None:
                yield Location(lo + shift, hi - lo, data=entry.data[lo - entry.offset:hi - entry.offset]), \
                    entry.end + shift
            else:
                yield Location(lo + shift, hi - lo, entry.object_key, entry.object_offset + lo - entry.offset), \
                    entry.end + shift

    @staticmethod
    def _bounded(leaves: list[tuple[Location, int]], end: int, max_inline: int, max_parts: int) -> list[Location]:
        """The leading locations within the bounds (see ``locate``), adjacent ranges of one object merged."""
        out: list[Location] = []
        inline = 0
        for location, entry_end in leaves:
            if out and entry_end > end:
                break  # an entry cut by the window: the next answer starts at it, and fetches it whole
            if out and location.data is not None and inline + location.length > max_inline:
                break
            last = out[-1] if out else None
            if last is not None and last.object_key is not None and location.object_key == last.object_key \
                    and last.object_offset + last.length == location.object_offset:
                out[-1] = replace(last, length=last.length + location.length)
                continue
            if last is not None and last.data is not None and location.data is not None:
                out[-1] = replace(last, length=last.length + location.length, data=last.data + location.data)
                inline += location.length
                continue
            if len(out) >= max_parts:
                break
            out.append(location)
            inline += len(location.data or b"")
        return out

    def _raise_if_gone(self, segment: str, offset: int, meta: SegmentMeta) -> None:
        """After a gap in the index under a read: the typed error if the segment was deleted or
        truncated past ``offset`` since ``meta`` was read (otherwise the caller raises the gap)."""
        now = self._meta(segment)
        if now.created_ms != meta.created_ms:
            raise SegmentNotFound(f"segment {segment} was deleted while it was read") from None
        if offset < now.start:
            raise Truncated(f"offset {offset} of {segment} is below its start offset {now.start}",
                            start_offset=now.start) from None

    def plan(self, segment: str, start: int, end: int) -> list[PlanPart]:
        """Where the bytes [start, end) of a sealed-or-committed range are, for readers that fetch S3
        objects themselves (Spark executors): S3 ranges, and inline ranges to read through the read API.

        Every part starts where an index entry (an append block) starts or at ``start``, so part
        boundaries inside the range are event boundaries: a batch reader may split there.
        """
        meta = self._meta(segment)
        if start < meta.start:
            raise Truncated(f"offset {start} of {segment} is below its start offset {meta.start}",
                            start_offset=meta.start)
        if end > meta.length or start > end:
            raise InvalidArgument(f"range [{start}, {end}) is not within the length {meta.length} of {segment}")
        if start == end:
            return []  # no index entry covers an empty range (an empty segment has none at all)
        return self._plan(segment, start, end, 0, self._may_have_chunks(meta, start), int(meta.created_ms))

    def _plan(self, segment: str, start: int, end: int, shift: int, chunked: bool = True,
              incarnation: int | None = None) -> list[PlanPart]:
        parts: list[PlanPart] = []
        for entry, lo, hi in self._covering(segment, start, end, chunked, incarnation):
            if entry.source is not None:
                parts += self._plan(entry.source, lo - entry.offset, hi - entry.offset, shift + entry.offset)
            elif entry.object_key is not None:
                parts.append(PlanPart(lo + shift, hi - lo, entry.object_key, entry.object_offset + lo - entry.offset))
            else:
                parts.append(PlanPart(lo + shift, hi - lo))
        return parts

    def _read_range(self, segment: str, start: int, end: int, chunked: bool = True,
                    meta: SegmentMeta | None = None) -> bytes:
        """The bytes [start, end); with ``meta`` (the head record the range was checked against), an entry
        that record proves uncommitted counts as a gap (see ``_not_committed_in``)."""
        covering = self._covering(segment, start, end, chunked, None if meta is None else int(meta.created_ms))
        if meta is not None:
            self._check_committed(segment, start, end, covering, meta)
        parts: list[bytes] = []
        pending: list[tuple[str, int, int]] = []  # adjacent ranges of one S3 object, fetched in one GET

        def flush() -> None:
            if pending:
                key, lo, hi = pending[0][0], pending[0][1], pending[-1][2]
                parts.append(self._get_object_range(key, lo, hi))
                pending.clear()

        for entry, lo, hi in covering:
            if entry.data is not None:
                flush()
                parts.append(entry.data[lo - entry.offset:hi - entry.offset])
            elif entry.object_key is not None:
                obj_lo = entry.object_offset + lo - entry.offset
                obj_hi = entry.object_offset + hi - entry.offset
                if pending and (pending[-1][0] != entry.object_key or pending[-1][2] != obj_lo):
                    flush()
                pending.append((entry.object_key, obj_lo, obj_hi))
            else:
                flush()
                parts.append(self._read_range(entry.source, lo - entry.offset, hi - entry.offset))
        flush()
        return b"".join(parts)

    def _check_committed(self, segment: str, start: int, end: int, covering: list[tuple[IndexEntry, int, int]],
                         meta: SegmentMeta) -> None:
        """Raise _IndexGap if an entry of the covering is a claim that ``meta`` (the head record the range
        was checked against) proves uncommitted, or, for entries of writers it does not list, if a
        truncation freed keys of the range since it was read (only then can a stale claim sit below the
        length)."""
        proofs = {self._not_committed_in(meta, entry) for entry, _, _ in covering}
        if True in proofs or (None in proofs and self._meta(segment).start > start):
            raise _IndexGap(f"an entry of {segment} in [{start}, {end}) is a claim made after the head record was read")

    @staticmethod
    def _not_committed_in(meta: SegmentMeta, entry: IndexEntry) -> bool | None:
        """Whether ``meta`` proves that ``entry``, below its length, is not the committed block there: the
        writer's events it holds were not all appended yet, or it is the writer's last block, committed
        at another offset. Such an entry is a stale appender's claim on a key that a truncation racing
        the read freed (the reader then answers Truncated). Costs no request: the head record is at hand.
        None when the head record does not list the entry's writer (it lists only the most recent few).
        Not caught: a stale claim of an older block of a writer that appended since (see docs)."""
        if entry.sk.startswith(CHUNK_PREFIX) or entry.source is not None:
            return False  # chunks are never claimed; a merge names its source, de-duplicated by it
        state = meta.writers.as_dict().get(entry.writer) if meta.writers else None
        if not state:
            return None
        if entry.last > int(state["l"]):
            return True
        return (int(state["f"]), int(state["l"])) == (entry.first, entry.last) and int(state["o"]) != entry.offset

    @staticmethod
    def _may_have_chunks(meta: SegmentMeta, offset: int) -> bool:
        """Whether a chunk may cover bytes at or above ``offset`` below the length read with ``meta``:
        not if no chunk reaches that far and no inline entry is left that tiering could pack meanwhile.
        Reads of segments written in large blocks skip the chunk query that way."""
        return meta.inline_bytes > 0 or (meta.chunk_end or 0) > offset

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

    def _index_items(self, segment: str, prefix: str, below: int | None = None) -> list[IndexEntry]:
        """Every ``e#`` or ``c#`` item of the segment (only those whose offset is below ``below``)."""
        upper = (entry_key if prefix == ENTRY_PREFIX else chunk_key)(below - 1) if below is not None else prefix + "~"
        if below is not None and below <= 0:
            return []
        return list(IndexEntry.query(segment, IndexEntry.sk.between(prefix, upper), consistent_read=True))

    def _delete_unchanged(self, entry: IndexEntry) -> bool:
        """Delete the item only if it is still exactly ``entry``; False if it changed or is gone."""
        try:
            entry.delete(condition=_holds(entry.size, entry.data, entry.object_key, entry.source)
                         & (IndexEntry.offset == entry.offset) & (IndexEntry.created_ms == entry.created_ms))
            return True
        except DeleteError as e:
            if _failed_condition(e):
                return False
            raise

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

    def _get_object_range(self, key: str, lo: int, hi: int) -> bytes:
        try:
            body = self.deployment.s3.get_object(Bucket=self.deployment.bucket, Key=key, Range=f"bytes={lo}-{hi - 1}")
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _MISSING_OBJECT_CODES:
                raise _ObjectUnreadable(e) from e
            raise
        return body["Body"].read()

    # -- tiering and release -------------------------------------------------------------------

    def segments_due_for_tiering(self, limit: int = 100) -> list[str]:
        return [m.pk for m in SegmentMeta.tiering.query(TIER_SHARD, SegmentMeta.tier_at <= now_ms(), limit=limit)]

    def tier(self, segment: str) -> int:
        """Move committed inline entries into S3 chunks of about ``chunk_target`` bytes.

        The pass first bumps the head record's tiering epoch, then scans; it saves each chunk (at
        ``c#<offset>``) in one transaction with a check that the epoch is still its own, so a pass
        that a newer one overtook saves nothing more and chunks never overlap. Each step is safe to
        repeat: put the chunk object (deterministic key), save the chunk entry, delete the run's
        entries (each only if unchanged), then adjust the head record's inline byte count. A crash
        between steps leaves entries inside the chunk, which readers skip and the next pass deletes,
        like stale claims. Returns the number of bytes moved.
        """
        try:
            meta = self._meta(segment)
            meta.update(actions=[SegmentMeta.tier_epoch.add(1)], condition=SegmentMeta.pk.exists())
        except (SegmentNotFound, UpdateError) as e:
            if isinstance(e, UpdateError) and not _failed_condition(e):
                raise
            return 0  # deleted
        epoch = meta.tier_epoch
        try:
            parts, garbage = self._scan(segment, meta.start, meta.length, True, int(meta.created_ms)) \
                if meta.length > meta.start else ([], [])
        except _IndexGap:
            return 0  # a truncation released the range meanwhile; the segment stays due for the next pass
        if meta.sealed:  # a claim at the final length never commits: its appender died before removing it
            garbage += list(IndexEntry.query(meta.pk, IndexEntry.sk.between(entry_key(meta.length), ENTRY_PREFIX + "~"),
                                             consistent_read=True))
        stale = [item for item in garbage if not _same_incarnation(item, int(meta.created_ms))]
        if stale:
            self._remove_other_incarnations(segment, stale)
        for entry in garbage:
            if _same_incarnation(entry, int(meta.created_ms)):
                self._delete_unchanged(entry)  # only the item: its object may be another entry's too
        entries = [entry for entry, _, _ in parts]
        horizon = now_ms() - self.settings.tier_min_age_ms
        moved = 0
        chunk_end = meta.chunk_end or 0
        tiered: set[str] = set()
        for run in self._inline_runs(entries, meta, horizon):
            if not self._tier_run(segment, run, epoch, chunk_end, int(meta.created_ms)):
                return moved  # a newer pass took over; it finishes the job
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
                self._remove_orphans(segment, epoch)
                actions.append(SegmentMeta.orphans_after.remove())
            else:
                due.append(meta.orphans_after)
        if due:
            actions.append(SegmentMeta.tier_at.set(min(due)))
        else:
            actions += [SegmentMeta.tier_at.remove(), SegmentMeta.tier_shard.remove()]
        try:
            # Only if no append committed since the scan: an inline append meanwhile has added its bytes
            # and kept the segment due; overwriting that would drop it from the tiering index for good.
            # And only if no newer pass began, whose count this one would overwrite.
            meta.update(actions=actions,
                        condition=(SegmentMeta.length == meta.length) & (SegmentMeta.tier_epoch == epoch)
                        & (SegmentMeta.created_ms == meta.created_ms))
        except UpdateError as e:
            if not _failed_condition(e):
                raise
        self._release_below(segment)
        return moved

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

    def _tier_run(self, segment: str, run: list[IndexEntry], epoch: int, chunk_end: int, incarnation: int) -> bool:
        """Pack one run into a chunk; False if a newer tiering pass began (nothing was saved)."""
        first, last = run[0], run[-1]
        # The key names the pass's epoch: only this pass ever saves a chunk item naming the object, and
        # only while the epoch is its own, so an object it could not save is nobody's.
        key = f"{self._object_prefix(segment)}c/{first.offset:020d}-{last.end:020d}-{epoch}"
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
                return False
        for entry in run:
            self._delete_unchanged(entry)
        return True

    @staticmethod
    def _saved_object_key(segment: str, sk: str) -> str | None:
        try:
            return IndexEntry.get(segment, sk, consistent_read=True).object_key
        except DoesNotExist:
            return None

    def _remove_orphans(self, segment: str, epoch: int) -> int:
        """Delete the objects under the segment's prefix that no index item names and none ever will;
        returns how many. Runs once per sealing (``orphans_after``), in the pass with ``epoch``.

        A block object's key is unique to the request that put it, and only that request creates
        items naming it; past ``orphan_grace_ms`` that request is over, so the items naming the object
        can only go, never come. A chunk object's key names its pass's epoch, and a pass saves chunks
        only while the epoch is its own; every earlier pass's is below ``epoch``. So an object of
        either kind that no item names after the listing is nobody's, whatever runs concurrently.
        """
        s3, bucket, prefix = self.deployment.s3, self.deployment.bucket, self._object_prefix(segment)
        horizon = time.time() - self.settings.orphan_grace_ms / 1000
        candidates = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix):]
                request_over = name.startswith("b/") and obj["LastModified"].timestamp() < horizon
                pass_over = name.startswith("c/") and name.count("-") == 2 and int(name.rsplit("-", 1)[1]) < epoch
                if request_over or pass_over:
                    candidates.append(obj["Key"])
        if not candidates:
            return 0
        named = {item.object_key for prefix_ in (ENTRY_PREFIX, CHUNK_PREFIX)
                 for item in self._index_items(segment, prefix_)}
        orphans = [key for key in candidates if key not in named]
        for i in range(0, len(orphans), 1000):  # DeleteObjects takes up to 1,000 keys
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in orphans[i:i + 1000]],
                                                      "Quiet": True})
        return len(orphans)

    def _release_below(self, segment: str) -> None:
        """Release what lies wholly below the start offset: objects, merged segments, index items.

        Payload goes first, and only that of committed entries, found by following the chain up from
        the head record's ``released`` offset (below it, payload is already gone). Then ``released``
        moves up, and only then are the index items below it deleted, each only if unchanged. So a
        key below the start is free only below ``released``, and a stale claim that lands there
        later is deleted without its object, which the block's committed copy may still need.
        A crash anywhere leaves work that the next truncation or tiering pass finishes.
        """
        try:
            meta = self._meta(segment)
        except SegmentNotFound:
            return
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
        for entry in entries:
            if entry.offset < released:
                self._delete_unchanged(entry)
        for chunk in chunks:
            if chunk.end <= released:
                # A chunk's object is its alone (named by its range). This one may have been saved after
                # the walk above (a tiering pass that read an older start): delete its object too.
                self.deployment.s3.delete_object(Bucket=self.deployment.bucket, Key=chunk.object_key)
                self._delete_unchanged(chunk)

    # -- helpers -------------------------------------------------------------------------------

    def _meta(self, segment: str) -> SegmentMeta:
        try:
            return SegmentMeta.get(segment, META_KEY, consistent_read=True)
        except DoesNotExist:
            raise SegmentNotFound(f"segment {segment} does not exist") from None

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


