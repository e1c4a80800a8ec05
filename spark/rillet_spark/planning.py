"""The driver's side of a read: the bytes of each segment to read (``_Piece``) cut into Spark partitions
along their read plans (``RangePartition``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

from rillet_spark.options import _Options


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
