"""The data path of one segment: appends, reads and the events inside the bytes read."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from rillet import api
from rillet.framing import FRAME_HEADER, HEADER_SIZE, MAX_READ_SIZE, unframe
from rillet.transport import Transport

DEFAULT_READ_SIZE = MAX_READ_SIZE  # a whole 4 MiB block per request when it is there


def _path(scope: str, stream: str, segment: str | int) -> str:
    return f"/v1/segments/{quote(scope, safe='')}/{quote(stream, safe='')}/{segment}"


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
    """Append, read and describe segments through the append and read APIs."""

    def __init__(self, append: Transport, read: Transport) -> None:
        self.append_transport = append
        self.read_transport = read

    def append(self, scope: str, stream: str, segment: str | int, writer_id: str, first_event: int,
               event_count: int, block: bytes, expected_offset: int | None = None,
               raw: bool = False, after: int | None = None, block_age_ms: int | None = None) -> api.AppendAck:
        """Append a block; with ``after`` (the writer's last event number before this block, -1 for its
        first block) the server commits it only after that event, whatever order requests arrive in.
        ``block_age_ms`` (since the block was first sent) lets a server that forgot the writer id refuse
        a resend that may already be stored (WriterExpired) rather than store it twice."""
        headers = {api.WRITER_ID: writer_id, api.EVENT_NUMBER: str(first_event), api.EVENT_COUNT: str(event_count)}
        if after is not None:
            headers[api.AFTER_EVENT] = str(after)
        if block_age_ms is not None:
            headers[api.BLOCK_AGE_MS] = str(block_age_ms)
        if expected_offset is not None:
            headers[api.EXPECTED_OFFSET] = str(expected_offset)
        if raw:
            headers[api.RAW_BYTES] = "true"
        data = self.append_transport.json("POST", _path(scope, stream, segment), body=block, headers=headers)
        return api.AppendAck.model_validate(data)

    def read(self, scope: str, stream: str, segment: str | int, offset: int, max_bytes: int = DEFAULT_READ_SIZE,
             wait_ms: int = 0) -> SegmentRead:
        r = self.read_transport.request(
            "GET", _path(scope, stream, segment),
            params={"offset": offset, "max_bytes": min(max_bytes, MAX_READ_SIZE), "wait_ms": wait_ms or None},
            timeout_s=self.read_transport.timeout_s + wait_ms / 1000)
        h = r.headers
        return SegmentRead(r.data, int(h[api.OFFSET]), int(h[api.NEXT_OFFSET]), int(h[api.START_OFFSET]),
                           int(h[api.LENGTH]), h[api.SEALED] == "true", h[api.END_OF_SEGMENT] == "true")

    def plan(self, scope: str, stream: str, segment: str | int, start: int, end: int) -> api.ReadPlan:
        """Where the bytes [start, end) are: S3 object ranges and ranges to read through ``read``."""
        data = self.read_transport.json("GET", _path(scope, stream, segment) + "/plan",
                                        params={"from": start, "to": end})
        return api.ReadPlan.model_validate(data)

    def info(self, scope: str, stream: str, segment: str | int) -> api.SegmentStatus:
        return api.SegmentStatus.model_validate(self.read_transport.json("GET", _path(scope, stream, segment) + "/info"))


class SegmentEventReader:
    """Reads the events of one segment from an offset, reassembling events split across reads.

    ``offset`` is always an event boundary: the position right after the last event returned.
    """

    def __init__(self, client: SegmentClient, scope: str, stream: str, segment: str | int, offset: int = 0,
                 end_offset: int | None = None, read_size: int = DEFAULT_READ_SIZE) -> None:
        self.client = client
        self.scope, self.stream, self.segment = scope, stream, segment
        self.offset = offset
        self.end_offset = end_offset
        self.read_size = read_size
        self._buffer = bytearray()
        self.end_of_segment = False
        self.last_read: SegmentRead | None = None

    @property
    def finished(self) -> bool:
        """Every event up to the end offset (or the end of a sealed segment) has been returned."""
        if self.end_offset is not None and self.offset >= self.end_offset:
            return True
        return self.end_of_segment and not self._buffer

    def read_events(self, wait_ms: int = 0) -> list[tuple[int, bytes]]:
        """The next whole events as (offset, bytes); empty at the tail after waiting up to ``wait_ms``."""
        if self.finished:
            return []
        fetch_from = self.offset + len(self._buffer)
        want = self.read_size
        if len(self._buffer) >= HEADER_SIZE:  # a partial event: fetch at least the rest of it
            (size,) = FRAME_HEADER.unpack_from(self._buffer, 0)
            want = max(want, HEADER_SIZE + size - len(self._buffer))
        if self.end_offset is not None:
            want = min(want, self.end_offset - fetch_from)
        if want > 0:
            result = self.client.read(self.scope, self.stream, self.segment, fetch_from, want, wait_ms)
            self.last_read = result
            self._buffer += result.data
            self.end_of_segment = result.end_of_segment
        frames, consumed = unframe(self._buffer)
        events = [(self.offset + pos, payload) for pos, payload in frames]
        del self._buffer[:consumed]
        self.offset += consumed
        return events
