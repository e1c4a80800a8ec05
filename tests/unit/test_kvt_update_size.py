"""An atomic key-value table update is refused before it is sent when its items, as DynamoDB stores
them (hex-encoded keys, partition key, version, names), would pass the 4 MB a transaction carries:
counting raw key bytes let through updates whose stored size was over it."""

from __future__ import annotations

import types

import pytest

from controlplane.kvtables import KeyValueTables
from rillet.errors import TooManyUpdates
from rillet.kvt_models import MAX_UPDATE_BYTES, MAX_UPDATES, TableKey, TableUpdate, UpdateType

RECORD = types.SimpleNamespace(primary_key_length=256, secondary_key_length=256)


def _puts(value_size: int) -> list[TableUpdate]:
    primary = b"p" * 256
    return [TableUpdate(type=UpdateType.PUT, key=TableKey(primary=primary, secondary=i.to_bytes(2, "big") * 128),
                        value=b"v" * value_size) for i in range(MAX_UPDATES)]


def test_keys_count_as_stored_hex_with_each_item_overhead():
    raw_key_bytes = MAX_UPDATES * 512
    value_size = (MAX_UPDATE_BYTES - raw_key_bytes - 10_000) // MAX_UPDATES  # raw total just under the bound
    assert MAX_UPDATES * value_size + raw_key_bytes < MAX_UPDATE_BYTES
    with pytest.raises(TooManyUpdates, match="as stored"):
        KeyValueTables._check_updates(RECORD, _puts(value_size))


def test_an_update_well_within_the_bound_passes():
    KeyValueTables._check_updates(RECORD, _puts(30_000))  # 2.97 MB of values
