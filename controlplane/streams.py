"""Scope and stream workflows, and the queries clients use to find segments.

Each workflow is a short sequence of idempotent steps. Its first step records, on the scope or
stream record, the workflow's name and parameters together with the ``pending`` marker; its last
step clears them. A crash anywhere in between leaves a record that says exactly what remains to be
done, and :mod:`controlplane.sweeper` (or a retry of the same request) calls the same ``finish_*``
function to complete it. Steps that talk to the data plane (create, seal, delete segments) are
themselves idempotent, so repeating a half-done step is harmless.
"""

from __future__ import annotations

import hashlib
import time

from controlplane.kvt_records import scope_has_key_value_tables
from controlplane.models import (
    SCOPES_PK,
    STREAM_SK,
    ScopeRecord,
    SegmentRecord,
    StreamRecord,
    stream_pk,
    workflow_shard,
)
from controlplane.states import check_transition
from controlplane.store import MetadataStore
from dataplane.scale_signals import ScaleThresholds, watch
from dataplane.segment_store import SegmentStore
from dataplane.shards import SHARDS
from rillet.errors import (
    AlreadyExists,
    IllegalState,
    InvalidArgument,
    ScopeNotEmpty,
    ScopeNotFound,
    SegmentNotFound,
    StreamNotFound,
    StreamRecreated,
    WriteConflict,
)
from rillet.keyspace import KeyRange, hash_routing_key, merge_adjacent, segment_id, split_evenly
from rillet.models import (
    ScaleType,
    ScalingPolicy,
    ScopeInfo,
    SegmentPosition,
    SegmentRange,
    SegmentSlice,
    StreamConfiguration,
    StreamConfigurationChange,
    StreamInfo,
    StreamState,
    SuccessorInfo,
)
from rillet.names import (
    mark_stream_name,
    segment_name,
    validate_internal_stream_name,
    validate_scope_name,
    validate_stream_name,
)
from rillet.stream_cut import (
    Ordering,
    compare_positions,
    segment_is_after,
    segment_is_before,
    validity_problem,
)

# A retention run takes one bucket, so no run touches every stream. As many as the indexes' shards (a
# deployment setting, dataplane.shards): standalone's one bucket makes its minutely cycle one run, not 16
# run processes a minute that queue faster than a laptop finishes them.
RETENTION_BUCKETS = SHARDS
# The partition keys of the metadata table's ``autoscale`` index: 1#<n> by the stream's name
# (dataplane.shards; "1" alone before the index was sharded). It lists the auto-scaled streams created
# before their segments carried scale signals (dataplane/scale_signals.py): the auto-scaler moves them
# over once and takes them out (AutoScaler.backfill). No stream enters it any more.
AUTOSCALED = "1"
# The most current segments a stream may have, as many as it can be created with
# (ScalingPolicy.min_num_segments). Its epoch and transaction records list every current segment
# (about 25 B each) and its cuts give each an offset (about 28 B): DynamoDB's 400 KB item limit would
# come at some 14,500. A retention cycle reads the stream's whole retention set, up to 500 cuts (14 MB
# at 1,000 segments), and a reader group's state takes some 40,000 live segments in its pages
# (docs/limits.md, measured by bench.record_sizes and bench.reader_group_state --pages).
MAX_CURRENT_SEGMENTS = 1000


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


class StreamTasks:
    """The control-plane workflows on scopes and streams."""

    def __init__(self, store: MetadataStore, segments: SegmentStore) -> None:
        self.store = store
        self.segments = segments
        self.transactions = None  # controlplane.transactions.TransactionTasks, wired by the Controller

    # -- scopes --------------------------------------------------------------------------------

    def create_scope(self, scope: str) -> bool:
        validate_scope_name(scope)
        return self.store.create_scope(ScopeRecord(SCOPES_PK, scope, state="ACTIVE", created_ms=now_ms()))

    def get_scope(self, scope: str) -> ScopeInfo:
        record = self.store.get_scope(validate_scope_name(scope))
        return ScopeInfo(scope=record.scope, created_at_ms=record.created_ms)

    def list_scopes(self, limit: int = 100, token: str | None = None) -> tuple[list[ScopeInfo], str | None]:
        records, token = self.store.list_scopes(limit, token)
        return [ScopeInfo(scope=r.scope, created_at_ms=r.created_ms) for r in records], token

    def delete_scope(self, scope: str) -> bool:
        """Delete an empty scope; returns False if it did not exist.

        The scope is first marked DELETING, which stops new streams from being created in it, and
        only then checked for streams, so a concurrent create cannot slip in between the check and
        the delete.
        """
        try:
            record = self.store.get_scope(validate_scope_name(scope))
        except ScopeNotFound:
            return False
        if record.state == "ACTIVE":
            self.store.update(record, [ScopeRecord.state.set("DELETING"),
                                              ScopeRecord.pending.set(workflow_shard(record.pk, record.sk)),
                                              ScopeRecord.pending_since.set(now_ms())],
                                     f"scope {scope} changed concurrently")
        return self.finish_delete_scope(record)

    def finish_delete_scope(self, record: ScopeRecord) -> bool:
        if self.store.scope_has_streams(record.scope) or scope_has_key_value_tables(record.scope):
            self.store.update(record, [ScopeRecord.state.set("ACTIVE"), ScopeRecord.pending.remove(),
                                              ScopeRecord.pending_since.remove()],
                                     f"scope {record.scope} changed concurrently")
            raise ScopeNotEmpty(f"scope {record.scope} still has streams or key-value tables; delete them first")
        self.store.delete_scope_record(record)
        return True

    # -- stream lifecycle ------------------------------------------------------------------------

    def create_stream(self, scope: str, stream: str, config: StreamConfiguration, internal: bool = False) -> bool:
        """Create a stream (CREATING, then ACTIVE); returns False if it already existed.

        Creating a stream that exists is not an error, as in Pravega; if an earlier attempt was
        interrupted, this call finishes it. ``internal`` streams (watermarks) have names starting '_'.
        """
        validate_scope_name(scope)
        (validate_internal_stream_name if internal else validate_stream_name)(stream)
        now = now_ms()
        count = config.scaling_policy.min_num_segments
        key = (stream_pk(scope, stream), STREAM_SK)
        record = StreamRecord(
            *key, scope=scope, stream=stream, state=StreamState.CREATING.value,
            configuration=config.model_dump(mode="json"), created_ms=now,
            current_epoch=0, segment_count=count, workflow={"name": "create"}, pending=workflow_shard(*key),
            pending_since=now, retention_bucket=_bucket(scope, stream, config))
        try:
            self.store.create_stream(record)
        except AlreadyExists:
            existing = self.store.get_stream(scope, stream)
            if _state(existing) == StreamState.CREATING:
                self.finish_create_stream(existing)
            return False
        self.finish_create_stream(record)
        return True

    def finish_create_stream(self, record: StreamRecord) -> None:
        config = _config(record)
        ranges = split_evenly(0.0, 1.0, config.scaling_policy.min_num_segments)
        epoch0 = [[segment_id(0, i), r.low, r.high] for i, r in enumerate(ranges)]
        # Every write is of this incarnation only (fenced on the stream record's created_ms): a finisher
        # that stalls across a delete and create again leaves the new stream's metadata alone.
        try:
            self.store.put_epoch(record.scope, record.stream, 0, record.created_ms, epoch0, fence=record)
            self.store.add_segments(record.scope, record.stream, [  # a late finisher must not undo a scale's changes
                SegmentRecord(segment_id=sid, low=low, high=high, created_ms=record.created_ms)
                for sid, low, high in epoch0], fence=record)
            for sid, _, _ in epoch0:
                self.segments.create(segment_name(record.scope, record.stream, sid), int(record.created_ms),
                                     scale_thresholds(config.scaling_policy), sublogs=True,
                                     sublog_shards=config.sublog_shards)
        except (StreamRecreated, StreamNotFound):
            return  # the name is gone, or holds another incarnation: nothing more is this finisher's
        self._finish(record, StreamState.ACTIVE)

    def update_stream(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        """Replace the configuration; a higher minimum number of segments than the stream has scales
        it up (every current segment is sealed and the key space split evenly), as Pravega does."""
        record = self.store.get_stream(scope, stream)
        if not (_state(record) == StreamState.UPDATING
                and record.workflow.get("configuration") == config.model_dump(mode="json")):
            self._begin(record, StreamState.UPDATING, {"name": "update", "configuration": config.model_dump(mode="json")})
        self.finish_update_stream(record)
        self._scale_to_minimum(scope, stream, config)

    def change_stream_configuration(self, scope: str, stream: str, change: StreamConfigurationChange,
                                    attempts: int = 5) -> StreamConfiguration:
        """Apply ``change`` to the configuration as stored, in one update conditioned on the record it
        was read from: a concurrent change makes it read again and apply ``change`` to that, so neither
        change is lost. A change names values, never increments, so a resend after a lost answer
        is harmless. Returns the configuration it set."""
        for _ in range(attempts):
            record = self.store.get_stream(scope, stream)
            if _state(record) == StreamState.UPDATING:  # an update in flight (or crashed): finish it first
                self.finish_update_stream(record)
                continue
            config = change.applied_to(_config(record))
            try:
                self._begin(record, StreamState.UPDATING, {"name": "update", "configuration": config.model_dump(mode="json")})
            except WriteConflict:
                continue
            self.finish_update_stream(record)
            self._scale_to_minimum(scope, stream, config)
            return config
        raise WriteConflict(f"stream {scope}/{stream} changed concurrently {attempts} times in a row; try again")

    def _scale_to_minimum(self, scope: str, stream: str, config: StreamConfiguration) -> None:
        current = self.current_segments(scope, stream)
        minimum = config.scaling_policy.min_num_segments
        if len(current) < minimum:
            ranges = split_evenly(0.0, 1.0, minimum)
            self.scale_stream(scope, stream, [s.segment_id for s in current], [(r.low, r.high) for r in ranges])

    def finish_update_stream(self, record: StreamRecord) -> None:
        config = StreamConfiguration.model_validate(record.workflow["configuration"])
        bucket = _bucket(record.scope, record.stream, config)
        if config.scaling_policy != _config(record).scaling_policy:  # the record holds the old one until _finish
            self.watch_scaling(record, config.scaling_policy)
        if set(config.tags) != set(_config(record).tags):
            self.store.list_with_tags(record, set(config.tags))
        self._finish(record, StreamState.ACTIVE, StreamRecord.configuration.set(config.model_dump(mode="json")),
                     StreamRecord.retention_bucket.set(bucket) if bucket is not None
                     else StreamRecord.retention_bucket.remove(),
                     StreamRecord.autoscale.remove())  # a stream of the old autoscale index: watched now

    def watch_scaling(self, record: StreamRecord, policy: ScalingPolicy) -> None:
        """Give the current segments the thresholds of ``policy`` and mark them due now, or take both
        away for a fixed policy (dataplane/scale_signals.py): a policy change may make a merge or split
        due that no append signals. One update per current segment; sealed ones are left alone."""
        thresholds = scale_thresholds(policy)
        for segment in self.current_segments(record.scope, record.stream, record):
            watch(segment_name(record.scope, record.stream, segment.segment_id), thresholds, now_ms(),
                  int(record.created_ms))

    def seal_stream(self, scope: str, stream: str, incarnation: int | None = None) -> None:
        """Seal the stream (only its ``incarnation``, if given: StreamNotFound once the name holds another)."""
        record = self._get_stream(scope, stream, incarnation)
        if _state(record) == StreamState.SEALED:
            return
        if _state(record) != StreamState.SEALING:
            self.transactions.drive_commits(scope, stream)  # acknowledged commits happen before the seal
            record = self._get_stream(scope, stream, incarnation)
            self._begin(record, StreamState.SEALING, {"name": "seal"})
        self.finish_seal_stream(record)

    def finish_seal_stream(self, record: StreamRecord) -> None:
        """Seal: commits requested before the seal began are applied (an acknowledged commit stands),
        open transactions are aborted (as in Pravega), then every current segment is sealed."""
        incarnation = record.created_ms
        if not self._in_flight(record):
            return
        self.transactions.commit_for_seal(record)  # keeps ``record`` up to date
        if record.created_ms != incarnation:
            return
        epoch = self.store.get_epoch(record.scope, record.stream, record.current_epoch)
        sealing = self._before_check(record, [int(sid) for sid, _, _ in epoch.segments])
        if not self._in_flight(record):
            return
        self.transactions.abort_open(record.scope, record.stream)
        for segment, segment_incarnation in sealing:
            if not self._seal_segment(record, segment, record.current_epoch, segment_incarnation):
                return  # the stream was deleted and created again since the check
        self._finish(record, StreamState.SEALED)

    def delete_stream(self, scope: str, stream: str, incarnation: int | None = None) -> None:
        """Delete a sealed stream with all its segments and metadata (only its ``incarnation``, if given)."""
        record = self._get_stream(scope, stream, incarnation)
        if _state(record) != StreamState.SEALED:
            raise IllegalState(f"stream {scope}/{stream} is {record.state}; seal it before deleting it",
                               state=record.state)
        if not record.workflow:
            self.store.update(record, [StreamRecord.workflow.set({"name": "delete"}),
                                              StreamRecord.pending.set(workflow_shard(record.pk, record.sk)),
                                              StreamRecord.pending_since.set(now_ms())],
                                     f"stream {scope}/{stream} changed concurrently")
        self.finish_delete_stream(record)

    def finish_delete_stream(self, record: StreamRecord) -> None:
        """Delete the segments, the stream's partition, then its record. Each destructive step first
        checks that the record read is still there: a finisher that resumes after another one finished
        (and the name may have been created again) stops instead of deleting the new stream's data.
        Record changes and the watermark stream's delete are conditioned on the incarnation; a segment's
        incarnation is read before the check, so it is this stream's, and its delete touches only that
        incarnation, even if the name is created again between the check and the delete."""
        for segment in self.store.list_segments(record.scope, record.stream):
            name = segment_name(record.scope, record.stream, segment.segment_id)
            try:
                incarnation = int(self.segments.info(name).created_ms)
            except SegmentNotFound:
                incarnation = None  # already deleted (by an earlier attempt): nothing to delete
            if not self._still_deleting(record):
                return
            if incarnation is not None:
                self.segments.delete(name, incarnation)
        if not self.store.delete_stream_partition(record.scope, record.stream,
                                                  still=lambda: self._still_deleting(record)):
            return
        # Its watermark stream goes with it, if it has one: a stream whose writers left the watermark set
        # (``watermarked`` removed) keeps the watermarks it had, so the flag does not tell.
        self._delete_internal(record, mark_stream_name(record.stream))
        self.store.delete_stream_record(record)

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

    def _delete_internal(self, owner: StreamRecord, stream: str) -> None:
        """Seal and delete ``owner``'s internal stream (its watermarks), only the incarnation read while
        ``owner`` is still the stream being deleted: that one is the owner's (a name created again gets
        its internal stream only after the owner's record is gone), and every later step of the seal and
        delete is conditioned on it, so a stale finisher leaves a new stream's internal stream alone."""
        try:
            internal = self.store.get_stream(owner.scope, stream)
        except StreamNotFound:
            return
        if not self._still_deleting(owner):
            return
        try:
            self.seal_stream(owner.scope, stream, internal.created_ms)
            self.delete_stream(owner.scope, stream, internal.created_ms)
        except StreamNotFound:
            pass

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

    # -- scaling -------------------------------------------------------------------------------

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

    # -- truncation ----------------------------------------------------------------------------

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

    # -- queries -------------------------------------------------------------------------------

    def list_streams(self, scope: str, tag: str | None = None, limit: int = 100,
                     token: str | None = None) -> tuple[list[str], str | None]:
        self.store.get_scope(validate_scope_name(scope))
        names, token = self.store.list_streams(scope, tag, limit, token)
        return [name for name in names if not name.startswith("_")], token

    def stream_info(self, scope: str, stream: str) -> StreamInfo:
        record = self.store.get_stream(scope, stream)
        creating = _state(record) == StreamState.CREATING
        tail = [] if creating else self.tail(scope, stream, record)
        current = [p.segment for p in tail]
        return StreamInfo(scope=scope, stream=stream, state=_state(record), configuration=_config(record),
                          created_at_ms=record.created_ms, current_epoch=record.current_epoch,
                          current_segments=current, head=self.head(scope, stream, record) if current else [],
                          tail=tail)

    def current_segments(self, scope: str, stream: str, record: StreamRecord | None = None) -> list[SegmentRange]:
        record = record or self.store.get_stream(scope, stream)
        return _ranges(self.store.get_epoch(scope, stream, record.current_epoch).segments)

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

    def head(self, scope: str, stream: str, record: StreamRecord | None = None) -> list[SegmentPosition]:
        """The head stream cut: the truncation record, or the first epoch's segments at offset 0."""
        record = record or self.store.get_stream(scope, stream)
        if record.head:
            return [SegmentPosition(segment=SegmentRange(segment_id=int(s), low=low, high=high), offset=int(o))
                    for s, low, high, o in record.head]
        return [SegmentPosition(segment=r, offset=0) for r in _ranges(self.store.get_epoch(scope, stream, 0).segments)]

    def segments_at(self, scope: str, stream: str, time_ms: int) -> list[SegmentRange]:
        """The segments that were current at ``time_ms`` (the first epoch's for earlier times)."""
        self.store.get_stream(scope, stream)
        epochs = self.store.list_epochs(scope, stream)
        chosen = epochs[0]
        for epoch in epochs:
            if epoch.created_ms <= time_ms:
                chosen = epoch
        return _ranges(chosen.segments)

    def segment_for_key(self, scope: str, stream: str, routing_key: str) -> SegmentRange:
        point = hash_routing_key(routing_key)
        for segment in self.current_segments(scope, stream):
            if segment.low <= point < segment.high:
                return segment
        raise InvalidArgument(f"no current segment of {scope}/{stream} covers key point {point}")

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
