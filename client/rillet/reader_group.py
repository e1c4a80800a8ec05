"""Reader groups: readers sharing the work of reading streams, with checkpoints (Pravega's API).

* :class:`ReaderGroupManager` creates, opens and deletes groups in a scope.
* :class:`ReaderGroup` administers one: online readers, ``reader_offline``, checkpoints, stream
  cuts, reset, unread bytes.
* :class:`EventStreamReader` is one reader of a group. ``read_next_event`` returns events of the
  segments the group assigned to it, checkpoint markers when the group checkpoints, and None when
  nothing arrived within the timeout; ``read_events`` returns the same, a block of one segment's
  events at a time, as bytes (:class:`GroupEventsRead`).

The group's shared state lives on the controller; a reader talks to it when it joins, when it
finishes a segment, when it passes a checkpoint and otherwise every ``group_refresh_time_ms``, less
often while nothing changes (:class:`SyncCadence`: up to a sixth of ``reader_lease_ms``). That
is also its lease: a reader not heard from for ``reader_lease_ms`` (the application stopped calling
``read_next_event`` or ``read_events``, or the process was killed) is taken offline and its segments
go to the others; its next call raises :class:`~rillet.errors.ReaderNotInReaderGroup`, and the
application creates a new reader (as with Pravega's ReaderNotInReaderGroupException). A reader id is
one reader while it is online: creating a second reader of that id raises
:class:`~rillet.errors.AlreadyExists` until the first closes or is taken offline (each reader sends a
random token with its join, so a join it repeats after a lost answer is not taken for another reader).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import quote

from pydantic import ValidationError

from rillet import api
from rillet.connection import Connection
from rillet.errors import (
    InvalidArgument,
    NotFound,
    ReaderNotInReaderGroup,
    SegmentNotFound,
    StreamRecreated,
    Truncated,
)
from rillet.framing import EventBatch
from rillet.models import ReaderGroupConfig, SegmentPosition, SegmentRange, StreamDataRetention, StreamRange
from rillet.names import mark_stream_name, split_scoped_name, validate_reader_group_name
from rillet.reader import EventPointer, EventsRead, StreamReader
from rillet.segments import DEFAULT_READ_SIZE, SegmentEventReader, TailBackoff
from rillet.serializers import JsonSerializer, Serializer
from rillet.stream_cut import Ordering, StreamCut, compare_positions

T = TypeVar("T")
R = TypeVar("R")


def group_config(streams: list[str | StreamCut], *, end: list[StreamCut] | None = None,
                 automatic_checkpoint_interval_ms: int = 30_000, group_refresh_time_ms: int = 3_000,
                 reader_lease_ms: int = 60_000, max_outstanding_checkpoint_request: int = 3,
                 retention_type: StreamDataRetention = StreamDataRetention.NONE) -> ReaderGroupConfig:
    """Build a ReaderGroupConfig: each stream as "scope/stream" (from its head) or a start StreamCut.

    ``reader_lease_ms``: how long a reader may go without calling ``read_next_event`` before the group
    takes it offline (like Kafka's max.poll.interval.ms); it must exceed ``group_refresh_time_ms``.
    ``max_outstanding_checkpoint_request``: 1 to 10. A value out of range is InvalidArgument, as the
    server would answer it."""
    ends = {(c.scope, c.stream): c for c in end or []}
    ranges = []
    for item in streams:
        if isinstance(item, StreamCut):
            scope, stream, start, incarnation = item.scope, item.stream, list(item.positions), item.incarnation
        else:
            (scope, stream), start, incarnation = split_scoped_name(item), None, None
        end_cut = ends.get((scope, stream))
        if end_cut is not None and None not in (incarnation, end_cut.incarnation) and incarnation != end_cut.incarnation:
            raise StreamRecreated(f"the start and end cuts of {scope}/{stream} are of two incarnations of the "
                                  f"stream ({incarnation}, {end_cut.incarnation})",
                                  expected=incarnation, current=end_cut.incarnation)
        if incarnation is None and end_cut is not None:
            incarnation = end_cut.incarnation
        ranges.append(StreamRange(scope=scope, stream=stream, start=start, incarnation=incarnation,
                                  end=list(end_cut.positions) if end_cut is not None else None))
    try:
        return ReaderGroupConfig(streams=ranges, automatic_checkpoint_interval_ms=automatic_checkpoint_interval_ms,
                                 group_refresh_time_ms=group_refresh_time_ms, reader_lease_ms=reader_lease_ms,
                                 max_outstanding_checkpoint_request=max_outstanding_checkpoint_request,
                                 retention_type=retention_type)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
                             for err in e.errors()[:5])
        raise InvalidArgument(f"invalid reader group configuration: {problems}") from None


def _cut(body: api.StreamCutBody | object) -> StreamCut:
    return StreamCut.of(body.scope, body.stream, list(body.positions), body.incarnation)


@dataclass(frozen=True)
class TimeWindow:
    """Event times around a reader's position: every event it reads next is at least ``lower_ms`` and
    every event it has read is at most ``upper_ms`` (None where no watermark says so yet)."""

    lower_ms: int | None
    upper_ms: int | None


@dataclass(frozen=True)
class Checkpoint:
    name: str
    cuts: dict[str, StreamCut]  # "scope/stream" -> cut


@dataclass(frozen=True)
class Position:
    """A reader's position: the offset after the last event it returned, per segment it holds."""

    offsets: tuple[api.SegmentOffset, ...]

    def to_wire(self) -> list[api.SegmentOffset]:
        return list(self.offsets)


@dataclass(frozen=True)
class GroupEventRead(Generic[T]):
    """An event (or a checkpoint marker) returned by a group reader, with what its writer kept
    (``EventWriterConfig.store_key_and_time``; None for events written without)."""

    event: T | None
    pointer: EventPointer | None
    position: Position
    checkpoint_name: str | None = None
    routing_key: str | None = None
    timestamp_ms: int | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.checkpoint_name is not None


@dataclass(frozen=True)
class GroupEventsRead:
    """What a group reader's ``read_events`` returns: consecutive events of one segment, as bytes (see
    :class:`~rillet.reader.EventsRead`), or a checkpoint marker (``events`` None). ``position`` is the
    reader's position after them, as ``get_position`` gives it."""

    events: EventsRead | None
    position: Position
    checkpoint_name: str | None = None

    @property
    def is_checkpoint(self) -> bool:
        return self.checkpoint_name is not None


class ReaderGroup:
    def __init__(self, connection: Connection, scope: str, name: str) -> None:
        self.connection = connection
        self.scope, self.name = scope, validate_reader_group_name(name)
        self._path = f"/v1/scopes/{quote(scope, safe='')}/reader-groups/{quote(name, safe='')}"
        # the incarnation of the group this handle opened (ReaderGroupInfo.incarnation), learnt from its
        # first info: the cuts it acknowledges are that group's only, never a group created again under
        # the name since (None: not learnt yet, or a group created before incarnations were recorded)
        self.incarnation: str | None = None

    @property
    def _transport(self):
        return self.connection.controller.transport

    def info(self) -> api.ReaderGroupInfo:
        info = api.parse_answer(api.ReaderGroupInfo, self._transport.json("GET", self._path))
        if self.incarnation is None:
            self.incarnation = info.incarnation
        return info

    @property
    def config(self) -> ReaderGroupConfig:
        return self.info().config

    def get_online_readers(self) -> list[str]:
        return self.info().online_readers

    def reader_offline(self, reader_id: str, last_position: Position | None) -> None:
        """Hand the reader's segments back to the group at ``last_position`` (its last report if None)."""
        self._offline(reader_id, last_position, None)

    def _offline(self, reader_id: str, last_position: Position | None, instance: str | None) -> None:
        body = api.OfflineRequest(position=last_position.to_wire() if last_position else None, instance=instance)
        self._transport.json("POST", f"{self._path}/readers/{quote(reader_id, safe='')}/offline",
                             json_body=body.model_dump())

    def initiate_checkpoint(self, name: str, timeout_s: float = 60.0, silent: bool = False) -> Checkpoint:
        """Start a checkpoint and wait until every reader has passed it; returns its stream cuts."""
        body = api.CheckpointRequest(name=name, silent=silent).model_dump()
        info = api.parse_answer(api.CheckpointInfo, self._transport.json("POST", f"{self._path}/checkpoints",
                                                                      json_body=body))
        deadline = time.monotonic() + timeout_s
        while not info.complete:
            if time.monotonic() > deadline:
                raise TimeoutError(f"checkpoint {name} did not complete within {timeout_s} s")
            time.sleep(0.2)
            info = api.parse_answer(api.CheckpointInfo, 
                self._transport.json("GET", f"{self._path}/checkpoints/{quote(name, safe='')}"))
        return Checkpoint(name, {f"{c.scope}/{c.stream}": _cut(c) for c in info.cuts})

    def get_stream_cuts(self) -> dict[str, StreamCut]:
        """The group's position per stream, as of the readers' last reports."""
        data = api.parse_answer(api.StreamCutList, self._transport.json("GET", f"{self._path}/stream-cuts"))
        return {f"{c.scope}/{c.stream}": _cut(c) for c in data.cuts}

    def generate_stream_cuts(self, timeout_s: float = 60.0) -> dict[str, StreamCut]:
        """Exact current cuts: a silent checkpoint every reader passes without emitting an event."""
        name = f"silent-{time.time_ns()}"
        return self.initiate_checkpoint(name, timeout_s, silent=True).cuts

    def reset_reader_group(self, config: ReaderGroupConfig) -> ReaderGroupConfig:
        data = self._transport.json("PUT", f"{self._path}/config", json_body=config.model_dump(mode="json"))
        return api.parse_answer(ReaderGroupConfig, data)

    def update_retention_stream_cut(self, cut: StreamCut) -> StreamCut:
        """Acknowledge consumption up to ``cut`` (groups with MANUAL_RELEASE_AT_USER_STREAMCUT retention).

        Consumption-based retention may then truncate the stream up to the lowest cut of its subscribers.
        The cut must be valid and may never move backwards. It is acknowledged for the group this handle
        opened only: ReaderGroupNotFound once that group was deleted, even if its name was created again.
        """
        if self.incarnation is None:
            self.info()
        body = api.TruncationCutRequest(scope=cut.scope, stream=cut.stream, positions=list(cut.positions),
                                        incarnation=cut.incarnation, group_incarnation=self.incarnation)
        unknown = {"group_incarnation"} if self.incarnation is None else None  # the body a group without one sent
        data = self._transport.json("POST", f"{self._path}/truncation-cut",
                                    json_body=body.model_dump(mode="json", exclude=unknown))
        return _cut(api.parse_answer(api.StreamCutBody, data))

    def unread_bytes(self) -> int:
        return api.parse_answer(api.UnreadBytes, self._transport.json("GET", f"{self._path}/unread-bytes")).unread_bytes


class ReaderGroupManager:
    def __init__(self, scope: str, endpoint: str | Connection | None = None, *, sign: bool | None = None,
                 region: str | None = None) -> None:
        self.scope = scope
        self.connection = endpoint if isinstance(endpoint, Connection) else Connection(endpoint, sign=sign,
                                                                                        region=region)

    def create_reader_group(self, name: str, config: ReaderGroupConfig) -> bool:
        body = api.CreateReaderGroupRequest(group=validate_reader_group_name(name), config=config)
        data = self.connection.controller.transport.json(
            "POST", f"/v1/scopes/{quote(self.scope, safe='')}/reader-groups", json_body=body.model_dump(mode="json"))
        return api.parse_answer(api.Created, data).created

    def get_reader_group(self, name: str) -> ReaderGroup:
        group = ReaderGroup(self.connection, self.scope, name)
        group.info()  # raises ReaderGroupNotFound
        return group

    def delete_reader_group(self, name: str) -> bool:
        path = f"/v1/scopes/{quote(self.scope, safe='')}/reader-groups/{quote(name, safe='')}"
        return api.parse_answer(api.Deleted, self.connection.controller.transport.json("DELETE", path)).deleted


@dataclass
class SyncCadence:
    """How long a reader waits between syncs with its group: ``group_refresh_time_ms`` (half a second
    at most while it holds no segment, so it finds work soon) after a sync that changed something -- its
    segments or offsets moved, a checkpoint came -- and twice as long after each sync that changed nothing,
    up to a sixth of ``reader_lease_ms`` (or the refresh time, if that is longer). The cap keeps a live
    reader's lease safe: the controller renews it at least every quarter lease of syncs, so a live
    reader's last renewal is never older than about 0.42 leases."""

    refresh_s: float
    lease_s: float
    interval_s: float = 0.0

    def after_sync(self, changed: bool, holding: bool) -> float:
        """The wait before the next sync, given whether the last one changed anything."""
        base = self.refresh_s if holding else min(self.refresh_s, 0.5)
        cap = max(base, self.lease_s / 6)
        self.interval_s = base if changed or not self.interval_s else min(cap, max(base, self.interval_s * 2))
        return self.interval_s


_NO_EVENTS = EventBatch([], [], 0)


@dataclass
class _Held:
    assigned: api.AssignedSegment
    reader: SegmentEventReader
    delivered: int  # offset after the last event returned to the application
    batch: EventBatch = _NO_EVENTS  # the events of the last read, decoded (at most one read's worth)
    next: int = 0  # the index in ``batch`` of the next event to return
    waiting: bool = False  # at its tail: read again only once a tail check shows news

    @property
    def key(self) -> str:
        return f"{self.assigned.stream}/{self.assigned.segment.segment_id}"

    @property
    def events(self) -> range:
        """The indices in ``batch`` of the events read and not returned yet."""
        return range(self.next, len(self.batch))

    def take(self, max_events: int | None) -> tuple[EventBatch, int, int]:
        """Return the next events (at most ``max_events``) as ``(batch, start, stop)``: they are
        delivered, and the batch is let go once all its events are (it may hold megabytes)."""
        batch, start = self.batch, self.next
        stop = len(batch) if max_events is None else min(len(batch), start + max_events)
        self.delivered = batch.positions[stop] if stop < len(batch) else batch.end
        if stop == len(batch):
            self.batch, self.next = _NO_EVENTS, 0
        else:
            self.next = stop
        return batch, start, stop


class EventStreamReader(Generic[T]):
    """One reader of a reader group."""

    def __init__(self, connection: Connection, scope: str, group: str, reader_id: str, serializer: Serializer[T],
                 read_size: int = DEFAULT_READ_SIZE, backoff: TailBackoff | None = None) -> None:
        self.connection = connection
        self.group = ReaderGroup(connection, scope, group)
        self.reader_id = reader_id
        self._instance = secrets.token_hex(16)  # this object's joins: a repeated join is not a second reader
        self.serializer = serializer
        self.read_size = read_size
        config = self.group.config
        self.refresh_s = config.group_refresh_time_ms / 1000
        self._cadence = SyncCadence(self.refresh_s, config.reader_lease_ms / 1000)
        self._held: dict[str, _Held] = {}
        self._reported: list[api.SegmentOffset] = []  # the positions the last sync reported
        self._tail_backoff = backoff or TailBackoff()  # the cadence of its tail checks: latency against cost
        self._check_at = 0.0  # when the next tail check of the held segments at their tail is due
        self._completed: list[api.SegmentOffset] = []
        self._to_pass: str | None = None  # a checkpoint returned to the application, passed on the next call
        self._emitted: set[str] = set()
        self._assignment = self._join()
        self._last_sync = time.monotonic()
        self._sync_interval = self._cadence.after_sync(True, bool(self._held))
        self._next = 0
        self._closed = False
        self._lost: ReaderNotInReaderGroup | None = None  # taken offline by the group: this reader is done
        self._watermarks: dict[str, tuple[StreamReader, list[dict]]] = {}

    # -- public API ------------------------------------------------------------------------------

    def read_next_event(self, timeout_ms: int = 1000) -> GroupEventRead[T] | None:
        """The next event, a checkpoint marker, or None when nothing arrived within ``timeout_ms``.

        Raises ReaderNotInReaderGroup once the group has taken this reader offline (its lease expired,
        or ``reader_offline`` named it): its segments are another reader's now. Close it and create a
        new reader.
        """
        return self._read(timeout_ms, self._next_buffered,
                          lambda name: GroupEventRead(None, None, self.get_position(), checkpoint_name=name))

    def read_events(self, max_events: int | None = None, timeout_ms: int = 1000) -> GroupEventsRead | None:
        """The next events of one held segment at once (at most ``max_events``), a checkpoint marker,
        or None, as ``read_next_event`` would return them one by one: for throughput, the events are
        handed over as bytes, with no object per event (the serializer is not applied). The two calls
        mix freely; each starts after the last event either returned. Raises as ``read_next_event`` does.
        """
        return self._read(timeout_ms, lambda: self._buffered_events(max_events),
                          lambda name: GroupEventsRead(None, self.get_position(), checkpoint_name=name))

    def _read(self, timeout_ms: int, take: Callable[[], R | None], marker: Callable[[str], R]) -> R | None:
        """The loop both reads share, so they sync, pass checkpoints and wait alike: ``marker`` of a
        checkpoint to return (it is passed on the next call), else what ``take`` makes of the events read
        and not returned yet, reading more as needed; None when nothing arrived within ``timeout_ms``."""
        if self._lost is not None:
            raise self._lost
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._to_pass is not None:
                self._sync(checkpoint=self._to_pass)
                self._to_pass = None
            elif self._completed or time.monotonic() - self._last_sync >= self._sync_interval:
                self._sync()
            checkpoint = self._assignment.checkpoint
            if checkpoint and checkpoint not in self._emitted:
                self._emitted.add(checkpoint)
                if self._assignment.silent:
                    self._sync(checkpoint=checkpoint)
                    continue
                self._to_pass = checkpoint
                return marker(checkpoint)
            taken = take()
            if taken is not None:
                return taken
            if self._fetch():
                continue
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                return None
            wake = self._last_sync + self._sync_interval  # the next sync, or sooner:
            if self._held:  # the next tail check, or a short pause if a segment is not at its tail
                wake = min(wake, self._check_at if all(h.waiting for h in self._held.values()) else now + 0.05)
            time.sleep(min(remaining, max(0.0, wake - now)))

    def get_current_time_window(self, stream: str) -> TimeWindow:
        """The time window of this reader's position in ``stream`` ("scope/stream"), from its watermarks."""
        scope, name = split_scoped_name(stream)
        if stream not in self._watermarks:
            try:
                reader = StreamReader(self.connection, scope, mark_stream_name(name), JsonSerializer())
            except NotFound:
                return TimeWindow(None, None)  # no writer of the stream has noted time yet
            self._watermarks[stream] = (reader, [])
        reader, marks = self._watermarks[stream]
        try:
            marks.extend(read.event for read in reader)
        except SegmentNotFound:
            # The first writer's mark created the mark stream a moment ago and its segments are not
            # there yet: no time noted so far that this reader could see; look again next call.
            del self._watermarks[stream]
            return TimeWindow(None, None)
        position = [SegmentPosition(segment=h.assigned.segment, offset=h.delivered)
                    for h in self._held.values() if h.assigned.stream == stream]
        if not position:
            return TimeWindow(None, None)
        lower = upper = None
        for mark in marks:
            cut = [SegmentPosition(segment=SegmentRange(segment_id=int(s), low=lo, high=hi), offset=int(o))
                   for s, lo, hi, o in mark["cut"]]
            relation = compare_positions(cut, position)
            if relation in (Ordering.BEFORE, Ordering.EQUAL):
                lower = max(lower or 0, mark["lower_ms"])
            if relation in (Ordering.AFTER, Ordering.EQUAL):
                upper = mark["upper_ms"] if upper is None else min(upper, mark["upper_ms"])
        return TimeWindow(lower, upper)

    def get_position(self) -> Position:
        """Held segments at the offset after the last event returned, and segments read to their end
        that the group has not been told about yet at that end (so a reader taking over after
        ``reader_offline`` does not read them again)."""
        held = tuple(api.SegmentOffset(stream=h.assigned.stream, segment_id=h.assigned.segment.segment_id,
                                       offset=h.delivered) for h in self._held.values())
        return Position(held + tuple(self._completed))

    def close(self) -> None:
        """Leave the group, handing the segments back at this reader's position (nothing to hand back
        once the group took it offline: a new reader of the same id may hold them by now, and the
        server leaves that one online even if this reader never learnt it was taken offline)."""
        if not self._closed and self._lost is None:
            self._closed = True
            self.group._offline(self.reader_id, self.get_position(), self._instance)

    def __enter__(self) -> EventStreamReader[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- talking to the group --------------------------------------------------------------------

    def _join(self) -> api.Assignment:
        """Join the group; AlreadyExists while another reader of this id is online."""
        data = self.group._transport.json("POST", f"{self.group._path}/readers/{quote(self.reader_id, safe='')}",
                                          json_body=api.JoinRequest(instance=self._instance).model_dump())
        assignment = api.parse_answer(api.Assignment, data)
        self._apply(assignment)
        return assignment

    def _sync(self, checkpoint: str | None = None) -> None:
        request = api.SyncRequest(positions=list(self.get_position().offsets), completed=self._completed,
                                  checkpoint=checkpoint, instance=self._instance)
        previous = self._assignment
        try:
            data = self.group._transport.json("POST", f"{self.group._path}/readers/{quote(self.reader_id, safe='')}/sync",
                                              json_body=request.model_dump())
            assignment = api.parse_answer(api.Assignment, data)
            self._apply(assignment)
        except ReaderNotInReaderGroup as e:
            self._held.clear()  # another reader's now: not one more event from them
            if e.details.get("generation") == self._assignment.generation:
                self._lost = e
                raise
            assignment = self._join()  # the group was reset (a new generation): start over in it
        changed = (request.completed or checkpoint is not None or assignment != previous
                   or request.positions != self._reported)
        self._reported = request.positions
        self._completed = []
        self._assignment = assignment
        self._last_sync = time.monotonic()
        self._sync_interval = self._cadence.after_sync(changed, bool(self._held))

    def _apply(self, assignment: api.Assignment) -> None:
        if getattr(self, "_assignment", None) is not None and assignment.generation != self._assignment.generation:
            self._held.clear()
        wanted = {f"{a.stream}/{a.segment.segment_id}": a for a in assignment.segments}
        for key in [k for k in self._held if k not in wanted]:
            del self._held[key]  # released to another reader: undelivered events are theirs now
        for key, assigned in wanted.items():
            if key not in self._held:
                scope, stream = split_scoped_name(assigned.stream)
                reader = SegmentEventReader(self.connection.segments, scope, stream, assigned.segment.segment_id,
                                            assigned.offset, assigned.end_offset, self.read_size,
                                            incarnation=assigned.incarnation)
                self._held[key] = _Held(assigned, reader, assigned.offset)

    # -- reading ---------------------------------------------------------------------------------

    def _next_held(self) -> _Held | None:
        """The next held segment with events read and not returned, in turn (so one busy segment does
        not starve the others)."""
        keys = sorted(self._held)
        for i in range(len(keys)):
            held = self._held[keys[(self._next + i) % len(keys)]]
            if held.events:
                self._next = (self._next + i + 1) % len(keys)
                return held
        return None

    def _next_buffered(self) -> GroupEventRead[T] | None:
        """The next event read and not returned, deserialized; None if there is none (the Pravega
        facade's slicing reader overrides it to take the events of one segment)."""
        held = self._next_held()
        if held is None:
            return None
        batch, i, _ = held.take(1)
        scope, stream = split_scoped_name(held.assigned.stream)
        pointer = EventPointer(scope, stream, held.assigned.segment.segment_id, batch.positions[i], batch.length(i),
                               held.assigned.incarnation)
        self._complete_if_done(held)
        return GroupEventRead(self.serializer.deserialize(batch.payloads[i]), pointer, self.get_position(),
                              routing_key=batch.routing_keys[i] if batch.routing_keys else None,
                              timestamp_ms=batch.timestamps[i] if batch.timestamps else None)

    def _buffered_events(self, max_events: int | None) -> GroupEventsRead | None:
        """The next events read and not returned of one segment (at most ``max_events``, at least one),
        as bytes; None if there are none."""
        held = self._next_held()
        if held is None:
            return None
        batch, start, stop = held.take(None if max_events is None else max(1, max_events))
        scope, stream = split_scoped_name(held.assigned.stream)
        events = EventsRead.of(scope, stream, held.assigned.segment.segment_id, batch, start, stop,
                               held.assigned.incarnation)
        self._complete_if_done(held)
        return GroupEventsRead(events, self.get_position())

    def _fetch(self) -> bool:
        """Read once from each held segment not at its tail, and check the tails of those that are (one
        request per stream for all of them, backing off while nothing arrives: ``TailBackoff``); True
        if anything arrived or finished."""
        progressed = self._read_once()
        if not progressed and time.monotonic() >= self._check_at and self._check_tails():
            progressed = self._read_once()
        if progressed:
            self._check_at = self._tail_backoff.reset()
        return progressed

    def _check_tails(self) -> bool:
        """One tail check per stream of the held segments at their tail; True if any shows news."""
        waiting: dict[tuple[str, str], list[_Held]] = {}
        for held in self._held.values():
            if held.waiting:
                waiting.setdefault((held.reader.scope, held.reader.stream), []).append(held)
        woken = False
        for (scope, stream), helds in waiting.items():
            tails = self.connection.segments.tails(scope, stream, [int(h.reader.segment) for h in helds],
                                                   helds[0].assigned.incarnation)
            for held, tail in zip(helds, tails, strict=True):
                if held.reader.has_news(tail):
                    held.waiting, woken = False, True
        self._check_at = time.monotonic() + self._tail_backoff.next_delay()
        return woken

    def _read_once(self) -> bool:
        """Read once from each held segment not at its tail, without waiting; True if anything arrived
        or finished."""
        progressed = False
        for held in list(self._held.values()):
            if held.waiting:
                continue
            if held.reader.finished:
                progressed |= self._complete_if_done(held)
                continue
            try:
                batch = held.reader.read_batch()
            except Truncated as e:  # truncation overtook this reader: continue at the new start
                start = int(e.details.get("start_offset", held.reader.offset))
                held.reader = SegmentEventReader(self.connection.segments, held.reader.scope, held.reader.stream,
                                                 held.reader.segment, start, held.assigned.end_offset, self.read_size,
                                                 incarnation=held.assigned.incarnation)
                held.delivered = start
                progressed = True
                continue
            except SegmentNotFound:  # truncated away entirely: done with it
                self._completed.append(self._offset_of(held))
                del self._held[held.key]
                progressed = True
                continue
            held.batch, held.next = batch, 0  # the last read's events were all returned: _fetch reads only then
            progressed |= bool(batch) or self._complete_if_done(held)
            # at the tail once its last answer's length is read (with this batch too): a tail check, not a
            # locate, looks for more
            held.waiting = held.reader.at_tail
        return progressed

    def _complete_if_done(self, held: _Held) -> bool:
        if held.reader.finished and not held.events and held.key in self._held:
            self._completed.append(self._offset_of(held))
            del self._held[held.key]
            return True
        return False

    @staticmethod
    def _offset_of(held: _Held) -> api.SegmentOffset:
        return api.SegmentOffset(stream=held.assigned.stream, segment_id=held.assigned.segment.segment_id,
                                 offset=held.delivered)

