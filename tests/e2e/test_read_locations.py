"""The read path over HTTP (standalone stack): readers fetch S3 objects themselves through presigned
ranged GETs the read API answers, get small appends inline, and wait at the tail with one tail check
for all their segments instead of a request that waits on the server."""

from __future__ import annotations

import base64
import json
import time

import pytest
import urllib3

import rillet
from rillet import api
from rillet.framing import frame
from rillet.models import SegmentPosition
from rillet.segments import DEFAULT_READ_SIZE, SegmentClient, SegmentEventReader, StaleLocation
from rillet.stream_cut import StreamCut

http = urllib3.PoolManager(retries=False, timeout=60)
BIG = 1_000_000  # events big enough that each block is an S3 object, not inline


def _stream(manager, url: str, scope: str, name: str, segments: int = 1):
    manager.create_scope(scope)
    manager.create_stream(scope, name, rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(segments)))
    connection = rillet.Connection(url)
    return connection, [s.segment_id for s in connection.controller.current_segments(scope, name)]


def _append(connection, scope, stream, segment, writer, number, payloads: list[bytes]) -> None:
    connection.segments.append(scope, stream, segment, writer, number, len(payloads), b"".join(map(frame, payloads)))


def test_catch_up_reads_fetch_each_object_once_and_inline_bytes_come_in_the_answer(stack, manager, url, unique):
    connection, (segment,) = _stream(manager, url, unique, "s")
    events = [bytes([i]) * BIG for i in range(5)]
    for i, payload in enumerate(events):  # one object per block
        _append(connection, unique, "s", segment, "big", i, [payload])
    _append(connection, unique, "s", segment, "small", 0, [b"tiny-1", b"tiny-2"])  # kept inline
    stack.requests.reset()
    reader = SegmentEventReader(connection.segments, unique, "s", segment)
    got = []
    while batch := reader.read_events():
        got += [e.payload for e in batch]
    assert got == [*events, b"tiny-1", b"tiny-2"]
    counts, _ = stack.requests.snapshot()
    assert counts[("s3", "GetObject")] == 5  # one GET per object holding the bytes, none by the function


class _CountingSegments(SegmentClient):
    """The SDK's segment client, counting its locates (in the caller's thread and ahead) and making the
    first fetch of the offsets in ``stale_once`` find its location stale, as an expired URL does."""

    def __init__(self, connection, stale_once=()):
        super().__init__(connection.segments.append_transport, connection.segments.read_transport)
        self.locates, self.ahead, self.stale_once = [], [], set(stale_once)

    def locate(self, scope, stream, segment, offset, max_bytes=DEFAULT_READ_SIZE, incarnation=None):
        self.locates.append((offset, max_bytes))
        return super().locate(scope, stream, segment, offset, max_bytes, incarnation)

    def locate_later(self, scope, stream, segment, offset, max_bytes, incarnation=None):
        self.ahead.append((offset, max_bytes))
        return super().locate_later(scope, stream, segment, offset, max_bytes, incarnation)

    def fetch(self, location):
        if location.offset in self.stale_once:
            self.stale_once.discard(location.offset)
            raise StaleLocation("GET of a segment object answered 403")
        return super().fetch(location)


def test_a_catch_up_locates_ahead_in_widening_windows_for_no_more_requests(manager, url, unique):
    connection, (segment,) = _stream(manager, url, unique, "s")
    events = [bytes([i]) * BIG for i in range(7)]
    for i, payload in enumerate(events):
        _append(connection, unique, "s", segment, "big", i, [payload])
    _append(connection, unique, "s", segment, "small", 0, [b"tiny"])
    block = BIG + 4
    segments = _CountingSegments(connection)
    reader = SegmentEventReader(segments, unique, "s", segment, read_size=block)  # one object in the first answer
    got = []
    while batch := reader.read_events():
        got += [e.payload for e in batch]
    assert got == [*events, b"tiny"]
    # Each answer makes the next window twice what it covered (1, 2, then 4 objects; the small append
    # after them in a fourth answer), and the next range is asked for as soon as an answer comes, while
    # its objects are fetched: one locate per range, none ahead of the tail. The fourth answer covered
    # 8 bytes, so the check at the tail asks for read_size again.
    assert segments.ahead == [(block, 2 * block), (3 * block, 4 * block), (7 * block, 8 * block)]
    assert segments.locates == [(0, block), *segments.ahead, (7 * block + 8, block)]


def test_a_location_found_stale_is_located_again_and_the_range_asked_ahead_with_it(manager, url, unique):
    connection, (segment,) = _stream(manager, url, unique, "s")
    events = [bytes([i]) * BIG for i in range(4)]
    for i, payload in enumerate(events):
        _append(connection, unique, "s", segment, "big", i, [payload])
    block = BIG + 4
    segments = _CountingSegments(connection, stale_once={block})
    reader = SegmentEventReader(segments, unique, "s", segment, read_size=block)
    got = []
    while batch := reader.read_events():
        got += [e.payload for e in batch]
    assert got == events  # in order, once each
    located = [offset for offset, _ in segments.locates]
    assert located.count(block) == 2  # located again after the stale fetch, not taken from ahead


def test_an_answer_ends_where_an_object_ends(stack, manager, url, unique):
    connection, (segment,) = _stream(manager, url, unique, "s")
    for i in range(3):
        _append(connection, unique, "s", segment, "w", i, [bytes([i]) * BIG])
    block = BIG + 4
    answer = connection.segments.locate(unique, "s", segment, 0, max_bytes=2 * block + 100)
    assert [(x.offset, x.length) for x in answer.locations] == [(0, block), (block, block)]
    assert answer.next_offset == 2 * block and answer.length == 3 * block and not answer.end_of_segment
    assert all(x.url and x.range and x.data is None for x in answer.locations)
    # Each URL names one object and is signed for its range: fetched with plain HTTP, no credentials.
    second = http.request("GET", answer.locations[1].url, headers={"Range": answer.locations[1].range})
    assert second.status == 206 and second.data == frame(bytes([1]) * BIG)
    assert "X-Amz-Expires=300" in answer.locations[1].url and "range" in answer.locations[1].url.lower()
    # A window smaller than the first object still answers it, cut: a reader always progresses.
    cut = connection.segments.locate(unique, "s", segment, 0, max_bytes=10)
    assert [(x.offset, x.length) for x in cut.locations] == [(0, 10)]


def test_locations_at_the_tail_and_past_the_start_are_typed(manager, url, unique):
    connection, (segment,) = _stream(manager, url, unique, "s")
    _append(connection, unique, "s", segment, "w", 0, [b"abc"])
    tail = connection.segments.locate(unique, "s", segment, 7)
    assert tail.locations == [] and tail.next_offset == 7 == tail.length and not tail.end_of_segment
    inline = connection.segments.locate(unique, "s", segment, 0)
    assert [base64.b64decode(x.data) for x in inline.locations] == [frame(b"abc")]
    with pytest.raises(rillet.InvalidArgument):
        connection.segments.locate(unique, "s", segment, 8)
    (current,) = connection.controller.current_segments(unique, "s")
    manager.truncate_stream(unique, "s", StreamCut.of(unique, "s", [SegmentPosition(segment=current, offset=7)]))
    with pytest.raises(rillet.Truncated):
        connection.segments.locate(unique, "s", segment, 0)
    manager.seal_stream(unique, "s")
    assert connection.segments.locate(unique, "s", segment, 7).end_of_segment


def test_one_tail_check_answers_many_segments(manager, url, unique):
    connection, segments = _stream(manager, url, unique, "s", segments=3)
    _append(connection, unique, "s", segments[1], "w", 0, [b"x" * 10])
    tails = connection.segments.tails(unique, "s", [*segments, 999])
    assert [(t.segment_id, t.found, t.length, t.sealed) for t in tails] == [
        (segments[0], True, 0, False), (segments[1], True, 14, False), (segments[2], True, 0, False), (999, False, 0, False)]
    read_url = connection.controller.endpoints.read_url
    too_many = http.request("GET", f"{read_url}/v1/segments/{unique}/s/tails?segments="
                            + ",".join(str(i) for i in range(api.MAX_TAIL_SEGMENTS + 1)))
    assert too_many.status == 400 and json.loads(too_many.data)["code"] == "InvalidArgument"
    assert http.request("GET", f"{read_url}/v1/segments/{unique}/s/tails?segments=1,x").status == 400


def test_an_idle_reader_sends_only_tail_checks_backing_off_and_wakes_on_data(stack, manager, url, unique):
    connection, segments = _stream(manager, url, unique, "s", segments=4)
    factory = rillet.EventStreamClientFactory(unique, url)
    reader = factory.create_stream_reader("s", rillet.BytesSerializer(), backoff=rillet.TailBackoff(first_s=0.05, max_s=0.4))
    sent = []
    for transport in (reader.connection.segments.read_transport, reader.connection.segments.tails_transport):
        original = transport.request
        transport.request = lambda method, path, original=original, **kw: sent.append(path) or original(method, path, **kw)
    assert reader.read_next_event(timeout_ms=0) is None  # every segment read once: at the tail
    sent.clear()
    started = time.monotonic()
    assert reader.read_next_event(timeout_ms=2000) is None
    elapsed = time.monotonic() - started
    assert all(path.endswith("/tails") for path in sent), sent  # no reads, no waits on the server
    # Backing off from 50 ms to 400 ms: at most about 2 s / 0.4 s + the ramp's 4 checks, one request each.
    assert 3 <= len(sent) <= elapsed / 0.4 + 6, (len(sent), elapsed)
    _append(connection, unique, "s", segments[2], "w", 0, [b"news"])
    event = reader.read_next_event(timeout_ms=5000)
    assert event is not None and event.event == b"news" and event.pointer.segment_id == segments[2]
