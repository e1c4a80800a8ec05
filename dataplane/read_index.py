"""The read index of a segment: reads, read plans, locations for readers that fetch S3 objects
themselves, and tail checks. Every read follows the chain of index items (journal.SegmentJournal._scan)
from the head record it read, and checks the claims that record proves uncommitted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from botocore.exceptions import ClientError

from dataplane.deployment import batch_get
from dataplane.journal import (
    BATCH_KEY,
    SegmentJournal,
    _IndexGap,
    validate_segment_name,
)
from dataplane.models import (
    CHUNK_PREFIX,
    META_KEY,
    IndexEntry,
    SegmentMeta,
)
from rillet.errors import (
    InvalidArgument,
    SegmentNotFound,
    Truncated,
)
from rillet.framing import MAX_LOCATE_BYTES, MAX_READ_SIZE


@dataclass(frozen=True)
class ReadResult:
    data: bytes
    offset: int
    next_offset: int
    start_offset: int
    length: int
    sealed: bool

    @property
    def end_of_segment(self) -> bool:
        return self.sealed and self.next_offset >= self.length


@dataclass(frozen=True)
class PlanPart:
    """Bytes [offset, offset + length) of a segment: in S3 at ``object_key`` + ``object_offset``, or
    (no key) inline in the index, to be read through the read API."""

    offset: int
    length: int
    object_key: str | None = None
    object_offset: int = 0


@dataclass(frozen=True)
class SegmentTail:
    """A segment's start, length and sealed flag as an eventually consistent read saw them (``found``
    False: no head record was seen, which for a segment created a moment ago can also mean not yet)."""

    name: str
    found: bool
    start_offset: int = 0
    length: int = 0
    sealed: bool = False


@dataclass(frozen=True)
class Location:
    """Bytes [offset, offset + length) of a segment: ``data`` itself (kept inline in the index), or the
    range at ``object_offset`` of the S3 object ``object_key``."""

    offset: int
    length: int
    object_key: str | None = None
    object_offset: int = 0
    data: bytes | None = None


@dataclass(frozen=True)
class LocateResult:
    """Where the bytes [offset, next_offset) are, with the segment's state as ``read`` reports it."""

    locations: list[Location]
    offset: int
    next_offset: int
    start_offset: int
    length: int
    sealed: bool

    @property
    def end_of_segment(self) -> bool:
        return self.sealed and self.next_offset >= self.length


class _ObjectUnreadable(RuntimeError):
    """S3 refused a GET of an object the index named: gone (a truncation released it after the index
    was read), or a permission problem. Only the head record read afterwards tells which."""

    def __init__(self, error: ClientError) -> None:
        super().__init__(str(error))
        self.error = error


# A GET of a missing key answers 403 AccessDenied, not 404, when the caller may not list the bucket
# (the read role may list only under segments/).
_MISSING_OBJECT_CODES = ("NoSuchKey", "404", "AccessDenied", "403")

MAX_TAILS = 100  # segments per tail check: one BatchGetItem reads at most 100 items


# What one locate answer holds at most: whole S3 objects are what a reader fetches, so an answer ends
# where an index entry ends; inline bytes travel in the answer itself, so they are bounded to keep it
# far below the Function URL's 6 MB; and the parts (each a presigned URL of about 1 KB) are bounded.
MAX_LOCATE_INLINE = 1024 * 1024
MAX_LOCATE_PARTS = 256


class ReadIndex(SegmentJournal):
    """Reads, plans, locations and tail checks of a segment."""

    def _readable(self, segment: str, offset: int, max_bytes: int, cap: int, incarnation: int | None) -> tuple:
        """The head record and the end of the range a read or locate from ``offset`` answers (at most
        ``cap`` bytes), after the checks both make: typed errors for a position of another incarnation of
        the stream, below the start or past the length."""
        if offset < 0 or max_bytes < 1:
            raise InvalidArgument("offset must be >= 0 and max_bytes >= 1")
        meta = self._meta(segment)
        self._check_incarnation(segment, meta, incarnation)
        if offset < meta.start:
            raise Truncated(f"offset {offset} of {segment} is below its start offset {meta.start}",
                            start_offset=meta.start)
        if offset > meta.length:
            raise InvalidArgument(f"offset {offset} is beyond the length {meta.length} of {segment}",
                                  length=meta.length)
        return meta, min(meta.length, offset + min(max_bytes, cap))

    def read(self, segment: str, offset: int, max_bytes: int = MAX_READ_SIZE,
             incarnation: int | None = None) -> ReadResult:
        """Read up to ``max_bytes`` from ``offset``; at the tail, answer empty at once (waiting is the
        reader's: tail checks, see ``tails``, so no invocation is held while nothing arrives). With
        ``incarnation`` (the stream's, as the caller's position names it), StreamRecreated if the
        segment is another incarnation's."""
        meta, end = self._readable(segment, offset, max_bytes, MAX_READ_SIZE, incarnation)
        try:
            data = self._read_range(segment, offset, end, self._may_have_chunks(meta, offset), meta) if end > offset else b""
        except (_IndexGap, _ObjectUnreadable) as gone:
            # A truncation released the range after the head record was read: say so, typed. Otherwise
            # (a permission problem, a missing object above the start) it stays an error.
            self._raise_if_gone(segment, offset, meta)
            if isinstance(gone, _ObjectUnreadable):
                raise gone.error from None
            raise
        return ReadResult(data, offset, end, meta.start, meta.length, meta.sealed)

    def tails(self, segments: list[str], incarnation: int | None = None) -> list[SegmentTail]:
        """Each segment's start, length and sealed flag, in the order asked, from one eventually
        consistent BatchGetItem of the head records (half a read unit each): the cheap check a waiting
        reader makes. It may lag a commit by a moment; readers read by offset, so a late answer only
        delays them, never misleads them."""
        if len(segments) > MAX_TAILS:
            raise InvalidArgument(f"at most {MAX_TAILS} segments per tail check, got {len(segments)}")
        for name in segments:
            validate_segment_name(name)
        wanted = list(dict.fromkeys(segments))
        seen = {meta.pk: meta for meta in batch_get(
            SegmentMeta, [(name, META_KEY) for name in wanted], consistent_read=False,
            attributes_to_get=[SegmentMeta.pk, SegmentMeta.sk, SegmentMeta.kind, SegmentMeta.length,
                               SegmentMeta.start, SegmentMeta.sealed, SegmentMeta.stream_incarnation])}
        for name, meta in seen.items():
            self._check_incarnation(name, meta, incarnation)
        return [SegmentTail(name, True, int(seen[name].start), int(seen[name].length), bool(seen[name].sealed))
                if name in seen else SegmentTail(name, False) for name in segments]

    def locate(self, segment: str, offset: int, max_bytes: int = MAX_LOCATE_BYTES,
               max_inline: int = MAX_LOCATE_INLINE, max_parts: int = MAX_LOCATE_PARTS,
               incarnation: int | None = None) -> LocateResult:
        """Where the bytes from ``offset`` are, for a reader that fetches S3 objects itself: like ``read``
        (same checks, same answer at the tail), but answering locations rather than bytes.

        The answer ends where an index entry ends (unless the first entry alone exceeds ``max_bytes``),
        so a reader fetches each object once, whole, and the next answer starts at the next object;
        adjacent ranges of one object are one location. It also ends before ``max_inline`` inline bytes
        or ``max_parts`` locations are exceeded (always at least one location)."""
        meta, end = self._readable(segment, offset, max_bytes, MAX_LOCATE_BYTES, incarnation)
        locations: list[Location] = []
        if end > offset:
            try:
                covering = self._covering(segment, offset, end, self._may_have_chunks(meta, offset),
                                          int(meta.created_ms))
                self._check_committed(segment, offset, end, covering, meta)
                leaves = list(self._leaves(covering))
            except _IndexGap:
                self._raise_if_gone(segment, offset, meta)
                raise
            locations = self._bounded(leaves, end, max_inline, max_parts)
        next_offset = locations[-1].offset + locations[-1].length if locations else offset
        return LocateResult(locations, offset, next_offset, meta.start, meta.length, meta.sealed)

    def _leaves(self, covering: list[tuple[IndexEntry, int, int]], shift: int = 0) -> Iterator[tuple[Location, int]]:
        """The locations of a covering, merged segments expanded, each with the end of the entry it is
        part of (in the outer segment's offsets)."""
        for entry, lo, hi in covering:
            if entry.source is not None:
                yield from self._leaves(self._covering(entry.source, lo - entry.offset, hi - entry.offset),
                                        shift + entry.offset)
            elif entry.data is not None:
                yield Location(lo + shift, hi - lo, data=entry.data[lo - entry.offset:hi - entry.offset]), \
                    entry.end + shift
            else:
                yield Location(lo + shift, hi - lo, entry.object_key, entry.object_offset + lo - entry.offset), \
                    entry.end + shift

    @staticmethod
    def _bounded(leaves: list[tuple[Location, int]], end: int, max_inline: int, max_parts: int) -> list[Location]:
        """The leading locations within the bounds (see ``locate``), adjacent ranges of one object merged."""
        out: list[Location] = []
        inline = 0
        for location, entry_end in leaves:
            if out and entry_end > end:
                break  # an entry cut by the window: the next answer starts at it, and fetches it whole
            if out and location.data is not None and inline + location.length > max_inline:
                break
            last = out[-1] if out else None
            if last is not None and last.object_key is not None and location.object_key == last.object_key \
                    and last.object_offset + last.length == location.object_offset:
                out[-1] = replace(last, length=last.length + location.length)
                continue
            if last is not None and last.data is not None and location.data is not None:
                out[-1] = replace(last, length=last.length + location.length, data=last.data + location.data)
                inline += location.length
                continue
            if len(out) >= max_parts:
                break
            out.append(location)
            inline += len(location.data or b"")
        return out

    def _raise_if_gone(self, segment: str, offset: int, meta: SegmentMeta) -> None:
        """After a gap in the index under a read: the typed error if the segment was deleted or
        truncated past ``offset`` since ``meta`` was read (otherwise the caller raises the gap)."""
        now = self._meta(segment)
        if now.created_ms != meta.created_ms:
            raise SegmentNotFound(f"segment {segment} was deleted while it was read") from None
        if offset < now.start:
            raise Truncated(f"offset {offset} of {segment} is below its start offset {now.start}",
                            start_offset=now.start) from None

    def plan(self, segment: str, start: int, end: int, incarnation: int | None = None) -> list[PlanPart]:
        """Where the bytes [start, end) of a sealed-or-committed range are, for readers that fetch S3
        objects themselves (Spark executors): S3 ranges, and inline ranges to read through the read API.

        Every part starts where an index entry (an append block) starts or at ``start``, so part
        boundaries inside the range are event boundaries: a batch reader may split there.
        """
        meta = self._meta(segment)
        self._check_incarnation(segment, meta, incarnation)
        if start < meta.start:
            raise Truncated(f"offset {start} of {segment} is below its start offset {meta.start}",
                            start_offset=meta.start)
        if end > meta.length or start > end:
            raise InvalidArgument(f"range [{start}, {end}) is not within the length {meta.length} of {segment}")
        if start == end:
            return []  # no index entry covers an empty range (an empty segment has none at all)
        return self._plan(segment, start, end, 0, self._may_have_chunks(meta, start), int(meta.created_ms))

    def _plan(self, segment: str, start: int, end: int, shift: int, chunked: bool = True,
              incarnation: int | None = None) -> list[PlanPart]:
        parts: list[PlanPart] = []
        for entry, lo, hi in self._covering(segment, start, end, chunked, incarnation):
            if entry.source is not None:
                parts += self._plan(entry.source, lo - entry.offset, hi - entry.offset, shift + entry.offset)
            elif entry.object_key is not None:
                parts.append(PlanPart(lo + shift, hi - lo, entry.object_key, entry.object_offset + lo - entry.offset))
            else:
                parts.append(PlanPart(lo + shift, hi - lo))
        return parts

    def _read_range(self, segment: str, start: int, end: int, chunked: bool = True,
                    meta: SegmentMeta | None = None) -> bytes:
        """The bytes [start, end); with ``meta`` (the head record the range was checked against), an entry
        that record proves uncommitted counts as a gap (see ``_not_committed_in``)."""
        covering = self._covering(segment, start, end, chunked, None if meta is None else int(meta.created_ms))
        if meta is not None:
            self._check_committed(segment, start, end, covering, meta)
        parts: list[bytes] = []
        pending: list[tuple[str, int, int]] = []  # adjacent ranges of one S3 object, fetched in one GET

        def flush() -> None:
            if pending:
                key, lo, hi = pending[0][0], pending[0][1], pending[-1][2]
                parts.append(self._get_object_range(key, lo, hi))
                pending.clear()

        for entry, lo, hi in covering:
            if entry.data is not None:
                flush()
                parts.append(entry.data[lo - entry.offset:hi - entry.offset])
            elif entry.object_key is not None:
                obj_lo = entry.object_offset + lo - entry.offset
                obj_hi = entry.object_offset + hi - entry.offset
                if pending and (pending[-1][0] != entry.object_key or pending[-1][2] != obj_lo):
                    flush()
                pending.append((entry.object_key, obj_lo, obj_hi))
            else:
                flush()
                parts.append(self._read_range(entry.source, lo - entry.offset, hi - entry.offset))
        flush()
        return b"".join(parts)

    def _check_committed(self, segment: str, start: int, end: int, covering: list[tuple[IndexEntry, int, int]],
                         meta: SegmentMeta) -> None:
        """Raise _IndexGap if an entry of the covering is a claim that ``meta`` (the head record the range
        was checked against) proves uncommitted, or, for entries of writers it does not list, if a
        truncation freed keys of the range since it was read (only then can a stale claim sit below the
        length)."""
        proofs = {self._not_committed_in(meta, entry) for entry, _, _ in covering}
        if True in proofs or (None in proofs and self._meta(segment).start > start):
            raise _IndexGap(f"an entry of {segment} in [{start}, {end}) is a claim made after the head record was read")

    @staticmethod
    def _not_committed_in(meta: SegmentMeta, entry: IndexEntry) -> bool | None:
        """Whether ``meta`` proves that ``entry``, below its length, is not the committed block there: the
        writer's events it holds were not all appended yet, or it is the writer's last block, committed
        at another offset. Such an entry is a stale appender's claim on a key that a truncation racing
        the read freed (the reader then answers Truncated). Costs no request: the head record is at hand.
        None when the head record does not list the entry's writer (it lists only the most recent few).
        Not caught: a stale claim of an older block of a writer that appended since (see docs)."""
        if entry.sk.startswith(CHUNK_PREFIX) or entry.source is not None or entry.writer == BATCH_KEY:
            # Chunks are never claimed; a merge names its source, de-duplicated by it; a sub-log batch's
            # entries are written with the advance that commits them (dataplane/sublog_path.py).
            return False
        state = meta.writers.as_dict().get(entry.writer) if meta.writers else None
        if not state:
            return None
        if entry.last > int(state["l"]):
            return True
        return (int(state["f"]), int(state["l"])) == (entry.first, entry.last) and int(state["o"]) != entry.offset

    @staticmethod
    def _may_have_chunks(meta: SegmentMeta, offset: int) -> bool:
        """Whether a chunk may cover bytes at or above ``offset`` below the length read with ``meta``:
        not if no chunk reaches that far and no inline entry is left that tiering could pack meanwhile.
        Reads of segments written in large blocks skip the chunk query that way."""
        return meta.inline_bytes > 0 or (meta.chunk_end or 0) > offset

    def _get_object_range(self, key: str, lo: int, hi: int) -> bytes:
        try:
            body = self.deployment.s3.get_object(Bucket=self.deployment.bucket, Key=key, Range=f"bytes={lo}-{hi - 1}")
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _MISSING_OBJECT_CODES:
                raise _ObjectUnreadable(e) from e
            raise
        return body["Body"].read()
