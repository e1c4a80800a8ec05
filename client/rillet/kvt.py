"""Key-value tables (Pravega's KeyValueTableManager, KeyValueTableFactory and KeyValueTable).

A table maps keys (a fixed-length primary key and an optional fixed-length secondary key) to values,
each entry with a :class:`Version`. Updates of entries that share a primary key apply atomically, and
any of them can be conditional on a version: a stale one fails with :class:`rillet.BadKeyVersion`
and changes nothing. Keys and values are bytes; a ``str`` is taken as its UTF-8 encoding.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Self

from rillet.controller import ControllerClient
from rillet.errors import InvalidArgument
from rillet.kvt_models import (
    IterateRequest,
    KeyValueTableConfiguration,
    KeyValueTableInfo,
    TableKey,
    TableUpdate,
    UpdateRequest,
    UpdateType,
    WireEntry,
)
from rillet.transport import Transport

KeyPart = bytes | str


def table_key(primary: KeyPart, secondary: KeyPart = b"") -> TableKey:
    """A key from its parts (``str`` parts are UTF-8 encoded)."""
    return TableKey(primary=_bytes(primary), secondary=_bytes(secondary))


def _bytes(value: KeyPart) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _as_key(key: TableKey | KeyPart) -> TableKey:
    return key if isinstance(key, TableKey) else table_key(key)


@dataclass(frozen=True)
class Version:
    """An entry's version: opaque, and new with every write of the entry (a version seen before a
    remove and re-insert never matches again). ``NOT_EXISTS`` and ``NO_VERSION`` are Pravega's
    conditions "the key must not exist" and "unconditional"."""

    token: str | None
    NOT_EXISTS: ClassVar[Version]
    NO_VERSION: ClassVar[Version]

    def __str__(self) -> str:
        return self.token or ("NOT_EXISTS" if self is Version.NOT_EXISTS else "NO_VERSION")


Version.NOT_EXISTS = Version(None)
Version.NO_VERSION = Version("")


@dataclass(frozen=True)
class TableEntry:
    key: TableKey
    value: bytes | None  # None when iterating keys only
    version: Version


@dataclass(frozen=True)
class Put:
    """Set a key's value: unconditionally, only if it does not exist (``Version.NOT_EXISTS``), or only
    if it has ``version``."""

    key: TableKey
    value: bytes
    version: Version = Version.NO_VERSION


@dataclass(frozen=True)
class Remove:
    """Remove a key: unconditionally (``Version.NO_VERSION``), or only if it has ``version``.

    ``Version.NOT_EXISTS`` is refused with :class:`rillet.InvalidArgument`: "remove only if absent"
    names no entry to remove, and the wire has no such condition, so it would remove unconditionally."""

    key: TableKey
    version: Version = Version.NO_VERSION

    def __post_init__(self) -> None:
        if self.version == Version.NOT_EXISTS:
            raise InvalidArgument("a remove cannot be conditional on Version.NOT_EXISTS: pass Version.NO_VERSION "
                                  "to remove unconditionally, or the entry's version")


def _update(change: Put | Remove) -> TableUpdate:
    if isinstance(change, Remove):
        version = None if change.version == Version.NO_VERSION else change.version.token
        return TableUpdate(type=UpdateType.REMOVE, key=change.key, version=version)
    if change.version == Version.NOT_EXISTS:
        return TableUpdate(type=UpdateType.INSERT, key=change.key, value=_bytes(change.value))
    if change.version == Version.NO_VERSION:
        return TableUpdate(type=UpdateType.PUT, key=change.key, value=_bytes(change.value))
    return TableUpdate(type=UpdateType.REPLACE, key=change.key, value=_bytes(change.value),
                       version=change.version.token)


def _entry(wire: WireEntry) -> TableEntry:
    return TableEntry(key=wire.key, value=wire.value, version=Version(wire.version))


class KeyValueTable:
    """Reads and updates the entries of one table. Every call is one request to the controller."""

    def __init__(self, controller: ControllerClient, scope: str, table: str) -> None:
        self.controller = controller
        self.scope = scope
        self.table = table

    def update(self, changes: Iterable[Put | Remove]) -> list[Version | None]:
        """Apply changes to keys of one primary key atomically: all or none. Returns each key's new
        version (None for a removal). A retry after an unknown outcome is applied at most once."""
        request = UpdateRequest(updates=[_update(c) for c in changes], request_id=uuid.uuid4().hex)
        return [None if v is None else Version(v) for v in self.controller.update_entries(self.scope, self.table, request)]

    def put(self, key: TableKey | KeyPart, value: bytes) -> Version:
        """Set the value whatever the key's version (Pravega's put with no version)."""
        return self.update([Put(_as_key(key), value)])[0]

    def put_if_absent(self, key: TableKey | KeyPart, value: bytes) -> Version:
        """Insert: BadKeyVersion if the key exists."""
        return self.update([Put(_as_key(key), value, Version.NOT_EXISTS)])[0]

    def replace(self, key: TableKey | KeyPart, value: bytes, version: Version) -> Version:
        """Set the value only if the key has ``version``: BadKeyVersion if it has another, NoSuchKey if
        it does not exist."""
        return self.update([Put(_as_key(key), value, version)])[0]

    def remove(self, key: TableKey | KeyPart, version: Version | None = None) -> None:
        """Remove the key; with ``version``, only if it has that version (not ``Version.NOT_EXISTS``:
        InvalidArgument, before anything is sent)."""
        self.update([Remove(_as_key(key), version or Version.NO_VERSION)])

    def get(self, key: TableKey | KeyPart) -> TableEntry | None:
        return self.get_all([key])[0]

    def get_all(self, keys: Iterable[TableKey | KeyPart]) -> list[TableEntry | None]:
        """The entries of ``keys`` in order, None where a key does not exist (at most 100 keys a call)."""
        found = self.controller.get_entries(self.scope, self.table, [_as_key(k) for k in keys])
        return [None if e is None else _entry(e) for e in found]

    def entries(self, primary_key: KeyPart | None = None, secondary_prefix: KeyPart | None = None,
                page_size: int = 100) -> Iterator[TableEntry]:
        """Every entry, or those of one primary key (and secondary keys starting with
        ``secondary_prefix``), a page at a time, in key order within a partition. Each page is read
        consistently; entries changed while iterating may or may not be seen, as in Pravega."""
        return self._iterate(primary_key, secondary_prefix, page_size, with_values=True)

    def keys(self, primary_key: KeyPart | None = None, secondary_prefix: KeyPart | None = None,
             page_size: int = 100) -> Iterator[TableEntry]:
        """As :meth:`entries`, without the values (``value`` is None)."""
        return self._iterate(primary_key, secondary_prefix, page_size, with_values=False)

    def _iterate(self, primary_key: KeyPart | None, secondary_prefix: KeyPart | None, page_size: int,
                 with_values: bool) -> Iterator[TableEntry]:
        token = None
        primary = None if primary_key is None else _bytes(primary_key)
        prefix = None if secondary_prefix is None else _bytes(secondary_prefix)
        while True:
            page = self.controller.iterate_entries(self.scope, self.table, IterateRequest(
                primary_key=primary, secondary_prefix=prefix, with_values=with_values, limit=page_size, token=token))
            yield from (_entry(e) for e in page.entries)
            if not page.next_token:
                return
            token = page.next_token


class KeyValueTableFactory:
    """Opens the key-value tables of a scope (Pravega's KeyValueTableFactory.withScope)."""

    def __init__(self, endpoint: str | None, scope: str, *, sign: bool | None = None, region: str | None = None,
                 timeout_s: float = 30.0) -> None:
        self.controller = ControllerClient(Transport(endpoint, sign=sign, region=region, timeout_s=timeout_s))
        self.scope = scope

    def for_key_value_table(self, table: str) -> KeyValueTable:
        return KeyValueTable(self.controller, self.scope, table)


class KeyValueTableManager:
    """Creates, lists, describes, seals and deletes key-value tables (Pravega's KeyValueTableManager)."""

    def __init__(self, endpoint: str | None = None, *, sign: bool | None = None, region: str | None = None,
                 timeout_s: float = 30.0) -> None:
        self.controller = ControllerClient(Transport(endpoint, sign=sign, region=region, timeout_s=timeout_s))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing to release (connections are pooled)."""

    def create_key_value_table(self, scope: str, table: str, configuration: KeyValueTableConfiguration) -> bool:
        """Create a table; False if it already existed."""
        return self.controller.create_key_value_table(scope, table, configuration)

    def list_key_value_tables(self, scope: str) -> Iterator[str]:
        return self.controller.list_key_value_tables(scope)

    def get_key_value_table_info(self, scope: str, table: str) -> KeyValueTableInfo:
        return self.controller.key_value_table_info(scope, table)

    def get_configuration(self, scope: str, table: str) -> KeyValueTableConfiguration:
        return self.get_key_value_table_info(scope, table).configuration

    def seal_key_value_table(self, scope: str, table: str) -> KeyValueTableInfo:
        """Make the table read-only (a no-op on a sealed table)."""
        return self.controller.seal_key_value_table(scope, table)

    def delete_key_value_table(self, scope: str, table: str) -> bool:
        """Delete the table and its entries; False if it did not exist."""
        return self.controller.delete_key_value_table(scope, table)
