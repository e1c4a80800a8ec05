"""Key-value tables: their lifecycle, and the reads and conditional writes of their entries.

Pravega's controller provisions a table's table segments; here a table's partitions are DynamoDB
partition keys, so creating a table is writing its record (in one transaction with a check that its
scope is ACTIVE, as streams are created) and nothing else. Sealing is one conditional update.
Deleting has steps: the record turns DELETING (and ``pending``, so the sweeper finds it if the
caller dies), every partition's entries are deleted, then the record; a retry of the delete or the
sweeper runs the same :meth:`KeyValueTables.finish_delete`.

The state is the barrier: every entry write is a DynamoDB transaction whose first item checks that
the table record is still ACTIVE and still the same incarnation, so nothing is written to a sealed
table, or to a table being deleted, whatever the interleaving. Entry keys name the incarnation, so
deleting a table's entries can never touch those of a table created later under the same name. Reads refuse a
DELETING table (its entries are going). See docs/kvt.md for the model, limits and costs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Sequence

from pynamodb.exceptions import DeleteError, DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from controlplane.kvt_records import (
    EntryRecord,
    KeyValueTableRecord,
    bind,
    entries_pk,
    entry_sk,
    partition_of,
    tables_pk,
)
from controlplane.models import SCOPES_PK, ScopeRecord, workflow_shard
from controlplane.store import MetadataStore, failed_condition
from controlplane.streams import now_ms
from dataplane.deployment import batch_get
from rillet.errors import (
    BadKeyLength,
    BadKeyVersion,
    IllegalState,
    InvalidArgument,
    KeyValueTableNotFound,
    NoSuchKey,
    TooManyUpdates,
    ValueTooLong,
    WriteConflict,
)
from rillet.kvt_models import (
    MAX_UPDATE_BYTES,
    MAX_UPDATES,
    MAX_VALUE_LENGTH,
    IteratePage,
    KeyValueTableConfiguration,
    KeyValueTableInfo,
    KeyValueTableState,
    TableKey,
    TableUpdate,
    UpdateType,
    WireEntry,
    validate_table_name,
)
from rillet.names import validate_scope_name

ACTIVE, SEALED, DELETING = (s.value for s in KeyValueTableState)
# An iteration of all entries reads partition after partition; one page reads at most this many, so a
# page of a large, sparse table still answers quickly (it may then hold fewer entries than asked).
MAX_PARTITIONS_PER_PAGE = 32
# An entry item's bytes beside its value and key: partition key (scope, table name, incarnation: at
# most about 550 bytes), version and attribute names.
_ITEM_OVERHEAD = 600


def _config(record: KeyValueTableRecord) -> KeyValueTableConfiguration:
    return KeyValueTableConfiguration(partition_count=record.partition_count,
                                      primary_key_length=record.primary_key_length,
                                      secondary_key_length=record.secondary_key_length)


def _info(record: KeyValueTableRecord) -> KeyValueTableInfo:
    return KeyValueTableInfo(scope=record.scope, table=record.table, state=KeyValueTableState(record.state),
                             configuration=_config(record), created_at_ms=record.created_ms)


def _key_text(key: TableKey) -> dict[str, str]:
    return {"primary": base64.b64encode(key.primary).decode(), "secondary": base64.b64encode(key.secondary).decode()}


def _new_version(request_id: str, index: int) -> str:
    """The version an update writes, derived from the request: a retried request (same request id,
    which DynamoDB also takes as the transaction's idempotency token) answers the versions it stored."""
    return hashlib.blake2b(f"{request_id}/{index}".encode(), digest_size=8).hexdigest()


class KeyValueTables:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        bind(store.deployment)

    # -- lifecycle -------------------------------------------------------------------------------

    def create(self, scope: str, table: str, config: KeyValueTableConfiguration) -> bool:
        """Create a table; False if one of that name exists (as Pravega's createKeyValueTable).

        The configuration of an existing table is not compared: like a stream's, it is the first one."""
        validate_scope_name(scope)
        validate_table_name(table)
        record = KeyValueTableRecord(tables_pk(scope), table, scope=scope, table=table, state=ACTIVE,
                                     partition_count=config.partition_count,
                                     primary_key_length=config.primary_key_length,
                                     secondary_key_length=config.secondary_key_length, created_ms=now_ms(),
                                     incarnation=uuid.uuid4().hex)
        try:
            with TransactWrite(connection=self.store.transaction_connection) as tx:
                tx.condition_check(ScopeRecord, SCOPES_PK, scope, condition=ScopeRecord.state == "ACTIVE")
                tx.save(record, condition=KeyValueTableRecord.pk.does_not_exist())
        except TransactWriteError as e:
            reasons = [r.code if r else None for r in (e.cancellation_reasons or [])]
            if reasons and reasons[0] == "ConditionalCheckFailed":
                self.store.get_scope(scope)  # ScopeNotFound if absent
                raise IllegalState(f"scope {scope} is being deleted") from e
            if len(reasons) > 1 and reasons[1] == "ConditionalCheckFailed":
                if self._get(scope, table).state == DELETING:
                    raise IllegalState(f"key-value table {scope}/{table} is being deleted", state=DELETING) from e
                return False
            raise
        return True

    def list(self, scope: str, limit: int = 100, token: str | None = None) -> tuple[list[str], str | None]:
        """One page of the scope's tables (those being deleted are left out): a query, never a scan."""
        self.store.get_scope(validate_scope_name(scope))
        start = None
        if token:
            start = {"pk": {"S": tables_pk(scope)}, "sk": {"S": validate_table_name(_decode_token(token))}}
        result = KeyValueTableRecord.query(tables_pk(scope), limit=limit, last_evaluated_key=start)
        names = [r.table for r in result if r.state != DELETING]
        last = result.last_evaluated_key
        return names, _encode_token(last["sk"]["S"]) if last else None

    def info(self, scope: str, table: str) -> KeyValueTableInfo:
        return _info(self._get(scope, table))

    def seal(self, scope: str, table: str) -> KeyValueTableInfo:
        """Make the table read-only; sealing a sealed table is a no-op."""
        record = self._get(scope, table)
        if record.state == ACTIVE:
            self.store.update(record, [KeyValueTableRecord.state.set(SEALED)],
                              f"key-value table {scope}/{table} changed concurrently")
        elif record.state == DELETING:
            raise IllegalState(f"key-value table {scope}/{table} is being deleted", state=DELETING)
        return _info(record)

    def delete(self, scope: str, table: str) -> bool:
        """Delete a table and its entries; False if it did not exist. Resumes an interrupted delete."""
        try:
            record = self._get(scope, table)
        except KeyValueTableNotFound:
            return False
        if record.state != DELETING:
            self.store.update(record, [KeyValueTableRecord.state.set(DELETING),
                                       KeyValueTableRecord.pending.set(workflow_shard(record.pk, record.sk)),
                                       KeyValueTableRecord.pending_since.set(now_ms())],
                              f"key-value table {scope}/{table} changed concurrently")
        self.finish_delete(record)
        return True

    def finish_delete(self, record: KeyValueTableRecord) -> None:
        """Delete every partition's entries, then the record. The entries' keys name this incarnation
        and nothing writes them any more (the DELETING state fails every write's check), so deleting
        what a query finds is safe however late this runs: a table created again under the name keeps
        its own entries. The record goes only as it was read; if it is already gone (another finisher
        was first, and the name may have been created again), the delete is done."""
        for partition in range(record.partition_count):
            # The query pages lazily (1 MB a page) and the batch writes 25 at a time, so memory stays
            # flat however large the partition.
            with EntryRecord.batch_write() as batch:
                for item in EntryRecord.query(entries_pk(record, partition), consistent_read=True,
                                              attributes_to_get=["pk", "sk"]):
                    batch.delete(item)
        try:
            record.delete(condition=KeyValueTableRecord.incarnation == record.incarnation)
        except DeleteError as e:
            if not failed_condition(e):
                raise
            if self._current_delete(record.scope, record.table, record.incarnation) is not None:
                raise WriteConflict(f"key-value table {record.scope}/{record.table} changed while being deleted") from e

    def resume_delete(self, scope: str, table: str, incarnation: str) -> None:
        """Finish the delete of the incarnation the sweeper found DELETING, unless it is done already
        (the record gone, or the name created again since)."""
        record = self._current_delete(scope, table, incarnation)
        if record is not None:
            self.finish_delete(record)

    def _current_delete(self, scope: str, table: str, incarnation: str) -> KeyValueTableRecord | None:
        """The record of ``incarnation`` if it is still there and DELETING."""
        try:
            record = self._get(scope, table)
        except KeyValueTableNotFound:
            return None
        return record if record.incarnation == incarnation and record.state == DELETING else None

    def _get(self, scope: str, table: str) -> KeyValueTableRecord:
        validate_scope_name(scope)
        validate_table_name(table)
        try:
            return KeyValueTableRecord.get(tables_pk(scope), table, consistent_read=True)
        except DoesNotExist:
            raise KeyValueTableNotFound(f"key-value table {scope}/{table} does not exist") from None

    def _readable(self, scope: str, table: str) -> KeyValueTableRecord:
        record = self._get(scope, table)
        if record.state == DELETING:
            raise IllegalState(f"key-value table {scope}/{table} is being deleted", state=DELETING)
        return record

    # -- entries ---------------------------------------------------------------------------------

    def update(self, scope: str, table: str, updates: Sequence[TableUpdate],
               request_id: str | None = None) -> list[str | None]:
        """Apply updates of one primary key atomically: all of them, or none (a failed condition is
        BadKeyVersion or NoSuchKey naming the key). Returns each key's new version (None if removed)."""
        # The state is left to the transaction's check: a repeat of an update that was applied before the
        # table was sealed must answer success (DynamoDB does, for the same token), not IllegalState.
        record = self._get(scope, table)
        self._check_updates(record, updates)
        request_id = request_id or uuid.uuid4().hex
        pk = entries_pk(record, partition_of(updates[0].key.primary, record.partition_count))
        versions: list[str | None] = []
        try:
            with TransactWrite(connection=self.store.transaction_connection,
                               client_request_token=request_id) as tx:
                tx.condition_check(KeyValueTableRecord, record.pk, record.sk,
                                   condition=(KeyValueTableRecord.state == ACTIVE)
                                   & (KeyValueTableRecord.incarnation == record.incarnation))
                for index, u in enumerate(updates):
                    versions.append(self._stage(tx, pk, u, _new_version(request_id, index)))
        except TransactWriteError as e:
            self._raise_failed(record, updates, e)
        return versions

    @staticmethod
    def _stage(tx: TransactWrite, pk: str, u: TableUpdate, version: str) -> str | None:
        sk = entry_sk(u.key.primary, u.key.secondary)
        if u.type == UpdateType.REMOVE:
            condition = EntryRecord.entry_version == u.version if u.version is not None else None
            tx.delete(EntryRecord(pk, sk), condition=condition)
            return None
        condition = {UpdateType.PUT: None, UpdateType.INSERT: EntryRecord.pk.does_not_exist(),
                     UpdateType.REPLACE: EntryRecord.entry_version == u.version}[u.type]
        tx.save(EntryRecord(pk, sk, value=u.value, entry_version=version), condition=condition)
        return version

    @staticmethod
    def _check_updates(record: KeyValueTableRecord, updates: Sequence[TableUpdate]) -> None:
        if not updates:
            raise InvalidArgument("an update needs at least one change")
        if len(updates) > MAX_UPDATES:
            raise TooManyUpdates(f"at most {MAX_UPDATES} updates are applied atomically (one DynamoDB "
                                 f"transaction); this request has {len(updates)}")
        primary = updates[0].key.primary
        seen: set[TableKey] = set()
        size = 0
        for u in updates:
            _check_key(record, u.key)
            if u.key.primary != primary:
                raise InvalidArgument("updates applied together must all have the same primary key")
            if u.key in seen:
                raise InvalidArgument("a key may appear only once in one update request")
            seen.add(u.key)
            if u.type == UpdateType.REMOVE:
                if u.value is not None:
                    raise InvalidArgument("a remove takes no value")
            else:
                if u.value is None:
                    raise InvalidArgument(f"a {u.type.value} needs a value")
                if len(u.value) > MAX_VALUE_LENGTH:
                    raise ValueTooLong(f"a value may hold at most {MAX_VALUE_LENGTH} bytes, not {len(u.value)}")
                size += len(u.value)
            if u.type == UpdateType.REPLACE and u.version is None:
                raise InvalidArgument("a replace needs the version it replaces")
            if u.type in (UpdateType.PUT, UpdateType.INSERT) and u.version is not None:
                raise InvalidArgument(f"a {u.type.value} takes no version (use replace)")
            # As stored: the key hex-encoded in the sort key, plus the item's partition key, version and
            # attribute names, so the transaction's items stay within 4 MB however it is counted.
            size += 2 * (len(u.key.primary) + len(u.key.secondary)) + _ITEM_OVERHEAD
        if size > MAX_UPDATE_BYTES:
            raise TooManyUpdates(f"one atomic update may carry at most {MAX_UPDATE_BYTES} bytes of keys and "
                                 f"values as stored (a DynamoDB transaction takes 4 MB); this one has {size}")

    def _raise_failed(self, record: KeyValueTableRecord, updates: Sequence[TableUpdate],
                      error: TransactWriteError) -> None:
        """Turn a cancelled transaction into the typed reason: the table changed, or a key's condition."""
        if getattr(error, "cause_response_code", None) == "IdempotentParameterMismatchException":
            raise InvalidArgument("this request_id was used for a different update in the last 10 minutes") from error
        reasons = [r.code if r else None for r in (error.cancellation_reasons or [])]
        if not reasons or not any(r == "ConditionalCheckFailed" for r in reasons):
            raise error
        if reasons[0] == "ConditionalCheckFailed":
            current = self._get(record.scope, record.table)
            if current.incarnation != record.incarnation:
                raise WriteConflict(f"key-value table {record.scope}/{record.table} was deleted and created "
                                    "again during this update; nothing was applied") from error
            raise IllegalState(f"key-value table {record.scope}/{record.table} is {current.state.lower()}; "
                               "its entries cannot change", state=current.state) from error
        # PynamoDB sends a transaction's items grouped: condition checks, then deletes, then puts.
        sent = ([u for u in updates if u.type == UpdateType.REMOVE]
                + [u for u in updates if u.type != UpdateType.REMOVE])
        u = next(u for u, r in zip(sent, reasons[1:], strict=True) if r == "ConditionalCheckFailed")
        if u.type == UpdateType.INSERT:
            raise BadKeyVersion("the key already exists", key=_key_text(u.key)) from error
        pk = entries_pk(record, partition_of(u.key.primary, record.partition_count))
        try:
            EntryRecord.get(pk, entry_sk(u.key.primary, u.key.secondary), consistent_read=True,
                            attributes_to_get=["pk"])
        except DoesNotExist:
            raise NoSuchKey(f"the key does not exist, so it has no version {u.version}",
                            key=_key_text(u.key)) from error
        raise BadKeyVersion(f"the key's version is not {u.version}", key=_key_text(u.key)) from error

    def get(self, scope: str, table: str, keys: Sequence[TableKey]) -> list[WireEntry | None]:
        """The entries of ``keys`` (None where a key does not exist), read consistently."""
        record = self._readable(scope, table)
        wanted = {}
        for key in keys:
            _check_key(record, key)
            wanted[key] = (entries_pk(record, partition_of(key.primary, record.partition_count)),
                           entry_sk(key.primary, key.secondary))
        found = {(e.pk, e.sk): e for e in batch_get(EntryRecord, set(wanted.values()), consistent_read=True)}
        entries: list[WireEntry | None] = []
        for key in keys:
            item = found.get(wanted[key])
            entries.append(None if item is None else WireEntry(key=key, value=item.value, version=item.entry_version))
        return entries

    def iterate(self, scope: str, table: str, primary_key: bytes | None, with_values: bool, limit: int,
                token: str | None, secondary_prefix: bytes | None = None) -> IteratePage:
        """A page of entries: those of one primary key (optionally only secondary keys with a prefix, as
        Pravega's forPrimaryKey(pk, prefix)), or all of them partition by partition.

        The token names the partition and the last key returned; it is checked against the request,
        so a token of another table or primary key is InvalidArgument rather than a wrong page."""
        record = self._readable(scope, table)
        position = _decode_token(token) if token else None
        partition, last = _parse_position(position, record.partition_count)
        prefix = ""
        if secondary_prefix is not None and (primary_key is None
                                             or len(secondary_prefix) > record.secondary_key_length):
            raise InvalidArgument("a secondary key prefix needs a primary key, and is at most the secondary key length")
        if primary_key is not None:
            _check_primary(record, primary_key)
            prefix = primary_key.hex() + (secondary_prefix or b"").hex()
            partition = partition_of(primary_key, record.partition_count)
            if last is not None and not last.startswith(prefix):
                raise InvalidArgument("the page token belongs to another primary key or prefix")
        attributes = None if with_values else ["pk", "sk", "entry_version"]
        entries: list[WireEntry] = []
        for _ in range(MAX_PARTITIONS_PER_PAGE):
            pk = entries_pk(record, partition)
            start = {"pk": {"S": pk}, "sk": {"S": last}} if last is not None else None
            condition = EntryRecord.sk.startswith(prefix) if prefix else None
            result = EntryRecord.query(pk, condition, consistent_read=True, limit=limit - len(entries),
                                       last_evaluated_key=start, attributes_to_get=attributes)
            for item in result:
                entries.append(_entry(record, item, with_values))
            if result.last_evaluated_key is not None:
                return IteratePage(entries=entries, next_token=_encode_token(
                    json.dumps([partition, result.last_evaluated_key["sk"]["S"]])))
            last = None
            partition += 1
            if primary_key is not None or partition >= record.partition_count:
                return IteratePage(entries=entries)
            if len(entries) >= limit:
                break
        return IteratePage(entries=entries, next_token=_encode_token(json.dumps([partition, None])))


def _check_primary(record: KeyValueTableRecord, primary: bytes) -> None:
    if len(primary) != record.primary_key_length:
        raise BadKeyLength(f"the primary key must be {record.primary_key_length} bytes, not {len(primary)}")


def _check_key(record: KeyValueTableRecord, key: TableKey) -> None:
    _check_primary(record, key.primary)
    if len(key.secondary) != record.secondary_key_length:
        raise BadKeyLength(f"the secondary key must be {record.secondary_key_length} bytes, not "
                           f"{len(key.secondary)}")


def _entry(record: KeyValueTableRecord, item: EntryRecord, with_values: bool) -> WireEntry:
    raw = bytes.fromhex(item.sk)
    key = TableKey(primary=raw[:record.primary_key_length], secondary=raw[record.primary_key_length:])
    return WireEntry(key=key, value=item.value if with_values else None, version=item.entry_version)


def _encode_token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def _decode_token(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, ValueError) as e:
        raise InvalidArgument("malformed page token: pass the next_token of the previous page") from e


def _parse_position(text: str | None, partition_count: int) -> tuple[int, str | None]:
    """The (partition, last sort key) a token names; (0, None) for the first page."""
    if text is None:
        return 0, None
    try:
        partition, last = json.loads(text)
    except (ValueError, TypeError) as e:
        raise InvalidArgument("malformed page token: pass the next_token of the previous page") from e
    if not isinstance(partition, int) or not 0 <= partition < partition_count or not (
            last is None or isinstance(last, str) and len(last) <= 2048 and all(c in "0123456789abcdef" for c in last)):
        raise InvalidArgument("malformed page token: pass the next_token of the previous page")
    return partition, last
