"""Batch reads: the segments between two cuts of each stream, one partition per range or per
``max_partition_bytes`` of it."""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSourceReader

from rillet_spark.options import _Options
from rillet_spark.planning import RangePartition, _at_least, _partitions, _pieces, _split_size
from rillet_spark.reading import _read


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
