"""Stream cuts and positions: the head, the tail, truncation at a cut, the byte ranges between two
cuts, how far a reader can go next, and the segments that follow or precede a segment."""

from __future__ import annotations

from controlplane.models import StreamRecord
from controlplane.stream_steps import StreamSteps, _range, _ranges, _state
from rillet.errors import IllegalState, InvalidArgument, StreamNotFound
from rillet.models import SegmentPosition, SegmentRange, SegmentSlice, StreamState, SuccessorInfo
from rillet.names import segment_name
from rillet.stream_cut import (
    Ordering,
    compare_positions,
    segment_is_after,
    segment_is_before,
    validity_problem,
)


class StreamCuts(StreamSteps):
    """The cuts, positions and truncation of :class:`controlplane.streams.StreamTasks`."""

    def truncate_stream(self, scope: str, stream: str, offsets: dict[int, int], incarnation: int | None = None) -> None:
        """Truncate at a stream cut: only forward, only at a valid cut, only of the stream's incarnation
        ``incarnation`` when the cut names one (StreamRecreated otherwise).

        The new head takes effect at the first step (readers move to it right away); the data before
        it is then released segment by segment.
        """
        record = self.store.get_stream(scope, stream)
        self.check_incarnation(record, incarnation)
        if _state(record) == StreamState.TRUNCATING:
            if {int(s): int(o) for s, _, _, o in record.head} != offsets:
                raise IllegalState(f"stream {scope}/{stream} is being truncated at another cut", state=record.state)
            return self.finish_truncate_stream(record)
        cut = self.resolve_cut(scope, stream, offsets)
        ordering = compare_positions(cut, self.head(scope, stream, record))
        if ordering == Ordering.EQUAL:
            return None
        if ordering != Ordering.AFTER:
            raise InvalidArgument(f"truncation only moves forward: the cut is {ordering.value.lower()} the head")
        head = [[p.segment.segment_id, p.segment.low, p.segment.high, p.offset] for p in cut]
        self._begin(record, StreamState.TRUNCATING, {"name": "truncate"}, StreamRecord.head.set(head))
        self.finish_truncate_stream(record)

    def finish_truncate_stream(self, record: StreamRecord) -> None:
        """Truncate the head's segments at the head and delete the segments before it, each only as the
        incarnation read before the in-flight check (``_before_check``): a finisher resuming after the
        stream was deleted and created again leaves the new stream's segments alone."""
        head = self.head(record.scope, record.stream, record)
        cut = [p.segment for p in head]
        before = [s.segment_id for s in self.store.list_segments(record.scope, record.stream)
                  if segment_is_before(_range(s), cut)]
        offsets = {p.segment.segment_id: p.offset for p in head}
        segments = self._before_check(record, [*offsets, *before])
        if not self._in_flight(record):
            return
        for segment, incarnation in segments:
            name = segment_name(record.scope, record.stream, segment.segment_id)
            if incarnation is None:
                continue  # deleted by an earlier attempt
            if segment.segment_id in offsets:
                self.segments.truncate(name, offsets[segment.segment_id], incarnation)
            else:
                self.segments.delete(name, incarnation)
        self._finish(record, StreamState.ACTIVE)

    def resolve_cut(self, scope: str, stream: str, offsets: dict[int, int]) -> list[SegmentPosition]:
        """Check that ``offsets`` is a valid cut of the stream and attach the segments' key ranges."""
        try:
            records = self.store.get_segments(scope, stream, sorted(offsets))
        except StreamNotFound as e:
            self.store.get_stream(scope, stream)  # a missing stream is a 404 wherever it is named
            raise InvalidArgument(f"the cut names a segment the stream does not have: {e.message}") from e
        problem = validity_problem([_range(r) for r in records])
        if problem:
            raise InvalidArgument(f"invalid stream cut: {problem}")
        positions = []
        for r in records:
            offset = offsets[r.segment_id]
            length = r.sealed_size if r.sealed_size is not None else self.segments.info(
                segment_name(scope, stream, r.segment_id)).length
            if offset > length:
                raise InvalidArgument(f"offset {offset} is beyond the length {length} of segment {r.segment_id}")
            positions.append(SegmentPosition(segment=_range(r), offset=offset))
        return positions

    def tail(self, scope: str, stream: str, record: StreamRecord | None = None) -> list[SegmentPosition]:
        """The tail stream cut: the current segments at their current lengths."""
        return [SegmentPosition(segment=s, offset=self.segments.info(segment_name(scope, stream, s.segment_id)).length)
                for s in self.current_segments(scope, stream, record)]

    def slices(self, scope: str, stream: str, start: dict[int, int] | None = None,
               end: dict[int, int] | None = None) -> list[SegmentSlice]:
        """The byte range of every segment between two cuts (head and tail by default)."""
        record = self.store.get_stream(scope, stream)
        frm = self.resolve_cut(scope, stream, start) if start else self.head(scope, stream, record)
        to = self.resolve_cut(scope, stream, end) if end else self.tail(scope, stream, record)
        if compare_positions(frm, to) in (Ordering.AFTER, Ordering.OVERLAPPING):
            raise InvalidArgument("the start cut must not lie after the end cut")
        frm_offsets = {p.segment.segment_id: p.offset for p in frm}
        to_offsets = {p.segment.segment_id: p.offset for p in to}
        frm_cut, to_cut = [p.segment for p in frm], [p.segment for p in to]
        slices = []
        for r in self.store.list_segments(scope, stream, min(s.segment_id for s in frm_cut)):
            segment = _range(r)
            if segment.segment_id not in frm_offsets and segment_is_before(segment, frm_cut):
                continue
            if segment.segment_id not in to_offsets and segment_is_after(segment, to_cut):
                continue
            begin = frm_offsets.get(segment.segment_id, 0)
            finish = to_offsets.get(segment.segment_id)
            if finish is None:
                finish = r.sealed_size if r.sealed_size is not None else self.segments.info(
                    segment_name(scope, stream, segment.segment_id)).length
            slices.append(SegmentSlice(segment=segment, start_offset=begin, end_offset=max(begin, finish)))
        return slices

    def next_cut(self, scope: str, stream: str, offsets: dict[int, int],
                 incarnation: int | None = None) -> list[SegmentPosition]:
        """How far a reader at ``offsets`` (of the stream's ``incarnation``, if given) can read without
        mixing a segment and its successors.

        Segments read to their sealed end give way to their successors at offset 0, but only once all
        of a successor's predecessors are at their ends; then every segment extends to its current
        length (or sealed size). The bytes between the two cuts never hold a key's events from a
        segment and from its successor, so a consumer of consecutive ranges keeps per-key order.
        A stream deleted (and perhaps created again) while this reads is StreamNotFound (or
        StreamRecreated), as it would have been a moment later.
        """
        start = self.resolve_cut(scope, stream, offsets)
        records = {r.segment_id: r for r in self.store.list_segments(scope, stream, min(offsets))}
        named = {p.segment.segment_id for p in start}
        named |= {successor for sid in named if sid in records for successor in records[sid].successors}
        if not named <= records.keys():  # deleted since resolve_cut read them
            self.check_incarnation(self.store.get_stream(scope, stream), incarnation)
            raise StreamNotFound(f"stream {scope}/{stream} was deleted while its cut was read")
        if incarnation is not None:  # the records listed may be of an incarnation created since
            self.check_incarnation(self.store.get_stream(scope, stream), incarnation)
        done = {p.segment.segment_id for p in start
                if records[p.segment.segment_id].sealed_size is not None
                and p.offset >= records[p.segment.segment_id].sealed_size}
        positions = {p.segment.segment_id: p for p in start}
        for sid in sorted(done):
            for successor in records[sid].successors:
                preds = records[successor].predecessors
                if successor not in positions and all(p in done for p in preds):
                    for p in preds:
                        positions.pop(p, None)
                    positions[successor] = SegmentPosition(segment=_range(records[successor]), offset=0)
        result = []
        for sid, position in positions.items():
            record = records[sid]
            end = record.sealed_size if record.sealed_size is not None else self.segments.info(
                segment_name(scope, stream, sid)).length
            result.append(SegmentPosition(segment=position.segment, offset=max(position.offset, end)))
        return sorted(result, key=lambda p: p.segment.low)

    def segments_at(self, scope: str, stream: str, time_ms: int) -> list[SegmentRange]:
        """The segments that were current at ``time_ms`` (the first epoch's for earlier times)."""
        self.store.get_stream(scope, stream)
        epochs = self.store.list_epochs(scope, stream)
        chosen = epochs[0]
        for epoch in epochs:
            if epoch.created_ms <= time_ms:
                chosen = epoch
        return _ranges(chosen.segments)

    def successors(self, scope: str, stream: str, sid: int, incarnation: int | None = None) -> list[SuccessorInfo]:
        """The successors of segment ``sid``; with ``incarnation``, of that incarnation of the stream only
        (StreamRecreated once the name holds another: its segment ids start again)."""
        if incarnation is not None:
            self.check_incarnation(self.store.get_stream(scope, stream), incarnation)
        (segment,) = self.store.get_segments(scope, stream, [sid])
        found = self.store.get_segments(scope, stream, list(segment.successors))
        predecessor_ids = sorted({p for s in found for p in s.predecessors})
        ranges = {r.segment_id: _range(r) for r in self.store.get_segments(scope, stream, predecessor_ids)}
        return [SuccessorInfo(segment=_range(s), predecessors=[ranges[p] for p in s.predecessors]) for s in found]

    def predecessors(self, scope: str, stream: str, sid: int) -> list[SegmentRange]:
        (segment,) = self.store.get_segments(scope, stream, [sid])
        return [_range(s) for s in self.store.get_segments(scope, stream, list(segment.predecessors))]
