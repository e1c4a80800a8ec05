"""The executor's side of a read: a partition's bytes, from S3 objects and the read API, as Arrow record
batches of the source's columns. Batch and streaming reads share it."""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Iterator

from rillet_spark.options import _Options
from rillet_spark.planning import RangePartition
from rillet_spark.unframing import _events

# A read's columns: Kafka's source has the key and the timestamp too (null for frames that kept neither).
COLUMNS = {"stream": "string", "segment_id": "long", "offset": "long", "event": None, "routing_key": "string",
           "timestamp": "timestamp"}


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
