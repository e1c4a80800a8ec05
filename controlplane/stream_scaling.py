"""Scaling a stream: replacing some of its current segments by new ones with a new epoch, and keeping
its segments' scale signals in step with its scaling policy (dataplane/scale_signals.py)."""

from __future__ import annotations

from controlplane.models import SegmentRecord, StreamRecord
from controlplane.stream_steps import StreamSteps, _config, _state, now_ms, scale_thresholds
from dataplane.scale_signals import watch
from rillet.errors import IllegalState, InvalidArgument, StreamNotFound, StreamRecreated
from rillet.keyspace import KeyRange, merge_adjacent, segment_id, split_evenly
from rillet.models import ScalingPolicy, SegmentRange, StreamConfiguration, StreamState
from rillet.names import segment_name

# The most current segments a stream may have, as many as it can be created with
# (ScalingPolicy.min_num_segments). Its epoch and transaction records list every current segment
# (about 25 B each) and its cuts give each an offset (about 28 B): DynamoDB's 400 KB item limit would
# come at some 14,500. A retention cycle reads the stream's whole retention set, up to 500 cuts (14 MB
# at 1,000 segments), and a reader group's state takes some 40,000 live segments in its pages
# (docs/limits.md, measured by bench.record_sizes and bench.reader_group_state --pages).
MAX_CURRENT_SEGMENTS = 1000


class StreamScaling(StreamSteps):
    """The scale workflow of :class:`controlplane.streams.StreamTasks`."""

    def scale_stream(self, scope: str, stream: str, seal: list[int], new_ranges: list[tuple[float, float]],
                     now: int | None = None) -> int:
        """Replace segments ``seal`` of the current epoch by new segments with ``new_ranges``.

        The new ranges must tile exactly the key space of the sealed segments. Steps: enter SCALING
        (recording the request and the new segment ids), create the new segments, record them with
        their predecessors and the sealed segments' successors, write the new epoch, seal the old
        segments (recording sealed sizes), then make the new epoch current and return to ACTIVE.
        Returns the new epoch. Repeating a finished request returns its epoch again.
        """
        record = self.store.get_stream(scope, stream)
        seal = sorted(set(seal))
        ranges = sorted((float(lo), float(hi)) for lo, hi in new_ranges)
        if _state(record) == StreamState.SCALING:
            if record.workflow.get("seal") == seal and [tuple(r) for r in record.workflow["ranges"]] == ranges:
                epoch = int(record.workflow["epoch"])
                self.finish_scale_stream(record)
                return epoch
            raise IllegalState(f"stream {scope}/{stream} is already scaling", state=record.state)
        done = self._finished_scale(scope, stream, seal, ranges)
        if done is not None:
            return done
        current = {s.segment_id: s for s in self.current_segments(scope, stream, record)}
        missing = [s for s in seal if s not in current]
        if not seal or missing:
            raise InvalidArgument(f"segments {missing or seal} are not current segments of {scope}/{stream}")
        sealed_ranges = [current[s].key_range for s in seal]
        try:
            wanted = [KeyRange(lo, hi) for lo, hi in ranges]
        except InvalidArgument as e:
            raise InvalidArgument(f"invalid new key range: {e.message}") from None
        if merge_adjacent(wanted) != merge_adjacent(sealed_ranges) or any(
                a.overlaps(b) for a, b in zip(sorted(wanted), sorted(wanted)[1:])):
            raise InvalidArgument("the new key ranges must cover exactly the key ranges of the sealed segments")
        width = len(current) - len(seal) + len(ranges)
        if width > MAX_CURRENT_SEGMENTS:
            raise InvalidArgument(f"the scale would leave {width} current segments; a stream has at most "
                                  f"{MAX_CURRENT_SEGMENTS}")
        epoch = record.current_epoch + 1
        new_ids = [segment_id(epoch, record.segment_count + i) for i in range(len(ranges))]
        workflow = {"name": "scale", "seal": seal, "ranges": [list(r) for r in ranges], "epoch": epoch,
                    "new": new_ids, "created_ms": now if now is not None else now_ms()}
        self._begin(record, StreamState.SCALING, workflow, StreamRecord.segment_count.add(len(ranges)))
        self.finish_scale_stream(record)
        return epoch

    def finish_scale_stream(self, record: StreamRecord) -> None:
        if not self._in_flight(record):
            return
        wf = record.workflow
        epoch, created = int(wf["epoch"]), int(wf["created_ms"])
        sealed = {r.segment_id: r for r in self.store.get_segments(record.scope, record.stream, wf["seal"])}
        new = [SegmentRange(segment_id=sid, low=lo, high=hi) for sid, (lo, hi) in zip(wf["new"], wf["ranges"])]
        # Each write below is fenced on this incarnation of the stream (StreamRecreated once the name
        # holds another): a finisher that stalls across a seal, delete and create again writes nothing
        # into the new stream, whose segment ids and epochs start again.
        # The records go first: until the successors and the epoch are written nothing routes to the new
        # segments, and a finisher that stalls between the fenced records and the heads leaves at most
        # heads of the old incarnation, which the new stream's own creation replaces (SegmentStore.create).
        try:
            self.store.add_segments(record.scope, record.stream, [
                SegmentRecord(segment_id=n.segment_id, low=n.low, high=n.high, created_ms=created,
                              predecessors=[o for o in wf["seal"] if sealed[o].low < n.high and n.low < sealed[o].high])
                for n in new], fence=record)
            config = _config(record)
            for segment in new:
                self.segments.create(segment_name(record.scope, record.stream, segment.segment_id),
                                     int(record.created_ms), scale_thresholds(config.scaling_policy),
                                     sublogs=True, sublog_shards=config.sublog_shards)
            for old in sealed.values():
                self.store.set_successors(old, [n.segment_id for n in new if old.low < n.high and n.low < old.high],
                                          fence=record)
            previous = self.store.get_epoch(record.scope, record.stream, record.current_epoch)
            kept = [s for s in previous.segments if int(s[0]) not in sealed]
            segments = sorted(kept + [[n.segment_id, n.low, n.high] for n in new], key=lambda s: s[1])
            self.store.put_epoch(record.scope, record.stream, epoch, created, segments, fence=record)
        except (StreamRecreated, StreamNotFound):
            return  # the name is gone, or holds another incarnation: nothing more is this finisher's
        sealing = self._before_check(record, [int(sid) for sid in wf["seal"]])
        if not self._in_flight(record):
            return
        for segment, incarnation in sealing:
            if not self._seal_segment(record, segment, epoch, incarnation):
                return  # the stream was deleted and created again since the check
        self._finish(record, StreamState.ACTIVE, StreamRecord.current_epoch.set(epoch))

    def _finished_scale(self, scope: str, stream: str, seal: list[int],
                        ranges: list[tuple[float, float]]) -> int | None:
        """The epoch of an already completed scale with exactly this request, if there is one."""
        try:
            records = self.store.get_segments(scope, stream, seal)
        except StreamNotFound:
            return None
        epochs = {r.sealed_epoch for r in records}
        if len(epochs) != 1 or None in epochs:
            return None
        successors = self.store.get_segments(scope, stream, sorted({s for r in records for s in r.successors}))
        if sorted((s.low, s.high) for s in successors) == ranges:
            return int(epochs.pop())
        return None

    def scale_status(self, scope: str, stream: str, epoch: int) -> str:
        """DONE once ``epoch`` (returned by a scale) is current or past; IN_PROGRESS before."""
        record = self.store.get_stream(scope, stream)
        if record.current_epoch >= epoch:
            return "DONE"
        if _state(record) == StreamState.SCALING and int(record.workflow.get("epoch", -1)) == epoch:
            return "IN_PROGRESS"
        raise InvalidArgument(f"no scale to epoch {epoch} of {scope}/{stream} is known")

    def _scale_to_minimum(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        current = self.current_segments(scope, stream)
        minimum = config.scaling_policy.min_num_segments
        if len(current) < minimum:
            ranges = split_evenly(0.0, 1.0, minimum)
            self.scale_stream(scope, stream, [s.segment_id for s in current], [(r.low, r.high) for r in ranges])

    def watch_scaling(self, record: StreamRecord, policy: ScalingPolicy) -> None:
        """Give the current segments the thresholds of ``policy`` and mark them due now, or take both
        away for a fixed policy (dataplane/scale_signals.py): a policy change may make a merge or split
        due that no append signals. One update per current segment; sealed ones are left alone."""
        thresholds = scale_thresholds(policy)
        for segment in self.current_segments(record.scope, record.stream, record):
            watch(segment_name(record.scope, record.stream, segment.segment_id), thresholds, now_ms(),
                  int(record.created_ms))
