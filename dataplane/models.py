"""The segments table: one partition per segment, holding its head record and its index.

Items of a segment's partition (hash key ``pk`` = the segment's name):

* ``sk = "m"`` -- the :class:`SegmentMeta` head record: committed length, start offset (after
  truncation), sealed flag, the last block of the few most recently active writers (for
  de-duplication), traffic rates, scale signals and tiering bookkeeping. Every append ends with one conditional
  update of this item.
* ``sk = "e#<offset>"`` -- :class:`IndexEntry` items, one per append block (a claim until the head
  record's length passes it), saying where the bytes are: inline in the item (small appends), in an S3
  object (a large append block), or in another segment (a merged transaction segment, so merges copy
  no payload).
* ``sk = "w#<writer id>"`` -- :class:`WriterState` items: the last block of a writer that the head
  record no longer lists (it keeps only the most recently active few, so that its size, and what every
  append pays to read and rewrite it, does not grow with the number of writers). DynamoDB's TTL deletes
  one once its writer has been idle for the writer expiry window.
* ``sk = "c#<offset>"`` -- :class:`IndexEntry` items for chunks: a run of inline entries that tiering
  packed into one S3 object. They have their own key range so that no claim can ever land on one, and
  an ``e#`` entry that starts inside a chunk is known to be garbage (see docs/dataplane.md).

A segment in sub-log mode (``SegmentMeta.sublog_shards``: dataplane/sublog_path.py) also has items
under partition keys of their own, so that its appends spread over partitions: ``<segment>#<incarnation>#p<n>``
holds :class:`PendingBlock` items waiting for a batch, ``<segment>#<incarnation>#w<n>`` its writers'
:class:`WriterState` items, ``<segment>#<incarnation>#lease`` its :class:`BatchLease`. A segment name
has no ``#``, so no such key is ever another segment's.

Every item but the head record carries the head record's ``created_ms``, the segment's incarnation:
a name deleted and created again never adopts an item of its earlier life (docs/dataplane.md,
"Incarnations").

Attribute names are one or two letters because every append writes an index entry and DynamoDB
charges for names as well as values.
"""

from __future__ import annotations

from pynamodb.attributes import (
    BinaryAttribute,
    BooleanAttribute,
    DiscriminatorAttribute,
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    UnicodeAttribute,
)
from pynamodb.indexes import GlobalSecondaryIndex, IncludeProjection
from pynamodb.models import Model

from dataplane.deployment import Deployment, point_models

META_KEY = "m"
ENTRY_PREFIX = "e#"
CHUNK_PREFIX = "c#"
WRITER_PREFIX = "w#"
EXPIRES_AT = "ex"  # the TTL attribute of the segments table (epoch seconds; writer states and pending blocks)
OFFSET_DIGITS = 20
EVENTS, BYTES = "e", "b"  # what a segment holds: framed events, or raw bytes (a byte stream)


def entry_key(offset: int) -> str:
    return f"{ENTRY_PREFIX}{offset:0{OFFSET_DIGITS}d}"


def writer_key(writer: str) -> str:
    return f"{WRITER_PREFIX}{writer}"


def chunk_key(offset: int) -> str:
    return f"{CHUNK_PREFIX}{offset:0{OFFSET_DIGITS}d}"


class TieringIndex(GlobalSecondaryIndex):
    """Sparse index of segments whose inline bytes are due to move to S3 (``tier_at`` is set), under
    write-sharded partition keys (``due#<n>``: dataplane.shards). Keys only: the job reads the segment
    names, and an append that leaves ``ts``/``ta`` as they are writes nothing to the index. Beside the
    keys it projects only ``k``, the discriminator PynamoDB filters a query of SegmentMeta on (it never
    changes)."""

    class Meta:
        index_name = "tiering"
        projection = IncludeProjection(["k"])

    tier_shard = UnicodeAttribute(hash_key=True, attr_name="ts")
    tier_at = NumberAttribute(range_key=True, attr_name="ta")


class ScaleCandidateIndex(GlobalSecondaryIndex):
    """Sparse index of the segments auto-scaling should look at (``scale_at`` is set: see
    dataplane/scale_signals.py), under write-sharded partition keys (``sc#<n>``: dataplane.shards), by
    the time they are due. Keys only, as the tiering index: the job reads the segment names, and an
    append that leaves ``ss``/``sa`` as they are writes nothing to the index. Beside the keys it projects
    only ``k``, PynamoDB's discriminator (it never changes)."""

    class Meta:
        index_name = "scale-candidates"
        projection = IncludeProjection(["k"])

    scale_shard = UnicodeAttribute(hash_key=True, attr_name="ss")
    scale_at = NumberAttribute(range_key=True, attr_name="sa")


class SegmentItem(Model):
    class Meta:
        table_name = Deployment.segments_table
        region = Deployment.region
        billing_mode = "PAY_PER_REQUEST"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = DiscriminatorAttribute(attr_name="k")


class SegmentMeta(SegmentItem, discriminator="m"):
    length = NumberAttribute(default=0, attr_name="n")
    start = NumberAttribute(default=0, attr_name="s")
    sealed = BooleanAttribute(default=False, attr_name="x")
    # When the segment was created: also its incarnation, which every other item of the partition
    # carries (IndexEntry.incarnation, WriterState.incarnation), so that a name deleted and created
    # again never adopts an item of its earlier life.
    created_ms = NumberAttribute(attr_name="c")
    # The created_ms of the stream record the segment was created for: the stream's incarnation, which
    # every position a reader keeps names (rillet.StreamCut.incarnation). A read, locate, plan, tail
    # check or truncation naming another one is StreamRecreated, never bytes of the new stream. Absent
    # on segments created before it was recorded (and on a transaction's own segments), which take any.
    stream_incarnation = NumberAttribute(null=True, attr_name="si")
    # writer id -> {"f": first event number, "l": last event number, "o": offset, "t": time ms} of
    # the writer's last block. Bounded: at most StoreSettings.head_writers writers; an append of another
    # writer moves the least recently active one out to its WriterState item first (SegmentStore._advance).
    # Merges are not listed: a merged source's own merged_into / merged_offset mark de-duplicates them.
    writers = MapAttribute(default=dict, attr_name="w")
    # Exponentially decayed event and byte rates: {"t": ms, "e": [...], "b": [...]} (see rates.py).
    rates = MapAttribute(null=True, attr_name="r")
    inline_bytes = NumberAttribute(default=0, attr_name="ib")
    tier_shard = UnicodeAttribute(null=True, attr_name="ts")
    tier_at = NumberAttribute(null=True, attr_name="ta")
    # Set (with merged_offset) on a transaction segment by the transaction that commits its merge, only if
    # not set yet: the fence that lets a source be merged once (SegmentStore._commit_merge).
    merged_into = UnicodeAttribute(null=True, attr_name="mi")
    merged_offset = NumberAttribute(null=True, attr_name="mo")
    # EVENTS or BYTES, pinned by the first append (no attribute: nothing appended yet).
    content = UnicodeAttribute(null=True, attr_name="kd")
    # Bumped by every tiering pass before it scans; a chunk is saved only while it is still the pass's
    # number, so two passes never save overlapping chunks.
    tier_epoch = NumberAttribute(default=0, attr_name="te")
    chunk_end = NumberAttribute(null=True, attr_name="ce")  # the end of the highest chunk ever saved
    # Objects and merged segments of the committed entries below this offset are deleted; entries
    # below it are only index items still to remove (see SegmentStore._release_below).
    released = NumberAttribute(default=0, attr_name="rl")
    # From this time the next tiering pass deletes the objects under the segment's prefix that no index
    # item names (StorageWriter._remove_orphans). Set by sealing (a grace period later), and by an S3
    # block's append on a segment where it is not set (a sweep period later).
    orphans_after = NumberAttribute(null=True, attr_name="oa")
    # The thresholds of an auto-scaled stream's segment ({"u": "e" or "b", "t": target}: a few bytes,
    # dataplane/scale_signals.py), and while the segment is a scale candidate, when it is due (the
    # scale-candidates index). Absent on segments of fixed streams and transactions.
    scaling = MapAttribute(null=True, attr_name="sp")
    scale_shard = UnicodeAttribute(null=True, attr_name="ss")
    scale_at = NumberAttribute(null=True, attr_name="sa")
    # The segment's queue of appenders waiting for the tail (two numbers: dataplane/append_path.py): the
    # last ticket taken (an atomic add by an appender that lost the tail), and the ticket of the last
    # appender with one that committed. Only an estimate of how many wait, so that each waits about its
    # turn instead of polling; nothing waits on them. Absent until a segment's appenders first contend.
    tickets = NumberAttribute(null=True, attr_name="qt")
    served = NumberAttribute(null=True, attr_name="qs")
    # Sub-log mode (dataplane/sublog_path.py): the number of shards its appends spread over, fixed for
    # the incarnation (absent: the chain of claims). Who batches is a BatchLease item's, off this partition.
    sublog_shards = NumberAttribute(null=True, attr_name="sl")
    tiering = TieringIndex()
    scale_candidates = ScaleCandidateIndex()


class IndexEntry(SegmentItem, discriminator="e"):
    offset = NumberAttribute(attr_name="o")
    size = NumberAttribute(attr_name="z")
    data = BinaryAttribute(null=True, legacy_encoding=False, attr_name="d")
    object_key = UnicodeAttribute(null=True, attr_name="ok")
    object_offset = NumberAttribute(default=0, attr_name="oo")
    source = UnicodeAttribute(null=True, attr_name="src")
    writer = UnicodeAttribute(null=True, attr_name="w")
    first = NumberAttribute(null=True, attr_name="f")
    last = NumberAttribute(null=True, attr_name="l")
    created_ms = NumberAttribute(attr_name="c")
    raw = BooleanAttribute(null=True, attr_name="b")  # a claim of raw bytes (set only then: it pins BYTES)
    # The head record's created_ms when the claim (or chunk) was made: the incarnation of the segment
    # name it belongs to. An item of another incarnation is a stale appender's claim that landed after
    # the segment was deleted (and perhaps created again): never read, advanced or tiered. Absent only
    # on items written before incarnations were recorded, which count as the current incarnation's.
    incarnation = NumberAttribute(null=True, attr_name="i")
    # A random number of the request that claimed an inline block (a block in an object is told apart by
    # its object's key): its own claim, met again by botocore's resend after a lost answer, is recognised.
    token = NumberAttribute(null=True, attr_name="t")

    @property
    def end(self) -> int:
        return self.offset + self.size


class WriterState(SegmentItem, discriminator="w"):
    """A writer's last block on the segment, once the head record no longer lists the writer. Only
    ever replaced by a later block of the same writer (the put is conditioned on it), or by a state of
    a segment created again under the name: ``incarnation`` is the head record's ``created_ms`` when
    it was saved, and an item of another incarnation (a stale appender saving it after the segment
    was deleted) counts as no state at all."""

    incarnation = NumberAttribute(attr_name="sc")
    first = NumberAttribute(attr_name="f")
    last = NumberAttribute(attr_name="l")
    offset = NumberAttribute(attr_name="o")
    time_ms = NumberAttribute(attr_name="t")
    expires_at = NumberAttribute(attr_name=EXPIRES_AT)  # TTL: DynamoDB deletes the item after this
    # A sub-log writer's last few blocks, [first, last, offset] each, oldest first, so that a pipelined
    # writer's resend of an older block than its last is told its offset. Bounded: at most
    # RECENT_BLOCKS (the SDK keeps at most max_inflight_blocks, 3 by default, in flight).
    recent = ListAttribute(null=True, attr_name="r")

    def as_state(self) -> dict:
        state = {"f": int(self.first), "l": int(self.last), "o": int(self.offset), "t": int(self.time_ms)}
        if self.recent:
            state["r"] = [[int(x) for x in block] for block in self.recent]
        return state


RECENT_BLOCKS = 8


class PendingBlock(SegmentItem, discriminator="p"):
    """A block of a sub-log segment waiting for a batch (dataplane/sublog_path.py), keyed by its writer
    and last event number in a shard of its own: ``pk = <segment>#<incarnation>#p<n>``,
    ``sk = <writer>#<last event number>``. The batch that commits it sets ``offset`` and drops its
    bytes (they are in the batch's index entry now); its appender then deletes it. DynamoDB's TTL removes
    one whose appender died."""

    writer = UnicodeAttribute(attr_name="w")
    first = NumberAttribute(attr_name="f")
    last = NumberAttribute(attr_name="l")
    size = NumberAttribute(attr_name="z")
    data = BinaryAttribute(null=True, legacy_encoding=False, attr_name="d")
    object_key = UnicodeAttribute(null=True, attr_name="ok")
    raw = BooleanAttribute(null=True, attr_name="b")
    token = NumberAttribute(attr_name="t")  # the putting request's own random number (its resend is recognised)
    since_ms = NumberAttribute(attr_name="ps")  # when it was put: batches take the oldest first
    new_writer = BooleanAttribute(null=True, attr_name="nw")  # its appender found no state of the writer
    # The writer's state as its appender read it (WriterState.as_state: about 60 B, and [first, last,
    # offset] for each of at most RECENT_BLOCKS recent blocks). A batch commits the block on this copy
    # rather than reading the state again; its put of the new state is conditioned on the state's last
    # event number being this copy's, which no other state of the writer has (each batch raises it).
    seen = MapAttribute(null=True, attr_name="sv")
    expected_offset = NumberAttribute(null=True, attr_name="xo")  # a conditional append: only at this offset
    offset = NumberAttribute(null=True, attr_name="o")  # set by the batch that commits it
    refused_at = NumberAttribute(null=True, attr_name="rf")  # a conditional append refused: the length then
    batcher = UnicodeAttribute(null=True, attr_name="hl")  # the lease token a batcher handed to its appender
    expires_at = NumberAttribute(attr_name=EXPIRES_AT)

    @property
    def pending(self) -> bool:
        return self.offset is None and self.refused_at is None


class BatchLease(SegmentItem, discriminator="l"):
    """Who batches a sub-log segment's pending blocks (dataplane/sublog_path.py), in an item of its own:
    ``pk = <segment>#<incarnation>#lease``. Its takes, hand-offs and releases -- a few hundred a second
    on a busy segment, each refused take charged too -- cost a write unit each here rather than two
    each on the head record, the partition the segment's batches, reads and index already share.
    Replaced whole by every change (a put), so the discriminator is always there; no ``batcher`` (or an
    ``until`` passed) is a free lease. DynamoDB's TTL removes the item of an idle or deleted segment."""

    batcher = UnicodeAttribute(null=True, attr_name="bl")  # the holder's token
    until = NumberAttribute(null=True, attr_name="bu")  # epoch ms: after this, anyone may take it
    expires_at = NumberAttribute(attr_name=EXPIRES_AT)  # set anew by every put (an hour on)


def bind(deployment: Deployment) -> None:
    """Point the models at a deployment's table and endpoint (call before first use)."""
    point_models((SegmentItem, SegmentMeta, IndexEntry, WriterState, PendingBlock, BatchLease), deployment.segments_table,
                 deployment)
