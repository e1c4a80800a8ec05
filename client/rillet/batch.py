"""Batch reads: the segments between two stream cuts, each readable on its own and in any order.

Per-key order is not preserved across slices; the point is parallelism (Spark reads each slice in
its own task).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from rillet.connection import Connection
from rillet.models import SegmentSlice
from rillet.segments import DEFAULT_READ_SIZE, SegmentEventReader
from rillet.serializers import BytesSerializer, Serializer
from rillet.stream_cut import StreamCut

T = TypeVar("T")


_BYTES = BytesSerializer()


class BatchClient:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def list_segments(self, scope: str, stream: str, start: StreamCut | None = None,
                      end: StreamCut | None = None) -> list[SegmentSlice]:
        """Every segment's byte range between ``start`` and ``end`` (head and tail by default)."""
        return self.connection.controller.slices(scope, stream, start.to_text() if start else None,
                                                 end.to_text() if end else None).slices

    def read_segment(self, scope: str, stream: str, piece: SegmentSlice,
                     serializer: Serializer[T] = _BYTES,
                     read_size: int = DEFAULT_READ_SIZE) -> Iterator[tuple[int, T]]:
        """The events of one slice as (offset, event), in offset order."""
        reader = SegmentEventReader(self.connection.segments, scope, stream, piece.segment.segment_id,
                                    piece.start_offset, piece.end_offset, read_size)
        while not reader.finished:
            events = reader.read_events()
            if not events and reader.last_read is not None and reader.last_read.next_offset >= reader.last_read.length:
                return  # at the segment's tail (the slice was computed while it was still growing)
            for e in events:
                yield e.position, serializer.deserialize(e.payload)
