"""A segment reader that meets a corrupt frame raises it, and raises it again when read again: the
fetched bytes are kept, so later bytes are never decoded as if they started where the corrupt ones did."""

from __future__ import annotations

import base64
from concurrent.futures import Future

import pytest

from rillet import api
from rillet.errors import InvalidArgument
from rillet.framing import FRAME_HEADER, MAX_EVENT_SIZE, frame
from rillet.segments import SegmentEventReader

CORRUPT = FRAME_HEADER.pack(MAX_EVENT_SIZE + 1) + b"x" * 8  # a length word no plain frame has
GOOD = frame(b"after")


class _InlineSegments:
    """Answers a segment of two inline pieces: the corrupt bytes, then a good frame."""

    def __init__(self) -> None:
        self.pieces = [CORRUPT, GOOD]
        self.length = sum(map(len, self.pieces))

    def locate(self, scope, stream, segment, offset, max_bytes, incarnation=None) -> api.ReadLocations:
        locations, at = [], 0
        for piece in self.pieces:
            if at >= offset:
                locations.append(api.ReadLocation(offset=at, length=len(piece), data=base64.b64encode(piece).decode()))
            at += len(piece)
        return api.ReadLocations(offset=offset, next_offset=self.length if locations else offset, start_offset=0,
                                 length=self.length, sealed=True, end_of_segment=bool(locations), expires_in_s=300,
                                 locations=locations)

    def locate_later(self, *args) -> Future:
        done: Future = Future()
        done.set_result(self.locate(*args))
        return done

    def fetch_later(self, location: api.ReadLocation) -> Future:
        done: Future = Future()
        done.set_result(base64.b64decode(location.data))
        return done


def test_a_corrupt_frame_is_raised_again_when_read_again_never_skipped():
    reader = SegmentEventReader(_InlineSegments(), "s", "t", 0)
    for _ in range(2):  # the second read adds the good frame's bytes behind the corrupt ones: same error
        with pytest.raises(InvalidArgument, match="corrupt frame at 0"):
            reader.read_batch()
        assert reader.offset == 0
