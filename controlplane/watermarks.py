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
from dataclasses import dataclass

from pynamodb.exceptions import DeleteError, PutError

from controlplane.cuts import upper_bound
from controlplane.models import StreamRecord, WriterMarkRecord, stream_pk
from controlplane.store import failed_condition
from controlplane.streams import StreamTasks
from dataplane.shards import query_every_shard, shard_key
from rillet.errors import IllegalState, InvalidArgument, StreamNotFound, WriteConflict
from rillet.framing import frame, unframe
from rillet.models import ScalingPolicy, SegmentPosition, SegmentRange, StreamConfiguration, StreamState
from rillet.names import mark_stream_name, segment_name
from rillet.stream_cut import Ordering, compare_positions

DEFAULT_WRITER_TIMEOUT_MS = 60_000
# The watermarking index's partition keys: 1#<n> by the stream's name (dataplane.shards; "1" alone was
# the one key before the index was sharded, still read for records written then).
WATERMARKED = "1"
WATERMARK_WRITER = "watermarks"


def now_ms() -> int:
    return int(time.time() * 1000)


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
            pass
        mark = WriterMarkRecord(*key, writer=writer, timestamp_ms=timestamp_ms, position=_wire(position),
                                updated_ms=now_ms(), write_id=uuid.uuid4().hex)
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
    def _forget(mark: WriterMarkRecord) -> None:
        """Delete a silent writer's mark as it was read: if the writer noted a time since, it stays (each
        note writes a new token; the note's time stamp is no witness, clocks of two hosts may agree)."""
        as_read = (WriterMarkRecord.write_id == mark.write_id if mark.write_id else
                   WriterMarkRecord.write_id.does_not_exist() & (WriterMarkRecord.updated_ms == mark.updated_ms))
        try:
            mark.delete(condition=as_read)
        except DeleteError as e:
            if not failed_condition(e):
                raise

    def remove_writer(self, scope: str, stream: str, writer: str) -> None:
        WriterMarkRecord(stream_pk(scope, stream), f"mark#{writer}").delete()

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
        return [(r.scope, r.stream) for r in query_every_shard(WATERMARKED, StreamRecord.watermarking.query)]

    def compute(self, scope: str, stream: str, now: int | None = None) -> Watermark | None:
        """Append the stream's next watermark if it moved forward; returns it (None when it did not, or
        when another job appended one under the same number meanwhile: that one is recorded instead)."""
        now = now if now is not None else now_ms()
        record = self.store.get_stream(scope, stream)
        timeout = StreamConfiguration.model_validate(record.configuration).timestamp_aggregation_timeout_ms
        timeout = timeout or DEFAULT_WRITER_TIMEOUT_MS
        marks = list(WriterMarkRecord.query(stream_pk(scope, stream), WriterMarkRecord.sk.startswith("mark#"),
                                            consistent_read=True))
        active = []
        for mark in marks:
            if now - mark.updated_ms > timeout:
                self._forget(mark)  # the writer stopped reporting: it no longer holds watermarks back
            else:
                active.append(mark)
        if not active:
            return None
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

    def run(self, now: int | None = None) -> list[tuple[str, Watermark]]:
        appended = []
        for scope, stream in self.candidates():
            try:
                watermark = self.compute(scope, stream, now)
            except (StreamNotFound, WriteConflict, IllegalState):
                continue
            if watermark is not None:
                appended.append((f"{scope}/{stream}", watermark))
        return appended
