"""Key-value tables: the configuration, the limits, and the JSON bodies the SDK and the server share.

Keys and values are bytes; on the wire they travel base64-encoded (standard alphabet, padded) in
JSON. A key is a primary key of exactly the table's ``primary_key_length`` bytes and a secondary key
of exactly ``secondary_key_length`` bytes (empty when that is 0), as in Pravega's KeyValueTable.
"""

from __future__ import annotations

import base64
import binascii
from enum import Enum
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from rillet.api import _Body
from rillet.names import MAX_GIVEN_NAME_SIZE
from rillet.names import _validate as _validate_name

# The bounds, each set by what one DynamoDB item or transaction can hold (see docs/kvt.md):
# a key is stored hex-encoded in the item's sort key, which DynamoDB caps at 1,024 bytes;
MAX_KEY_LENGTH = 512
# a value shares its 400 KB item with the key, the version and the attribute names;
MAX_VALUE_LENGTH = 384 * 1024
# one atomic request is one TransactWriteItems: at most 100 items, one of which checks the table's state,
MAX_UPDATES = 99
# and at most 4 MB in all (values plus keys, with a margin for names and versions);
MAX_UPDATE_BYTES = 4_000_000
# a get-all is one BatchGetItem of at most 100 keys.
MAX_GET_KEYS = 100
MAX_PARTITIONS = 1024  # partitions are DynamoDB partition keys: enough to spread any table's load


def _decode(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise ValueError("expected base64 text")  # noqa: TRY004 - pydantic reports ValueErrors, not TypeErrors
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"not base64: {e}") from None


Base64Bytes = Annotated[bytes, BeforeValidator(_decode),
                        PlainSerializer(lambda b: base64.b64encode(b).decode(), return_type=str, when_used="json"),
                        WithJsonSchema({"type": "string", "contentEncoding": "base64"})]


class KeyValueTableConfiguration(_Body):
    """Pravega's KeyValueTableConfiguration: partitions spread the load; key lengths are fixed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition_count: int = Field(ge=1, le=MAX_PARTITIONS)
    primary_key_length: int = Field(ge=1, le=MAX_KEY_LENGTH)
    secondary_key_length: int = Field(default=0, ge=0, le=MAX_KEY_LENGTH)

    def model_post_init(self, _context: Any) -> None:
        if self.primary_key_length + self.secondary_key_length > MAX_KEY_LENGTH:
            raise ValueError(f"primary_key_length + secondary_key_length must be at most {MAX_KEY_LENGTH}")


class KeyValueTableState(str, Enum):
    ACTIVE = "ACTIVE"
    SEALED = "SEALED"  # entries can be read, not changed
    DELETING = "DELETING"  # its entries are being removed; nothing can be read or changed


class KeyValueTableInfo(_Body):
    scope: str
    table: str
    state: KeyValueTableState
    configuration: KeyValueTableConfiguration
    created_at_ms: int


class TableKey(_Body):
    """A key: the primary key, and the secondary key (empty when the table has none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    primary: Base64Bytes
    secondary: Base64Bytes = b""


class UpdateType(str, Enum):
    PUT = "put"  # unconditional
    INSERT = "insert"  # only if the key does not exist (Pravega's Insert / putIfAbsent)
    REPLACE = "replace"  # only if the key exists with ``version`` (Pravega's Put with a version)
    REMOVE = "remove"  # unconditional without ``version``; with one, only if the key has it


class TableUpdate(_Body):
    type: UpdateType
    key: TableKey
    value: Base64Bytes | None = None  # required for put, insert and replace
    version: str | None = Field(default=None, max_length=64)  # required for replace, optional for remove


class CreateKeyValueTableRequest(_Body):
    table: str = Field(max_length=255)
    configuration: KeyValueTableConfiguration


class KeyValueTableList(_Body):
    tables: list[str]
    next_token: str | None = None


class UpdateRequest(_Body):
    updates: list[TableUpdate] = Field(min_length=1)
    # Names the request: a retry with the same id (after an unknown outcome) is applied at most once
    # and answers the same versions (DynamoDB's ClientRequestToken, honoured for 10 minutes).
    request_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]{1,36}$")


class UpdateResult(_Body):
    versions: list[str | None]  # the new version of each update's key, None for a remove


class GetRequest(_Body):
    keys: list[TableKey] = Field(min_length=1, max_length=MAX_GET_KEYS)


class WireEntry(_Body):
    key: TableKey
    value: Base64Bytes | None = None  # absent when iterating keys only
    version: str


class GetResult(_Body):
    entries: list[WireEntry | None]  # in the order of the keys asked for; None where a key does not exist


class IterateRequest(_Body):
    primary_key: Base64Bytes | None = None  # only this primary key's entries; all entries without it
    secondary_prefix: Base64Bytes | None = None  # with primary_key: only secondary keys starting so
    with_values: bool = True
    limit: int = Field(default=100, ge=1, le=1000)
    token: str | None = Field(default=None, max_length=4096)


class IteratePage(_Body):
    entries: list[WireEntry]
    next_token: str | None = None


def validate_table_name(name: object) -> str:
    """Table names follow the stream name rules (Pravega's NameUtils checks them alike)."""
    return _validate_name("Key-value table", name, MAX_GIVEN_NAME_SIZE)
