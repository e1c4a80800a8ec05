"""What a reader group's shared state costs: its record's size, and the writes its readers cause.

Six measurements:

* (default) The group record's size. A sync that changes what the group shares (a completion, a
  checkpoint, a join) rewrites the record, and DynamoDB charges a write by the item's size (1 KB
  units), so its size is the cost of such a sync. The groups run through the pure transitions of
  controlplane.reader_groups (no AWS): a stream that keeps scaling (splits while narrower than
  ``width`` segments, merges otherwise) is read by ``readers`` readers until ``completed`` segments
  were read to their end (a scale event every ``scale_every_s``: the history is compressed in time,
  which changes no figure); every reader syncs every ``refresh_s`` meanwhile, and the benchmark counts
  how often the group's lease record (the reader-lease job's index entry) had to be rewritten.
  Run: ``.venv/bin/python -m bench.reader_group_state``.
* ``--metered``: the real controller code on moto with simulated time, a group where nothing changes;
  every DynamoDB request is metered and priced (bench/cost.py): syncs, group-record and reader-item
  writes, write units per reader-hour. ``--fixed-cadence`` syncs every refresh time (the SDK before
  issue 27) instead of the SDK's backing-off cadence; ``--auto-checkpoints`` turns on the default
  30 s automatic checkpoints. Run: ``.venv/bin/python -m bench.reader_group_state --metered``.
* ``--scale``: the same with 30 s automatic checkpoints for 10, 100 and 1,000 readers on as many
  segments over 60 simulated seconds: read and write units per sync, the group record's largest write,
  the checkpoints completed (issue 40's target: units per sync flat as the group grows). Syncs run one
  at a time, so it shows no conflicts. Each sync goes to one of 16 controller processes at random (the
  Lambda containers a busy group's syncs spread over), each with its own copies of group records
  (controlplane.reader_groups.state.current_record). Run: ``.venv/bin/python -m bench.reader_group_state --scale``
  (or ``--scale 10 100`` for those sizes only; the 1,000-reader row takes about half an hour).
* ``--pages``: 1,000 readers on 1,000, 5,000 and 15,000 live segments with a checkpoint outstanding,
  stored through the real controller code on moto: the state's size, its pages (a state over
  state.PAGE_BYTES is cut into page items) and the group's largest item, and the units of a whole read,
  of the pass that completes the checkpoint (a rewrite of the state) and of a sync served from a copy.
  The stream's side is answered from the simulated stream. Run:
  ``.venv/bin/python -m bench.reader_group_state --pages`` (or ``--pages 5000`` for that size only).
* ``--concurrent``: every reader of a group passes one checkpoint at once, from 16 threads of one
  controller process on moto: conditional writes refused (races lost), syncs that answered
  WriteConflict, and whether the checkpoint completed. Run:
  ``.venv/bin/python -m bench.reader_group_state --concurrent`` (100 and 300 readers; or give sizes).
* ``--idle-reader``: one SDK reader of a group on an empty 4-segment stream over the standalone stack,
  its syncs and tail checks counted and priced per day.
  Run: ``.venv/bin/python -m bench.reader_group_state --idle-reader``.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from types import SimpleNamespace

from bench.stack import moto_stack
from controlplane.reader_groups import add_reader, initiate_checkpoint, new_state, schedule_lease_check, sync
from controlplane.reader_groups.state import stored_size
from rillet.api import SegmentOffset, SyncRequest
from rillet.keyspace import segment_id
from rillet.models import ReaderGroupConfig, SegmentPosition, SegmentRange, StreamRange, SuccessorInfo

STREAM = "bench-scope/bench-stream"


@dataclass
class Figures:
    readers: int
    width: int
    completed: int
    json_bytes: int  # the largest state as JSON
    record_bytes: int  # and as its record stores it, compressed (controlplane.models.CompressedJSONAttribute)
    write_units_per_sync: int
    lease_writes_per_reader_sync: float


class _Stream:
    """Segments with key ranges through scale events, answering successors as the controller does."""

    def __init__(self, width: int, seed: int) -> None:
        self.random, self.width, self.count = random.Random(seed), width, 0
        self.current = [self._new(0, i / width, (i + 1) / width) for i in range(width)]
        self.epoch = 0
        self.successors_of: dict[int, list[SegmentRange]] = {}
        self.predecessors_of: dict[int, list[SegmentRange]] = {}

    def _new(self, epoch: int, low: float, high: float) -> SegmentRange:
        self.count += 1
        return SegmentRange(segment_id=segment_id(epoch, self.count - 1), low=low, high=high)

    def scale(self) -> set[int]:
        self.epoch += 1
        if len(self.current) < self.width or self.random.random() < 0.3:
            at, count = self.random.randrange(len(self.current)), 1
            s = self.current[at]
            created = [self._new(self.epoch, s.low, (s.low + s.high) / 2), self._new(self.epoch, (s.low + s.high) / 2, s.high)]
        else:
            at, count = self.random.randrange(len(self.current) - 1), 2
            created = [self._new(self.epoch, self.current[at].low, self.current[at + 1].high)]
        sealed = self.current[at:at + count]
        self.current[at:at + count] = created
        for old in sealed:
            self.successors_of[old.segment_id] = [c for c in created if c.low < old.high and old.low < c.high]
        for new in created:
            self.predecessors_of[new.segment_id] = [p for p in sealed if p.low < new.high and new.low < p.high]
        return {s.segment_id for s in sealed}

    def successors(self, stream: str, sid: int, incarnation: int | None) -> list[SuccessorInfo]:
        return [SuccessorInfo(segment=c, predecessors=self.predecessors_of[c.segment_id])
                for c in self.successors_of.get(sid, [])]


def run_one(readers: int, width: int, completed: int, refresh_s: float = 3.0, scale_every_s: float = 3.0,
            seed: int = 1) -> Figures:
    stream = _Stream(width, seed)
    config = ReaderGroupConfig(streams=[StreamRange(scope="bench-scope", stream="bench-stream")],
                               automatic_checkpoint_interval_ms=30_000, group_refresh_time_ms=int(refresh_s * 1000))
    state = new_state(config, {STREAM: [SegmentPosition(segment=s, offset=0) for s in stream.current]})
    names = [f"reader-{stream.random.getrandbits(128):032x}" for _ in range(readers)]
    now = 1_800_000_000_000
    tokens = random.Random(-seed)  # instance tokens, as the SDK's readers send, apart from the workload's draws
    for name in names:
        add_reader(state, name, now, instance=f"{tokens.getrandbits(128):032x}")
    syncs = lease_writes = done = 0
    largest = largest_json = 0
    next_scale = now + scale_every_s * 1000
    while done < completed:
        now += int(refresh_s * 1000 / readers)  # the readers' syncs, spread over each refresh period
        name = names[syncs % readers]
        sealed: set[int] = set()
        if now >= next_scale:
            sealed, next_scale = stream.scale(), next_scale + scale_every_s * 1000
        held = state.readers[name].segments.values()
        finished = [SegmentOffset(stream=h.stream, segment_id=h.segment.segment_id, offset=10**9)
                    for h in held if h.segment.segment_id not in {s.segment_id for s in stream.current}]
        checkpoint = next((c.name for c in state.checkpoints if name in c.pending), None)
        positions = [SegmentOffset(stream=h.stream, segment_id=h.segment.segment_id, offset=h.offset + 1000)
                     for h in held if h.segment.segment_id not in sealed]
        before = state.lease_deadline_ms
        sync(state, name, SyncRequest(positions=positions, completed=finished, checkpoint=checkpoint), now,
             stream.successors)
        lease_writes += schedule_lease_check(state, now) != before
        syncs += 1
        done += len(finished)
        if syncs % readers == 0 or state.checkpoints:
            body = state.model_dump(mode="json")
            largest_json, largest = max(largest_json, len(json.dumps(body))), max(largest, stored_size(body))
        if syncs % (readers * 200) == 0 and not state.checkpoints:
            initiate_checkpoint(state, f"cp-{syncs}", True, now)
    return Figures(readers, width, done, largest_json, largest, math.ceil(largest / 1024), lease_writes / syncs)


def run(cases: tuple[tuple[int, int, int], ...] = ((10, 8, 1_000), (100, 24, 10_000), (100, 100, 2_000))
        ) -> list[Figures]:
    return [run_one(readers, width, completed) for readers, width, completed in cases]


def report(figures: list[Figures]) -> str:
    lines = [("| readers | stream width | segments completed | largest state as JSON | largest record (stored) | "
              "write units per sync | lease-record writes per sync |"), "|---|---|---|---|---|---|---|"]
    for f in figures:
        lines.append(f"| {f.readers} | {f.width} | {f.completed:,} | {f.json_bytes / 1024:.1f} KB | "
                     f"{f.record_bytes / 1024:.1f} KB | "
                     f"{f.write_units_per_sync} | {f.lease_writes_per_reader_sync:.4f} |")
    return "\n".join(lines)


# -- metered: the real controller code on moto, every DynamoDB request priced by bench/cost.py ----------

HOUR_S = 3_600
DAY_S = 86_400
# Modeled duration of one controller request on a warm arm64 instance (not the emulation's wall time):
# a sync reads the group record and the reader's item (two GetItems) and now and then writes the item
SYNC_FUNCTION_MS = 10


@dataclass
class Metered:
    readers: int
    width: int
    simulated_s: float
    syncs: int
    write_units: float
    read_units: float
    group_record_writes: int
    reader_item_writes: int
    checkpoints_completed: int = 0
    largest_group_write_bytes: int = 0  # the largest write request of the group record (JSON, as sent)
    containers: int = 1  # controller processes the syncs went to, each with its own copies of group records

    @property
    def read_units_per_sync(self) -> float:
        return self.read_units / max(1, self.syncs)

    @property
    def syncs_per_reader_hour(self) -> float:
        return self.syncs / self.readers * HOUR_S / self.simulated_s

    @property
    def write_units_per_reader_hour(self) -> float:
        return self.write_units / self.readers * HOUR_S / self.simulated_s

    @property
    def write_units_per_sync(self) -> float:
        return self.write_units / max(1, self.syncs)

    @property
    def read_units_per_reader_hour(self) -> float:
        return self.read_units / self.readers * HOUR_S / self.simulated_s

    @property
    def dollars_per_reader_day(self) -> float:
        """DynamoDB units and controller invocations (SYNC_FUNCTION_MS each, modeled) of one reader's syncs."""
        from bench.cost import FUNCTION_MEMORY_MB, PRICES

        invocation = PRICES["lambda_request"] + SYNC_FUNCTION_MS / 1000 * FUNCTION_MEMORY_MB / 1024 * PRICES["lambda_gb_second"]
        hourly = (self.write_units_per_reader_hour * PRICES["dynamodb_write_request_unit"]
                  + self.read_units_per_reader_hour * PRICES["dynamodb_read_request_unit"]
                  + self.syncs_per_reader_hour * invocation)
        return hourly * 24


def fixed_cadence(config: ReaderGroupConfig):
    """Every reader syncs every ``group_refresh_time_ms`` (the SDK before issue 27)."""
    return lambda changed, holding, reader=0: config.group_refresh_time_ms


def sdk_cadence(config: ReaderGroupConfig):
    """The SDK's cadence (rillet.reader_group.SyncCadence), one per reader."""
    from rillet.reader_group import SyncCadence

    cadences: dict[int, SyncCadence] = {}

    def next_ms(changed: bool, holding: bool, reader: int = 0) -> int:
        cadence = cadences.setdefault(reader, SyncCadence(config.group_refresh_time_ms / 1000,
                                                          config.reader_lease_ms / 1000))
        return int(cadence.after_sync(changed, holding) * 1000)

    return next_ms


def run_metered(readers: int, width: int, simulated_s: float, cadence=fixed_cadence,
                automatic_checkpoint_interval_ms: int = 0, containers: int = 1) -> Metered:
    """A group of ``readers`` on a fixed stream of ``width`` segments where nothing changes: every
    reader holds its segments at the same offsets and syncs on ``cadence`` (a function of the config
    that answers, per sync, the milliseconds to the next one given whether that sync changed the
    reader's assignment, and whether it holds segments). Readers pass the checkpoints they are asked
    to at their next sync. Time is simulated (the module's clock is replaced), so ``simulated_s`` of
    syncs run as fast as moto answers; the joins and first acquisitions are not metered. Each sync runs
    in one of ``containers`` controller processes, chosen at random: each keeps its own copies of group
    records, as Lambda containers do."""
    import uuid

    from bench.cost import usage
    from controlplane.reader_groups import groups as module
    from controlplane.reader_groups import state as state_module
    from controlplane.service import Controller
    from rillet.models import ScalingPolicy, StreamConfiguration

    clock = [1_800_000_000_000]
    real_now, module._now = module._now, lambda: clock[0]
    real_copies = state_module._COPIES
    copies = [state_module._RecordCopies(state_module.CACHED_GROUPS, state_module.CACHED_STATE_BYTES)
              for _ in range(containers)]
    choose = random.Random(7)
    try:
        with moto_stack() as (server, deployment):
            controller = Controller.for_deployment(deployment)
            groups = controller.reader_groups
            scope = "bench" + uuid.uuid4().hex[:8]
            controller.streams.create_scope(scope)
            controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(width)))
            config = ReaderGroupConfig(streams=[StreamRange(scope=scope, stream="s")],
                                       automatic_checkpoint_interval_ms=automatic_checkpoint_interval_ms)
            groups.create(scope, "g", config)
            names = [f"reader-{uuid.uuid4().hex}" for _ in range(readers)]
            tokens = {name: uuid.uuid4().hex for name in names}
            held: dict[str, list[SegmentOffset]] = {}
            for name in names:
                groups.add_reader(scope, "g", name, tokens[name])
            for name in names:
                assignment = groups.sync(scope, "g", name, SyncRequest(instance=tokens[name]))
                held[name] = [SegmentOffset(stream=a.stream, segment_id=a.segment.segment_id, offset=a.offset)
                              for a in assignment.segments]
            next_of = cadence(config)
            spread = config.group_refresh_time_ms / readers
            due = {name: clock[0] + int(i * spread) for i, name in enumerate(names)}
            server.meter.keep_records = True
            server.meter.reset()
            start, syncs, passing = clock[0], 0, {}
            while True:
                name = min(due, key=due.get)
                if due[name] - start >= simulated_s * 1000:
                    break
                clock[0] = due[name]
                before = held[name]
                state_module._COPIES = choose.choice(copies)
                assignment = groups.sync(scope, "g", name, SyncRequest(positions=before, instance=tokens[name],
                                                                       checkpoint=passing.pop(name, None)))
                held[name] = [SegmentOffset(stream=a.stream, segment_id=a.segment.segment_id, offset=a.offset)
                              for a in assignment.segments]
                changed = {(p.segment_id, p.offset) for p in held[name]} != {(p.segment_id, p.offset) for p in before}
                if assignment.checkpoint:
                    passing[name], changed = assignment.checkpoint, True
                due[name] += next_of(changed, bool(held[name]), names.index(name))
                syncs += 1
            _, records = server.meter.snapshot()
            last = groups.state(scope, "g").last_checkpoint
            completed = int(last.name.split("-")[1]) if last and last.name.startswith("auto-") else 0
    finally:
        module._now, state_module._COPIES = real_now, real_copies
    u = usage(records)
    writes = [r for r in records if r.operation in ("UpdateItem", "PutItem", "DeleteItem", "TransactWriteItems")]

    group_writes = [r for r in writes if module.GROUP_KEY in _sort_keys(r)]
    return Metered(readers, width, simulated_s, syncs, u.write_units, u.read_units, len(group_writes),
                   sum(1 for r in writes if any(k.startswith("reader#") for k in _sort_keys(r))), completed,
                   max((len(json.dumps(r.request)) for r in group_writes), default=0), containers)


def _sort_keys(record) -> list[str]:
    """The sort keys of the items a metered write request writes (every item a transaction writes)."""
    body = record.request or {}
    if "TransactItems" in body:
        actions = [b for a in body["TransactItems"] for kind, b in a.items() if kind != "ConditionCheck"]
    else:
        actions = [body]
    return [((a.get("Key") or a.get("Item") or {}).get("sk") or {}).get("S", "") for a in actions]


@dataclass
class Paged:
    readers: int
    segments: int
    stored_bytes: int  # the state as stored, a checkpoint passed by every reader but one
    pages: int  # then
    largest_item: int  # bytes, of any item under the group's key, then
    read_units: float  # a whole read of the record (and its pages)
    write_units: float  # the last pass, which completes the checkpoint: a rewrite of the record
    copy_sync_read_units: float  # a sync served from a copy
    copy_sync_write_units: float
    copy_sync_cpu_ms: float  # the controller's CPU (this thread's) in a sync served from a copy, median of 5
    copy_sync_cpu_ms_default_collector: float  # the same, with Python's default collector thresholds


class _StubbedStreams:
    """The stream calls a group makes, answered from a fixed stream of ``segments``: what is measured is
    the group's own items, and a real stream of 15,000 segments would take moto minutes to create."""

    def __init__(self, stream: _Stream) -> None:
        from controlplane.models import ReaderGroupRecord
        from controlplane.streams import StreamTasks

        self._stream = stream
        self.check_incarnation = StreamTasks.check_incarnation
        self.store = SimpleNamespace(transaction_connection=ReaderGroupRecord._get_connection().connection)

    def record(self, scope: str, stream: str) -> SimpleNamespace:
        return SimpleNamespace(scope=scope, stream=stream, created_ms=1)

    def head(self, scope: str, stream: str, record: object = None) -> list[SegmentPosition]:
        return [SegmentPosition(segment=s, offset=0) for s in self._stream.current]

    def successors(self, scope: str, stream: str, sid: int, incarnation: int | None = None) -> list[SuccessorInfo]:
        return self._stream.successors(stream, sid, incarnation)


def _held_at(state, name: str, offset: int) -> list[SegmentOffset]:
    """The segments ``name`` holds in ``state``, at ``offset``."""
    return [SegmentOffset(stream=h.stream, segment_id=h.segment.segment_id, offset=offset)
            for h in state.readers[name].segments.values()]


def run_pages(readers: int, segments: int) -> Paged:
    """A group of ``readers`` holding their shares of ``segments`` live segments, with a checkpoint that
    every reader but the last has passed (built through the pure transitions, then stored), on moto: the
    stored state, its pages and largest item, and the units of a whole read, of the last pass (a record
    write that completes the checkpoint), and of a sync served from a process's copy."""
    import gc
    import statistics
    import time
    import uuid

    import boto3

    from bench.cost import item_size, usage
    from controlplane.models import bind, reader_group_pk
    from controlplane.reader_groups import ReaderGroups
    from controlplane.reader_groups import groups as module
    from controlplane.reader_groups import state as state_module
    from controlplane.reader_groups.state import PAGE_PREFIX, read_record
    from controlplane.service import tune_collector

    stream = _Stream(segments, seed=1)
    config = ReaderGroupConfig(streams=[StreamRange(scope="bench-scope", stream="bench-stream")],
                               automatic_checkpoint_interval_ms=0, reader_lease_ms=7 * 24 * 3_600_000)
    state = new_state(config, {STREAM: [SegmentPosition(segment=s, offset=0) for s in stream.current]})
    names = [f"reader-{uuid.UUID(int=stream.random.getrandbits(128)).hex}" for _ in range(readers)]
    now = 1_800_000_000_000
    for name in names:
        add_reader(state, name, now)
    for name in names:
        sync(state, name, SyncRequest(), now, stream.successors)
    initiate_checkpoint(state, "cp", False, now)

    for name in names[:-1]:
        sync(state, name, SyncRequest(positions=_held_at(state, name, 1_000), checkpoint="cp"), now, stream.successors)
    stored = state_module.stored_size(state.model_dump(mode="json"))
    first, last = names[0], names[-1]
    held = {first: _held_at(state, first, 0), last: _held_at(state, last, 0)}

    def moved(name: str, offset: int) -> list[SegmentOffset]:
        return [p.model_copy(update={"offset": offset}) for p in held[name]]

    real_now, module._now = module._now, lambda: now
    try:
        with moto_stack() as (server, deployment):
            bind(deployment)
            groups = ReaderGroups(_StubbedStreams(stream), retention=None)
            scope = "bench" + uuid.uuid4().hex[:8]
            groups.create(scope, "g", config)
            pk = reader_group_pk(scope, "g")
            groups._write(scope, "g", read_record(scope, "g"), state, None)
            del state  # as a controller process holds none of it: the collector walks what is alive
            client = boto3.client("dynamodb", endpoint_url=server.url, region_name=deployment.region)
            items = [item for page in client.get_paginator("query").paginate(
                TableName=deployment.metadata_table, ConsistentRead=True, KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": pk}}) for item in page["Items"]]
            pages = sum(1 for i in items if i["sk"]["S"].startswith(PAGE_PREFIX))
            largest = max(item_size(i) for i in items)
            server.meter.keep_records = True

            def metered(action) -> tuple[float, float]:
                server.meter.reset()
                action()
                u = usage(server.meter.snapshot()[1])
                return u.read_units, u.write_units

            read_units, _ = metered(lambda: read_record(scope, "g"))
            _, write_units = metered(lambda: groups.sync(scope, "g", last, SyncRequest(positions=moved(last, 2_000),
                                                                                       checkpoint="cp")))
            assert groups.checkpoint(scope, "g", "cp").complete
            groups.sync(scope, "g", first, SyncRequest(positions=moved(first, 3_000)))  # takes this process's copy
            copy_reads, copy_writes = metered(lambda: groups.sync(scope, "g", first,
                                                                  SyncRequest(positions=moved(first, 4_000))))

            def cpu_ms(offsets: range) -> float:
                """The median CPU of syncs of ``first`` moving to each offset, in this thread."""
                spent = []
                for offset in offsets:
                    started = time.thread_time()
                    groups.sync(scope, "g", first, SyncRequest(positions=moved(first, offset)))
                    spent.append((time.thread_time() - started) * 1000)
                return statistics.median(spent)

            thresholds = gc.get_threshold()
            try:
                default_cpu = cpu_ms(range(5_000, 10_000, 1_000))
                tune_collector()  # as the controller function does
                tuned_cpu = cpu_ms(range(10_000, 15_000, 1_000))
            finally:
                gc.set_threshold(*thresholds)
    finally:
        module._now = real_now
    return Paged(readers, segments, stored, pages, largest, read_units, write_units,
                 copy_reads, copy_writes, tuned_cpu, default_cpu)


def report_pages(figures: list[Paged]) -> str:
    return _markdown(
        ["readers", "live segments", "state stored", "pages", "largest item of the group",
         "read units, whole read", "write units, checkpoint-completing pass", "units of a sync from a copy (read / write)",
         "controller CPU of a sync from a copy (Python's default collector -> the controller's)"],
        [[f"{f.readers:,}", f"{f.segments:,}", f"{f.stored_bytes / 1000:.0f} KB",
          f"{f.pages}", f"{f.largest_item / 1000:.0f} KB", f"{f.read_units:.0f}", f"{f.write_units:.0f}",
          f"{f.copy_sync_read_units:.0f} / {f.copy_sync_write_units:.0f}", f"{f.copy_sync_cpu_ms_default_collector:.0f} -> {f.copy_sync_cpu_ms:.0f} ms"]
         for f in figures])


@dataclass
class Concurrent:
    readers: int
    threads: int
    syncs: int
    refused: int  # conditional writes DynamoDB refused (a race lost), in the group's partition
    conflicts: int  # syncs that answered WriteConflict after their retries (the SDK would sync again)
    requests: int
    complete: bool  # the checkpoint, once every reader passed it once
    seconds: float


def run_concurrent(readers: int, threads: int = 16) -> Concurrent:
    """``readers`` readers, each holding one segment of a fixed stream of as many, pass one checkpoint
    at once: every pass is a sync sent from one of ``threads`` threads of one controller process, on
    moto, at once rather than one at a time as --scale sends them. Counts the conditional writes refused
    (races lost on the group's items) and the syncs that still answered WriteConflict."""
    import time
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    from controlplane.service import Controller
    from rillet.errors import WriteConflict
    from rillet.models import ScalingPolicy, StreamConfiguration

    with moto_stack() as (server, deployment):
        groups = (controller := Controller.for_deployment(deployment)).reader_groups
        scope = "bench" + uuid.uuid4().hex[:8]
        controller.streams.create_scope(scope)
        controller.streams.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(readers)))
        groups.create(scope, "g", ReaderGroupConfig(streams=[StreamRange(scope=scope, stream="s")],
                                                    automatic_checkpoint_interval_ms=0, reader_lease_ms=600_000))
        names = [f"reader-{n:04d}" for n in range(readers)]
        for name in names:
            groups.add_reader(scope, "g", name, f"tok-{name}")
        held = {name: [SegmentOffset(stream=a.stream, segment_id=a.segment.segment_id, offset=a.offset)
                       for a in groups.sync(scope, "g", name, SyncRequest(instance=f"tok-{name}")).segments]
                for name in names}
        groups.initiate_checkpoint(scope, "g", "cp")
        server.meter.keep_records = True
        server.meter.reset()
        conflicts: list[str] = []  # appended from the threads

        def pass_it(name: str) -> None:
            moved = [p.model_copy(update={"offset": p.offset + 1_000}) for p in held[name]]
            try:
                groups.sync(scope, "g", name, SyncRequest(positions=moved, instance=f"tok-{name}", checkpoint="cp"))
            except WriteConflict:
                conflicts.append(name)

        started = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(pass_it, names))
        seconds = time.monotonic() - started
        _, records = server.meter.snapshot()
        complete = groups.checkpoint(scope, "g", "cp").complete
    refused = sum(1 for r in records if "ConditionalCheckFailed" in json.dumps(r.response or {})
                  or "TransactionCanceled" in json.dumps(r.response or {}))
    return Concurrent(readers, threads, readers, refused, len(conflicts), len(records), complete, seconds)


def report_concurrent(figures: list[Concurrent]) -> str:
    return _markdown(
        ["readers passing at once", "threads", "conditional writes refused", "per pass", "syncs answering WriteConflict",
         "requests per pass", "checkpoint complete", "wall time"],
        [[f"{f.readers:,}", f"{f.threads}", f"{f.refused:,}", f"{f.refused / f.syncs:.2f}", f"{f.conflicts}",
          f"{f.requests / f.syncs:.1f}", "yes" if f.complete else "no", f"{f.seconds:.1f} s"] for f in figures])


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                     + ["| " + " | ".join(row) + " |" for row in rows])


def report_metered(figures: list[Metered]) -> str:
    return _markdown(
        ["readers", "segments", "simulated", "syncs per reader-hour", "group-record writes", "reader-item writes",
         "write units per sync", "write units per reader-hour", "read units per reader-hour", "$ per reader-day"],
        [[f"{f.readers}", f"{f.width}", f"{f.simulated_s:.0f} s", f"{f.syncs_per_reader_hour:,.0f}",
          f"{f.group_record_writes:,}", f"{f.reader_item_writes:,}", f"{f.write_units_per_sync:.2f}",
          f"{f.write_units_per_reader_hour:,.0f}", f"{f.read_units_per_reader_hour:,.0f}",
          f"{f.dollars_per_reader_day:.4f}"] for f in figures])


# -- an idle reader of a group over HTTP: its syncs and tail checks, priced ------------------------------

def run_idle_reader(seconds: float = 60, warmup_s: float = 25, segments: int = 4) -> dict:
    """One reader of a group on an empty ``segments``-segment stream, left at the tail for ``seconds``
    after ``warmup_s`` (its sync cadence and tail checks backed off by then), calling
    ``read_next_event(timeout_ms=1000)`` in a loop as an application does. Its controller requests
    (syncs), read requests and tail checks (to the tails function) are counted, the DynamoDB requests the
    functions make are metered by moto and priced with bench/cost.py, function duration is modeled per request
    (cost.FUNCTION_MS at each function's memory, SYNC_FUNCTION_MS for the controller), scaled to a day."""
    import threading
    import time
    import uuid
    from collections import Counter

    import rillet
    from bench.cost import FUNCTION_MEMORY_MB, function_gb_seconds, usage
    from standalone.stack import Stack, StackConfig

    with Stack(StackConfig.ephemeral()) as stack:
        stack.requests.keep_records = True
        scope = "idle" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        manager.create_stream(scope, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(segments)))
        groups = rillet.ReaderGroupManager(scope, stack.controller_url)
        groups.create_reader_group("g", rillet.group_config([f"{scope}/s"], automatic_checkpoint_interval_ms=0))
        factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
        reader = factory.create_reader("r1", "g", rillet.BytesSerializer())
        kinds: Counter = Counter()
        lock = threading.Lock()

        def counting(transport, kind_of):
            original = transport.request

            def request(method, path, **kwargs):
                with lock:
                    kinds[kind_of(path)] += 1
                return original(method, path, **kwargs)

            transport.request = request

        segments_client = reader.connection.segments

        def read_kind(path: str) -> str:
            return next((k for k in ("tails", "locations", "plan", "info") if path.endswith("/" + k)), "read")

        # Tail checks go to the tails function's transport (the read one when the deployment has none).
        for transport in {id(t): t for t in (segments_client.read_transport, segments_client.tails_transport)}.values():
            counting(transport, read_kind)
        counting(reader.group._transport, lambda path: "sync" if path.endswith("/sync") else "controller")
        started = time.monotonic()
        while time.monotonic() - started < warmup_s:
            reader.read_next_event(timeout_ms=1000)
        stack.requests.reset()
        with lock:
            kinds.clear()
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            assert reader.read_next_event(timeout_ms=1000) is None
        elapsed = time.monotonic() - started
        _, records = stack.requests.snapshot()
        counted = dict(kinds)
        reader.close()
    read_kinds = {"tails": counted.get("tails", 0), "read": counted.get("read", 0) + counted.get("locations", 0)}
    controller_requests = counted.get("sync", 0) + counted.get("controller", 0)
    gb_seconds = (function_gb_seconds("read", read_kinds)
                  + controller_requests * SYNC_FUNCTION_MS / 1000 * FUNCTION_MEMORY_MB / 1024)
    u = usage(records, sum(read_kinds.values()) + controller_requests, gb_seconds)
    per_day = {k: v * DAY_S / elapsed for k, v in u.dollars().items()}
    return {"segments": segments, "seconds": elapsed, "requests": counted,
            "syncs_per_hour": counted.get("sync", 0) * 3_600 / elapsed,
            "tail_checks_per_hour": counted.get("tails", 0) * 3_600 / elapsed,
            "write_units_per_hour": u.write_units * 3_600 / elapsed, "read_units_per_hour": u.read_units * 3_600 / elapsed,
            "dollars_per_day": per_day}


def report_idle(r: dict) -> str:
    d = r["dollars_per_day"]
    return (f"idle group reader, {r['segments']} segments, {r['seconds']:.0f} s: requests {r['requests']}; "
            f"{r['syncs_per_hour']:,.0f} syncs/h, {r['tail_checks_per_hour']:,.0f} tail checks/h, "
            f"{r['write_units_per_hour']:,.0f} write units/h, {r['read_units_per_hour']:,.0f} read units/h; "
            f"${d['total']:.4f}/day (DynamoDB writes ${d['dynamodb_writes']:.4f}, reads ${d['dynamodb_reads']:.4f}, "
            f"function requests ${d['lambda_requests']:.4f}, duration ${d['lambda_duration']:.4f}, "
            f"S3 ${d['s3_get'] + d['s3_put']:.4f})")


def report_scale(figures: list[Metered]) -> str:
    """Units per sync as the group grows (issue 40: flat from 10 to 1,000 readers is the target)."""
    return _markdown(
        ["readers", "segments", "controller processes", "simulated", "syncs", "read units per sync",
         "write units per sync", "group-record writes", "largest group-record write request", "checkpoints completed"],
        [[f"{f.readers:,}", f"{f.width:,}", f"{f.containers}", f"{f.simulated_s:.0f} s", f"{f.syncs:,}",
          f"{f.read_units_per_sync:.1f}",
          f"{f.write_units_per_sync:.2f}", f"{f.group_record_writes:,}", f"{f.largest_group_write_bytes / 1000:.1f} KB",
          f"{f.checkpoints_completed}"] for f in figures])


if __name__ == "__main__":
    import sys

    if "--concurrent" in sys.argv:
        sizes = [int(a) for a in sys.argv[sys.argv.index("--concurrent") + 1:] if a.isdigit()] or [100, 300]
        print(report_concurrent([run_concurrent(n) for n in sizes]))
    elif "--pages" in sys.argv:
        sizes = [int(a) for a in sys.argv[sys.argv.index("--pages") + 1:] if a.isdigit()] or [1_000, 5_000, 15_000]
        print(report_pages([run_pages(1_000, n) for n in sizes]))
    elif "--idle-reader" in sys.argv:
        print(report_idle(run_idle_reader()))
    elif "--scale" in sys.argv:
        sizes = [int(a) for a in sys.argv[sys.argv.index("--scale") + 1:] if a.isdigit()] or [10, 100, 1_000]
        print(report_scale([run_metered(n, n, 60, sdk_cadence, 30_000, containers=16) for n in sizes]))
    elif "--metered" in sys.argv:
        cadence = fixed_cadence if "--fixed-cadence" in sys.argv else sdk_cadence
        auto_ms = 30_000 if "--auto-checkpoints" in sys.argv else 0
        print(report_metered([run_metered(r, w, s, cadence, auto_ms) for r, w, s in ((10, 8, 600), (100, 24, 600), (1, 4, 1800))]))
    else:
        print(report(run()))
