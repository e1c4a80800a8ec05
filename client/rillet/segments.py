"""The data path of one segment: appends, reads and the events inside the bytes read.

Reads go where the bytes are: the read API answers *locations* (presigned ranged GETs of S3 objects,
and the bytes of small appends inline), and the reader fetches the objects itself, several at a time,
with plain HTTP. A reader at the tail asks nothing of a segment but its length, for all its segments in
one request (``SegmentClient.tails``), at a cadence that backs off while nothing changes
(``TailBackoff``); no request waits on the server.
"""

from __future__ import annotations

import base64
import random
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import quote

import urllib3

from rillet import api
from rillet.errors import ServiceUnavailable
from rillet.framing import (
    FRAME_HEADER,
    HEADER_SIZE,
    MAX_LOCATE_BYTES,
    MAX_READ_SIZE,
    EventBatch,
    Frame,
    body_size,
    unframe_batch,
)
from rillet.transport import Transport

# How much one locations request covers: four of the writer's 4 MiB blocks (the server ends an answer
# where an object ends, so each object is fetched once, whole).
DEFAULT_READ_SIZE = 16 * 1024 * 1024
PREFETCH = 4  # object GETs one segment reader keeps in flight (bounds its memory to about 4 objects)
FETCH_THREADS = 8  # object GETs in flight per SegmentClient, over all its readers
FETCH_ATTEMPTS = 4


class StaleLocation(Exception):
    """S3 refused a presigned GET (expired, or the object was released by a truncation meanwhile): ask
    for the locations again, whose answer says which."""


@dataclass
class TailBackoff:
    """The cadence of tail checks: every ``first_s`` while the stream is active (data seen within
    ``active_s``), then doubling while nothing changes, up to ``max_s``. An event written while data
    flows is seen within ``first_s`` plus the round trips; the first one after idle time within ``max_s``
    plus a round trip (and the moment an eventually consistent read takes to show it). A reader idle
    for a day sends about 86,400 / ``max_s`` checks, each one request for all its segments; one tailing
    a stream that never pauses for ``active_s`` sends 1 / ``first_s`` a second while it waits."""

    first_s: float = 0.05
    max_s: float = 1.9
    active_s: float = 2.0
    delay_s: float = 0.0  # 0: check at once
    data_at: float = float("-inf")  # when data was last seen (time.monotonic())

    def next_delay(self) -> float:
        """The pause before the next check (and the one after grows, once the stream is quiet)."""
        delay = self.delay_s
        if time.monotonic() - self.data_at < self.active_s:
            self.delay_s = self.first_s
        else:
            self.delay_s = min(self.max_s, max(self.first_s, self.delay_s * 2))
        return delay

    def reset(self) -> float:
        """Data arrived: the next check is due at once (the time returned), then every ``first_s`` while
        more keeps coming."""
        self.delay_s = self.first_s
        self.data_at = time.monotonic()
        return self.data_at


def locate_window(read_size: int, answer: api.ReadLocations) -> int:
    """How many bytes a catch-up asks to locate after ``answer``: twice what it covered, at least
    ``read_size`` and at most what one answer may cover. Where the bytes are in large objects that means
    fewer locates per MB; an answer cut short (inline bytes, the tail) brings the window back to
    ``read_size``, so a window of small appends' index entries stays small."""
    return min(max(read_size, 2 * (answer.next_offset - answer.offset)), MAX_LOCATE_BYTES)


def _path(scope: str, stream: str, segment: str | int) -> str:
    return f"/v1/segments/{quote(scope, safe='')}/{quote(stream, safe='')}/{segment}"


def _with_incarnation(params: dict, incarnation: int | None) -> dict:
    """A data-path request's parameters, naming the stream incarnation the caller's position was taken
    on when it knows one: the server then answers StreamRecreated for a segment of another incarnation
    (the name deleted and created again) instead of the new stream's bytes at the old offset."""
    return params if incarnation is None else {**params, "incarnation": incarnation}


@dataclass(frozen=True)
class SegmentRead:
    data: bytes
    offset: int
    next_offset: int
    start_offset: int
    length: int
    sealed: bool
    end_of_segment: bool


class SegmentClient:
    """Append, read and describe segments through the append and read APIs; tail checks go to the
    tails API (``tails``: by default the read API, as a deployment without a tails function serves them)."""

    def __init__(self, append: Transport, read: Transport, tails: Transport | None = None) -> None:
        self.append_transport = append
        self.read_transport = read
        self.tails_transport = tails or read
        self._objects = urllib3.PoolManager(maxsize=FETCH_THREADS, retries=False)  # presigned S3 GETs
        self._fetcher: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def append(self, scope: str, stream: str, segment: str | int, writer_id: str, first_event: int,
               event_count: int, block: bytes, expected_offset: int | None = None,
               raw: bool = False, after: int | None = None, block_age_ms: int | None = None,
               deadline: float | None = None) -> api.AppendAck:
        """Append a block; with ``after`` (the writer's last event number before this block, -1 for its
        first block) the server commits it only after that event, whatever order requests arrive in.
        ``block_age_ms`` (since the block was first sent) lets a server that forgot the writer id refuse
        a resend that may already be stored (WriterExpired) rather than store it twice. ``deadline``
        (``time.monotonic()``): the transport's own retries stop there (see ``Transport.request``)."""
        headers = {api.WRITER_ID: writer_id, api.EVENT_NUMBER: str(first_event), api.EVENT_COUNT: str(event_count)}
        if after is not None:
            headers[api.AFTER_EVENT] = str(after)
        if block_age_ms is not None:
            headers[api.BLOCK_AGE_MS] = str(block_age_ms)
        if expected_offset is not None:
            headers[api.EXPECTED_OFFSET] = str(expected_offset)
        if raw:
            headers[api.RAW_BYTES] = "true"
        data = self.append_transport.json("POST", _path(scope, stream, segment), body=block, headers=headers,
                                          deadline=deadline)
        return api.parse_answer(api.AppendAck, data)

    def read(self, scope: str, stream: str, segment: str | int, offset: int,
             max_bytes: int = DEFAULT_READ_SIZE, incarnation: int | None = None) -> SegmentRead:
        """Bytes from ``offset`` through the function; empty at once at the tail (wait with ``tails``).
        ``incarnation`` (of the stream, as the caller's position names it; see ``_with_incarnation``)."""
        r = self.read_transport.request("GET", _path(scope, stream, segment), params=_with_incarnation(
            {"offset": offset, "max_bytes": min(max_bytes, MAX_READ_SIZE)}, incarnation))
        h = r.headers
        return SegmentRead(r.data, int(h[api.OFFSET]), int(h[api.NEXT_OFFSET]), int(h[api.START_OFFSET]),
                           int(h[api.LENGTH]), h[api.SEALED] == "true", h[api.END_OF_SEGMENT] == "true")

    def tails(self, scope: str, stream: str, segment_ids: Sequence[int],
              incarnation: int | None = None) -> list[api.SegmentTail]:
        """Start, length and sealed flag of each segment, in the order given: one request per
        ``api.MAX_TAIL_SEGMENTS`` segments. Eventually consistent: a tail may lag a commit by a moment
        (never run ahead of one); a segment created a moment ago may show ``found=False``."""
        tails: list[api.SegmentTail] = []
        ids = list(segment_ids)
        for i in range(0, len(ids), api.MAX_TAIL_SEGMENTS):
            chunk = ids[i:i + api.MAX_TAIL_SEGMENTS]
            data = self.tails_transport.json("GET", _path(scope, stream, "tails"),
                                            params=_with_incarnation(
                                                {"segments": ",".join(str(s) for s in chunk)}, incarnation))
            tails += api.parse_answer(api.SegmentTails, data).tails
        return tails

    def locate(self, scope: str, stream: str, segment: str | int, offset: int,
               max_bytes: int = DEFAULT_READ_SIZE, incarnation: int | None = None) -> api.ReadLocations:
        """Where the bytes from ``offset`` are (see ``fetch``); at the tail, no locations."""
        data = self.read_transport.json("GET", _path(scope, stream, segment) + "/locations",
                                        params=_with_incarnation({"offset": offset, "max_bytes": max_bytes},
                                                                 incarnation))
        return api.parse_answer(api.ReadLocations, data)

    def fetch(self, location: api.ReadLocation) -> bytes:
        """The bytes of one location: inline, or one ranged GET of its presigned URL (plain HTTP, no
        credentials: the URL carries its signature). Transient failures are retried; a refusal (the URL
        expired, the object is gone) is StaleLocation."""
        if location.data is not None:
            return base64.b64decode(location.data)
        for attempt in range(1, FETCH_ATTEMPTS + 1):
            try:
                r = self._objects.request("GET", location.url, headers={"Range": location.range},
                                          timeout=self.read_transport.timeout_s, preload_content=True)
            except urllib3.exceptions.HTTPError as e:
                if attempt == FETCH_ATTEMPTS:
                    raise ServiceUnavailable(f"GET of a segment object failed: {e}") from e
            else:
                if r.status in (200, 206) and len(r.data) == location.length:
                    return r.data
                if r.status < 500 and r.status != 429:
                    raise StaleLocation(f"GET of a segment object answered {r.status}")
                if attempt == FETCH_ATTEMPTS:
                    raise ServiceUnavailable(f"GET of a segment object answered {r.status}")
            time.sleep(random.uniform(0, 0.05 * 2 ** attempt))
        raise AssertionError("unreachable")

    def fetch_later(self, location: api.ReadLocation) -> Future[bytes]:
        """``fetch`` on this client's fetch threads (inline bytes at once)."""
        if location.data is not None:
            done: Future[bytes] = Future()
            done.set_result(base64.b64decode(location.data))
            return done
        return self._threads().submit(self.fetch, location)

    def locate_later(self, scope: str, stream: str, segment: str | int, offset: int, max_bytes: int,
                     incarnation: int | None = None) -> Future[api.ReadLocations]:
        """``locate`` on this client's fetch threads: a reader asks where its next range is while it
        still fetches and decodes the last one."""
        return self._threads().submit(self.locate, scope, stream, segment, offset, max_bytes, incarnation)

    def _threads(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._fetcher is None:
                self._fetcher = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="rillet-fetch")
        return self._fetcher

    def plan(self, scope: str, stream: str, segment: str | int, start: int, end: int,
             incarnation: int | None = None) -> api.ReadPlan:
        """Where the bytes [start, end) are: S3 object ranges and ranges to read through ``read``."""
        data = self.read_transport.json("GET", _path(scope, stream, segment) + "/plan",
                                        params=_with_incarnation({"from": start, "to": end}, incarnation))
        return api.parse_answer(api.ReadPlan, data)

    def info(self, scope: str, stream: str, segment: str | int) -> api.SegmentStatus:
        return api.parse_answer(api.SegmentStatus, self.read_transport.json("GET", _path(scope, stream, segment) + "/info"))


class SegmentEventReader:
    """Reads the events of one segment from an offset, reassembling events split across reads.

    ``offset`` is always an event boundary: the position right after the last event returned. Bytes
    come from the locations the read API answers: up to ``prefetch`` objects are fetched ahead, in
    parallel, while the caller consumes the events of earlier ones.
    """

    def __init__(self, client: SegmentClient, scope: str, stream: str, segment: str | int, offset: int = 0,
                 end_offset: int | None = None, read_size: int = DEFAULT_READ_SIZE, prefetch: int = PREFETCH,
                 incarnation: int | None = None) -> None:
        self.client = client
        self.scope, self.stream, self.segment = scope, stream, segment
        self.incarnation = incarnation  # of the stream the offset was taken on: another one is StreamRecreated
        self.offset = offset
        self.end_offset = end_offset
        self.read_size = read_size
        self.prefetch = max(1, prefetch)
        self._buffer = bytearray()
        self._located = offset  # bytes below it are in the buffer, fetched or being fetched
        self._locations: deque[api.ReadLocation] = deque()  # located, not fetched yet
        self._fetches: deque[tuple[api.ReadLocation, Future[bytes]]] = deque()  # in flight, in offset order
        self._stale_at: int | None = None  # where a fetch last found its location stale
        self._ahead: Future[api.ReadLocations] | None = None  # the next range's locate, asked ahead
        self._ahead_at = offset  # where that locate starts
        self._window = read_size  # how many bytes the next locate asks for (see _locate)
        self.end_of_segment = False  # the locations reached the end of the sealed segment
        self.last_read: SegmentRead | None = None  # the state of the segment as the last answer gave it

    @property
    def finished(self) -> bool:
        """Every event up to the end offset (or the end of a sealed segment) has been returned."""
        if self.end_offset is not None and self.offset >= self.end_offset:
            return True
        return self.end_of_segment and not self._buffer and not self._pending

    @property
    def _pending(self) -> bool:
        return bool(self._fetches or self._locations)

    @property
    def at_tail(self) -> bool:
        """Everything located was returned and the last answer reached the segment's length: only a tail
        check (``SegmentClient.tails``, then ``has_news``) says when reading is worth a request again."""
        return (not self._pending and not self.finished and self.last_read is not None
                and self._located >= self.last_read.length)

    def has_news(self, tail: api.SegmentTail) -> bool:
        """Whether a tail check shows something for this reader: bytes past what it located, the segment
        sealed (its end), truncated past it, or not seen (the next read says which, typed)."""
        return (not tail.found or tail.sealed or tail.length > self._located
                or tail.start_offset > self._located)

    def read_events(self, wait_ms: int = 0) -> list[Frame]:
        """The next whole events (positioned in the segment); empty at the tail after waiting up to ``wait_ms``
        (tail checks backing off, see ``TailBackoff``: no request waits on the server)."""
        return self.read_batch(wait_ms).frames()

    def read_batch(self, wait_ms: int = 0) -> EventBatch:
        """``read_events`` as one :class:`EventBatch` (the events of the next fetched bytes, decoded in
        one pass); empty at the tail after waiting up to ``wait_ms``."""
        deadline = time.monotonic() + wait_ms / 1000
        backoff = TailBackoff(delay_s=TailBackoff.first_s)
        while not self.finished:
            if not self._pending and not self._locate():
                if self.end_of_segment:
                    return self._no_events()
                while True:  # at the tail: wait for news, checking the tail with backoff
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return self._no_events()
                    time.sleep(min(backoff.next_delay(), remaining))
                    if self.has_news(self.client.tails(self.scope, self.stream, [int(self.segment)],
                                                       self.incarnation)[0]):
                        break
                continue
            events = self._next_events()
            if events:
                return events
        return self._no_events()

    def _no_events(self) -> EventBatch:
        return EventBatch([], [], self.offset)

    def _want(self) -> int:
        """How many bytes to locate from ``_located``."""
        want = self._window
        if len(self._buffer) >= HEADER_SIZE:  # a partial event: locate at least the rest of it
            (word,) = FRAME_HEADER.unpack_from(self._buffer, 0)
            want = max(want, HEADER_SIZE + body_size(word) - len(self._buffer))
        if self.end_offset is not None:
            want = min(want, self.end_offset - self._located)
        return want

    def _locate(self) -> bool:
        """Ask where the next bytes are (or take the answer asked ahead); False if there are none yet
        (at the tail, or at the end)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and self._ahead_at == self._located:
            answer = ahead.result()
        else:
            want = self._want()
            if want <= 0:
                return False
            answer = self.client.locate(self.scope, self.stream, self.segment, self._located, want,
                                        self.incarnation)
        self.last_read = SegmentRead(b"", answer.offset, answer.next_offset, answer.start_offset, answer.length,
                                     answer.sealed, answer.end_of_segment)
        self.end_of_segment = answer.end_of_segment
        self._locations.extend(answer.locations)
        self._located = answer.next_offset
        self._window = locate_window(self.read_size, answer)
        if answer.locations and self._more_known():
            # Ask where the next range is at once, on another thread: locating takes longer than fetching
            # a range of large objects, so asking only once they are fetched would leave nothing in flight.
            self._ahead_at = self._located
            self._ahead = self.client.locate_later(self.scope, self.stream, self.segment, self._located,
                                                   self._want(), self.incarnation)
        return bool(answer.locations)

    def _next_events(self) -> EventBatch:
        """Take the next fetched location's bytes and return the whole events they complete."""
        self._fetch_ahead()
        location, fetch = self._fetches.popleft()
        try:
            data = fetch.result()
        except StaleLocation:
            if self._stale_at == location.offset:
                raise  # stale again right after locating afresh: not an expiry, a refusal
            self._stale_at = location.offset
            self._relocate_from(location.offset)
            return self._no_events()
        self._stale_at = None
        if self._buffer:  # the rest of a partial event first
            self._buffer += data
            data = bytes(self._buffer)
        try:
            events, consumed = unframe_batch(data, self.offset)
        except Exception:
            self._buffer = bytearray(data)  # a corrupt frame: kept, so reading again meets it again
            raise
        self._buffer = bytearray(data[consumed:])  # no copy of the fetched bytes unless an event spans two
        self.offset += consumed
        return events

    def _fetch_ahead(self) -> None:
        while self._locations and len(self._fetches) < self.prefetch:
            location = self._locations.popleft()
            self._fetches.append((location, self.client.fetch_later(location)))

    def _more_known(self) -> bool:
        """Bytes past what was located that the last answer already showed (so asking where they are
        ahead costs no request a reader at the tail would not make)."""
        limit = self.last_read.length if self.last_read is not None else 0
        if self.end_offset is not None:
            limit = min(limit, self.end_offset)
        return not self.end_of_segment and self._located < limit

    def _relocate_from(self, offset: int) -> None:
        """Drop what was located from ``offset`` on (URLs expired, or objects released): the next read
        locates it again, and that answer says whether the bytes are gone (Truncated)."""
        self._ahead = None  # its URLs may be as old: located again too
        for _, fetch in self._fetches:
            fetch.cancel()
        self._fetches.clear()
        self._locations.clear()
        self._located = offset
        self.end_of_segment = False
