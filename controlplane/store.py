"""Data access for stream metadata: every read and conditional write of the metadata table.

The workflows never touch PynamoDB directly; they call this store, which turns DynamoDB's outcomes
into typed errors: a failed version or state condition is a retryable :class:`WriteConflict`, a
missing record is a ``*NotFound``, a duplicate create is :class:`AlreadyExists`.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pynamodb.connection import Connection
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from controlplane.models import (
    PENDING,
    SCOPES_PK,
    STREAM_SK,
    EpochRecord,
    MetadataItem,
    ScopeRecord,
    SegmentRecord,
    StreamNameRecord,
    StreamRecord,
    epoch_sk,
    scope_pk,
    segment_sk,
    stream_pk,
    workflow_shard,
)
from dataplane.deployment import Deployment, batch_get
from dataplane.shards import query_every_shard
from rillet.errors import (
    AlreadyExists,
    IllegalState,
    InvalidArgument,
    ScopeNotFound,
    StreamNotFound,
    StreamRecreated,
    WriteConflict,
)

_CONDITION_FAILED = "ConditionalCheckFailedException"
_REFUSED = "ConditionalCheckFailed"  # a transaction item's cancellation reason when its condition failed
_SEGMENTS_END = "segment#~"  # sorts after every segment_sk (digits sort before "~")


def failed_condition(error: PutError | UpdateError | DeleteError) -> bool:
    """Whether a write was refused only because its condition did not hold (a race, not a fault).

    PynamoDB's ``cause_response_code`` raises AttributeError when the cause carries no response (a
    read timeout, a reset connection); ``getattr`` turns that into "not a failed condition"."""
    return getattr(error, "cause_response_code", None) == _CONDITION_FAILED


@contextmanager
def conditional(conflict: str) -> Iterator[None]:
    """Turn a failed condition into a retryable WriteConflict that says what raced."""
    try:
        yield
    except (PutError, UpdateError, DeleteError) as e:
        if failed_condition(e):
            raise WriteConflict(conflict) from e
        raise


def versioned_update(record: MetadataItem, actions: list, conflict: str, condition: Any = None) -> None:
    """Apply ``actions`` to a versioned record if it still has the version it was read with (and
    ``condition`` holds).

    A refusal is a WriteConflict, unless the record carries this call's token: then the refused
    request was botocore's resend of one whose answer was lost after it was applied (a read timeout, a
    reset connection), and the change stands; ``record`` is brought up to date as after a success."""
    token = uuid.uuid4().hex
    try:
        with conditional(conflict):
            record.update(actions=[*actions, type(record).write_id.set(token)], condition=condition)
    except WriteConflict:
        try:
            fresh = type(record).get(record.pk, record.sk, consistent_read=True)
        except DoesNotExist:
            raise WriteConflict(conflict) from None
        if fresh.write_id != token:
            raise
        record.deserialize(fresh.serialize())


def create_item(record: MetadataItem, condition: Any) -> bool:
    """Save a new record under ``condition`` (that it does not exist); False if it is refused because it does.

    The record carries a fresh ``create_id``: a refusal of botocore's resend of a save whose answer was lost
    (applied the first time) finds this call's own record and answers True; ``record`` is then brought up
    to date as after a success."""
    record.create_id = uuid.uuid4().hex
    try:
        record.save(condition=condition)
        return True
    except PutError as e:
        if not failed_condition(e):
            raise
    return created_by(record)


def created_by(record: MetadataItem) -> bool:
    """Whether the stored item is the one ``record`` created (its ``create_id``); if so ``record`` takes
    its current content (the version a save would have set, anything changed since)."""
    try:
        fresh = type(record).get(record.pk, record.sk, consistent_read=True)
    except DoesNotExist:
        return False
    if fresh.create_id != record.create_id:
        return False
    record.deserialize(fresh.serialize())
    return True


def _encode_token(key: dict[str, Any] | None) -> str | None:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode() if key else None


_MALFORMED = "malformed page token: pass the next_token of the previous page"
_MAX_KEY_BYTES = 1024  # DynamoDB's bound on a sort key (a partition key's is 2048)


def _key_string(key: dict[str, Any], name: str) -> str:
    """The string a key attribute of a token holds (``{"S": text}``), or InvalidArgument."""
    value = key.get(name)
    if not isinstance(value, dict) or value.keys() != {"S"} or not isinstance(value["S"], str):
        raise InvalidArgument(_MALFORMED)
    text = value["S"]
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:  # a lone surrogate ("\\ud800" in the JSON) is no UTF-8 text
        raise InvalidArgument(_MALFORMED) from e
    if not 0 < size <= _MAX_KEY_BYTES:
        raise InvalidArgument(_MALFORMED)
    return text


def _decode_token(token: str | None, partition: str | None = None, prefix: str = "") -> dict[str, Any] | None:
    """The ExclusiveStartKey a page token names, checked to be one the query could have answered.

    A token is the base64 JSON of a query's LastEvaluatedKey: exactly ``{"pk": {"S": ...}, "sk": {"S":
    ...}}``. Anything else (other attributes, other types, another partition than ``partition``, a sort
    key outside the query's ``prefix``) is InvalidArgument, where DynamoDB would have answered
    ValidationException (a 500). Callers that query one partition pass it (and the sort key prefix of
    their key condition); without ``partition`` only the shape is checked."""
    if not token:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, TypeError) as e:  # binascii.Error and JSONDecodeError are ValueErrors
        raise InvalidArgument(_MALFORMED) from e
    if not isinstance(key, dict) or key.keys() != {"pk", "sk"}:
        raise InvalidArgument(_MALFORMED)
    pk, sk = _key_string(key, "pk"), _key_string(key, "sk")
    if (partition is not None and pk != partition) or not sk.startswith(prefix):
        raise InvalidArgument(_MALFORMED)
    return key


class MetadataStore:
    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.transaction_connection = Connection(region=deployment.region, host=deployment.endpoint_url)

    # -- scopes --------------------------------------------------------------------------------

    def create_scope(self, record: ScopeRecord) -> bool:
        """False if the scope existed before this call."""
        return create_item(record, ScopeRecord.pk.does_not_exist())

    def get_scope(self, scope: str) -> ScopeRecord:
        try:
            return ScopeRecord.get(SCOPES_PK, scope, consistent_read=True)
        except DoesNotExist:
            raise ScopeNotFound(f"scope {scope} does not exist") from None

    def list_scopes(self, limit: int, token: str | None) -> tuple[list[ScopeRecord], str | None]:
        result = ScopeRecord.query(SCOPES_PK, limit=limit, last_evaluated_key=_decode_token(token, SCOPES_PK))
        records = list(result)
        return records, _encode_token(result.last_evaluated_key)

    def delete_scope_record(self, record: ScopeRecord) -> None:
        try:
            with conditional(f"scope {record.scope} changed while being deleted"):
                record.delete()
        except WriteConflict:
            # Refused because it is gone: deleted by this call (a resend after a lost answer) or by
            # another finisher; either way the delete is done.
            if self._current(ScopeRecord, record) is not None:
                raise

    # -- streams -------------------------------------------------------------------------------

    def create_stream(self, record: StreamRecord) -> None:
        """Store a new stream record and its scope's listing entry, provided the scope exists and is not
        being deleted. A resend refused by this call's own first attempt (its answer lost) is recognised
        by the record's ``create_id``."""
        scope_key = ScopeRecord(SCOPES_PK, record.scope)
        name = StreamNameRecord(scope_pk(record.scope), record.stream, created_ms=record.created_ms,
                                tags=set(record.configuration.get("tags") or []) or None)
        record.create_id = uuid.uuid4().hex
        try:
            with TransactWrite(connection=self.transaction_connection) as tx:
                tx.condition_check(ScopeRecord, SCOPES_PK, record.scope,
                                   condition=ScopeRecord.state == "ACTIVE")
                tx.save(record, condition=StreamRecord.pk.does_not_exist())
                tx.save(name, condition=StreamNameRecord.pk.does_not_exist())
        except TransactWriteError as e:
            reasons = [r.code if r else None for r in (e.cancellation_reasons or [])]
            if len(reasons) > 1 and reasons[1] == _REFUSED and created_by(record):
                return
            if reasons and reasons[0] == _REFUSED:
                self.get_scope(record.scope)  # raises ScopeNotFound if absent
                raise IllegalState(f"scope {scope_key.sk} is being deleted") from e
            if _REFUSED in reasons[1:]:  # the record, or a record stored under the scope before records moved
                raise AlreadyExists(f"stream {record.scope}/{record.stream} already exists") from e
            raise

    def get_stream(self, scope: str, stream: str) -> StreamRecord:
        try:
            return StreamRecord.get(stream_pk(scope, stream), STREAM_SK, consistent_read=True)
        except DoesNotExist:
            return self._move_stream_record(scope, stream)

    def _move_stream_record(self, scope: str, stream: str, attempts: int = 8) -> StreamRecord:
        """The record of a stream created before stream records moved to their own partition, moved there
        now; StreamNotFound if there is none.

        Such a record is at ``scope#<scope>`` / ``<stream>``, where the listing entry now goes: one
        DynamoDB transaction writes the record (same version) under its new key and replaces the old
        item with the entry, conditioned on the version read, so a change racing the move makes it read
        again. A stream moves on its first read after the upgrade; the old item stays listable (and in
        the indexes it was in) until then. A move whose answer was lost is found by the next read."""
        for _ in range(attempts):
            try:
                old = MetadataItem.get(scope_pk(scope), stream, consistent_read=True)
            except DoesNotExist:
                old = None
            if isinstance(old, StreamNameRecord):  # moved (or created) since this call read the new key
                try:
                    return StreamRecord.get(stream_pk(scope, stream), STREAM_SK, consistent_read=True)
                except DoesNotExist:
                    old = None  # deleted since
            if not isinstance(old, StreamRecord):
                raise StreamNotFound(f"stream {scope}/{stream} does not exist")
            moved = StreamRecord()
            moved.deserialize(old.serialize())
            moved.pk, moved.sk = stream_pk(scope, stream), STREAM_SK
            if moved.pending is not None:
                moved.pending = workflow_shard(moved.pk, moved.sk)
            name = StreamNameRecord(scope_pk(scope), stream, created_ms=old.created_ms,
                                    tags=set(old.configuration.get("tags") or []) or None)
            put_moved = {"TableName": StreamRecord.Meta.table_name, "Item": moved.serialize(),
                         "ConditionExpression": "attribute_not_exists(pk)"}
            try:
                self.transaction_connection.transact_write_items(
                    condition_check_items=[], delete_items=[], update_items=[],
                    put_items=[put_moved, name.get_save_kwargs_from_instance(
                        condition=(MetadataItem.kind == StreamRecord) & (StreamRecord.version == old.version))])
                return moved
            except TransactWriteError:
                pass  # moved meanwhile (by another reader, or this call's own resend), or changed: read again
            try:
                return StreamRecord.get(stream_pk(scope, stream), STREAM_SK, consistent_read=True)
            except DoesNotExist:
                continue
        raise WriteConflict(f"stream {scope}/{stream} changed while its record was being moved; try again")

    def list_streams(self, scope: str, tag: str | None, limit: int,
                     token: str | None) -> tuple[list[str], str | None]:
        """A page of the scope's stream names, from their listing entries (and the records of streams not
        yet moved, which carry ``tags`` too)."""
        condition = StreamNameRecord.tags.contains(tag) if tag else None
        result = MetadataItem.query(scope_pk(scope), filter_condition=condition, limit=limit,
                                    last_evaluated_key=_decode_token(token, scope_pk(scope)))
        names = [item.sk for item in result]
        return names, _encode_token(result.last_evaluated_key)

    def scope_has_streams(self, scope: str) -> bool:
        """Consistent: a stale "none" would delete a scope whose stream was created just before it
        turned DELETING, and leave that stream without a scope."""
        return any(True for _ in MetadataItem.query(scope_pk(scope), limit=1, consistent_read=True))

    def list_with_tags(self, record: StreamRecord, tags: set[str]) -> None:
        """Give the stream's listing entry ``tags``, only while the stream record is at the version
        ``record`` was read with (an update's finisher that resumes after another change writes nothing).
        Idempotent, so a resend after a lost answer is harmless."""
        name = StreamNameRecord(scope_pk(record.scope), record.stream)
        try:
            with TransactWrite(connection=self.transaction_connection) as tx:
                tx.condition_check(StreamRecord, record.pk, record.sk, condition=StreamRecord.version == record.version)
                tx.update(name, [StreamNameRecord.tags.set(tags) if tags else StreamNameRecord.tags.remove()],
                          condition=StreamNameRecord.created_ms == record.created_ms)
        except TransactWriteError as e:
            if _REFUSED in [r.code if r else None for r in (e.cancellation_reasons or [])]:
                raise WriteConflict(f"stream {record.scope}/{record.stream} changed concurrently") from e
            raise

    def update(self, record: ScopeRecord | StreamRecord, actions: list, conflict: str) -> None:
        """Apply ``actions`` if the scope or stream record is still the incarnation and version it was read
        with (a resend refused after a lost answer counts as applied: see versioned_update). The version
        alone would not do: it starts again with a name deleted and created again."""
        versioned_update(record, actions, conflict, condition=type(record).created_ms == record.created_ms)

    def delete_stream_record(self, record: StreamRecord) -> None:
        """The record and its listing entry, only the incarnation read: the version alone restarts with a
        stream created again."""
        try:
            with TransactWrite(connection=self.transaction_connection) as tx:
                tx.delete(record, condition=StreamRecord.created_ms == record.created_ms)
                tx.delete(StreamNameRecord(scope_pk(record.scope), record.stream),
                          condition=StreamNameRecord.created_ms == record.created_ms)
        except TransactWriteError as e:
            if _REFUSED not in [r.code if r else None for r in (e.cancellation_reasons or [])]:
                raise
            # Refused because that incarnation is gone: deleted by this call (a resend after a lost
            # answer) or by another finisher; either way the delete is done.
            if self._current(StreamRecord, record) is not None:
                raise WriteConflict(f"stream {record.scope}/{record.stream} changed while being deleted") from e

    @staticmethod
    def _current(model: type, record: ScopeRecord | StreamRecord) -> ScopeRecord | StreamRecord | None:
        """The record's item if it is still the same incarnation (created at the same time)."""
        try:
            fresh = model.get(record.pk, record.sk, consistent_read=True)
        except DoesNotExist:
            return None
        return fresh if fresh.created_ms == record.created_ms else None

    # -- epochs and segments ---------------------------------------------------------------------

    def put_epoch(self, scope: str, stream: str, epoch: int, created_ms: int,
                  segments: list[list[float]], reference_epoch: int | None = None,
                  fence: StreamRecord | None = None) -> None:
        """Write an epoch record; rewriting it with the same content is harmless (idempotent). With
        ``fence``, only while the stream is still that record's incarnation (see ``_fenced``)."""
        item = EpochRecord(stream_pk(scope, stream), epoch_sk(epoch), epoch=epoch, created_ms=created_ms,
                           segments=segments, reference_epoch=reference_epoch)
        if fence is None:
            item.save()
        else:
            self._fenced(fence, lambda tx: tx.save(item))

    def get_epoch(self, scope: str, stream: str, epoch: int) -> EpochRecord:
        try:
            return EpochRecord.get(stream_pk(scope, stream), epoch_sk(epoch), consistent_read=True)
        except DoesNotExist:
            raise StreamNotFound(f"stream {scope}/{stream} has no epoch {epoch}") from None

    def list_epochs(self, scope: str, stream: str) -> list[EpochRecord]:
        return list(EpochRecord.query(stream_pk(scope, stream), EpochRecord.sk.startswith("epoch#"),
                                      consistent_read=True))

    def add_segments(self, scope: str, stream: str, records: list[SegmentRecord],
                     fence: StreamRecord | None = None) -> None:
        """Write segment records that do not exist yet; existing ones (written by an earlier attempt,
        and possibly updated since) are left as they are, so a delayed workflow finisher never writes
        stale records over newer ones. Only a record left by an older incarnation of the stream (created
        earlier) is replaced. With ``fence``, only while the stream is that record's incarnation."""
        pk = stream_pk(scope, stream)
        existing = {r.segment_id: r.created_ms
                    for r in batch_get(SegmentRecord, [(pk, segment_sk(r.segment_id)) for r in records])}
        for record in records:
            if existing.get(record.segment_id, -1) >= record.created_ms:
                continue
            record.pk, record.sk = pk, segment_sk(record.segment_id)
            condition = SegmentRecord.pk.does_not_exist() | (SegmentRecord.created_ms < record.created_ms)
            if fence is not None:  # False: a concurrent finisher wrote it first
                self._fenced(fence, lambda tx, record=record, condition=condition: tx.save(record, condition=condition))
                continue
            try:
                record.save(condition=condition)
            except PutError as e:
                if not failed_condition(e):
                    raise  # otherwise a concurrent finisher wrote it first

    def set_successors(self, record: SegmentRecord, successors: list[int], fence: StreamRecord | None = None) -> None:
        if list(record.successors) == successors:
            return
        if fence is None:
            record.update(actions=[SegmentRecord.successors.set(successors)])
        else:
            self._fenced(fence, lambda tx: tx.update(record, actions=[SegmentRecord.successors.set(successors)]))

    def _fenced(self, fence: StreamRecord, write: Callable[[TransactWrite], Any]) -> bool:
        """Apply one ``write`` in a transaction with a check that the stream is still ``fence``'s
        incarnation, so a workflow finisher that stalled across a delete and create again of the name
        writes nothing into the new stream: StreamRecreated then (StreamNotFound once the name is gone).
        False if only the write's own condition refused it. A transaction costs twice the units of a
        plain write: only workflow steps (create, scale) take it, never a user's data path."""
        try:
            with TransactWrite(connection=self.transaction_connection) as tx:
                tx.condition_check(StreamRecord, fence.pk, fence.sk,
                                   condition=StreamRecord.created_ms == fence.created_ms)
                write(tx)
            return True
        except TransactWriteError as e:
            reasons = [r.code if r else None for r in (e.cancellation_reasons or [])]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                current = self.get_stream(fence.scope, fence.stream)  # StreamNotFound if gone
                raise StreamRecreated(f"stream {fence.scope}/{fence.stream} was deleted and created again "
                                      f"(incarnation {int(fence.created_ms)} is now {int(current.created_ms)})",
                                      expected=int(fence.created_ms), current=int(current.created_ms)) from e
            if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                return False
            raise

    def get_segments(self, scope: str, stream: str, segment_ids: list[int]) -> list[SegmentRecord]:
        """Consistent: a stale record may lack the successors a scale wrote just before sealing, and a
        writer refused by the sealed segment would take "no successors" for a sealed stream."""
        if not segment_ids:
            return []
        pk = stream_pk(scope, stream)
        found = {r.segment_id: r for r in batch_get(SegmentRecord, [(pk, segment_sk(s)) for s in segment_ids],
                                                                    consistent_read=True)}
        missing = [s for s in segment_ids if s not in found]
        if missing:
            raise StreamNotFound(f"stream {scope}/{stream} has no segment(s) {missing}")
        return [found[s] for s in segment_ids]

    def list_segments(self, scope: str, stream: str, from_segment: int = 0) -> list[SegmentRecord]:
        """The stream's segment records from segment id ``from_segment`` on. A stream keeps one record per
        segment it ever had; ids grow with the epoch that created them (rillet.keyspace.segment_id), so
        from the lowest id of a complete cut this is every segment not wholly before the cut: the readers'
        listings skip what scaling and truncation left behind."""
        return list(SegmentRecord.query(stream_pk(scope, stream),
                                        SegmentRecord.sk.between(segment_sk(from_segment), _SEGMENTS_END),
                                        consistent_read=True))

    def update_segment(self, record: SegmentRecord, actions: list) -> bool:
        """Update the segment record as ``record`` was read; False if that item is gone or is another
        incarnation's (its stream deleted, perhaps created again). Never creates the item."""
        try:
            record.update(actions=actions, condition=SegmentRecord.created_ms == record.created_ms)
        except UpdateError as e:
            if failed_condition(e):
                return False
            raise
        return True

    def delete_stream_partition(self, scope: str, stream: str, still: Callable[[], bool]) -> bool:
        """Delete every item of the stream's partition but its record (delete_stream_record's, last), 25 at
        a time (one BatchWriteItem), each batch only while ``still()`` holds; False if it stopped because
        it no longer did."""
        items = [item for item in MetadataItem.query(stream_pk(scope, stream), consistent_read=True,
                                                     attributes_to_get=["pk", "sk", "kind"])
                 if item.sk != STREAM_SK]
        for i in range(0, len(items), 25):
            if not still():
                return False
            with MetadataItem.batch_write() as batch:
                for item in items[i:i + 25]:
                    batch.delete(item)
        return True

    # -- workflows -------------------------------------------------------------------------------

    def pending_workflows(self, older_than_ms: int) -> list[MetadataItem]:
        """Records with a workflow in flight since before ``older_than_ms``, oldest first. The index
        (every shard, in parallel) gives their keys; one consistent BatchGetItem per 100 gives the records
        as they are now, leaving out any whose workflow finished in between."""
        found = query_every_shard(PENDING, lambda key: MetadataItem.workflows.query(
            key, MetadataItem.pending_since <= older_than_ms), MetadataItem)
        found.sort(key=lambda item: item.pending_since)
        current = {(record.pk, record.sk): record
                   for record in batch_get(MetadataItem, [(item.pk, item.sk) for item in found], consistent_read=True)}
        return [current[key] for key in ((item.pk, item.sk) for item in found)
                if key in current and current[key].pending is not None]
