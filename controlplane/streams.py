"""Scope and stream workflows, and the queries clients use to find segments.

Each workflow is a short sequence of idempotent steps. Its first step records, on the scope or
stream record, the workflow's name and parameters together with the ``pending`` marker; its last
step clears them. A crash anywhere in between leaves a record that says exactly what remains to be
done, and :mod:`controlplane.sweeper` (or a retry of the same request) calls the same ``finish_*``
function to complete it. Steps that talk to the data plane (create, seal, delete segments) are
themselves idempotent, so repeating a half-done step is harmless.
"""

from __future__ import annotations

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
from controlplane.stream_cuts import StreamCuts
from controlplane.stream_scaling import MAX_CURRENT_SEGMENTS, StreamScaling
from controlplane.stream_steps import (
    AUTOSCALED,
    RETENTION_BUCKETS,
    _bucket,
    _config,
    _range,
    _state,
    now_ms,
    scale_thresholds,
)
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
from rillet.keyspace import hash_routing_key, segment_id, split_evenly
from rillet.models import (
    ScopeInfo,
    SegmentRange,
    StreamConfiguration,
    StreamConfigurationChange,
    StreamInfo,
    StreamState,
)
from rillet.names import (
    mark_stream_name,
    segment_name,
    validate_internal_stream_name,
    validate_scope_name,
    validate_stream_name,
)

# The names other modules (and tests) import from here, which now live in the modules above.
__all__ = ["AUTOSCALED", "MAX_CURRENT_SEGMENTS", "RETENTION_BUCKETS", "StreamTasks", "_bucket", "_range", "now_ms",
           "scale_thresholds"]


class StreamTasks(StreamScaling, StreamCuts):
    """The control-plane workflows on scopes and streams: scaling is in :mod:`controlplane.stream_scaling`,
    cuts and truncation in :mod:`controlplane.stream_cuts`, the steps they share in
    :mod:`controlplane.stream_steps`."""

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

    def segment_for_key(self, scope: str, stream: str, routing_key: str) -> SegmentRange:
        point = hash_routing_key(routing_key)
        for segment in self.current_segments(scope, stream):
            if segment.low <= point < segment.high:
                return segment
        raise InvalidArgument(f"no current segment of {scope}/{stream} covers key point {point}")
