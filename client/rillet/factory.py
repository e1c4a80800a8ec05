"""Client factories, named after Pravega's: one per kind of client, each bound to a scope."""

from __future__ import annotations

from typing import TypeVar

from rillet.batch import BatchClient
from rillet.byte_stream import ByteStreamReader, ByteStreamWriter
from rillet.connection import Connection
from rillet.models import SegmentPosition
from rillet.names import validate_scope_name
from rillet.reader import StreamReader
from rillet.reader_group import EventStreamReader
from rillet.segments import TailBackoff
from rillet.serializers import Serializer
from rillet.stream_cut import StreamCut
from rillet.transaction import TransactionalEventStreamWriter
from rillet.writer import EventStreamWriter, EventWriterConfig

T = TypeVar("T")


class _Factory:
    def __init__(self, scope: str, endpoint: str | Connection | None = None, *, sign: bool | None = None,
                 region: str | None = None) -> None:
        self.scope = validate_scope_name(scope)
        self.connection = endpoint if isinstance(endpoint, Connection) else Connection(endpoint, sign=sign,
                                                                                        region=region)

    def close(self) -> None:
        """Nothing to release beyond pooled connections; for symmetry with Pravega's factories."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventStreamClientFactory(_Factory):
    def create_event_writer(self, stream: str, serializer: Serializer[T],
                            config: EventWriterConfig | None = None) -> EventStreamWriter[T]:
        return EventStreamWriter(self.connection, self.scope, stream, serializer, config)

    def create_transactional_writer(self, stream: str, serializer: Serializer[T],
                                    config: EventWriterConfig | None = None) -> TransactionalEventStreamWriter[T]:
        return TransactionalEventStreamWriter(self.connection, self.scope, stream, serializer, config)

    def create_reader(self, reader_id: str, reader_group: str, serializer: Serializer[T], *,
                      backoff: TailBackoff | None = None) -> EventStreamReader[T]:
        """A reader that joins ``reader_group`` (created with ReaderGroupManager) as ``reader_id``;
        ``backoff``: the cadence of its tail checks at the tail (``TailBackoff``'s defaults if None)."""
        return EventStreamReader(self.connection, self.scope, reader_group, reader_id, serializer, backoff=backoff)

    def create_stream_reader(self, stream: str, serializer: Serializer[T],
                             start: list[SegmentPosition] | StreamCut | None = None, *,
                             backoff: TailBackoff | None = None) -> StreamReader[T]:
        """A single reader over the whole stream from ``start`` (the head by default; a StreamCut's reads
        name its incarnation, so a stream deleted and created again since is StreamRecreated);
        ``backoff`` as for ``create_reader``."""
        return StreamReader(self.connection, self.scope, stream, serializer, start, backoff=backoff)


class ByteStreamClientFactory(_Factory):
    def create_byte_stream_writer(self, stream: str) -> ByteStreamWriter:
        return ByteStreamWriter(self.connection, self.scope, stream)

    def create_byte_stream_reader(self, stream: str) -> ByteStreamReader:
        return ByteStreamReader(self.connection, self.scope, stream)


class BatchClientFactory(_Factory):
    def create_batch_client(self) -> BatchClient:
        return BatchClient(self.connection)
