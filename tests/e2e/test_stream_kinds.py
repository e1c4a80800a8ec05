"""Over HTTP: raw bytes never land in an event stream's segment (they would desynchronise every event
reader after them), nor framed events in a byte stream's."""

from __future__ import annotations

import pytest

import rillet
from rillet.errors import StreamKindMismatch
from rillet.framing import frame


def test_a_raw_append_to_an_event_stream_is_a_typed_409_and_readers_go_on(url, unique):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "events", rillet.StreamConfiguration())
    connection = rillet.Connection(url)
    (segment,) = connection.controller.current_segments(unique, "events")
    sid = segment.segment_id
    connection.segments.append(unique, "events", sid, "w", 0, 1, frame(b"before"))
    with pytest.raises(StreamKindMismatch) as refused:
        connection.segments.append(unique, "events", sid, "w", 1, 1, b"abc", raw=True)
    assert refused.value.status == 409 and refused.value.code == "StreamKindMismatch"
    connection.segments.append(unique, "events", sid, "w", 1, 1, frame(b"after"))
    assert connection.segments.read(unique, "events", sid, 0).data == frame(b"before") + frame(b"after")

    factory = rillet.ByteStreamClientFactory(unique, url)
    manager.create_stream(unique, "bytes", rillet.StreamConfiguration())
    writer = factory.create_byte_stream_writer("bytes")
    writer.write(b"raw bytes")
    writer.flush()
    (byte_segment,) = connection.controller.current_segments(unique, "bytes")
    with pytest.raises(StreamKindMismatch):
        connection.segments.append(unique, "bytes", byte_segment.segment_id, "w", 0, 1, frame(b"event"))
