"""Watermarks: from the times writers note to a time window for any reader position (seed 003).

A writer notes a time together with its position: its whole segment map at the offsets after its
last acknowledged writes (a cut covering the key space). Everything it wrote before that position is
no later than the time, everything after no earlier. Marks are kept per writer; a writer that has not
noted time within the stream's ``timestamp_aggregation_timeout_ms`` (60 s when 0) is dropped.

Every few seconds the watermark job computes, for each stream with writers, a watermark: the upper
bound of the active writers' positions (a stream cut at or after each of them), the lowest noted time
(every event after the cut is at least that late) and the highest (every event before it is at most
that late). A watermark is appended to the stream's internal ``_MARK<stream>`` stream only when it
moves forward: a later lowest time and a cut at or after the previous one.

What the job looks at: each writer's mark is in the sparse, write-sharded ``txn-deadlines`` index under
``watermark#<n>`` (n by the stream's name, so a stream's marks share a shard) with ``deadline_ms`` the
time it next needs a look. A note makes its mark due at once; once the job has computed the stream's
watermark from it, it re-arms the mark at the instant the writer would turn silent (its note time plus
the timeout), conditioned on the note it read. So a tick queries the index's shards and nothing per
stream whose writers' marks did not move: an idle watermarked stream costs a tick no request. A stream
whose writers are all gone (silent for the timeout, or closed) leaves the watermark set: its record's
``watermarked`` flag is removed, conditioned on the record it read, and a writer that comes back puts
it in again.

Numbering: the n-th watermark is event number n of the watermark stream's writer, and the stream
record's ``watermark_count`` is n + 1 only once ``last_watermark`` names that event. A job that stops
between the append and the record update, or two jobs that overlap, append under the same number;
the segment store keeps the first and answers the others as duplicates, and a duplicate's job reads
the watermark stored under the number and records that one. So the record never names a watermark the
stream lacks, and the next watermark is computed from the one the stream holds (never behind it).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from pynamodb.exceptions import DeleteError, PutError, UpdateError

from controlplane.cuts import upper_bound
from controlplane.models import StreamRecord, WriterMarkRecord, stream_pk
from controlplane.parallel import in_parallel
from controlplane.store import failed_condition
from controlplane.streams import StreamTasks
from dataplane.fanout import error_outcome
from dataplane.shards import SHARDS, query_every_shard, shard_key
from rillet.errors import IllegalState, InvalidArgument, StreamNotFound, WriteConflict
from rillet.framing import frame, unframe
from rillet.models import ScalingPolicy, SegmentPosition, SegmentRange, StreamConfiguration, StreamState
from rillet.names import mark_stream_name, segment_name
from rillet.stream_cut import Ordering, compare_positions

DEFAULT_WRITER_TIMEOUT_MS = 60_000
# The watermarking index's partition keys: 1#<n> by the stream's name (dataplane.shards; "1" alone was
# the one key before the index was sharded, still read for records written then).
WATERMARKED = "1"
# The writers' marks' partition keys in the txn-deadlines index: watermark#<n> by the stream's name.
MARKS_DUE = "watermark"
WATERMARK_WRITER = "watermarks"
T = TypeVar("T")
# Tries to take a stream out of the set while its record keeps changing; past them it stays listed (at no
# cost per tick: no mark of it is due) until a writer notes time and falls silent again.
_LEAVE_ATTEMPTS = 3


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class WatermarkRun:
    """What one look at the due streams did: the watermarks appended ("scope/stream", watermark), and the
    streams whose computation raised (their ``error: <code>``), which stay due for the next look."""

    appended: list[tuple[str, Watermark]]
    failed: dict[str, str]


def _wire(positions: list[SegmentPosition]) -> list[list]:
    return [[p.segment.segment_id, p.segment.low, p.segment.high, p.offset] for p in positions]


def _positions(cut: list) -> list[SegmentPosition]:
    return [SegmentPosition(segment=SegmentRange(segment_id=int(s), low=lo, high=hi), offset=int(o))
            for s, lo, hi, o in cut]


@dataclass(frozen=True)
class Watermark:
    lower_ms: int
    upper_ms: int
    cut: list[SegmentPosition]

    def to_json(self) -> bytes:
        return json.dumps({"lower_ms": self.lower_ms, "upper_ms": self.upper_ms, "cut": _wire(self.cut)}).encode()


class WatermarkTasks:
    def __init__(self, streams: StreamTasks) -> None:
        self.streams = streams
        self.store = streams.store

    def note_time(self, scope: str, stream: str, writer: str, timestamp_ms: int, offsets: dict[int, int]) -> None:
        record = self.store.get_stream(scope, stream)
        if record.state in (StreamState.SEALING.value, StreamState.SEALED.value):
            raise IllegalState(f"stream {scope}/{stream} is {record.state}", state=record.state)
        position = self.streams.resolve_cut(scope, stream, offsets)
        key = (stream_pk(scope, stream), f"mark#{writer}")
        try:
            previous = WriterMarkRecord.get(*key, consistent_read=True)
            if timestamp_ms < previous.timestamp_ms:
                raise InvalidArgument(f"writer {writer} noted {previous.timestamp_ms}; time cannot go back to {timestamp_ms}")
        except WriterMarkRecord.DoesNotExist:
            previous = None
        now = now_ms()
        mark = WriterMarkRecord(*key, writer=writer, timestamp_ms=timestamp_ms, position=_wire(position),
                                updated_ms=now, write_id=uuid.uuid4().hex, incarnation=int(record.created_ms),
                                deadline_shard=self._shard(scope, stream), deadline_ms=self._due_from(previous, now))
        try:  # a note of the same writer racing this one may have saved a later time meanwhile
            mark.save(condition=WriterMarkRecord.timestamp_ms.does_not_exist()
                      | (WriterMarkRecord.timestamp_ms <= timestamp_ms))
        except PutError as e:
            if not failed_condition(e):
                raise
            raise InvalidArgument(f"writer {writer} noted a later time meanwhile; time cannot go back to "
                                  f"{timestamp_ms}") from None
        if record.watermarked is None:
            self._start_watermarking(record)

    @staticmethod
    def _shard(scope: str, stream: str) -> str:
        return shard_key(MARKS_DUE, f"{scope}/{stream}")

    @classmethod
    def shard_of(cls, scope: str, stream: str) -> int:
        """The index shard of the stream's marks (a run computes the streams of some shards)."""
        return int(cls._shard(scope, stream).rsplit("#", 1)[1])

    @staticmethod
    def _due_from(previous: WriterMarkRecord | None, now: int) -> int:
        """A note's mark is due now; a mark already due keeps its instant, so notes between two ticks
        leave the index entry as it is (DynamoDB writes an index only when its keys move)."""
        if previous is not None and previous.deadline_ms is not None and previous.deadline_ms <= now:
            return int(previous.deadline_ms)
        return now

    @staticmethod
    def _as_read(mark: WriterMarkRecord):
        """The condition that the mark is still the note that was read (each note writes a new token;
        the note's time stamp is no witness, clocks of two hosts may agree)."""
        return (WriterMarkRecord.write_id == mark.write_id if mark.write_id else
                WriterMarkRecord.write_id.does_not_exist() & (WriterMarkRecord.updated_ms == mark.updated_ms))

    def _forget(self, mark: WriterMarkRecord) -> bool:
        """Delete a silent writer's mark as it was read; False if the writer noted a time since (it stays)."""
        try:
            mark.delete(condition=self._as_read(mark))
            return True
        except DeleteError as e:
            if not failed_condition(e):
                raise
            return False

    def _rearm(self, scope: str, stream: str, marks: list[WriterMarkRecord], timeout: int, now: int) -> None:
        """Give each due mark its next look at the instant its writer turns silent, unless the writer
        noted again since it was read (that note left it due). A mark written before marks carried a
        due time gets one here."""
        for mark in marks:
            if mark.deadline_ms is not None and mark.deadline_ms > now:
                continue
            try:
                mark.update(actions=[WriterMarkRecord.deadline_shard.set(self._shard(scope, stream)),
                                     WriterMarkRecord.deadline_ms.set(int(mark.updated_ms) + timeout + 1)],
                            condition=self._as_read(mark))
            except UpdateError as e:
                if not failed_condition(e):
                    raise

    def remove_writer(self, scope: str, stream: str, writer: str) -> None:
        """A writer that closes counts as silent from now on: its mark is made due and silent (noted at
        time 0), so the job forgets it as it forgets a silent writer's, recomputes the watermark without
        it and takes the stream out of the watermark set when it was the last writer."""
        try:
            WriterMarkRecord(stream_pk(scope, stream), f"mark#{writer}").update(
                actions=[WriterMarkRecord.updated_ms.set(0), WriterMarkRecord.write_id.set(uuid.uuid4().hex),
                         WriterMarkRecord.deadline_shard.set(self._shard(scope, stream)),
                         WriterMarkRecord.deadline_ms.set(now_ms())],
                condition=WriterMarkRecord.pk.exists())
        except UpdateError as e:
            if not failed_condition(e):
                raise

    def _leave(self, record: StreamRecord) -> None:
        """Take the stream out of the watermark set, conditioned on the record read; on a concurrent
        change, read again and leave only while still no writer has a mark (a writer that notes time
        meanwhile makes its mark due, and the job's next look puts the stream back)."""
        for _ in range(_LEAVE_ATTEMPTS):
            if record.watermarked is None:
                return
            try:
                self.store.update(record, [StreamRecord.watermarked.remove()], "stream changed concurrently")
                return
            except WriteConflict:
                record = self.store.get_stream(record.scope, record.stream)
                if self._marks(record.scope, record.stream):
                    return

    @staticmethod
    def _marks(scope: str, stream: str) -> list[WriterMarkRecord]:
        return list(WriterMarkRecord.query(stream_pk(scope, stream), WriterMarkRecord.sk.startswith("mark#"),
                                           consistent_read=True))

    def _start_watermarking(self, record: StreamRecord) -> None:
        """Create the stream's watermark stream, then put the stream in the watermarking index."""
        self.streams.create_stream(record.scope, mark_stream_name(record.stream),
                                   StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)), internal=True)
        try:
            self.store.update(record, [StreamRecord.watermarked.set(shard_key(WATERMARKED, f"{record.scope}/{record.stream}"))],
                              "stream changed concurrently")
        except WriteConflict:
            pass  # a concurrent mark or workflow: the next mark sets it

    def candidates(self) -> list[tuple[str, str]]:
        """The watermark set: every stream with a writer's mark (an operator's listing; the job reads
        ``due`` instead)."""
        return [(r.scope, r.stream) for r in query_every_shard(WATERMARKED, StreamRecord.watermarking.query, StreamRecord)]

    def due(self, now: int | None = None, shards: list[int] | None = None) -> list[tuple[str, str]]:
        """The streams with a writer's mark due for a look (noted since the last look, or turning silent),
        from one query per shard (``shards``: some of them, for a run that takes a share of the work)."""
        now = now if now is not None else now_ms()
        keys = [f"{MARKS_DUE}#{n}" for n in (range(SHARDS) if shards is None else shards)]
        streams: dict[tuple[str, str], None] = {}
        for mark in _query_keys(keys, lambda key: WriterMarkRecord.txn_deadlines.query(
                key, WriterMarkRecord.deadline_ms <= now)):
            scope, stream = mark.pk.removeprefix("stream#").split("/", 1)
            streams[(scope, stream)] = None
        return list(streams)

    def compute(self, scope: str, stream: str, now: int | None = None) -> Watermark | None:
        """Append the stream's next watermark if it moved forward; returns it (None when it did not, or
        when another job appended one under the same number meanwhile: that one is recorded instead).
        Forgets silent writers, re-arms the marks it looked at, and takes a stream whose writers are
        all gone out of the watermark set."""
        now = now if now is not None else now_ms()
        record = self.store.get_stream(scope, stream)
        timeout = StreamConfiguration.model_validate(record.configuration).timestamp_aggregation_timeout_ms
        timeout = timeout or DEFAULT_WRITER_TIMEOUT_MS
        active, all_forgotten = [], True
        for mark in self._marks(scope, stream):
            stale = mark.incarnation is not None and int(mark.incarnation) != int(record.created_ms)
            if stale or now - mark.updated_ms > timeout:
                # a note of the stream's earlier life, or a writer that stopped reporting: it no longer
                # holds watermarks back
                all_forgotten = self._forget(mark) and all_forgotten
            else:
                active.append(mark)
        if not active:
            if all_forgotten:  # no writer noted time for the timeout
                self._leave(record)
            return None
        if record.watermarked is None:  # a writer came back after the stream left the set
            self._start_watermarking(record)
            record = self.store.get_stream(scope, stream)
        watermark = self._advance(record, active)
        self._rearm(scope, stream, active, timeout, now)
        return watermark

    def _advance(self, record: StreamRecord, active: list[WriterMarkRecord]) -> Watermark | None:
        scope, stream = record.scope, record.stream
        records = {r.segment_id: r for r in self.store.list_segments(scope, stream)}
        previous = self.last(scope, stream, record)
        cuts = [_positions(m.position) for m in active] + ([previous.cut] if previous else [])
        watermark = Watermark(min(m.timestamp_ms for m in active), max(m.timestamp_ms for m in active),
                              upper_bound(cuts, records))
        if previous and (watermark.lower_ms <= previous.lower_ms
                         or compare_positions(watermark.cut, previous.cut) in (Ordering.BEFORE, Ordering.OVERLAPPING)):
            return None
        count = int(record.watermark_count or 0)
        marks_segment = segment_name(scope, mark_stream_name(stream), 0)
        appended = self.streams.segments.append(marks_segment, WATERMARK_WRITER, count, 1, frame(watermark.to_json()))
        ours = watermark
        if appended.duplicate:  # number ``count`` was taken (an earlier attempt, a stopped or concurrent job)
            watermark = self._stored(marks_segment, count, appended.offset)
        recorded = [StreamRecord.watermark_count.set(count + 1),
                    StreamRecord.last_watermark.set(json.loads(watermark.to_json()))]
        try:  # through the store: a resend refused after a lost answer is told apart from a concurrent change
            self.store.update(record, recorded, "stream changed concurrently")
        except WriteConflict:
            fresh = self.store.get_stream(scope, stream)
            if fresh.watermark_count != count + 1 or self.last(scope, stream, fresh) != watermark:
                raise
        # Another job's watermark under this number is recorded, but this job appended none: the caller
        # hears of watermarks it added, each later than the one before.
        return watermark if watermark == ours else None

    def _stored(self, segment: str, number: int, offset: int | None) -> Watermark:
        """The watermark the watermark stream holds under ``number``, which starts at ``offset``."""
        if offset is None:  # the stream already holds later numbers: this job's record is stale
            raise WriteConflict(f"watermark {number} was superseded while it was computed")
        events, _ = unframe(self.streams.segments.read(segment, offset).data)
        if not events:
            raise WriteConflict(f"watermark {number} could not be read back")
        stored = json.loads(events[0].payload)
        return Watermark(int(stored["lower_ms"]), int(stored["upper_ms"]), _positions(stored["cut"]))

    def last(self, scope: str, stream: str, record: StreamRecord | None = None) -> Watermark | None:
        record = record or self.store.get_stream(scope, stream)
        if not record.last_watermark:
            return None
        w = record.last_watermark
        return Watermark(int(w["lower_ms"]), int(w["upper_ms"]), _positions(w["cut"]))

    def run(self, now: int | None = None, shards: list[int] | None = None,
            streams: list[tuple[str, str]] | None = None, budget_s: float | None = None) -> WatermarkRun:
        """Compute the watermark of each due stream (of ``shards``, or the ``streams`` a caller already
        found due), several at once (controlplane.parallel). With ``budget_s``, a stream not started
        within that many seconds is left due for the next look (a sensor tick must end within Dagster's
        60 s, however slow the store answers). A stream whose computation raises (throttled, or a poison
        stream) is an outcome of the run, not its end: the other streams' watermarks are appended."""
        due = self.due(now, shards) if streams is None else streams
        stop_at = None if budget_s is None else time.monotonic() + budget_s
        failed: dict[str, str] = {}

        def one(name: tuple[str, str]) -> tuple[str, Watermark] | None:
            if stop_at is not None and time.monotonic() > stop_at:
                return None
            try:
                watermark = self.compute(*name, now)
            except (StreamNotFound, WriteConflict, IllegalState):
                return None  # deleted, sealing, or changed meanwhile: its marks stay due for the next look
            except Exception as e:  # noqa: BLE001 - its outcome: its marks stay due, the caller reports it
                failed[f"{name[0]}/{name[1]}"] = error_outcome(e)
                return None
            return (f"{name[0]}/{name[1]}", watermark) if watermark is not None else None

        return WatermarkRun([found for found in in_parallel(one, due) if found is not None], failed)



def _query_keys(keys: list[str], query: Callable[[str], Iterable[T]]) -> list[T]:
    """``query`` of each index partition key, in parallel (as dataplane.shards.query_every_shard, for an
    index with no item under the bare prefix to read)."""
    return [item for items in in_parallel(lambda key: list(query(key)), keys) for item in items]
