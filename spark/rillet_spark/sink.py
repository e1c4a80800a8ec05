"""Writes: each task's rows in a transaction of its own, committed together by the driver; streaming
writes commit a batch's transactions once per batch id through a sink record."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from rillet_spark.options import _Options


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
