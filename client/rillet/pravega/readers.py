"""pravega_client's reader groups and readers: ``StreamReaderGroup`` creates ``StreamReader``s, which hand
out a segment's buffered events as a ``Slice`` (see the package's docstring for how slices behave)."""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rillet.errors import IllegalState
from rillet.pravega.errors import raising
from rillet.reader_group import EventStreamReader, GroupEventRead, ReaderGroup
from rillet.serializers import BytesSerializer
from rillet.stream_cut import StreamCut

_ACQUIRE_S = 1.0  # pravega_client's get_segment_slice_async yields an empty slice after this without data
_POLL_S = 0.1  # the pause between a waiting acquisition's looks at the reader


class StreamReaderGroupConfig:
    """The streams (of one scope) a reader group reads, all from their head or all from their tail."""

    def __init__(self, read_from_tail: bool, scope_name: str, *stream_names: str) -> None:
        if not stream_names:
            raise ValueError("No Pravega Streams present in the ReaderGroupConfiguration")
        self.read_from_tail = bool(read_from_tail)
        self.scope_name = scope_name
        self.stream_names = list(stream_names)

    def __repr__(self) -> str:
        return (f"StreamReaderGroupConfig(read_from_tail={self.read_from_tail}, scope={self.scope_name!r}, "
                f"streams={self.stream_names!r})")


class StreamCuts:
    """A position in a stream: an offset for each segment across the key space."""

    def __init__(self, cut: StreamCut) -> None:
        self.cut = cut

    def get_segment_offset_map(self) -> dict[int, int]:
        return dict(self.cut.offsets)

    def __repr__(self) -> str:
        return f"StreamCuts({self.cut.to_text()!r})"


class StreamReaderGroup:
    def __init__(self, group: ReaderGroup, streams: list[str]) -> None:
        self.group = group
        self.streams = streams

    def create_reader(self, reader_name: str) -> StreamReader:
        """A new reader of the group; a name already online in it is refused (AlreadyExists, also a
        ValueError), as pravega_client does: by the server, at the join, so of two created at once with
        one name exactly one gets in."""
        with raising(ValueError):
            reader = _SlicingReader(self.group.connection, self.group.scope, self.group.name, reader_name,
                                    BytesSerializer())
        return StreamReader(reader)

    def reader_offline(self, reader_name: str) -> None:
        """Hand the reader's segments back to the group at its last reported position (idempotent)."""
        with raising(ValueError):
            self.group.reader_offline(reader_name, None)

    def get_streamcut(self) -> StreamCuts:
        """The group's position in its (first) stream, as of its readers' last reports."""
        with raising(ValueError):
            cuts = self.group.get_stream_cuts()
            cut = next((cuts[s] for s in self.streams if s in cuts), None) or next(iter(cuts.values()), None)
            if cut is None:
                raise IllegalState(f"reader group {self.group.name} has no stream cut")
            return StreamCuts(cut)

    def __repr__(self) -> str:
        return f"StreamReaderGroup(ReaderGroup: {self.group.scope}/{self.group.name}, streams: {self.streams})"


_READY = object()  # peeking: some segment has buffered events
_GONE = object()  # a slice's segment has no buffered events (any more)


class _SlicingReader(EventStreamReader[bytes]):
    """The group reader, whose choice of the next buffered event can be narrowed for slices.

    ``_only`` None reads as usual; ``_READY`` only peeks (read_next_event returns ``_READY`` once any
    segment has buffered events, after syncing and fetching as usual); a segment key returns the
    next buffered event of that segment only, or ``_GONE``.
    """

    _only: object = None

    def _next_buffered(self) -> Any:
        only = self._only
        if only is None:
            return super()._next_buffered()
        if only is _READY:
            return _READY if any(h.events for h in self._held.values()) else None
        held = self._held.get(only)
        if held is None or not held.events:
            return _GONE
        self._next = sorted(self._held).index(only)  # the base class takes the next event from here
        return super()._next_buffered()


class EventData:
    """An event of a slice: its bytes and its offset in its segment."""

    __slots__ = ("_data", "_offset")

    def __init__(self, data: bytes, offset: int) -> None:
        self._data, self._offset = data, offset

    def data(self) -> bytes:
        return self._data

    def offset(self) -> int:
        return self._offset

    def __repr__(self) -> str:
        return f"EventData(offset {self._offset} data: {self._data!r})"


class Slice:
    """Events of one segment, in order; iterate it (or call ``next``) to consume them."""

    def __init__(self, reader: StreamReader | None, segment: str | None, count: int) -> None:
        self._reader = reader
        self.segment = segment
        self._remaining = count

    def __iter__(self) -> Slice:
        return self

    def __next__(self) -> EventData:
        event = self._reader._take(self) if self._remaining > 0 and self._reader is not None else None
        if event is None:
            self._remaining = 0
            raise StopIteration
        self._remaining -= 1
        return event

    def _end(self) -> None:
        self._remaining = 0

    def __repr__(self) -> str:
        return f"Slice(segment={self.segment!r}, remaining={self._remaining})"


class StreamReader:
    """A reader of a reader group, handing out its data as per-segment slices."""

    def __init__(self, reader: _SlicingReader) -> None:
        self.reader = reader
        self._lock = threading.Lock()
        self._live: weakref.WeakValueDictionary[str, Slice] = weakref.WeakValueDictionary()
        self._turn = 0
        self._offline = False
        # The reader's own thread for the HTTP of async acquisitions: the loop's default executor stays
        # free, however many readers wait on an idle stream.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rillet-slice")

    def get_segment_slice_async(self) -> asyncio.Future[Slice]:
        """A future (a task of the running loop) of the next slice: empty if none is ready within about
        a second, as in pravega_client. Cancelling it ends the wait; nothing is lost, since events are
        only taken by iterating a slice."""
        return asyncio.ensure_future(self._acquire(_ACQUIRE_S))

    async def _acquire(self, timeout_s: float) -> Slice:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            with raising(OSError):
                self._check_online()  # before submitting: reader_offline shuts the executor down
            found = await loop.run_in_executor(self._executor, self._look)
            remaining = deadline - loop.time()
            if found is not None or remaining <= 0:
                return found or Slice(None, None, 0)
            await asyncio.sleep(min(_POLL_S, remaining))

    def get_segment_slice(self, timeout_ms: int | None = None) -> Slice:
        """Wait for a slice (at most ``timeout_ms``, then return an empty one; forever if None)."""
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while True:
            found = self._look()
            if found is not None:
                return found
            remaining = _POLL_S if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return Slice(None, None, 0)
            time.sleep(min(_POLL_S, remaining))

    def _look(self) -> Slice | None:
        """A slice of a segment with buffered events, after one read of the reader's segments without
        waiting; None if there is none."""
        with self._lock, raising(OSError):
            self._check_online()
            segment = self._buffered_segment()
            if segment is None:
                self._read(_READY, 0)
                segment = self._buffered_segment()
            return None if segment is None else self._slice(segment)

    def release_segment(self, slice: Slice) -> None:
        """Hand the slice back: events not taken from it are served again by the next slices."""
        with self._lock:
            if slice.segment is not None and self._live.get(slice.segment) is slice:
                del self._live[slice.segment]
            slice._end()

    def reader_offline(self) -> None:
        """Leave the group; its segments go back to the group after the last events taken from slices."""
        with self._lock, raising(OSError):
            if not self._offline:
                self._offline = True
                self._executor.shutdown(wait=False)
                self.reader.close()

    def _check_online(self) -> None:
        if self._offline:
            raise IllegalState(f"reader {self.reader.reader_id} is offline")

    def _read(self, only: object, timeout_ms: int) -> GroupEventRead[bytes] | object | None:
        self.reader._only = only
        try:
            return self.reader.read_next_event(timeout_ms=timeout_ms)
        finally:
            self.reader._only = None

    def _buffered_segment(self) -> str | None:
        """A segment with buffered events, preferring those without an unfinished slice, in turn."""
        keys = sorted(k for k, h in self.reader._held.items() if h.events)
        if not keys:
            return None
        free = [k for k in keys if (s := self._live.get(k)) is None or s._remaining == 0]
        candidates = free or keys
        self._turn += 1
        return candidates[self._turn % len(candidates)]

    def _slice(self, segment: str) -> Slice:
        previous = self._live.get(segment)
        if previous is not None:
            previous._end()  # superseded: its events not taken are in the new slice
        new = Slice(self, segment, len(self.reader._held[segment].events))
        self._live[segment] = new
        return new

    def _take(self, slice: Slice) -> EventData | None:
        with self._lock, raising(OSError):
            if self._offline or self._live.get(slice.segment) is not slice:
                return None
            for _ in range(16):  # checkpoint markers first: each call passes one
                read = self._read(slice.segment, 0)
                if isinstance(read, GroupEventRead):
                    if read.is_checkpoint:
                        continue
                    return EventData(read.event, read.pointer.offset)
                return None
            return None

    def __repr__(self) -> str:
        return f"StreamReader(reader: {self.reader.reader_id}, group: {self.reader.group.scope}/{self.reader.group.name})"
