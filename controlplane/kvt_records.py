"""Key-value tables in the metadata table: one record per table, one item per entry.

Keys (``pk`` / ``sk``), beside those in :mod:`controlplane.models`:

* ``kvts#<scope>`` / ``<table>`` -- :class:`KeyValueTableRecord`: configuration and state; all tables
  of a scope share a partition, so listing them (and checking a scope has none) is one query.
* ``kvt#<scope>/<table>/<incarnation>/<partition>`` / ``<primary key hex><secondary key hex>`` --
  :class:`EntryRecord`: one entry. The incarnation (a random id of each table created under a name)
  keeps a late delete of an earlier table of the name away from the entries of the next one. A table partition is one DynamoDB partition key, so the entries of
  a primary key (which hash to one partition) are one query, and all entries are one query per
  partition. Keys have fixed lengths, so the hex of the two parts never runs together ambiguously.

Neither kind carries a growing list or map: a table record has a fixed set of scalars, and an entry
is bounded by rillet.kvt_models.MAX_KEY_LENGTH and MAX_VALUE_LENGTH.
"""

from __future__ import annotations

import hashlib

from pynamodb.attributes import BinaryAttribute, NumberAttribute, UnicodeAttribute, VersionAttribute

from controlplane.models import MetadataItem
from dataplane.deployment import Deployment, point_models


def tables_pk(scope: str) -> str:
    return f"kvts#{scope}"


def entries_pk(record: KeyValueTableRecord, partition: int) -> str:
    return f"kvt#{record.scope}/{record.table}/{record.incarnation}/{partition}"


def entry_sk(primary: bytes, secondary: bytes) -> str:
    return primary.hex() + secondary.hex()


def partition_of(primary: bytes, partition_count: int) -> int:
    """The partition of a primary key: a stable hash, so every caller finds the same one."""
    return int.from_bytes(hashlib.blake2b(primary, digest_size=8).digest(), "big") % partition_count


class KeyValueTableRecord(MetadataItem, discriminator="kvt"):
    """A table: ACTIVE, SEALED or DELETING. Versioned: every change is conditional on what was read.

    A table being deleted carries ``pending`` (the sweeper's index) until its entries and the record
    are gone. ``incarnation`` tells one table of a name from the next: entry keys name it, entry writes
    check it, and a delete removes only its own record.
    """

    scope = UnicodeAttribute()
    table = UnicodeAttribute()
    state = UnicodeAttribute()
    partition_count = NumberAttribute()
    primary_key_length = NumberAttribute()
    secondary_key_length = NumberAttribute()
    created_ms = NumberAttribute()
    incarnation = UnicodeAttribute()  # a random id, new with every create
    version = VersionAttribute()


class EntryRecord(MetadataItem, discriminator="kvt-entry"):
    """An entry's value and its version: an opaque token that is new with every write, so a version
    read before a remove and re-insert never matches again (no ABA)."""

    value = BinaryAttribute(legacy_encoding=False)
    entry_version = UnicodeAttribute()


def bind(deployment: Deployment) -> None:
    """Point these models at a deployment, as controlplane.models.bind does for its own."""
    point_models((KeyValueTableRecord, EntryRecord), deployment.metadata_table, deployment)


def scope_has_key_value_tables(scope: str) -> bool:
    """Consistent, for the same reason as MetadataStore.scope_has_streams."""
    return any(True for _ in KeyValueTableRecord.query(tables_pk(scope), limit=1, consistent_read=True))
