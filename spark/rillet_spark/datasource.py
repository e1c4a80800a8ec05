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

Modules
    ``options`` parses the options; ``planning`` (driver) cuts the bytes to read into partitions and
    ``reading`` (executor) turns a partition into Arrow batches, with ``unframing``; ``batch`` and
    ``streaming`` are the readers (``limits``: per-trigger limits), ``sink`` the writers, and this
    module the data source that ties them together. ``lag`` measures a streaming query's backlog.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from rillet_spark.batch import _Reader
from rillet_spark.options import _Options
from rillet_spark.reading import COLUMNS
from rillet_spark.sink import _StreamWriter, _write_options, _Writer
from rillet_spark.streaming import _StreamReader


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
