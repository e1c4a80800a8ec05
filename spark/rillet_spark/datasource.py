"""The ``rillet`` PySpark data source (Spark 4 Python Data Source API): batch and streaming reads,
transactional batch and streaming writes.

Reading
    ``spark.read.format("rillet").option("endpoint", url).option("stream", "scope/stream").load()``
    gives one row per event: ``stream``, ``segment_id``, ``offset`` (of the event's frame, so
    ``(stream, segment_id, offset)`` locates it), ``event`` (bytes, or a string with
    ``encoding=utf-8``), and the ``routing_key`` and ``timestamp`` its writer kept with it
    (``EventWriterConfig.store_key_and_time``; null for events written without); ``streams`` (a
    comma-separated list) reads several streams in one source, and ``stream`` says which one a row
    came from. The driver asks the controller for the segment ranges
    between two stream cuts (``start_cut``/``end_cut`` in text form; head and tail by default) and, for
    each range, its *read plan*: which bytes are S3 object ranges and which are small appends still
    inline in the index. Ranges larger than ``max_partition_bytes`` are split at plan-part boundaries,
    which are event boundaries. Executors build their clients inside ``read()``, fetch S3 ranges directly
    (``s3_endpoint`` for a non-AWS endpoint; EMR's instance role otherwise) and inline bytes through
    the read API.

Streaming reads
    Offsets are stream cuts, one per stream. Each micro-batch covers the range between two cuts chosen by the
    controller's ``next-cut`` so that a batch never holds both a segment's and its successor's events:
    per-key order holds across scaling when batches are consumed in order. A batch is re-readable
    (the bytes between two cuts never change). With ``subscriber=<group>`` the query registers as a
    consumption-based retention subscriber (a MANUAL_RELEASE_AT_USER_STREAMCUT reader group) and
    ``commit(end)`` publishes each committed cut, so retention can truncate behind it.

Writing
    Every task writes its rows (column ``event``, optional ``routing_key`` and ``timestamp``) into a
    transaction of its own, keeping each event's key and time unless ``store_key_and_time=false``, and
    returns its id; the driver's commit commits them all, abort aborts them all (a failed task
    aborts its own), so a failed job leaves nothing visible. Streaming writes commit a batch's
    transactions through a sink record (``sink_id``, by default derived from the query's checkpoint
    location), exactly once per batch id; a batch id older than the sink's last is an error.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

try:  # Spark 4.2 and later: Trigger.AvailableNow for Python sources (admission control comes with it)
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    _AVAILABLE_NOW: tuple = (SupportsTriggerAvailableNow,)
except ImportError:  # Spark 4.0 and 4.1
    _AVAILABLE_NOW = ()

DEFAULT_PARTITION_BYTES = 64 * 1024 * 1024
DEFAULT_LEASE_MS = 120_000


# A read's columns: Kafka's source has the key and the timestamp too (null for frames that kept neither).
COLUMNS = {"stream": "string", "segment_id": "long", "offset": "long", "event": None, "routing_key": "string",
           "timestamp": "timestamp"}

# What Spark itself adds to a source's or sink's options.
_SPARK_OPTIONS = {"checkpointlocation", "path"}


@dataclass
class _Options:
    endpoint: str
    streams: list[tuple[str, str]]  # (scope, stream), at least one; several only for reads
    encoding: str = "binary"
    start_cut: str | None = None
    end_cut: str | None = None
    starting_position: str = "head"
    starting_timestamp_ms: int | None = None
    ending_timestamp_ms: int | None = None
    max_bytes_per_trigger: int | None = None
    max_events_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_partition_bytes: int = DEFAULT_PARTITION_BYTES
    s3_endpoint: str | None = None
    subscriber: str | None = None
    sink_id: str | None = None
    checkpoint_location: str | None = None
    lease_ms: int = DEFAULT_LEASE_MS
    event_column: str = "event"
    routing_key_column: str = "routing_key"
    timestamp_column: str = "timestamp"
    store_key_and_time: bool = True

    @classmethod
    def parse(cls, options: dict, write: bool = False) -> _Options:
        given = {k.lower(): v for k, v in options.items()}
        known = {"endpoint", "stream", "scope"} | {f.lower() for f in cls.__dataclass_fields__} - {"checkpoint_location"}
        unknown = sorted(set(given) - known - _SPARK_OPTIONS)
        if unknown:
            raise ValueError(f"the rillet data source has no option {', '.join(map(repr, unknown))}; "
                             f"its options are: {', '.join(sorted(known))}")
        get = given.get
        endpoint = get("endpoint")
        if get("stream") and get("streams"):
            raise ValueError('options "stream" and "streams" both name what to read: give one')
        names = [name.strip() for name in (get("streams") or get("stream") or "").split(",") if name.strip()]
        streams = []
        for name in names:
            scope, stream = name.split("/", 1) if "/" in name else (get("scope"), name)
            if not scope or not stream:
                break
            streams.append((scope, stream))
        if not endpoint or not names or len(streams) != len(names):
            raise ValueError('the rillet data source needs options "endpoint" and "stream" ("scope/stream"; or '
                             '"streams", a comma-separated list of them, for reads)')
        if write and len(streams) > 1:
            raise ValueError('a write goes to one stream: option "stream", not "streams"')
        if len(set(streams)) != len(streams):
            raise ValueError(f'option "streams" names a stream twice: {get("streams")!r}')
        encoding = (get("encoding") or "binary").lower()
        if encoding not in ("binary", "utf-8", "utf8"):
            raise ValueError('option "encoding" is "binary" or "utf-8"')
        starting_position = (get("starting_position") or "head").lower()
        if starting_position not in ("head", "tail"):
            raise ValueError('option "starting_position" is "head" or "tail"')
        starts = [name for name in ("start_cut", "starting_position", "starting_timestamp_ms") if get(name)]
        if len(starts) > 1:
            raise ValueError(f"options {' and '.join(starts)} both say where to start: give one")
        fail_on_data_loss = _boolean(get, "fail_on_data_loss")
        if get("end_cut") and get("ending_timestamp_ms"):
            raise ValueError("options end_cut and ending_timestamp_ms both say where to end: give one")
        parsed = cls(endpoint=endpoint, streams=streams, encoding=encoding,
                     start_cut=get("start_cut"), end_cut=get("end_cut"), starting_position=starting_position,
                     starting_timestamp_ms=_integer(get, "starting_timestamp_ms"),
                     ending_timestamp_ms=_integer(get, "ending_timestamp_ms"),
                     max_bytes_per_trigger=_integer(get, "max_bytes_per_trigger", minimum=1),
                     max_events_per_trigger=_integer(get, "max_events_per_trigger", minimum=1),
                     fail_on_data_loss=fail_on_data_loss,
                     min_partitions=_integer(get, "min_partitions", minimum=1),
                     max_partition_bytes=_integer(get, "max_partition_bytes", minimum=1) or DEFAULT_PARTITION_BYTES,
                     s3_endpoint=get("s3_endpoint"), subscriber=get("subscriber"),
                     sink_id=get("sink_id"), checkpoint_location=get("checkpointlocation"),
                     lease_ms=_integer(get, "lease_ms", minimum=1) or DEFAULT_LEASE_MS,
                     event_column=get("event_column") or "event",
                     routing_key_column=get("routing_key_column") or "routing_key",
                     timestamp_column=get("timestamp_column") or "timestamp",
                     store_key_and_time=_boolean(get, "store_key_and_time"))
        parsed._given_cuts("start_cut")  # a cut naming no stream of the source is an error before any read
        parsed._given_cuts("end_cut")
        return parsed

    @property
    def text(self) -> bool:
        return self.encoding != "binary"

    @property
    def names(self) -> list[str]:
        return [f"{scope}/{stream}" for scope, stream in self.streams]

    @property
    def target(self) -> tuple[str, str]:
        """The stream a write goes to (a write's options name one: ``parse(write=True)``)."""
        return self.streams[0]

    def connection(self):
        from rillet.connection import Connection

        return Connection(self.endpoint)

    def _given_cuts(self, option: str) -> dict:
        """The cuts of ``start_cut`` or ``end_cut`` (comma-separated text forms, each naming its stream),
        by stream name."""
        from rillet.stream_cut import StreamCut

        cuts = {}
        for text in filter(None, (part.strip() for part in (getattr(self, option) or "").split(","))):
            cut = StreamCut.from_text(text)
            name = f"{cut.scope}/{cut.stream}"
            if name not in self.names or name in cuts:
                raise ValueError(f'option "{option}": the cut of {name} is not one per stream of the source '
                                 f"({', '.join(self.names)})")
            cuts[name] = cut
        return cuts

    def start(self, connection, scope: str, stream: str):
        """The cut a stream is read from: its ``start_cut``, the cut at ``starting_timestamp_ms``, or
        head/tail."""
        from rillet.stream_cut import StreamCut

        controller = connection.controller
        given = self._given_cuts("start_cut").get(f"{scope}/{stream}")
        if given is not None:
            return given
        if self.starting_timestamp_ms is not None:
            cut = controller.cut_at_time(scope, stream, self.starting_timestamp_ms)
            return StreamCut.of(scope, stream, cut.positions, cut.incarnation)
        if self.starting_position == "tail":
            info = controller.stream_info(scope, stream)
            return StreamCut.of(scope, stream, info.tail, info.created_at_ms)
        head = controller.head_cut(scope, stream)
        return StreamCut.of(scope, stream, head.positions, head.incarnation)

    def end(self, connection, scope: str, stream: str):
        """The cut a batch read of a stream ends at (None: the tail)."""
        from rillet.stream_cut import StreamCut

        given = self._given_cuts("end_cut").get(f"{scope}/{stream}")
        if given is not None:
            return given
        if self.ending_timestamp_ms is not None:
            cut = connection.controller.cut_at_time(scope, stream, self.ending_timestamp_ms)
            return StreamCut.of(scope, stream, cut.positions, cut.incarnation)
        return None


def _boolean(get, name: str) -> bool:
    value = (get(name) or "true").lower()
    if value not in ("true", "false"):
        raise ValueError(f'option "{name}" is "true" or "false", not {get(name)!r}')
    return value == "true"


def _integer(get, name: str, minimum: int = 0) -> int | None:
    value = get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f'option "{name}" is a whole number, not {value!r}') from None
    if number < minimum:
        raise ValueError(f'option "{name}" is at least {minimum}, not {number}')
    return number


@dataclass
class RangePartition(InputPartition):
    """Bytes [start, end) of one segment with their read plan; plain data, so it pickles."""

    scope: str
    stream: str
    segment_id: int
    start: int
    end: int
    bucket: str
    parts: list[tuple[int, int, str | None, int]] = field(default_factory=list)  # offset, length, key, key offset
    incarnation: int | None = None  # of the stream the offsets are of (rillet.StreamCut): reads name it

    def __post_init__(self) -> None:
        super().__init__(self.segment_id)


@dataclass(frozen=True)
class _Piece:
    """The bytes [start, end) of a segment of a stream: what a read or a micro-batch takes from it."""

    scope: str
    stream: str
    segment_id: int
    start: int
    end: int
    incarnation: int | None = None  # of the stream the offsets are of: plans and reads name it

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def _pieces(scope: str, stream: str, slices: list, incarnation: int | None = None) -> list[_Piece]:
    return [_Piece(scope, stream, s.segment.segment_id, s.start_offset, s.end_offset, incarnation) for s in slices]


def _split_size(options: _Options, pieces: list[_Piece], max_bytes: int | None) -> int | None:
    """The most bytes a partition of ``pieces`` holds: ``max_bytes``, or less where ``min_partitions``
    asks for more partitions."""
    if not options.min_partitions:
        return max_bytes
    wanted = max(1, -(-sum(piece.size for piece in pieces) // options.min_partitions))
    return wanted if max_bytes is None else min(max_bytes, wanted)


def _partitions(options: _Options, pieces: list[_Piece], max_bytes: int | None) -> list[RangePartition]:
    """One partition per piece, split at plan-part boundaries (event boundaries) so that none holds more
    than ``max_bytes`` (a single larger part stays whole). Unless ``min_partitions`` asks for a count, a
    part of less than an eighth of ``max_bytes`` stays with its neighbour even past the limit (by at most
    that eighth), as Spark's file sources pack small files: a task of a few bytes (the writer's first,
    small block; the tail still inline in the index) costs as much to launch as a task of megabytes."""
    connection = options.connection()
    slack = max_bytes // 8 if max_bytes is not None and not options.min_partitions else 0
    partitions = []
    for piece in pieces:
        if not piece.size:
            continue
        plan = connection.segments.plan(piece.scope, piece.stream, piece.segment_id, piece.start, piece.end,
                                        piece.incarnation)
        current: RangePartition | None = None
        for part in plan.parts:
            if current is None or (max_bytes is not None and _starts_partition(
                    current.end - current.start, part.length, max_bytes, slack)):
                current = RangePartition(piece.scope, piece.stream, piece.segment_id, part.offset, part.offset,
                                         plan.bucket, incarnation=piece.incarnation)
                partitions.append(current)
            current.parts.append((part.offset, part.length, part.object_key, part.object_offset))
            current.end = part.offset + part.length
    return partitions


def _at_least(partitions: list[RangePartition], minimum: int | None) -> list[RangePartition]:
    """``partitions`` split at plan-part boundaries until there are ``minimum`` (or no partition has two
    parts left): packing by bytes alone gave fewer partitions than ``min_partitions`` when the parts
    differ in size, as the small blocks of a rate-limited micro-batch do. The largest is split first,
    at the part boundary nearest its middle."""
    partitions = list(partitions)
    while minimum and len(partitions) < minimum:
        splittable = [i for i, p in enumerate(partitions) if len(p.parts) > 1]
        if not splittable:
            break
        at = max(splittable, key=lambda i: partitions[i].end - partitions[i].start)
        largest = partitions[at]
        middle = (largest.start + largest.end) / 2
        cut = min(range(1, len(largest.parts)), key=lambda i: abs(largest.parts[i][0] - middle))
        offset = largest.parts[cut][0]
        second = RangePartition(largest.scope, largest.stream, largest.segment_id, offset, largest.end, largest.bucket,
                                largest.parts[cut:], largest.incarnation)
        first = RangePartition(largest.scope, largest.stream, largest.segment_id, largest.start, offset,
                               largest.bucket, largest.parts[:cut], largest.incarnation)
        partitions[at:at + 1] = [first, second]
    return partitions


def _starts_partition(held: int, length: int, max_bytes: int, slack: int) -> bool:
    """Whether a part of ``length`` bytes starts a new partition after one that holds ``held`` bytes."""
    if held + length <= max_bytes or held < slack:  # it fits, or what is held is too small to be a task
        return False
    return not (length < slack and held + length <= max_bytes + slack)  # a small part stays with the held


def _fetch(segments, scope: str, stream: str, segment_id: int, offset: int, length: int,
           incarnation: int | None = None) -> bytes:
    """The bytes [offset, offset + length) of a segment through the read API (which may answer less)."""
    data = bytearray()
    while len(data) < length:
        data += segments.read(scope, stream, segment_id, offset + len(data), length - len(data), incarnation).data
    return bytes(data)


# Plan parts fetched ahead of the one being unframed and handed to Spark: the GETs overlap Spark's
# handling of the previous batch. Bounds an executor's buffered bytes to this many parts (a part is at
# most one writer object, 4 MiB by default) besides the current one.
PREFETCH_PARTS = 2


@functools.lru_cache(maxsize=4)  # one per S3 endpoint a worker process reads from: at most a few
def _s3_client(endpoint_url: str | None):
    """One S3 client per executor process and endpoint (Spark reuses its Python workers): building one
    costs tens of milliseconds, as much as a GET of a few MiB. A built client is thread-safe."""
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url)


def _read(options: _Options, partition: RangePartition) -> Iterator:
    """The events whose frames lie in the partition's range, as Arrow record batches (one per plan part):
    far cheaper for Spark than one Python tuple per event. Parts are fetched ``PREFETCH_PARTS`` ahead."""
    if not isinstance(partition, RangePartition):
        return  # no range at all: Spark then reads one empty default partition
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import pyarrow as pa

    name = f"{partition.scope}/{partition.stream}"
    # Clients built here, not in the fetching threads (neither a boto3 session nor the connection's
    # discovery of the read API builds them thread-safely), and only those the parts need: a connection
    # resolves AWS credentials where it signs, a cost no partition of S3 objects alone should pay.
    s3 = _s3_client(options.s3_endpoint) if any(key is not None for _, _, key, _ in partition.parts) else None
    segments = options.connection().segments if any(key is None for _, _, key, _ in partition.parts) else None

    def part_bytes(offset: int, length: int, key: str | None, key_offset: int) -> bytes:
        if key is None:
            return _fetch(segments, partition.scope, partition.stream, partition.segment_id, offset, length,
                          partition.incarnation)
        body = s3.get_object(
            Bucket=partition.bucket, Key=key, Range=f"bytes={key_offset}-{key_offset + length - 1}")
        return body["Body"].read()

    event_type = pa.string() if options.text else pa.binary()
    buffer = bytearray()
    position = partition.start  # segment offset of buffer[0]
    with ThreadPoolExecutor(PREFETCH_PARTS, thread_name_prefix="rillet-part") as pool:
        ahead = iter(partition.parts)
        fetches = deque(pool.submit(part_bytes, *part) for part in itertools.islice(ahead, PREFETCH_PARTS))
        while fetches:
            buffer += fetches.popleft().result()
            fetches.extend(pool.submit(part_bytes, *part) for part in itertools.islice(ahead, 1))
            try:
                unframed = _events(buffer, event_type, position)
            except ValueError as e:
                raise ValueError(f"segment {partition.segment_id} of {name}: {e}") from None
            if len(unframed.events):
                yield pa.RecordBatch.from_arrays(
                    [pa.repeat(pa.scalar(name, pa.string()), len(unframed.events)),  # no list of n names
                     pa.array(np.full(len(unframed.events), partition.segment_id, np.int64)),
                     pa.array(unframed.positions),
                     unframed.events, unframed.routing_keys, unframed.timestamps],
                    names=list(COLUMNS))
            del buffer[:unframed.consumed]
            position += unframed.consumed
        if buffer:
            raise ValueError(f"segment {partition.segment_id}: {len(buffer)} bytes after {position} are not a "
                             "whole event")


class _Unframed(NamedTuple):
    """The whole frames at the front of a buffer as Arrow columns, and how many bytes they take."""

    positions: object  # int64 numpy array: each frame's segment offset
    events: object  # the payloads (binary or string)
    routing_keys: object  # string, null where the frame kept none
    timestamps: object  # timestamp[us, UTC], null where the frame kept none
    consumed: int


MAX_TIMESTAMP_MS = (2**63 - 1) // 1000  # a later kept time does not fit Spark's microseconds


def _events(buffer: bytearray, event_type, base: int = 0) -> _Unframed:
    """The whole frames at the front of ``buffer`` (which starts at segment offset ``base``). The payloads
    are cut out of the buffer in one numpy pass and handed to Arrow as its value buffer, without a Python
    object per event (small events were read at a fifth of binaryFile's speed through per-event bytes);
    see ``_frames`` for the headers. Frames that kept their key and time (``framing.KEPT``) have them
    parsed with numpy too (``_kept``); a buffer of plain frames, the common case, gets null columns."""
    import numpy as np
    import pyarrow as pa

    from rillet.framing import HEADER_SIZE, KEPT

    positions, words, pos = _frames(buffer, base)
    count = len(positions)
    sizes = words & ~KEPT
    kept = words & KEPT != 0
    data = np.frombuffer(buffer, np.uint8, count=pos)
    time_type = pa.timestamp("us", tz="UTC")  # Spark's TimestampType in Arrow
    if kept.any():
        prefixes, routing_keys, timestamps = _kept(data, positions, sizes, kept, base, time_type)
    else:
        prefixes = None
        routing_keys, timestamps = pa.nulls(count, pa.string()), pa.nulls(count, time_type)
    keep = np.ones(pos, bool)
    if prefixes is None:
        keep[(positions[:, None] + np.arange(HEADER_SIZE)).ravel()] = False
    else:  # the header and what the frame kept
        keep[_spans(positions, HEADER_SIZE + prefixes)] = False
        sizes = sizes - prefixes
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    large = pa.large_string() if event_type == pa.string() else pa.large_binary()
    events = pa.Array.from_buffers(large, count, [None, pa.py_buffer(offsets), pa.py_buffer(data[keep])])
    if event_type == pa.string():
        events.validate(full=True)  # invalid UTF-8 fails the task, as decoding did
    return _Unframed(positions + base, events.cast(event_type), routing_keys, timestamps, pos)


def _spans(starts, lengths):
    """The indices of the spans ``[start, start + length)``, concatenated (int64)."""
    import numpy as np

    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if len(ends) else 0)


def _kept(data, positions, sizes, kept, base: int, time_type):
    """What kept frames keep before their payloads (``framing.read_body``, for all frames at once): the
    length of that prefix per frame (0 for plain frames), the routing keys and the timestamps."""
    import numpy as np
    import pyarrow as pa

    from rillet.framing import HAS_KEY, HAS_TIME, HEADER_SIZE

    def refuse(bad, why: str):
        if bad.any():
            raise ValueError(f"corrupt frame at {base + int(positions[np.argmax(bad)])}: {why}")

    body = positions + HEADER_SIZE
    refuse(kept & (sizes < 1), "a kept frame without its flags byte")
    flags = np.zeros(len(positions), np.uint8)
    flags[kept] = data[body[kept]]
    has_time = kept & (flags & HAS_TIME != 0)
    has_key = kept & (flags & HAS_KEY != 0)
    prefixes = kept.astype(np.int64) + 8 * has_time
    refuse(sizes < prefixes + 2 * has_key, "its kept key and time run past the frame")
    key_sizes = np.zeros(len(positions), np.int64)
    at = body[has_key] + prefixes[has_key]
    key_sizes[has_key] = data[at].astype(np.int64) << 8 | data[at + 1]
    key_starts = body + prefixes + 2
    prefixes += has_key * (2 + key_sizes)
    refuse(sizes < prefixes, "its kept key runs past the frame")

    key_bytes = data[_spans(key_starts[has_key], key_sizes[has_key])]
    key_offsets = np.zeros(len(positions) + 1, np.int32)
    np.cumsum(key_sizes, out=key_offsets[1:])
    routing_keys = pa.Array.from_buffers(pa.string(), len(positions), [
        pa.py_buffer(np.packbits(has_key, bitorder="little")), pa.py_buffer(key_offsets), pa.py_buffer(key_bytes)])
    try:
        routing_keys.validate(full=True)
    except pa.ArrowInvalid:
        for i in np.flatnonzero(has_key):  # name the first frame whose key is not UTF-8
            try:
                bytes(data[key_starts[i]:key_starts[i] + key_sizes[i]]).decode()
            except UnicodeDecodeError:
                raise ValueError(f"corrupt frame at {base + int(positions[i])}: its kept routing key is not "
                                 "UTF-8") from None
        raise

    millis = np.zeros(len(positions), np.int64)
    times = data[(body[has_time] + 1)[:, None] + np.arange(8)]
    millis[has_time] = times.view(">u8").ravel().astype(np.int64)  # past 2**63: negative, refused
    refuse(has_time & ((millis < 0) | (millis > MAX_TIMESTAMP_MS)), "its kept time is beyond Spark's timestamps")
    timestamps = pa.array(millis * 1000, time_type, mask=~has_time)
    return prefixes, routing_keys, timestamps


SAME_BEFORE_RUN = 16


def _frames(buffer: bytearray, base: int = 0):
    """The positions and length words (int64 arrays) of the whole frames at the front of ``buffer``, and
    where they end. Headers are walked one by one in Python, except that once ``SAME_BEFORE_RUN`` frames
    in a row have the same length word the following run of that word is found with numpy (``_run``:
    fixed-size records, the common case for small events, cost no Python step per event; a numpy look
    costs as much as a few dozen Python steps, so short runs stay in Python)."""
    import numpy as np

    from rillet.framing import FRAME_HEADER, HEADER_SIZE, KEPT, MAX_BODY_SIZE, MAX_EVENT_SIZE

    chunks: list[tuple] = []  # (positions, words) in order: lists walked one by one, or numpy runs
    starts, words = [], []
    pos, total, previous, same, unpack = 0, len(buffer), -1, 0, FRAME_HEADER.unpack_from
    while total - pos >= HEADER_SIZE:
        (word,) = unpack(buffer, pos)
        size = word & ~KEPT
        if size > (MAX_BODY_SIZE if word & KEPT else MAX_EVENT_SIZE):
            raise ValueError(f"corrupt frame at {base + pos}: length {size} exceeds the maximum event size")
        stride = HEADER_SIZE + size
        if pos + stride > total:
            break
        if word != previous or same < SAME_BEFORE_RUN:
            starts.append(pos)
            words.append(word)
            same = same + 1 if word == previous else 1
            pos, previous = pos + stride, word
            continue
        run = _run(buffer, pos, stride, word, (total - pos) // stride)
        chunks += [(starts, words), (pos + stride * np.arange(run, dtype=np.int64), np.full(run, word, np.int64))]
        starts, words = [], []
        pos, previous, same = pos + run * stride, -1, 0
    chunks.append((starts, words))
    positions = np.concatenate([np.asarray(p, np.int64) for p, _ in chunks])
    length_words = np.concatenate([np.asarray(w, np.int64) for _, w in chunks])
    return positions, length_words, pos


def _run(buffer: bytearray, pos: int, stride: int, word: int, fit: int) -> int:
    """How many of the ``fit`` frames of ``stride`` bytes from ``pos`` have length word ``word``: their
    headers are a strided view of the buffer (no copy), looked at in windows that double while they
    match, so a short run costs a short look (a look at everything up to the buffer's end made
    alternating sizes quadratic)."""
    import numpy as np

    run, window = 0, 64
    while run < fit:
        count = min(window, fit - run)
        heads = np.ndarray((count,), ">u4", buffer, pos + run * stride, (stride,))
        differ = np.flatnonzero(heads != word)
        if len(differ):
            return run + int(differ[0])
        run, window = run + count, window * 2
    return run


class _Reader(DataSourceReader):
    def __init__(self, options: _Options) -> None:
        self.options = options

    def partitions(self) -> list[RangePartition]:
        from rillet.batch import BatchClient

        o = self.options
        connection = o.connection()
        batch = BatchClient(connection)
        pieces = [piece for scope, stream in o.streams for piece in _pieces(scope, stream, batch.list_segments(
            scope, stream, o.start(connection, scope, stream), o.end(connection, scope, stream)))]
        return _at_least(_partitions(o, pieces, _split_size(o, pieces, o.max_partition_bytes)), o.min_partitions)

    def read(self, partition: RangePartition) -> Iterator:
        yield from _read(self.options, partition)


def _cuts(offset: dict) -> dict[str, str]:
    """An offset's cuts (text forms) by stream name. Offsets are ``{"cuts": [cut, ...]}``, one cut per
    stream; ``{"cut": cut}`` is how checkpoints of single-stream queries before several streams hold it."""
    texts = offset["cuts"] if "cuts" in offset else [offset["cut"]]
    return {text.split("|", 1)[0].split("@", 1)[0]: text for text in texts}  # "scope/stream@incarnation|..."


def _offset(cuts: dict[str, str]) -> dict:
    return {"cuts": [cuts[name] for name in sorted(cuts)]}


class _StreamReader(DataSourceStreamReader, *_AVAILABLE_NOW):
    """Offsets are stream cuts, one per stream; each batch ends at the controller's ``next-cut`` after
    its start, brought back to ``max_bytes_per_trigger`` and ``max_events_per_trigger`` when set.

    Spark 4.2 and later pass the start (and the engine's read limit) to ``latestOffset(start, limit)``.
    Spark 4.0 and 4.1 call ``latestOffset()`` with nothing, so the reader keeps the end of the last batch
    itself: the end it last returned, or, after a restart, the end of the batch Spark re-plans or
    commits first (Spark plans the last batch of its offset log when a query restarts, as its own
    simple-reader wrapper relies on). Both signatures are one method with optional arguments; Spark 4.2
    tells them apart by the parameter count.

    A stream added to ``streams`` since the checkpoint joins at its start position (a batch that reads
    nothing of it); one dropped from it is no longer read.
    """

    def __init__(self, options: _Options) -> None:
        self.options = options
        self._last_end: dict | None = None  # the end of the newest batch known to this reader
        self._target: dict[str, dict[int, int]] | None = None  # Trigger.AvailableNow: the tails at its start
        self._started = False

    def _start(self) -> None:
        """Refuse batch-only options and register the subscriber, at the first call rather than in the
        constructor: pyspark's runner calls ``reader.stop()`` in a ``finally`` around the construction,
        so an error raised there ended in an UnboundLocalError after the real message."""
        if self._started:
            return
        o = self.options
        if o.end_cut or o.ending_timestamp_ms is not None:
            raise ValueError("end_cut and ending_timestamp_ms are for batch reads: a streaming query reads "
                             "until it is stopped")
        if o.subscriber:
            self._subscribe()
        self._started = True

    def _subscribe(self) -> None:
        """Register the query's reader group (in the first stream's scope) at its start; an existing group
        is kept as it is."""
        from rillet.models import StreamDataRetention
        from rillet.reader_group import ReaderGroupManager, group_config

        o = self.options
        connection = o.connection()
        ReaderGroupManager(o.streams[0][0], connection).create_reader_group(
            o.subscriber, group_config([o.start(connection, *s) for s in o.streams], automatic_checkpoint_interval_ms=0,
                                       retention_type=StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT))

    def initialOffset(self) -> dict:
        self._start()
        connection = self.options.connection()
        return _offset({f"{scope}/{stream}": self.options.start(connection, scope, stream).to_text()
                        for scope, stream in self.options.streams})

    def getDefaultReadLimit(self):
        """Spark 4.2 and later: the engine's read limit. Its Python API has one limit at a time (no
        composite), so it says only whether the options' limits apply: ``latestOffset`` applies both."""
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

        o = self.options
        if o.max_events_per_trigger:
            return ReadMaxRows(o.max_events_per_trigger)
        return ReadMaxBytes(o.max_bytes_per_trigger) if o.max_bytes_per_trigger else ReadAllAvailable()

    def reportLatestOffset(self) -> dict:
        """Spark 4.2 and later: the streams' tails now, which a query's progress shows as its
        ``latestOffset`` beside the end of the batch it read (``endOffset``): the bytes between them,
        per segment, are the query's backlog (``backlog_bytes``), as Kafka's offsets behind latest."""
        from rillet.stream_cut import StreamCut

        controller = self.options.connection().controller
        tails = {}
        for scope, stream in self.options.streams:
            info = controller.stream_info(scope, stream)
            tails[f"{scope}/{stream}"] = StreamCut.of(scope, stream, info.tail, info.created_at_ms).to_text()
        return _offset(tails)

    def prepareForTriggerAvailableNow(self) -> None:
        """Spark 4.2 and later, ``Trigger.AvailableNow``: the streams' tails now are where the run ends;
        it gets there in batches within the per-trigger limits."""
        controller = self.options.connection().controller
        self._target = {f"{scope}/{stream}": {p.segment.segment_id: p.offset
                                              for p in controller.stream_info(scope, stream).tail}
                        for scope, stream in self.options.streams}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        from rillet.stream_cut import StreamCut

        self._start()
        o = self.options
        connection = o.connection()
        starts = _cuts(start or self._last_end or self.initialOffset())
        limited = (limit is None or type(limit).__name__ != "ReadAllAvailable") and bool(
            o.max_bytes_per_trigger or o.max_events_per_trigger)  # 4.0/4.1 give none; else the default limit
        ends, pieces = {}, []
        for scope, stream in o.streams:
            name = f"{scope}/{stream}"
            if name not in starts:  # added since the checkpoint: it joins at its start
                ends[name] = o.start(connection, scope, stream).to_text()
                continue
            cut = connection.controller.next_cut(scope, stream, starts[name])
            ends[name] = StreamCut.of(scope, stream, cut.positions, cut.incarnation).to_text()
            if limited or self._target is not None:
                pieces += _pieces(scope, stream, connection.controller.slices(scope, stream, starts[name],
                                                                              ends[name]).slices, cut.incarnation)
        if self._target is not None:
            pieces = [_before(piece, self._target[f"{piece.scope}/{piece.stream}"]) for piece in pieces]
        if limited:
            pieces = _limited(connection, pieces, o.max_bytes_per_trigger, o.max_events_per_trigger)
        stops = {(p.scope, p.stream, p.segment_id): p.end for p in pieces}
        for name, text in list(ends.items()):
            cut = StreamCut.from_text(text)
            ends[name] = StreamCut.of(cut.scope, cut.stream, [
                p.model_copy(update={"offset": stops.get((cut.scope, cut.stream, p.segment.segment_id), p.offset)})
                for p in cut.positions], cut.incarnation).to_text()
        self._last_end = _offset(ends)
        return self._last_end

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        from rillet.errors import SegmentNotFound, Truncated

        self._start()
        o = self.options
        self._last_end = self._last_end or end
        starts, ranges = _cuts(start), {}
        for name, stop in _cuts(end).items():
            scope, stream = name.split("/", 1)
            if name in starts and (scope, stream) in o.streams:  # else joining (nothing of it yet) or dropped
                ranges[(scope, stream, starts[name], stop)] = self._pieces(scope, stream, starts[name], stop)
        # One partition per segment (each key's events in order) unless min_partitions asks for more.
        max_bytes = _split_size(o, [piece for pieces in ranges.values() for piece in pieces], None)
        partitions = []
        for (scope, stream, begin, stop), pieces in ranges.items():
            try:
                partitions += _partitions(o, pieces, max_bytes)
            except (Truncated, SegmentNotFound) as lost:  # truncated since the slices were listed
                head = self._data_lost(scope, stream, begin, lost)
                partitions += _partitions(o, self._pieces(scope, stream, head, stop), max_bytes)
        return _at_least(partitions, o.min_partitions)

    def _pieces(self, scope: str, stream: str, begin: str, stop: str) -> list[_Piece]:
        """The stream's pieces of the batch from ``begin`` to ``stop``: from the head when retention
        truncated what the query had not read (``fail_on_data_loss``), none when all of it lies below."""
        from rillet.errors import InvalidArgument, SegmentNotFound, Truncated
        from rillet.stream_cut import StreamCut

        controller = self.options.connection().controller
        incarnation = StreamCut.from_text(stop).incarnation
        try:
            return _pieces(scope, stream, controller.slices(scope, stream, begin, stop).slices, incarnation)
        except (Truncated, SegmentNotFound) as lost:
            head = self._data_lost(scope, stream, begin, lost)
        try:
            return _pieces(scope, stream, controller.slices(scope, stream, head, stop).slices, incarnation)
        except (Truncated, SegmentNotFound, InvalidArgument):
            return []  # the stream's part of the batch lies below its head: the next batch goes on

    def _data_lost(self, scope: str, stream: str, start: str, lost: Exception) -> str:
        """Retention truncated bytes this query had not read (it was stopped, or slower than the policy):
        Kafka's failOnDataLoss. By default the query fails, naming the range; with
        ``fail_on_data_loss=false`` it goes on from the stream's head and logs what it skipped."""
        import logging

        from rillet.stream_cut import StreamCut

        cut = self.options.connection().controller.head_cut(scope, stream)
        head = StreamCut.of(scope, stream, cut.positions, cut.incarnation).to_text()
        what = f"{scope}/{stream}: bytes from {start} up to the head {head} were truncated before this query " \
               f"read them ({lost})"
        if self.options.fail_on_data_loss:
            raise RuntimeError(f"{what}. Set fail_on_data_loss=false to go on from the head.")
        logging.getLogger("rillet_spark").warning("skipped %s", what)
        return head

    def read(self, partition: RangePartition) -> Iterator:
        yield from _read(self.options, partition)

    def commit(self, end: dict) -> None:
        self._last_end = self._last_end or end
        if self.options.subscriber:
            from rillet.reader_group import ReaderGroup
            from rillet.stream_cut import StreamCut

            o = self.options
            group = ReaderGroup(o.connection(), o.streams[0][0], o.subscriber)
            for name, text in _cuts(end).items():
                if tuple(name.split("/", 1)) in o.streams:
                    group.update_retention_stream_cut(StreamCut.from_text(text))


def _before(piece: _Piece, target: dict[int, int]) -> _Piece:
    """``piece`` ended at the AvailableNow target (the tails when the run began): a segment of the target
    at its offset there, a segment created since (a larger id) where the piece starts; an older segment,
    sealed before the target, keeps its end."""
    if piece.segment_id in target:
        return replace(piece, end=min(piece.end, max(piece.start, target[piece.segment_id])))
    if piece.segment_id > max(target, default=-1):
        return replace(piece, end=piece.start)
    return piece


def _limited(connection, pieces: list[_Piece], max_bytes: int | None, max_events: int | None) -> list[_Piece]:
    """``pieces`` brought back within a per-trigger limit in bytes and one in events (the tighter wins).

    Bytes: each segment with bytes to read gets an equal share and ends at the last appended block (an
    event boundary) inside it, from its read plan, or after its first block when even that is larger:
    every batch moves on. Events: offsets are bytes and the read plan has no event counts, so the driver
    walks the frame headers of the pieces (after the byte limit, so at most that much), reading through
    the read API in windows of ``COUNT_WINDOW_BYTES``: one request per window, or per event for events
    larger than that. The limit is split equally between the segments with data (one more for the first
    ones while it does not divide); when it is smaller than their number, the segments with the most
    bytes pending take one event each, the others wait, so each batch holds at most ``max_events``.
    """
    pending = [piece for piece in pieces if piece.size]
    if max_bytes and sum(piece.size for piece in pending) > max_bytes:
        share = max(1, max_bytes // len(pending))
        pending = [_bytes_within(connection, piece, share) if piece.size > share else piece for piece in pending]
    if max_events:
        ranked = sorted(pending, key=lambda piece: -piece.size)
        shares = [max_events // len(ranked) + (i < max_events % len(ranked)) for i in range(len(ranked))]
        pending = [replace(piece, end=_after_events(connection, piece, share)) for piece, share in zip(ranked, shares)]
    stops = {(p.scope, p.stream, p.segment_id): p.end for p in pending}
    return [replace(p, end=stops.get((p.scope, p.stream, p.segment_id), p.end)) for p in pieces]


def _bytes_within(connection, piece: _Piece, share: int) -> _Piece:
    parts = connection.segments.plan(piece.scope, piece.stream, piece.segment_id, piece.start, piece.end,
                                     piece.incarnation).parts
    stop = parts[0].offset + parts[0].length
    for part in parts:
        if part.offset + part.length > piece.start + share:
            break
        stop = part.offset + part.length
    return replace(piece, end=stop)


COUNT_WINDOW_BYTES = 256 * 1024


def _after_events(connection, piece: _Piece, count: int) -> int:
    """The offset after the first ``count`` whole events of ``piece`` (its end when it holds fewer)."""
    from rillet.framing import FRAME_HEADER, HEADER_SIZE, body_size

    position, counted = piece.start, 0
    while counted < count and position < piece.end:
        window = _fetch(connection.segments, piece.scope, piece.stream, piece.segment_id, position,
                        min(COUNT_WINDOW_BYTES, piece.end - position), piece.incarnation)
        at = 0
        while counted < count and at + HEADER_SIZE <= len(window):
            at += HEADER_SIZE + body_size(FRAME_HEADER.unpack_from(window, at)[0])
            counted += 1
        if at == 0:
            raise ValueError(f"segment {piece.segment_id} of {piece.scope}/{piece.stream}: no whole frame header "
                             f"at {position}")
        position += at  # past the window when its last event runs on: the next read starts at the next header
    return position


@dataclass
class TransactionMessage(WriterCommitMessage):
    txn_id: str
    events: int


def _write(options: _Options, rows: Iterator) -> TransactionMessage:
    """One task's rows into a transaction of its own. With ``store_key_and_time`` (the default) each
    event keeps its routing key and its time: the row's timestamp column when it holds one, else now."""
    txn = _transactions(options).begin(options.lease_ms)
    futures = []
    try:
        for row in rows:
            fields = row.asDict()
            event = fields[options.event_column]
            if isinstance(event, str):
                event = event.encode()
            key = fields.get(options.routing_key_column)
            timestamp = fields.get(options.timestamp_column) if options.store_key_and_time else None
            futures.append(txn.write_event(bytes(event), None if key is None else str(key),
                                           None if timestamp is None else _epoch_ms(timestamp)))
        txn.flush()
        for future in futures:
            future.result()  # an event that failed to reach the transaction fails the task
    except BaseException:
        txn.abort()  # nothing of a failed task may ever become visible
        raise
    return TransactionMessage(txn.txn_id, len(futures))


def _epoch_ms(timestamp) -> int:
    """A timestamp column's value as milliseconds since the epoch, exactly (no float). PySpark hands a
    TimestampType value to the writer as a naive datetime in the worker's local time zone."""
    import datetime

    aware = timestamp if timestamp.tzinfo is not None else timestamp.astimezone()
    return (aware - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(milliseconds=1)


def _transactions(options: _Options):
    from rillet.serializers import BytesSerializer
    from rillet.transaction import TransactionalEventStreamWriter
    from rillet.writer import EventWriterConfig

    return TransactionalEventStreamWriter(options.connection(), *options.target, BytesSerializer(),
                                          EventWriterConfig(store_key_and_time=options.store_key_and_time))


def _abort_all(options: _Options, messages: list) -> None:
    from rillet.errors import TxnFailed, TxnNotFound

    writer = _transactions(options)
    for message in messages:
        if message is not None:
            try:
                writer.get_txn(message.txn_id).abort()
            except (TxnFailed, TxnNotFound):
                pass


class _Writer(DataSourceWriter):
    def __init__(self, options: _Options) -> None:
        self.options = options

    def write(self, iterator: Iterator) -> TransactionMessage:
        return _write(self.options, iterator)

    def commit(self, messages: list) -> None:
        writer = _transactions(self.options)
        for message in messages:
            writer.get_txn(message.txn_id).commit()

    def abort(self, messages: list) -> None:
        _abort_all(self.options, messages)


class _StreamWriter(DataSourceStreamWriter):
    def __init__(self, options: _Options) -> None:
        self.options = options

    def write(self, iterator: Iterator) -> TransactionMessage:
        return _write(self.options, iterator)

    def commit(self, messages: list, batchId: int) -> None:
        import logging

        if not _transactions(self.options).commit_batch(self._sink(), batchId,
                                                         [m.txn_id for m in messages if m is not None]):
            logging.getLogger("rillet_spark").info(
                "batch %d was committed to %s/%s before (this is its re-execution): its new transactions "
                "were aborted", batchId, *self.options.target)

    def _sink(self) -> str:
        """The name batches commit under: ``sink_id``, else one derived from the query's checkpoint
        location, so two queries into one stream never share a name and a restart keeps it."""
        o = self.options
        if o.sink_id:
            return o.sink_id
        if not o.checkpoint_location:
            raise ValueError('a streaming write to rillet needs option "sink_id" (or the query\'s own '
                             '"checkpointLocation" option, from which one is derived)')
        import hashlib

        digest = hashlib.sha256(o.checkpoint_location.rstrip("/").encode()).hexdigest()[:20]
        scope, stream = o.target
        return f"{scope}.{stream}"[:200] + f".{digest}"

    def abort(self, messages: list, batchId: int) -> None:
        _abort_all(self.options, messages)


class RilletDataSource(DataSource):
    """``format("rillet")``: see the module docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return "rillet"

    def schema(self) -> str:
        event = "string" if _Options.parse(self.options).text else "binary"
        return ", ".join(f"{name} {kind or event}" for name, kind in COLUMNS.items())

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(_Options.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(_Options.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return _Writer(_write_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return _StreamWriter(_write_options(self.options, schema))


def _write_options(options: dict, schema: StructType) -> _Options:
    """A write's options, with its timestamp column checked before any task runs: a Spark timestamp (a
    TimestampNTZ has no time zone to say which instant it is)."""
    from pyspark.sql.types import TimestampType

    parsed = _Options.parse(options, write=True)
    if parsed.store_key_and_time and parsed.timestamp_column in schema.fieldNames():
        kind = schema[parsed.timestamp_column].dataType
        if not isinstance(kind, TimestampType):
            raise ValueError(f'the column "{parsed.timestamp_column}" (option "timestamp_column") is the events\' '
                             f"time: a timestamp, not {kind.simpleString()} (cast it, or name another column)")
    return parsed
