"""Name rules, as Pravega's NameUtils states them.

User scope, stream, reader group and writer names are ASCII letters, digits, '.' and '-'. A leading
'_' is reserved for internal streams (the watermark and reader-group streams), which only the server
creates.
"""

from __future__ import annotations

import re

from rillet.errors import InvalidArgument

MAX_NAME_SIZE = 255
MAX_GIVEN_NAME_SIZE = MAX_NAME_SIZE - 5  # room for an internal prefix such as "_MARK"

_USER_NAME = re.compile(r"[A-Za-z0-9.\-]+")


def _validate(kind: str, name: object, limit: int) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{kind} name must be a non-empty string")
    if len(name) > limit:
        raise InvalidArgument(f"{kind} name cannot exceed {limit} characters")
    if not _USER_NAME.fullmatch(name):
        raise InvalidArgument(f"{kind} name {name!r} must be a-z, A-Z, 0-9, '.', '-'")
    return name


MARK_PREFIX = "_MARK"
_INTERNAL_NAME = re.compile(r"_[A-Za-z0-9.\-]+")


def validate_internal_stream_name(name: object) -> str:
    """Internal streams (created by the server only) start with '_'."""
    if not isinstance(name, str) or not _INTERNAL_NAME.fullmatch(name) or len(name) > MAX_NAME_SIZE:
        raise InvalidArgument(f"invalid internal stream name {name!r}")
    return name


def mark_stream_name(stream: str) -> str:
    """The internal stream that holds a stream's watermarks."""
    return f"{MARK_PREFIX}{stream}"


def validate_scope_name(name: object) -> str:
    return _validate("Scope", name, MAX_NAME_SIZE)


def validate_stream_name(name: object) -> str:
    return _validate("Stream", name, MAX_GIVEN_NAME_SIZE)


def validate_reader_group_name(name: object) -> str:
    return _validate("Reader group", name, MAX_GIVEN_NAME_SIZE)


def validate_writer_id(name: object) -> str:
    return _validate("Writer id", name, 64)


def scoped_name(scope: str, stream: str) -> str:
    return f"{scope}/{stream}"


def split_scoped_name(scoped: str, kind: str = "stream") -> tuple[str, str]:
    """``<scope>/<name>``; ``kind`` names the second part in errors (``stream`` or ``reader group``)."""
    parts = scoped.split("/")
    if len(parts) != 2:
        raise InvalidArgument(f"expected '<scope>/<{kind.replace(' ', '-')}>', got {scoped!r}")
    validate = validate_reader_group_name if kind == "reader group" else validate_stream_name
    return validate_scope_name(parts[0]), validate(parts[1])


def segment_name(scope: str, stream: str, segment: int | str) -> str:
    """The data plane's name of a stream's segment (``segment`` is its id, or a transaction segment's token)."""
    return f"{scope}/{stream}/{segment}"


def txn_segment_token(segment_id: int, txn_id: str) -> str:
    """The token of a transaction's segment for parent ``segment_id`` (``<id>.<txn id>``)."""
    return f"{segment_id}.{txn_id}"
