"""Rillet: Pravega's stream semantics as a serverless system on AWS. ``import rillet`` is the SDK."""

from rillet.errors import (
    AlreadyExists,
    IllegalState,
    InvalidArgument,
    NotFound,
    OffsetMismatch,
    RilletError,
    ScopeNotEmpty,
    ScopeNotFound,
    SegmentNotFound,
    SegmentSealed,
    StreamNotFound,
    LeaseTooLarge,
    TooLarge,
    Truncated,
    TxnFailed,
    TxnNotFound,
    WriteConflict,
)
from rillet.batch import BatchClient
from rillet.byte_stream import ByteStreamReader, ByteStreamWriter
from rillet.connection import Connection
from rillet.factory import BatchClientFactory, ByteStreamClientFactory, EventStreamClientFactory
from rillet.keyspace import KeyRange, hash_routing_key, segment_epoch, segment_id, segment_number
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
    StreamDataRetention,
    StreamInfo,
    StreamState,
    SuccessorInfo,
    TxnInfo,
    TxnState,
)

from rillet.reader import EventPointer, EventRead, StreamReader
from rillet.reader_group import (
    Checkpoint,
    EventStreamReader,
    GroupEventRead,
    Position,
    ReaderGroup,
    ReaderGroupManager,
    group_config,
)
from rillet.serializers import BytesSerializer, JsonSerializer, Serializer, UTF8StringSerializer
from rillet.stream_cut import Ordering, StreamCut
from rillet.transaction import Transaction, TransactionalEventStreamWriter
from rillet.writer import EventStreamWriter, EventWriterConfig, WriteAck

__all__ = [
    "BatchClient", "BatchClientFactory", "ByteStreamClientFactory", "ByteStreamReader", "ByteStreamWriter",
    "BytesSerializer", "Connection", "EventPointer", "EventRead", "EventStreamClientFactory", "EventStreamWriter",
    "EventWriterConfig", "JsonSerializer", "Ordering", "SegmentSlice", "Serializer", "StreamCut", "StreamReader",
    "UTF8StringSerializer", "WriteAck", "Checkpoint", "EventStreamReader", "GroupEventRead", "Position",
    "ReaderGroup", "ReaderGroupConfig", "ReaderGroupManager", "StreamDataRetention", "group_config",
    "LeaseTooLarge", "Transaction", "TransactionalEventStreamWriter", "TxnFailed", "TxnInfo", "TxnNotFound",
    "TxnState",
    "AlreadyExists", "ConsumptionLimits", "IllegalState", "InvalidArgument", "KeyRange", "NotFound",
    "OffsetMismatch", "RetentionPolicy", "RetentionType", "RilletError", "ScaleType", "ScalingPolicy",
    "ScopeInfo", "ScopeNotEmpty", "ScopeNotFound", "SegmentNotFound", "SegmentPosition", "SegmentRange",
    "SegmentSealed", "StreamConfiguration", "StreamInfo", "StreamManager", "StreamNotFound", "StreamState",
    "SuccessorInfo", "TooLarge", "Truncated", "WriteConflict", "hash_routing_key", "segment_epoch",
    "segment_id", "segment_number",
]
