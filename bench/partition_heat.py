"""Partition heat (issue 38): which DynamoDB partition of each table and each global index a mixed
workload loads most, in units per unit of work, and what that becomes at a target deployment.

The workload runs for real on moto through the control plane in-process (as the functions call it):
``streams`` streams in one scope, each auto-scaled by event rate, with a retention policy and a reader
group of ``readers`` readers, doing the same mix -- inline appends (the first one of a segment makes
it due for tiering), appends large enough to go to S3, writers noting time, transactions (begin, one
event per segment, a ping, commit), reads at the tail and reader syncs -- then every Dagster sensor
and schedule of dagster_project is ticked ``ticks`` times with Dagster's test context and the runs
it requests are executed in process. Each step is labelled with its kind of work.

Recording: moto's request meter (standalone.moto_server.RequestMeter; the server applies one
request at a time) is given a subclass that, as each DynamoDB request is answered, reads the images
of the items it touched from moto's tables and keeps the previous image of every item (the meter
sees every write from the tables' creation). So each write is judged on the real old and new item,
not reconstructed from its UpdateExpression. Units, as AWS charges them:

* table write: ``ceil(max(old, new item size) / 1 KB)``, twice in a transaction; a refused write
  (condition failed, transaction cancelled) on the existing item's size; a ConditionCheck as a write;
* index write, per global index, from the old and new image: an item entering or leaving the index
  is one write, an item whose index keys change is two (delete and put, on both partitions), an
  item that stays with its keys unchanged is one write only if a projected attribute changed (all
  of them under ALL); each on ``ceil(projected size / 1 KB)`` (keys and projected names, without
  DynamoDB's 100 bytes of index overhead);
* reads: GetItem and BatchGetItem on the whole item (``ceil(size / 4 KB)``, half if eventually
  consistent, one unit for a missing item), TransactGetItems twice; a Query on the summed size of the
  items it returns, whole items for a table and projected ones for an index, scaled by
  ScannedCount / Count where a filter dropped items (their sizes are not known).

The index definitions are read from moto's table descriptions, which standalone.resources creates
from the PynamoDB models: the figures follow the models as they change.

Extrapolation. For partition ``p`` and kind of work ``k`` the benchmark measures ``u(p, k)``, the
units ``p`` took per unit of ``k``. At a target deployment doing ``R(k)`` units of ``k`` a second
over ``S`` streams (the benchmark ran ``s``), uniformly spread over its streams::

    units/s on p = sum_k u(p, k) * R(k) * (s / S if p's key names one stream, segment or group, else 1)

A key naming a stream (``stream#<scope>/<stream>``, a segment, ``rg#<scope>/<group>``) takes its
stream's share of the work; every other key (index shards ``due#<n>``, retention buckets, the
``scopes`` and ``scope#<scope>`` partitions, with the target's streams in one scope as here) keeps the
share of all work it had at small scale: its shard count does not grow with the deployment. The
hottest sharded key measured over a few dozen items is above the 1/16 that crc32 settles to at
10,000 streams, so these shares err high. A job's unit of work is one stream of one tick, ``R =
S / interval`` (its queries return ``S / 16`` items a shard, its runs act on every stream), which errs
high for tiering (a segment's pass comes once per tiering age, not every tick). Limits: 1,000 write
and 3,000 read units a second per partition key (a key's items may share a partition; one key never
spreads over several for writes).

Before. The indexes as they were before issue 38 (single keys ``due``, ``open``, ``reader-lease``,
``1``, ``wf``; every projection ALL) are figured by judging the same recorded images against that
schema: an index key value ``<prefix>#<n>`` counts under ``<prefix>``, and every attribute is
projected. Index reads are remapped the same way (a sharded query's units count under the bare key).
The code's other changes of issue 38 (what it writes) are not undone, so the tables have no before.

    python -m bench.partition_heat [--streams N] [--readers N] [--ticks N]
"""

from __future__ import annotations

import argparse
import math
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import boto3
from moto.dynamodb.models import dynamodb_backends
from moto.dynamodb.models.dynamo_type import DynamoType

from bench.cost import _read_units, _write_units, item_size
from bench.stack import moto_stack
from controlplane.service import Controller
from dataplane.deployment import Deployment
from dataplane.segment_store import StoreSettings
from dataplane.shards import SHARDS
from rillet.api import SegmentOffset, SyncRequest
from rillet.framing import frame
from rillet.models import (
    ReaderGroupConfig,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamRange,
)
from rillet.names import segment_name, txn_segment_token
from standalone.moto_server import RequestMeter, RequestRecord, _wire_form

WRITE_LIMIT, READ_LIMIT = 1_000, 3_000  # units a second per partition
TABLE_ROWS = 3  # a table's hottest key families shown (an index shows its hottest)
SHARDED_VALUE = re.compile(r"^(.+)#\d+$")  # dataplane.shards: <prefix>#<n>
PER_STREAM_KEY = re.compile(r"stream-\d+|group-\d+")  # the entities the benchmark names (below)
# The indexes as they were before issue 38 (its table), by name: the partition key values they had (None:
# the retention index's 16 buckets, unchanged); every one projected ALL.
BEFORE_ISSUE_38 = {"tiering": {"due"}, "txn-deadlines": {"open", "reader-lease"}, "autoscale": {"1"},
                   "watermarks": {"1"}, "workflows": {"wf"}, "retention": None}
HASH_EQUALS = re.compile(r"(#?[\w.-]+)\s*(?<![<>!])=\s*(:[\w]+)")

# The target deployment of issue 38, and what the benchmark assumes of it beyond the issue's figures.
TARGET_STREAMS = 10_000
TARGET_APPENDS_S = 100_000
TARGET_INLINE_SHARE = 0.9  # of appends: blocks of at most StoreSettings.inline_max (the rest go to S3)
TARGET_READERS = 100_000  # one group per stream: 10 readers each
TARGET_TXNS_S = 1_000
TARGET_TIME_NOTES_S = TARGET_STREAMS  # each stream's writers note time once a second between them
TARGET_READS_S = TARGET_APPENDS_S  # each appended block read once, at the tail, by its stream's group
# A stream's time notes between two watermark ticks (10 s) at the target: a note moves its mark's index
# key only when the job looked at the mark since, so the notes per tick set a note's index writes.
NOTES_PER_ROUND = 10

READER_LEASE_MS = SILENT_AFTER_MS = 3_600_000
APPEND_INLINE, APPEND_S3, BECOMES_DUE = "append inline", "append to S3", "segment becomes due"
TIME_NOTE, TRANSACTION, READ, SYNC = "writer time note", "transaction", "read at the tail", "reader sync"


@dataclass(frozen=True)
class IndexSpec:
    """A global index as DynamoDB holds it: its keys and what it projects (None: ALL)."""

    table: str
    name: str
    hash_key: str
    range_key: str | None
    projected: frozenset[str] | None
    before: bool = False  # judged as before issue 38: bare key, ALL

    @property
    def resource(self) -> str:
        return f"{self.table}/{self.name}"

    def keys(self, image: dict | None) -> tuple | None:
        """The item's (hash value, range value) in the index, None if it is not in the index."""
        if not image or self.hash_key not in image or (self.range_key and self.range_key not in image):
            return None
        hash_value = _plain(image[self.hash_key])
        if self.before:
            hash_value = unsharded(hash_value)
            if not was_indexed(self.name, hash_value):
                return None
        return hash_value, _plain(image[self.range_key]) if self.range_key else None

    def projection(self, image: dict, table_keys: tuple[str, ...]) -> dict:
        if self.projected is None:
            return image
        names = self.projected | set(table_keys) | {self.hash_key, self.range_key}
        return {k: v for k, v in image.items() if k in names}

    def as_before(self) -> IndexSpec:
        return IndexSpec(self.table, self.name, self.hash_key, self.range_key, None, before=True)


def was_indexed(index: str, key_value: object) -> bool:
    """Whether an item under ``key_value`` (unsharded) was in the index before issue 38."""
    return index in BEFORE_ISSUE_38 and (BEFORE_ISSUE_38[index] is None or key_value in BEFORE_ISSUE_38[index])


def unsharded(value: object) -> object:
    """The index key value as it was before issue 38 sharded it: ``due#3`` -> ``due``."""
    match = SHARDED_VALUE.match(value) if isinstance(value, str) else None
    return match.group(1) if match else value


def _plain(value: dict) -> object:
    (kind, v), = value.items()
    return v if kind != "N" else (float(v) if "." in v else int(v))


def index_specs(client, table: str) -> list[IndexSpec]:
    """The table's global indexes from its description (moto's, created from the models)."""
    specs = []
    for index in client.describe_table(TableName=table)["Table"].get("GlobalSecondaryIndexes", []):
        keys = {k["KeyType"]: k["AttributeName"] for k in index["KeySchema"]}
        projection = index["Projection"]
        projected = None if projection["ProjectionType"] == "ALL" else frozenset(projection.get("NonKeyAttributes", []))
        specs.append(IndexSpec(table, index["IndexName"], keys["HASH"], keys.get("RANGE"), projected))
    return specs


@dataclass
class Heat:
    """Units by (kind of work, resource, partition key), and how many units of each kind were done."""

    writes: Counter = field(default_factory=Counter)
    reads: Counter = field(default_factory=Counter)
    before_writes: Counter = field(default_factory=Counter)  # indexes only, judged on the old schema
    before_reads: Counter = field(default_factory=Counter)
    work: Counter = field(default_factory=Counter)
    index_writes: Counter = field(default_factory=Counter)  # (kind, index resource): writes, not units


class HeatMeter(RequestMeter):
    """The moto request meter, also charging each DynamoDB request's units to the partitions it
    touched, for the kind of work under way (``doing``). Called by the server with its lock held."""

    def __init__(self) -> None:
        super().__init__(keep_records=True)  # the server hands over request and answer bodies only then
        self.heat = Heat()
        self.kind: str | None = None
        self.charging = True  # False: a warm-up, whose requests only keep the item images
        self.images: dict[tuple, dict] = {}  # (table, hash, range) -> the item's last image
        self.table_keys: dict[str, tuple[str, ...]] = {}
        self.indexes: dict[str, list[IndexSpec]] = {}

    def watch(self, client, tables: list[str]) -> None:
        for table in tables:
            schema = client.describe_table(TableName=table)["Table"]["KeySchema"]
            self.table_keys[table] = tuple(k["AttributeName"] for k in sorted(schema, key=lambda k: k["KeyType"]))
            self.indexes[table] = index_specs(client, table)

    @contextmanager
    def doing(self, kind: str, units: int = 1) -> Iterator[None]:
        self.kind = kind if self.charging else None
        try:
            yield
        finally:
            self.kind = None
            if self.charging:
                self.heat.work[kind] += units

    def add(self, record: RequestRecord) -> None:
        super().add(record)
        if record.service == "dynamodb":
            self._charge(record.operation, record.request or {}, record.response or {})

    # -- item images -------------------------------------------------------------------------------

    def _moto_image(self, table: str, key: dict) -> dict | None:
        for regions in dynamodb_backends.values():
            for backend in regions.values():
                moto_table = backend.tables.get(table)
                if moto_table is None:
                    continue
                hash_name, *range_name = self.table_keys[table]
                item = moto_table.get_item(DynamoType(key[hash_name]),
                                           DynamoType(key[range_name[0]]) if range_name else None)
                return _wire_form(item.to_json()["Attributes"]) if item else None
        return None

    def _slot(self, table: str, key: dict) -> tuple:
        return (table,) + tuple(_plain(key[name]) for name in self.table_keys[table])

    # -- charging ------------------------------------------------------------------------------------

    def _charge(self, operation: str, request: dict, response: dict) -> None:
        failed = "__type" in response
        writes: list[tuple[str, dict, int]] = []  # (table, key, multiplier)
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            writes.append((request["TableName"], request.get("Key") or request["Item"], 1))
        elif operation == "BatchWriteItem":
            for table, entries in request.get("RequestItems", {}).items():
                for entry in entries:
                    (_kind, body), = entry.items()
                    writes.append((table, body.get("Key") or body["Item"], 1))
        elif operation == "TransactWriteItems":
            for entry in request.get("TransactItems", []):
                (_kind, body), = entry.items()
                writes.append((body["TableName"], body.get("Key") or body["Item"], 2))
        for table, key, times in writes:
            if table in self.table_keys:
                self._write(table, key, times, failed)
        if failed or self.kind is None:
            return
        if operation == "GetItem":
            self._read_items(request["TableName"], [request["Key"]], bool(request.get("ConsistentRead")))
        elif operation == "BatchGetItem":
            for table, asked in request.get("RequestItems", {}).items():
                self._read_items(table, asked["Keys"], bool(asked.get("ConsistentRead")))
        elif operation == "TransactGetItems":
            for entry in request.get("TransactItems", []):
                self._read_items(entry["Get"]["TableName"], [entry["Get"]["Key"]], True, times=2)
        elif operation in ("Query", "Scan"):
            self._query(operation, request, response)

    def _write(self, table: str, key: dict, times: int, failed: bool) -> None:
        slot = self._slot(table, key)
        old = self.images.get(slot)
        new = old if failed else self._moto_image(table, key)
        if new is None:
            self.images.pop(slot, None)
        else:
            self.images[slot] = new
        if self.kind is None:
            return
        size = item_size(old) if failed else max(item_size(old), item_size(new))
        self.heat.writes[(self.kind, table, slot[1])] += times * _write_units(size)
        if failed:
            return
        for spec in self.indexes[table]:
            for judged, counter in ((spec, self.heat.writes), (spec.as_before(), self.heat.before_writes)):
                for partition, units in self._index_writes(judged, old, new, self.table_keys[table]):
                    counter[(self.kind, spec.resource, partition)] += units
                    if not judged.before:
                        self.heat.index_writes[(self.kind, spec.resource)] += 1

    @staticmethod
    def _index_writes(spec: IndexSpec, old: dict | None, new: dict | None,
                      table_keys: tuple[str, ...]) -> list[tuple[object, int]]:
        """(index partition, units) of each index write that replacing ``old`` by ``new`` makes."""
        old_keys, new_keys = spec.keys(old), spec.keys(new)
        old_entry = spec.projection(old, table_keys) if old_keys else None
        new_entry = spec.projection(new, table_keys) if new_keys else None
        if old_keys and new_keys and old_keys == new_keys:
            if old_entry == new_entry:
                return []
            return [(new_keys[0], _write_units(max(item_size(old_entry), item_size(new_entry))))]
        return ([(old_keys[0], _write_units(item_size(old_entry)))] if old_keys else []) + \
               ([(new_keys[0], _write_units(item_size(new_entry)))] if new_keys else [])

    def _read_items(self, table: str, keys: list[dict], consistent: bool, times: int = 1) -> None:
        if table not in self.table_keys:
            return
        for key in keys:
            slot = self._slot(table, key)
            self.heat.reads[(self.kind, table, slot[1])] += times * _read_units(item_size(self.images.get(slot)),
                                                                                consistent)

    def _query(self, operation: str, request: dict, response: dict) -> None:
        table = request["TableName"]
        if table not in self.table_keys:
            return
        consistent = bool(request.get("ConsistentRead"))
        spec = next((s for s in self.indexes[table] if s.name == request.get("IndexName")), None)
        images = [self.images.get(self._slot(table, item)) or item for item in response.get("Items", [])]
        sizes = [item_size(spec.projection(i, self.table_keys[table]) if spec else i) for i in images]
        returned, scanned = response.get("Count", len(images)), response.get("ScannedCount", len(images))
        size = sum(sizes) * (scanned / returned if returned else 0)
        partition = "(scan)" if operation == "Scan" else self._queried_partition(request, spec, table)
        resource = spec.resource if spec else table
        self.heat.reads[(self.kind, resource, partition)] += _read_units(math.ceil(size), consistent)
        if spec and was_indexed(spec.name, unsharded(partition)):  # before issue 38: the bare key, ALL
            whole = sum(item_size(i) for i in images) * (scanned / returned if returned else 0)
            self.heat.before_reads[(self.kind, resource, unsharded(partition))] += _read_units(math.ceil(whole),
                                                                                                consistent)

    def _queried_partition(self, request: dict, spec: IndexSpec | None, table: str) -> object:
        hash_name = spec.hash_key if spec else self.table_keys[table][0]
        names = request.get("ExpressionAttributeNames", {})
        for name, value in HASH_EQUALS.findall(request.get("KeyConditionExpression", "")):
            if names.get(name, name) == hash_name:
                return _plain(request["ExpressionAttributeValues"][value])
        return "(unknown)"


# -- the workload --------------------------------------------------------------------------------------

@dataclass
class Bench:
    controller: Controller
    meter: HeatMeter
    scope: str
    streams: list[str]
    segments: dict[str, list[int]]  # stream -> its segment ids
    readers: dict[str, list[tuple[str, str]]]  # stream -> (reader, instance token)
    held: dict[tuple[str, str], list[SegmentOffset]] = field(default_factory=dict)
    # (segment, writer) -> the writer's next event number there: a number sent again is a duplicate,
    # which the store answers without writing
    event_numbers: Counter = field(default_factory=Counter)


def start(meter: HeatMeter, deployment: Deployment, streams: int, readers: int) -> Bench:
    """On moto with the meter and the tables: ``streams`` streams with their groups (not charged)."""
    meter.watch(boto3.client("dynamodb", endpoint_url=deployment.endpoint_url, region_name=deployment.region),
                [deployment.segments_table, deployment.metadata_table])
    # tier_max_age 0: the first inline append of a segment makes it due at once, so a tick tiers it
    controller = Controller.for_deployment(deployment, StoreSettings(tier_min_age_ms=0, tier_max_age_ms=0))
    scope = "heat" + uuid.uuid4().hex[:6]
    controller.streams.create_scope(scope)
    bench = Bench(controller, meter, scope, [f"stream-{i:02d}" for i in range(streams)], {}, {})
    # writers count as silent after an hour, not a minute: on a busy machine the watermark job's tick
    # may come a minute after the notes, and would take the stream out of watermarking
    config = StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(1_000, 2, 2),
                                 retention_policy=RetentionPolicy.by_time(timedelta(days=1)),
                                 timestamp_aggregation_timeout_ms=SILENT_AFTER_MS)
    for stream in bench.streams:
        controller.streams.create_stream(scope, stream, config)
        bench.segments[stream] = [s.segment_id for s in controller.streams.current_segments(scope, stream)]
        bench.readers[stream] = [(f"reader-{n}", uuid.uuid4().hex) for n in range(readers)]
        if not readers:
            continue
        group = stream.replace("stream", "group")
        # a lease longer than the benchmark: on a busy machine a reader's turn to sync may come after
        # the default minute, and the lease job would take it offline
        controller.reader_groups.create(scope, group, ReaderGroupConfig(
            streams=[StreamRange(scope=scope, stream=stream)], reader_lease_ms=READER_LEASE_MS))
        for reader, token in bench.readers[stream]:
            controller.reader_groups.add_reader(scope, group, reader, token)
        for reader, token in bench.readers[stream]:
            _sync(bench, stream, reader, token)
    return bench


def _sync(bench: Bench, stream: str, reader: str, token: str) -> None:
    group = stream.replace("stream", "group")
    assignment = bench.controller.reader_groups.sync(bench.scope, group, reader, SyncRequest(
        positions=bench.held.get((stream, reader), []), instance=token))
    bench.held[(stream, reader)] = [SegmentOffset(stream=a.stream, segment_id=a.segment.segment_id, offset=a.offset)
                                    for a in assignment.segments]


def user_work(bench: Bench, inline_appends: int = 4, transactions: int = 2, syncs: int = 2) -> None:
    """Every stream's share of the user-path work, each step charged to its kind."""
    c, meter, scope = bench.controller, bench.meter, bench.scope
    inline, large = frame(b"i" * 1_000), frame(b"L" * (StoreSettings.inline_max * 4))
    numbers = bench.event_numbers

    def append(name: str, writer: str, block: bytes) -> None:
        c.segments.append(name, writer, numbers[(name, writer)], 1, block)
        numbers[(name, writer)] += 1

    for stream in bench.streams:
        for name in [segment_name(scope, stream, sid) for sid in bench.segments[stream]]:
            c.segments.tier(name)  # not charged: the segment starts as a tiering pass leaves it, not due
            with meter.doing(BECOMES_DUE):
                append(name, "writer-a", inline)
            for _ in range(inline_appends):
                with meter.doing(APPEND_INLINE):
                    append(name, "writer-a", inline)
            with meter.doing(APPEND_S3):
                append(name, "writer-b", large)
        for writer in ("writer-a", "writer-b"):
            for _ in range(NOTES_PER_ROUND // 2):
                with meter.doing(TIME_NOTE):
                    c.watermarks.note_time(scope, stream, writer, int(time.time() * 1000),
                                           {sid: 0 for sid in bench.segments[stream]})
        for _ in range(transactions):
            with meter.doing(TRANSACTION):
                txn = c.transactions.begin(scope, stream)
                for segment in txn.segments:
                    c.segments.append(segment_name(scope, stream, txn_segment_token(segment.segment_id, txn.txn_id)),
                                      "txn-writer", 0, 1, frame(b"t" * 100))
                c.transactions.ping(scope, stream, txn.txn_id, 30_000)
                c.transactions.commit(scope, stream, txn.txn_id)
    for _ in range(syncs):
        for stream in bench.streams:
            for reader, token in bench.readers[stream]:
                for position in bench.held[(stream, reader)]:
                    with meter.doing(READ):
                        result = c.segments.read(segment_name(scope, stream, position.segment_id), position.offset)
                    position.offset = result.next_offset
                with meter.doing(SYNC):
                    _sync(bench, stream, reader, token)


def job_ticks(bench: Bench, ticks: int) -> dict[str, float]:
    """Tick every sensor and schedule of the Dagster code location, running the runs they request in
    process; a tick is charged as one unit per stream. Answers each job's interval in seconds."""
    from dagster import RunRequest, build_schedule_context, build_sensor_context
    from dagster._core.definitions.run_status_sensor_definition import RunStatusSensorDefinition
    from dagster._utils.schedules import cron_string_iterator

    from dagster_project import definitions
    from dagster_project.resources import RilletDeployment

    deployment = bench.controller.deployment
    resource = RilletDeployment(endpoint_url=deployment.endpoint_url, metadata_table=deployment.metadata_table,
                                segments_table=deployment.segments_table, bucket=deployment.bucket, tier_min_age_ms=0)
    defs = definitions.defs
    # the code location's jobs and assets, bound to this deployment
    bound = type(defs)(assets=defs.assets, jobs=defs.jobs, resources={"rillet": resource}, executor=defs.executor)
    evaluators = {}
    for sensor in defs.sensors:
        if not isinstance(sensor, RunStatusSensorDefinition):  # the failure reporter reads Dagster's runs
            evaluators[f"job: {sensor.name}"] = (sensor.minimum_interval_seconds, sensor,
                                                 lambda: build_sensor_context(resources={"rillet": resource}))
    for schedule in defs.schedules:
        fires = cron_string_iterator(time.time(), schedule.cron_schedule, "UTC")
        first, second = next(fires), next(fires)
        evaluators[f"job: {schedule.name}"] = ((second - first).total_seconds(), schedule,
                                               lambda: build_schedule_context(resources={"rillet": resource},
                                                                              scheduled_execution_time=datetime.now(UTC)))
    for _ in range(ticks):
        for kind, (_, evaluator, context) in evaluators.items():
            with bench.meter.doing(kind, units=len(bench.streams)):
                with context() as tick:
                    outcome = evaluator(tick)
                for request in (r for r in (outcome if isinstance(outcome, list) else [outcome])
                                if isinstance(r, RunRequest)):
                    config = request.run_config if isinstance(request.run_config, dict) \
                        else request.run_config.to_config_dict()
                    bound.resolve_job_def(request.job_name or evaluator.job_name).execute_in_process(
                        run_config={**config, "loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    return {kind: interval for kind, (interval, _, _) in evaluators.items()}


# -- figures ---------------------------------------------------------------------------------------------

def target_rates(streams: int, segments_per_stream: float, intervals_s: dict[str, float]) -> dict[str, float]:
    """Units of each kind of work a second at the target deployment."""
    segments = TARGET_STREAMS * segments_per_stream
    rates = {
        APPEND_INLINE: TARGET_APPENDS_S * TARGET_INLINE_SHARE,
        APPEND_S3: TARGET_APPENDS_S * (1 - TARGET_INLINE_SHARE),
        # a segment enters the tiering index once per tiering age (inline bytes below the chunk target)
        BECOMES_DUE: segments / (StoreSettings.tier_max_age_ms / 1000),
        TIME_NOTE: TARGET_TIME_NOTES_S,
        TRANSACTION: TARGET_TXNS_S,
        READ: TARGET_READS_S,
        SYNC: TARGET_READERS / (ReaderGroupConfig.model_fields["group_refresh_time_ms"].default / 1000),
    }
    rates.update({kind: TARGET_STREAMS / interval for kind, interval in intervals_s.items()})
    return rates


@dataclass
class Hottest:
    """A partition key (family) at the target: units a second by kind of work, [write, read]."""

    partition: str
    by_kind: dict[str, list[float]]

    @property
    def write_units_s(self) -> float:
        return sum(w for w, _ in self.by_kind.values())

    @property
    def read_units_s(self) -> float:
        return sum(r for _, r in self.by_kind.values())

    @property
    def share(self) -> float:
        return max(self.write_units_s / WRITE_LIMIT, self.read_units_s / READ_LIMIT)

    @property
    def mostly_from(self) -> str:
        if not self.by_kind:
            return "-"
        return max(self.by_kind, key=lambda k: max(self.by_kind[k][0] / WRITE_LIMIT, self.by_kind[k][1] / READ_LIMIT))


def template(partition: object, scope: str) -> str:
    """The partition key with the benchmark's own names as placeholders: ``stream#<scope>/<stream>``."""
    text = str(partition).replace(scope, "<scope>")
    text = re.sub(r"stream-\d+", "<stream>", text)
    text = re.sub(r"group-\d+", "<group>", text)
    return re.sub(r"[0-9a-f]{32}", "<txn>", text)


def extrapolate(heat_writes: Counter, heat_reads: Counter, work: Counter, rates: dict[str, float],
                streams: int, scope: str) -> dict[str, list[Hottest]]:
    """Each resource's partition keys at the target, hottest first, one per key family (module
    docstring: the formula). A write-sharded family (``due#<n>``) is figured at its mean: the target's
    thousands of items hash evenly over its shards, where the benchmark's few dozen do not."""
    load: dict[tuple[str, object], dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    for column, counter in ((0, heat_writes), (1, heat_reads)):
        for (kind, resource, partition), units in counter.items():
            if kind not in rates or not work[kind]:
                continue
            per_stream = bool(PER_STREAM_KEY.search(str(partition)))
            load[(resource, partition)][kind][column] += units / work[kind] * rates[kind] * (
                streams / TARGET_STREAMS if per_stream else 1)
    families: dict[tuple[str, str], Hottest] = {}
    for (resource, partition), by_kind in load.items():
        name = template(partition, scope)
        sharded = SHARDED_VALUE.match(name)
        if sharded:
            family = families.setdefault((resource, sharded.group(1) + "#<n>"),
                                         Hottest(sharded.group(1) + "#<n>", defaultdict(lambda: [0.0, 0.0])))
            for kind, (w, r) in by_kind.items():
                family.by_kind[kind][0] += w / SHARDS
                family.by_kind[kind][1] += r / SHARDS
        else:
            member = Hottest(name, by_kind)
            if (resource, name) not in families or member.share > families[(resource, name)].share:
                families[(resource, name)] = member
    hottest: dict[str, list[Hottest]] = defaultdict(list)
    for (resource, _), family in families.items():
        hottest[resource].append(family)
    return {resource: sorted(rows, key=lambda h: -h.share) for resource, rows in hottest.items()}


@dataclass
class Result:
    streams: int
    readers: int
    heat: Heat
    rates: dict[str, float]
    after: dict[str, list[Hottest]]
    before: dict[str, list[Hottest]]
    scope: str
    resources: set[str]  # every table and index


def run(streams: int = 32, readers: int = 10, ticks: int = 1, jobs: bool = True, warm_up: bool = True,
        inline_appends: int = 4, transactions: int = 2, syncs: int = 2) -> Result:
    meter = HeatMeter()
    with moto_stack(meter) as (_, deployment):
        bench = start(meter, deployment, streams, readers)
        if warm_up:
            # A round not charged: what happens once per stream (a writer's first note starting
            # watermarking, the watermark job creating the stream's mark stream) is not steady work.
            meter.charging = False
            user_work(bench, 1, 1, 1)
            if jobs:
                job_ticks(bench, 1)
            meter.charging = True
        user_work(bench, inline_appends, transactions, syncs)
        intervals = job_ticks(bench, ticks) if jobs else {}
    heat = meter.heat
    segments_per_stream = sum(len(s) for s in bench.segments.values()) / streams
    rates = target_rates(streams, segments_per_stream, intervals)
    index_resources = {spec.resource for specs in meter.indexes.values() for spec in specs}

    def only_indexes(counter: Counter) -> Counter:
        return Counter({k: v for k, v in counter.items() if k[1] in index_resources})

    after = extrapolate(heat.writes, heat.reads, heat.work, rates, streams, bench.scope)
    before = extrapolate(only_indexes(heat.before_writes), only_indexes(heat.before_reads), heat.work, rates,
                         streams, bench.scope)
    return Result(streams, readers, heat, rates, after, before, bench.scope,
                  set(meter.table_keys) | index_resources)


def per_unit_lines(result: Result) -> list[str]:
    """Units per unit of work: each kind's total on each resource and on its most loaded partition."""
    heat = result.heat
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    top: dict[tuple[str, str], tuple[float, str]] = {}
    for column, counter in ((0, heat.writes), (1, heat.reads)):
        by_partition: Counter = Counter()
        for (kind, resource, partition), units in counter.items():
            totals[(kind, resource)][column] += units
            by_partition[(kind, resource, partition)] += units
        for (kind, resource, partition), units in by_partition.items():
            if units > top.get((kind, resource), (0, ""))[0]:
                top[(kind, resource)] = (units, template(partition, result.scope))
    lines = [("| work (units of it) | table or index | write units per unit | read units per unit | "
             "index writes per unit | most loaded partition (its units per unit) |"), "|---|---|---:|---:|---:|---|"]
    for (kind, resource), (w, r) in sorted(totals.items()):
        n = heat.work[kind]
        units, partition = top[(kind, resource)]
        writes = heat.index_writes.get((kind, resource), 0) / n
        lines.append(f"| {kind} ({n:,}) | {resource} | {w / n:.3f} | {r / n:.3f} | "
                     f"{writes:.3f} | `{partition}` ({units / n:.3f}) |")
    return lines


def formula(hottest: Hottest, rates: dict[str, float]) -> str:
    """The hottest key's units a second as a sum over the kinds of work: ``c x <kind>`` with ``c`` its
    units per unit of the deployment's work of that kind (of its stream's, for a key naming a stream;
    ``/ 16`` for a write-sharded key)."""
    per_stream = "<stream>" in hottest.partition or "<group>" in hottest.partition
    sharded = hottest.partition.endswith("#<n>")
    terms = []
    for column, unit in ((0, "W"), (1, "R")):
        parts = []
        for kind, loads in sorted(hottest.by_kind.items(), key=lambda item: -item[1][column]):
            if loads[column] <= 0:
                continue
            coefficient = loads[column] / rates[kind] * (TARGET_STREAMS if per_stream else 1) * (SHARDS if sharded else 1)
            parts.append(f"{coefficient:.3g} x {kind}" + (" of its stream" if per_stream else ""))
        if parts:
            terms.append(f"{unit} = ({' + '.join(parts)})" + (f" / {SHARDS}" if sharded else ""))
    return "; ".join(terms) or "-"


def report(result: Result) -> str:
    lines = [(f"partition heat: {result.streams} streams in one scope, each with a group of {result.readers} readers "
             "(moto, in-process; units as AWS charges them)"), ""]
    lines += per_unit_lines(result)
    lines += ["", (f"target: {TARGET_STREAMS:,} streams, {TARGET_APPENDS_S:,} appends/s "
              f"({TARGET_INLINE_SHARE:.0%} inline), {TARGET_READERS:,} readers, {TARGET_TXNS_S:,} transactions/s; "
              "rates of each kind of work:"),
              ", ".join(f"{kind} {rate:,.1f}/s" for kind, rate in sorted(result.rates.items())), "",
              ("| table or index | hottest partition at target | write units/s | read units/s | share of limit | "
              "mostly from | before issue 38: hottest | share |"), "|---|---|---:|---:|---:|---|---|---:|"]
    for resource in sorted(result.resources):
        before = result.before.get(resource)
        for h in result.after.get(resource, [Hottest("(no request)", {})])[:1 if before else TABLE_ROWS]:
            old = f"`{before[0].partition}` | {before[0].share:.1%}" if before else "- | -"
            lines.append(f"| {resource} | `{h.partition}` | {h.write_units_s:,.0f} | {h.read_units_s:,.0f} | "
                         f"{h.share:.1%} | {h.mostly_from} | {old} |")
    lines += ["", "the hottest key of each, in units a second, W (writes) and R (reads) by kind of work a second:"]
    for resource in sorted(result.after):
        lines.append(f"  {resource} `{result.after[resource][0].partition}`: {formula(result.after[resource][0], result.rates)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--readers", type=int, default=10, help="readers per stream (the target has 10)")
    parser.add_argument("--ticks", type=int, default=1, help="ticks of every Dagster sensor and schedule after "
                        "the round of work (a tick with nothing new to do lowers the jobs' figures)")
    args = parser.parse_args()
    print(report(run(args.streams, args.readers, args.ticks)))


if __name__ == "__main__":
    main()
