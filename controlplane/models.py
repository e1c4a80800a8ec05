"""The metadata table: scopes, streams, epochs and segment records (one table, PynamoDB models).

Keys (``pk`` / ``sk``):

* ``scopes`` / ``<scope>`` -- :class:`ScopeRecord`; all scopes share one partition so listing them is
  one query.
* ``scope#<scope>`` / ``<stream>`` -- :class:`StreamNameRecord`: the stream's entry in its scope's
  listing (its tags, for filtering), so listing a scope's streams (and checking it is empty) is one
  query. Written once at create and deleted with the stream: the scope's partition takes no write of a
  stream's life in between.
* ``stream#<scope>/<stream>`` / ``stream`` -- :class:`StreamRecord`: configuration, state, current
  epoch, the truncation record and any workflow in flight. In the stream's own partition, so the
  record updates of every transaction, watermark and workflow of a deployment do not meet on one
  partition (all of a scope's streams did, when records were kept under ``scope#<scope>``: see
  store.MetadataStore.get_stream for how such a record moves).
* ``stream#<scope>/<stream>`` / ``epoch#<n>`` -- :class:`EpochRecord`: the segments of an epoch.
* ``stream#<scope>/<stream>`` / ``segment#<id>`` -- :class:`SegmentRecord`: a segment's key range,
  successors, predecessors and sealed size.
* ``stream#<scope>/<stream>`` / ``txn#<id>`` -- :class:`TxnRecord`: a transaction.
* ``stream#<scope>/<stream>`` / ``rs#<time>`` -- :class:`RetentionRecord`: the retention set.
* ``stream#<scope>/<stream>`` / ``sub#<scope>/<group>`` -- :class:`SubscriberRecord`: a subscriber's cut.
* ``stream#<scope>/<stream>`` / ``retention-decision`` -- :class:`RetentionDecisionRecord`: retention's last decision.
* ``stream#<scope>/<stream>`` / ``mark#<writer>`` -- :class:`WriterMarkRecord`: a writer's noted time.
* ``stream#<scope>/<stream>`` / ``sink#<name>`` -- :class:`SinkRecord`: a streaming writer's batches.
* ``rg#<scope>/<group>`` / ``rg`` -- :class:`ReaderGroupRecord`: a reader group's shared state.
* ``rg#<scope>/<group>`` / ``page#<n>`` -- :class:`ReaderGroupPageRecord`: a piece of a large group's state.
* ``rg#<scope>/<group>`` / ``head`` -- :class:`ReaderGroupHeadRecord`: how far the state's version may have moved.
* ``rg#<scope>/<group>`` / ``lease`` -- :class:`ReaderLeaseRecord`: when its readers' leases next need a look.
* ``rgs#<scope>`` / ``<group>`` -- :class:`ReaderGroupNameRecord`: a scope's reader groups, listed by one query.

Records that are the subject of a workflow in flight carry ``pending`` / ``pending_since``, which
puts them in the sparse ``workflows`` index the sweeper reads; a finished workflow removes them.
Scope and stream records are versioned (``VersionAttribute``): every change is conditional on the
version it read.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from pynamodb.attributes import (
    Attribute,
    DiscriminatorAttribute,
    JSONAttribute,
    ListAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
    UnicodeSetAttribute,
    VersionAttribute,
)
from pynamodb.constants import STRING
from pynamodb.indexes import GlobalSecondaryIndex, IncludeProjection
from pynamodb.models import Model

from dataplane.deployment import Deployment, point_models
from dataplane.shards import shard_key

SCOPES_PK = "scopes"
PENDING = "wf"


def workflow_shard(pk: str, sk: str) -> str:
    """The ``workflows`` index partition key of the record ``(pk, sk)``: ``wf#<n>``, write-sharded
    (dataplane.shards), so the records of a deployment's workflows in flight (every transaction's commit
    and abort among them) do not all meet on one index partition."""
    return shard_key(PENDING, f"{pk}|{sk}")


def scope_pk(scope: str) -> str:
    return f"scope#{scope}"


def stream_pk(scope: str, stream: str) -> str:
    return f"stream#{scope}/{stream}"


STREAM_SK = "stream"  # the sort key of a stream's record in its own partition


def epoch_sk(epoch: int) -> str:
    return f"epoch#{epoch:010d}"


def reader_group_pk(scope: str, group: str) -> str:
    return f"rg#{scope}/{group}"


def reader_groups_pk(scope: str) -> str:
    return f"rgs#{scope}"


def txn_sk(txn_id: str) -> str:
    return f"txn#{txn_id}"


def committing_sk(txn_id: str) -> str:
    return f"cm#{txn_id}"


def segment_sk(segment_id: int) -> str:
    return f"segment#{segment_id:020d}"


# What the sharded "due" indexes of the metadata table project besides the keys: the names their jobs
# act on, which never change once written. So an update of a record in such an index (a commit's, a
# watermark's, a ping's other fields) writes nothing to the index unless it moves the item's index keys.
# ("kind" is PynamoDB's discriminator: a query of a subclass filters on it.)
INDEXED_NAMES = ["kind", "scope", "stream", "txn_id", "group"]


class WorkflowIndex(GlobalSecondaryIndex):
    """Sparse index of records with a workflow in flight, oldest first, under write-sharded partition
    keys (``wf#<n>``: :func:`workflow_shard`). It projects only the names that identify the record: the
    sweeper reads the few it acts on by key, so a workflow's own steps (which rewrite ``workflow``)
    write nothing to the index."""

    class Meta:
        index_name = "workflows"
        projection = IncludeProjection(INDEXED_NAMES)

    pending = UnicodeAttribute(hash_key=True)
    pending_since = NumberAttribute(range_key=True)


class TxnDeadlineIndex(GlobalSecondaryIndex):
    """Sparse index of open transactions by the time they expire (lease or maximum execution time),
    under write-sharded partition keys (``open#<n>``: dataplane.shards).

    Reader groups with online readers are in it too, under their own ``deadline_shard``
    (``reader-lease#<n>``, :class:`ReaderLeaseRecord`): one index of deadlines serves both lease jobs.
    """

    class Meta:
        index_name = "txn-deadlines"
        projection = IncludeProjection(INDEXED_NAMES)

    deadline_shard = UnicodeAttribute(hash_key=True)
    deadline_ms = NumberAttribute(range_key=True)


class RetentionIndex(GlobalSecondaryIndex):
    """Sparse index of streams with a retention policy, by bucket: a retention run takes one bucket.
    It projects only the stream's names (the cycle reads the record itself), so the updates of a
    stream record (watermarks, scaling, writers' notes) write nothing to it."""

    class Meta:
        index_name = "retention"
        projection = IncludeProjection(INDEXED_NAMES)

    retention_bucket = NumberAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)


class AutoScaleIndex(GlobalSecondaryIndex):
    """Sparse index of streams whose scaling policy is by rate: the ones auto-scaling looks at, under
    write-sharded partition keys (``1#<n>``: dataplane.shards)."""

    class Meta:
        index_name = "autoscale"
        projection = IncludeProjection(INDEXED_NAMES)

    autoscale = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)


class WatermarkIndex(GlobalSecondaryIndex):
    """Sparse index of streams whose writers note time: the ones the watermark job looks at, under
    write-sharded partition keys (``1#<n>``: dataplane.shards)."""

    class Meta:
        index_name = "watermarks"
        projection = IncludeProjection(INDEXED_NAMES)

    watermarked = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)


class MetadataItem(Model):
    class Meta:
        table_name = Deployment.metadata_table
        region = Deployment.region
        billing_mode = "PAY_PER_REQUEST"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = DiscriminatorAttribute()
    pending = UnicodeAttribute(null=True)
    pending_since = NumberAttribute(null=True)
    deadline_shard = UnicodeAttribute(null=True)
    deadline_ms = NumberAttribute(null=True)
    expires_at = TTLAttribute(null=True)  # finished transactions disappear a while after they end
    retention_bucket = NumberAttribute(null=True)
    autoscale = UnicodeAttribute(null=True)
    watermarked = UnicodeAttribute(null=True)
    # A random token that store.versioned_update writes with each change of a versioned record: a resend
    # botocore sends after a lost answer is refused by the version its first attempt moved on, and the
    # token tells that refusal apart from another writer's change.
    write_id = UnicodeAttribute(null=True)
    # A random token written with a record's creation and never changed (store.create_item): a create
    # whose answer was lost is refused on resend because the record exists, and the token tells its own
    # record apart from one someone else made (write_id does not: later changes replace it).
    create_id = UnicodeAttribute(null=True)
    workflows = WorkflowIndex()
    txn_deadlines = TxnDeadlineIndex()
    retention = RetentionIndex()
    autoscaled = AutoScaleIndex()
    watermarking = WatermarkIndex()


class ScopeRecord(MetadataItem, discriminator="scope"):
    state = UnicodeAttribute()  # ACTIVE or DELETING
    created_ms = NumberAttribute()
    version = VersionAttribute()

    @property
    def scope(self) -> str:
        return self.sk


class StreamRecord(MetadataItem, discriminator="stream"):
    scope = UnicodeAttribute()
    stream = UnicodeAttribute()
    state = UnicodeAttribute()
    configuration = JSONAttribute()  # rillet.models.StreamConfiguration as JSON
    created_ms = NumberAttribute()
    current_epoch = NumberAttribute(default=0)
    segment_count = NumberAttribute(default=0)  # segments created so far: the next segment's number
    head = JSONAttribute(null=True)  # the truncation record: {segment id: offset}
    workflow = JSONAttribute(null=True)  # {"name": ..., ...parameters} of the workflow in flight
    watermark_count = NumberAttribute(null=True)  # watermarks appended to the stream's _MARK stream
    last_watermark = JSONAttribute(null=True)  # {"lower_ms", "upper_ms", "cut"} of the latest one
    version = VersionAttribute()


class StreamNameRecord(MetadataItem, discriminator="stream-name"):
    """A stream's entry in its scope's listing, written and deleted in one transaction with the stream's
    record (so the listing never names a stream that is not there, nor misses one)."""

    created_ms = NumberAttribute()  # the incarnation it lists
    tags = UnicodeSetAttribute(null=True)  # a copy of the configuration's tags, for filtering listings

    @property
    def stream(self) -> str:
        return self.sk


class EpochRecord(MetadataItem, discriminator="epoch"):
    epoch = NumberAttribute()
    created_ms = NumberAttribute()
    # [[segment id, low, high], ...] ordered by key range: one epoch's segments, about 40 bytes each, so
    # the item holds an epoch of up to some 9,000 segments; it never grows once written.
    segments = JSONAttribute()
    # The epoch whose key ranges this one duplicates (a rolling commit's two epochs, as Pravega's
    # EpochRecord.referenceEpoch); none for an epoch a scale made. Transactions begun in epochs with
    # the same reference commit in place.
    reference_epoch = NumberAttribute(null=True)
    # The last auto-scale decision since this epoch became current, and what its run did:
    # {"decided_ms", "epoch", "reason", "outcome"}, set by scale_stream_job's op (not by the sensor's tick,
    # whose cost it leaves alone) and overwritten by the next one (controlplane/scale_report.py). Bounded:
    # one decision, its reason and outcome each cut to DECISION_TEXT_MAX characters, so under 1.2 KB.
    scale_decision = JSONAttribute(null=True)


class SegmentRecord(MetadataItem, discriminator="segment"):
    segment_id = NumberAttribute()
    low = NumberAttribute()
    high = NumberAttribute()
    created_ms = NumberAttribute()
    sealed_epoch = NumberAttribute(null=True)
    sealed_size = NumberAttribute(null=True)
    successors = ListAttribute(of=NumberAttribute, default=list)
    predecessors = ListAttribute(of=NumberAttribute, default=list)


class TxnRecord(MetadataItem, discriminator="txn"):
    """A transaction: its state, the epoch and segments it began in, its lease and deadlines.

    An open transaction carries ``deadline_shard``/``deadline_ms`` (the sparse ``txn-deadlines``
    index the timeout sensor reads); committing and aborting ones carry ``pending`` (the sweeper's
    index) until they are finished.
    """

    scope = UnicodeAttribute()
    stream = UnicodeAttribute()
    txn_id = UnicodeAttribute()
    state = UnicodeAttribute()
    epoch = NumberAttribute()
    segments = JSONAttribute()  # [[segment id, low, high], ...] of the epoch it began in (bounded as there)
    created_ms = NumberAttribute()
    lease_expiry_ms = NumberAttribute()
    max_expiry_ms = NumberAttribute()  # begin + min(1,000 x its lease, the bound): no ping's lease ends later
    commit_ms = NumberAttribute(null=True)  # when commit was requested: commits apply in this order
    timestamp_ms = NumberAttribute(null=True)  # the writer's event time at commit, for watermarks
    writer_id = UnicodeAttribute(null=True)
    batch = UnicodeAttribute(null=True)  # the commit batch it was stamped into: "<stream version>/<reference epoch>"
    version = VersionAttribute()


class RetentionRecord(MetadataItem, discriminator="retention"):
    """An entry of a stream's retention set: a tail stream cut, when it was recorded, and the stream's
    size from its very beginning up to it (so the bytes between two records are a subtraction)."""

    recorded_ms = NumberAttribute()
    size = NumberAttribute()
    cut = JSONAttribute()  # [[segment id, low, high, offset], ...]


class RetentionDecisionRecord(MetadataItem, discriminator="retention-decision"):
    """The last retention cycle's decision about a stream and why, for operators: one item per stream,
    overwritten by each cycle (only by a later one). An item of its own rather than fields of the
    stream record, so a cycle neither bumps the stream's version (racing its workflows) nor rewrites
    the stream's index entries."""

    decided_ms = NumberAttribute()
    stream_created_ms = NumberAttribute()  # which incarnation of the stream name it is about
    outcome = UnicodeAttribute()  # truncated, kept or skipped
    reason = UnicodeAttribute()  # one sentence
    retained_bytes = NumberAttribute()
    cut = JSONAttribute(null=True)  # [[segment id, low, high, offset], ...] truncated at: one epoch's segments at most


class SubscriberRecord(MetadataItem, discriminator="subscriber"):
    """A subscriber reader group of a stream and the latest truncation stream cut it acknowledged."""

    group = UnicodeAttribute()  # "scope/group"
    generation = NumberAttribute()
    cut = JSONAttribute()  # [[segment id, low, high, offset], ...]
    updated_ms = NumberAttribute()
    # the incarnation of the group that subscribed (its record's create_id): an acknowledgement of an
    # earlier group of that name is refused; absent for a group created before incarnations were recorded
    group_incarnation = UnicodeAttribute(null=True)


class CommittingRecord(MetadataItem, discriminator="cm"):
    """A transaction of the stream that is COMMITTING (``cm#<txn id>``): written in one DynamoDB
    transaction with its move to COMMITTING and deleted once it is closed, so that planning and applying
    a commit read the transactions being committed, never every transaction the stream kept (finished
    ones stay a day, ``TxnSettings.keep_finished_ms``). A marker whose transaction is closed (a crash
    between the close and the delete) is deleted by the next commit that reads it."""

    txn_id = UnicodeAttribute()


class WriterMarkRecord(MetadataItem, discriminator="mark"):
    """The latest time a writer noted, with its position then (its whole segment map, at the offsets
    after its last acknowledged writes)."""

    writer = UnicodeAttribute()
    timestamp_ms = NumberAttribute()
    position = JSONAttribute()  # [[segment id, low, high, offset], ...]
    updated_ms = NumberAttribute()
    # the stream record's created_ms the note read (None: noted before marks carried it): a note that
    # stalled across a delete and create again of the stream is of the old one, whose offsets the new
    # stream's watermarks must never take
    incarnation = NumberAttribute(null=True)


class SinkRecord(MetadataItem, discriminator="sink"):
    """A streaming writer's (Spark query's) commit progress: the last batch committed, and the batch
    being committed with its transactions, so that a batch commits once however often it is retried."""

    last_batch = NumberAttribute(default=-1)
    pending_batch = NumberAttribute(null=True)
    pending_txns = JSONAttribute(null=True)
    version = VersionAttribute()


class CompressedJSONAttribute(Attribute[Any]):
    """JSON stored deflated, as ``z:`` and the base64 of its zlib form: a reader group's state repeats its
    stream's name and field names in every entry, so it stores in about a sixth of its JSON's bytes,
    and a consistent read of it (every sync) costs as many fewer read units. A plain JSON value (a
    record written before compression) reads as it is."""

    attr_type = STRING
    PREFIX = "z:"

    def serialize(self, value: Any) -> str:
        packed = zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 6)
        return self.PREFIX + base64.b64encode(packed).decode()

    def deserialize(self, value: str) -> Any:
        if value.startswith(self.PREFIX):
            return json.loads(zlib.decompress(base64.b64decode(value[len(self.PREFIX):])))
        return json.loads(value)


class ReaderGroupRecord(MetadataItem, discriminator="rg"):
    """A reader group's configuration and shared state (controlplane.reader_groups.GroupState as
    compressed JSON).

    Every change is a read-modify-write conditional on ``version``: the role Pravega's State
    Synchronizer plays for reader groups. A state too large for one item is stored in ``pages`` page
    items beside it (:class:`ReaderGroupPageRecord`) and ``state`` is absent from the item; the record
    read back (controlplane.reader_groups.state.read_record) has it joined again.
    """

    scope = UnicodeAttribute()
    group = UnicodeAttribute()
    state = CompressedJSONAttribute(null=True)
    pages = NumberAttribute(null=True)  # how many page items hold the state (absent: none, it is in ``state``)
    version = VersionAttribute()


class ReaderGroupPageRecord(MetadataItem, discriminator="rg-page"):
    """One piece of a large reader group state as stored (controlplane.reader_groups.state.PAGE_BYTES at
    most), so that no item of a group nears DynamoDB's 400 KB whatever its streams' live segments. Every
    write of such a state writes all its pages and the record in one transaction, each page carrying the
    record's new ``version``: a read that meets pages of another version than the record's met a write
    between its two requests, and reads again."""

    version = NumberAttribute()
    piece = UnicodeAttribute()


class ReaderGroupHeadRecord(MetadataItem, discriminator="rg-head"):
    """A few bytes beside a reader group's record that say whether a copy of it is still current.

    ``bound`` is at least the record's version: every writer raises it to the version it is about to
    write before writing (controlplane.reader_groups.state.raise_bound). So a copy of the record at
    version ``bound`` that was read under the same ``token`` is the record as it stands, and a sync that
    reads this item (1 read unit) need not read the record (a unit per 4 KB: 25 at 1,000 readers).
    ``token`` is new with every group created under the name: a copy of a deleted group never matches.
    ``passes`` counts the checkpoint passes stored in readers' own items (each adds 1 after storing its
    pass; controlplane.reader_groups.state.count_pass), which tells a pass whether it may be the last.
    """

    token = UnicodeAttribute()
    bound = NumberAttribute()
    passes = NumberAttribute(null=True)


class ReaderLeaseRecord(MetadataItem, discriminator="rg-lease"):
    """When the control plane should next look for readers of a group whose lease expired.

    A small item of its own, so that the ``txn-deadlines`` index (which projects whole items) never
    copies the group's state, and syncs of live readers rarely write it (see
    controlplane.reader_groups.schedule_lease_check). Without ``deadline_ms`` (no reader online) it is
    out of the index. ``group_version`` is the version of the group record whose state decided it, and
    ``create_id`` that record's (the group's incarnation; absent: written before incarnations were
    recorded): writes only ever replace an older decision of the same incarnation, whatever order they
    arrive in, or the record of a group deleted since (versions restart when a name is created again).
    """

    scope = UnicodeAttribute()
    group = UnicodeAttribute()
    group_version = NumberAttribute()


class ReaderGroupNameRecord(MetadataItem, discriminator="rg-name"):
    """A reader group's entry in its scope's listing, written and deleted in one transaction with the
    group's record, so the listing never names a group that is not there (nor misses one)."""

    created_ms = NumberAttribute()

    @property
    def group(self) -> str:
        return self.sk


# The metadata table's models, each with a connection of its own once used.
MODELS = (MetadataItem, ScopeRecord, StreamRecord, StreamNameRecord, EpochRecord, SegmentRecord, TxnRecord, CommittingRecord,
          RetentionRecord, RetentionDecisionRecord, SubscriberRecord, WriterMarkRecord, SinkRecord, ReaderGroupRecord,
          ReaderGroupPageRecord, ReaderGroupHeadRecord, ReaderLeaseRecord, ReaderGroupNameRecord)


def bind(deployment: Deployment) -> None:
    """Point the models at a deployment's table and endpoint (call before first use)."""
    point_models(MODELS, deployment.metadata_table, deployment)
