"""Serializers turn application events into bytes and back (Pravega's Serializer interface)."""

from __future__ import annotations

import json
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


class Serializer(Protocol, Generic[T]):
    def serialize(self, value: T) -> bytes: ...

    def deserialize(self, data: bytes) -> T: ...


class BytesSerializer:
    """Events are bytes already."""

    def serialize(self, value: bytes) -> bytes:
        return bytes(value)

    def deserialize(self, data: bytes) -> bytes:
        return data


class UTF8StringSerializer:
    def serialize(self, value: str) -> bytes:
        return value.encode("utf-8")

    def deserialize(self, data: bytes) -> str:
        return data.decode("utf-8")


class JsonSerializer:
    """Any JSON-serializable value, encoded compactly as UTF-8."""

    def serialize(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode("utf-8")

    def deserialize(self, data: bytes) -> Any:
        return json.loads(data)
