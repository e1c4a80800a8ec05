"""What every stream workflow in :mod:`controlplane.streams` is built from: the stream record's helpers,
the first and last step of a workflow (``_begin``, ``_finish``), the checks a finisher makes before it
seals, truncates or deletes (``_in_flight``, ``_before_check``, ``_still_deleting``), and the reads of a
stream's current segments and head that every workflow and query starts from.
"""

from __future__ import annotations

import hashlib
import time

from controlplane.models import SegmentRecord, StreamRecord, workflow_shard
from controlplane.states import check_transition
from controlplane.store import MetadataStore
from dataplane.scale_signals import ScaleThresholds
from dataplane.segment_store import SegmentStore
from dataplane.shards import SHARDS
from rillet.errors import SegmentNotFound, StreamNotFound, StreamRecreated, WriteConflict
from rillet.models import (
    ScaleType,
    ScalingPolicy,
    SegmentPosition,
    SegmentRange,
    StreamConfiguration,
    StreamState,
)
from rillet.names import segment_name

# A retention run takes one bucket, so no run touches every stream. As many as the indexes' shards (a
# deployment setting, dataplane.shards): standalone's one bucket makes its minutely cycle one run, not 16
# run processes a minute that queue faster than a laptop finishes them.
RETENTION_BUCKETS = SHARDS
# The partition keys of the metadata table's ``autoscale`` index: 1#<n> by the stream's name
# (dataplane.shards; "1" alone before the index was sharded). It lists the auto-scaled streams created
# before their segments carried scale signals (dataplane/scale_signals.py): the auto-scaler moves them
# over once and takes them out (AutoScaler.backfill). No stream enters it any more.
AUTOSCALED = "1"


def now_ms() -> int:
    return int(time.time() * 1000)


def _state(record: StreamRecord) -> StreamState:
    return StreamState(record.state)


def _config(record: StreamRecord) -> StreamConfiguration:
    return StreamConfiguration.model_validate(record.configuration)


def _ranges(segments: list[list[float]]) -> list[SegmentRange]:
    return [SegmentRange(segment_id=int(s), low=low, high=high) for s, low, high in segments]


def _bucket(scope: str, stream: str, config: StreamConfiguration) -> int | None:
    """The retention bucket of a stream with a retention policy (it puts the stream in the retention index)."""
    if config.retention_policy is None:
        return None
    digest = hashlib.blake2b(f"{scope}/{stream}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % RETENTION_BUCKETS


def scale_thresholds(policy: ScalingPolicy) -> ScaleThresholds | None:
    """What a segment of a stream with ``policy`` carries for the append path's scale signals (None: a
    fixed stream, which never scales by itself)."""
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS:
        return None
    return ScaleThresholds(by_bytes=policy.scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC,
                           target=float(policy.target_rate))


def _range(record: SegmentRecord) -> SegmentRange:
    return SegmentRange(segment_id=record.segment_id, low=record.low, high=record.high)


class StreamSteps:
    """The steps and reads shared by the stream workflows (:class:`controlplane.streams.StreamTasks`)."""

    def __init__(self, store: MetadataStore, segments: SegmentStore) -> None:
        self.store = store
        self.segments = segments
        self.transactions = None  # controlplane.transactions.TransactionTasks, wired by the Controller

    def record(self, scope: str, stream: str) -> StreamRecord:
        """The stream's record (consistent): its ``created_ms`` is the incarnation positions name."""
        return self.store.get_stream(scope, stream)

    @staticmethod
    def check_incarnation(record: StreamRecord, incarnation: int | None) -> None:
        """StreamRecreated if a position, cut or group of ``incarnation`` meets the stream ``record``
        of another one (the name was deleted and created again). None: taken to be the current one."""
        if incarnation is not None and incarnation != int(record.created_ms):
            raise StreamRecreated(f"stream {record.scope}/{record.stream} was deleted and created again: the "
                                  f"position names its incarnation {incarnation}, the stream is now incarnation "
                                  f"{int(record.created_ms)}", expected=incarnation, current=int(record.created_ms))

    def current_segments(self, scope: str, stream: str, record: StreamRecord | None = None) -> list[SegmentRange]:
        record = record or self.store.get_stream(scope, stream)
        return _ranges(self.store.get_epoch(scope, stream, record.current_epoch).segments)

    def head(self, scope: str, stream: str, record: StreamRecord | None = None) -> list[SegmentPosition]:
        """The head stream cut: the truncation record, or the first epoch's segments at offset 0."""
        record = record or self.store.get_stream(scope, stream)
        if record.head:
            return [SegmentPosition(segment=SegmentRange(segment_id=int(s), low=low, high=high), offset=int(o))
                    for s, low, high, o in record.head]
        return [SegmentPosition(segment=r, offset=0) for r in _ranges(self.store.get_epoch(scope, stream, 0).segments)]

    def _get_stream(self, scope: str, stream: str, incarnation: int | None) -> StreamRecord:
        """The stream's record; StreamNotFound if it is not ``incarnation`` (when one is given)."""
        record = self.store.get_stream(scope, stream)
        if incarnation is not None and record.created_ms != incarnation:
            raise StreamNotFound(f"stream {scope}/{stream} was deleted and created again")
        return record

    def _still_deleting(self, record: StreamRecord) -> bool:
        """Whether the stream being deleted is still the incarnation ``record`` was read from."""
        try:
            return self.store.get_stream(record.scope, record.stream).created_ms == record.created_ms
        except StreamNotFound:
            return False

    def _in_flight(self, record: StreamRecord) -> bool:
        """Whether the workflow ``record`` was read with is still in flight on that incarnation of the
        stream. Checked before a workflow's seals and truncations: a finisher that resumes after the
        workflow was finished, and the stream perhaps deleted and created again, then stops instead
        of sealing or truncating the new stream. (The version is not compared: steps such as a seal's
        commits change the record while the workflow is in flight.)"""
        try:
            fresh = self.store.get_stream(record.scope, record.stream)
        except StreamNotFound:
            return False
        return (fresh.created_ms, fresh.state, fresh.workflow) == (record.created_ms, record.state, record.workflow)

    def _before_check(self, record: StreamRecord, sids: list[int]) -> list[tuple[SegmentRecord, int | None]]:
        """The segments' records and incarnations (their head's ``created_ms``; None once deleted), read
        before a finisher checks that its workflow is still in flight (``_in_flight``). Acting on them
        conditioned on what was read touches this stream's segments only, even if the name is deleted
        and created again between the check and the action (the reads before it were then of this
        stream, as the check passed after them)."""
        records = self.store.get_segments(record.scope, record.stream, sids)
        incarnations = []
        for sid in sids:
            try:
                incarnations.append(int(self.segments.info(segment_name(record.scope, record.stream, sid)).created_ms))
            except SegmentNotFound:
                incarnations.append(None)
        return list(zip(records, incarnations, strict=True))

    def _seal_segment(self, record: StreamRecord, segment: SegmentRecord | int, epoch: int,
                      incarnation: int | None = None) -> bool:
        """Seal a segment and record its final size. Given the segment's record and incarnation as read
        before the workflow's in-flight check (``_before_check``), only that incarnation: False if the
        name holds another one by now (nothing done)."""
        if isinstance(segment, int):
            (segment,) = self.store.get_segments(record.scope, record.stream, [segment])
        try:
            size = self.segments.seal(segment_name(record.scope, record.stream, segment.segment_id), incarnation,
                                      int(record.created_ms))
        except SegmentNotFound:
            if incarnation is None:
                raise
            return False
        if segment.sealed_size is None:
            return self.store.update_segment(segment, [SegmentRecord.sealed_size.set(size),
                                                       SegmentRecord.sealed_epoch.set(epoch)])
        return True

    def _begin(self, record: StreamRecord, state: StreamState, workflow: dict, *actions) -> None:
        """Step one of a workflow: leave ACTIVE for ``state`` and record what is to be done."""
        check_transition(_state(record), state, f"stream {record.scope}/{record.stream}")
        self.store.update(record, [StreamRecord.state.set(state.value), StreamRecord.workflow.set(workflow),
                                          StreamRecord.pending.set(workflow_shard(record.pk, record.sk)), StreamRecord.pending_since.set(now_ms()),
                                          *actions],
                                 f"stream {record.scope}/{record.stream} changed concurrently")

    def _finish(self, record: StreamRecord, state: StreamState, *actions) -> None:
        """The last step of a workflow: enter ``state`` and clear the workflow in flight.

        Several actors may finish one workflow at once (a retried request, the sweeper, a concurrent
        create of the same stream): the one that loses the race finds the work done and returns.
        """
        current = _state(record)
        if current != state:
            check_transition(current, state, f"stream {record.scope}/{record.stream}")
        try:
            self.store.update(record, [StreamRecord.state.set(state.value), StreamRecord.workflow.remove(),
                                       StreamRecord.pending.remove(), StreamRecord.pending_since.remove(), *actions],
                              f"stream {record.scope}/{record.stream} changed concurrently")
        except WriteConflict:
            fresh = self.store.get_stream(record.scope, record.stream)
            if _state(fresh) != state or fresh.workflow:
                raise
