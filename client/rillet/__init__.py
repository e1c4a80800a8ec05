"""Rillet: Pravega's stream semantics as a serverless system on AWS. ``import rillet`` is the SDK.

Each name is imported from its module the first time it is used (PEP 562), so that ``import rillet``
(and so every ``rillet.x`` submodule, such as the CLI) costs nothing until the SDK is used."""

# ruff: noqa: F401  (the TYPE_CHECKING imports are the names for type checkers; tests/unit/test_sdk_names.py keeps them equal to _MODULE_OF)
from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the CLI handles Ctrl-C only after this

_MODULE_OF = {
    "AccessDenied": "rillet.errors",
    "AlreadyExists": "rillet.errors",
    "BadKeyLength": "rillet.errors",
    "BadKeyVersion": "rillet.errors",
    "BatchClient": "rillet.batch",
    "BatchClientFactory": "rillet.factory",
    "ByteStreamClientFactory": "rillet.factory",
    "ByteStreamReader": "rillet.byte_stream",
    "ByteStreamWriter": "rillet.byte_stream",
    "BytesSerializer": "rillet.serializers",
    "Checkpoint": "rillet.reader_group",
    "ConditionalTableUpdate": "rillet.errors",
    "Connection": "rillet.connection",
    "ConsumptionLimits": "rillet.models",
    "EventPointer": "rillet.reader",
    "EventRead": "rillet.reader",
    "EventsNotAcknowledged": "rillet.errors",
    "EventsRead": "rillet.reader",
    "EventStreamClientFactory": "rillet.factory",
    "EventStreamReader": "rillet.reader_group",
    "EventStreamWriter": "rillet.writer",
    "EventWriterConfig": "rillet.writer_config",
    "GroupEventRead": "rillet.reader_group",
    "GroupEventsRead": "rillet.reader_group",
    "IllegalState": "rillet.errors",
    "InvalidArgument": "rillet.errors",
    "JsonSerializer": "rillet.serializers",
    "KeyRange": "rillet.keyspace",
    "KeyValueTable": "rillet.kvt",
    "KeyValueTableConfiguration": "rillet.kvt_models",
    "KeyValueTableFactory": "rillet.kvt",
    "KeyValueTableInfo": "rillet.kvt_models",
    "KeyValueTableManager": "rillet.kvt",
    "KeyValueTableNotFound": "rillet.errors",
    "KeyValueTableState": "rillet.kvt_models",
    "LeaseTooLarge": "rillet.errors",
    "NoSuchKey": "rillet.errors",
    "NotFound": "rillet.errors",
    "NotSent": "rillet.errors",
    "OffsetMismatch": "rillet.errors",
    "Ordering": "rillet.stream_cut",
    "OutcomeUnknown": "rillet.errors",
    "Position": "rillet.reader_group",
    "Put": "rillet.kvt",
    "ReaderGroup": "rillet.reader_group",
    "ReaderGroupConfig": "rillet.models",
    "ReaderGroupManager": "rillet.reader_group",
    "ReaderNotInReaderGroup": "rillet.errors",
    "Remove": "rillet.kvt",
    "RetentionPolicy": "rillet.models",
    "RetentionType": "rillet.models",
    "RilletError": "rillet.errors",
    "ScaleType": "rillet.models",
    "ScalingPolicy": "rillet.models",
    "ScopeInfo": "rillet.models",
    "ScopeNotEmpty": "rillet.errors",
    "ScopeNotFound": "rillet.errors",
    "SegmentNotFound": "rillet.errors",
    "SegmentPosition": "rillet.models",
    "SegmentRange": "rillet.models",
    "SegmentSealed": "rillet.errors",
    "SegmentSlice": "rillet.models",
    "Serializer": "rillet.serializers",
    "StreamConfiguration": "rillet.models",
    "StreamConfigurationChange": "rillet.models",
    "StreamCut": "rillet.stream_cut",
    "StreamDataRetention": "rillet.models",
    "StreamInfo": "rillet.models",
    "StreamKindMismatch": "rillet.errors",
    "StreamManager": "rillet.manager",
    "StreamNotFound": "rillet.errors",
    "StreamReader": "rillet.reader",
    "StreamRecreated": "rillet.errors",
    "StreamState": "rillet.models",
    "SuccessorInfo": "rillet.models",
    "TableEntry": "rillet.kvt",
    "TableKey": "rillet.kvt_models",
    "TailBackoff": "rillet.segments",
    "Throttled": "rillet.errors",
    "TimeWindow": "rillet.reader_group",
    "TooLarge": "rillet.errors",
    "TooManyUpdates": "rillet.errors",
    "Transaction": "rillet.transaction",
    "TransactionalEventStreamWriter": "rillet.transaction",
    "Truncated": "rillet.errors",
    "TxnFailed": "rillet.errors",
    "TxnInfo": "rillet.models",
    "TxnNotFound": "rillet.errors",
    "TxnState": "rillet.models",
    "UTF8StringSerializer": "rillet.serializers",
    "ValueTooLong": "rillet.errors",
    "Version": "rillet.kvt",
    "WriteAck": "rillet.writer_config",
    "WriteConflict": "rillet.errors",
    "WriterBufferFull": "rillet.errors",
    "WriterExpired": "rillet.errors",
    "group_config": "rillet.reader_group",
    "hash_routing_key": "rillet.keyspace",
    "segment_epoch": "rillet.keyspace",
    "segment_id": "rillet.keyspace",
    "segment_number": "rillet.keyspace",
    "table_key": "rillet.kvt",
}
__all__ = sorted(_MODULE_OF)

if TYPE_CHECKING:  # the names as type checkers and IDEs see them
    from rillet.batch import BatchClient
    from rillet.byte_stream import ByteStreamReader, ByteStreamWriter
    from rillet.connection import Connection
    from rillet.errors import (
        AccessDenied,
        AlreadyExists,
        BadKeyLength,
        BadKeyVersion,
        ConditionalTableUpdate,
        EventsNotAcknowledged,
        IllegalState,
        InvalidArgument,
        KeyValueTableNotFound,
        LeaseTooLarge,
        NoSuchKey,
        NotFound,
        NotSent,
        OffsetMismatch,
        OutcomeUnknown,
        ReaderNotInReaderGroup,
        RilletError,
        ScopeNotEmpty,
        ScopeNotFound,
        SegmentNotFound,
        SegmentSealed,
        StreamKindMismatch,
        StreamNotFound,
        StreamRecreated,
        Throttled,
        TooLarge,
        TooManyUpdates,
        Truncated,
        TxnFailed,
        TxnNotFound,
        ValueTooLong,
        WriteConflict,
        WriterBufferFull,
        WriterExpired,
    )
    from rillet.factory import BatchClientFactory, ByteStreamClientFactory, EventStreamClientFactory
    from rillet.keyspace import KeyRange, hash_routing_key, segment_epoch, segment_id, segment_number
    from rillet.kvt import (
        KeyValueTable,
        KeyValueTableFactory,
        KeyValueTableManager,
        Put,
        Remove,
        TableEntry,
        Version,
        table_key,
    )
    from rillet.kvt_models import KeyValueTableConfiguration, KeyValueTableInfo, KeyValueTableState, TableKey
    from rillet.manager import StreamManager
    from rillet.models import (
        ConsumptionLimits,
        ReaderGroupConfig,
        RetentionPolicy,
        RetentionType,
        ScaleType,
        ScalingPolicy,
        ScopeInfo,
        SegmentPosition,
        SegmentRange,
        SegmentSlice,
        StreamConfiguration,
        StreamConfigurationChange,
        StreamDataRetention,
        StreamInfo,
        StreamState,
        SuccessorInfo,
        TxnInfo,
        TxnState,
    )
    from rillet.reader import EventPointer, EventRead, EventsRead, StreamReader
    from rillet.reader_group import (
        Checkpoint,
        EventStreamReader,
        GroupEventRead,
        GroupEventsRead,
        Position,
        ReaderGroup,
        ReaderGroupManager,
        TimeWindow,
        group_config,
    )
    from rillet.segments import TailBackoff
    from rillet.serializers import BytesSerializer, JsonSerializer, Serializer, UTF8StringSerializer
    from rillet.stream_cut import Ordering, StreamCut
    from rillet.transaction import Transaction, TransactionalEventStreamWriter
    from rillet.writer import EventStreamWriter
    from rillet.writer_config import EventWriterConfig, WriteAck


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'rillet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return __all__
