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
    TooLarge,
    Truncated,
    WriteConflict,
)
from rillet.keyspace import KeyRange, hash_routing_key, segment_epoch, segment_id, segment_number
from rillet.manager import StreamManager
from rillet.models import (
    ConsumptionLimits,
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    ScopeInfo,
    SegmentPosition,
    SegmentRange,
    StreamConfiguration,
    StreamInfo,
    StreamState,
    SuccessorInfo,
)

__all__ = [
    "AlreadyExists", "ConsumptionLimits", "IllegalState", "InvalidArgument", "KeyRange", "NotFound",
    "OffsetMismatch", "RetentionPolicy", "RetentionType", "RilletError", "ScaleType", "ScalingPolicy",
    "ScopeInfo", "ScopeNotEmpty", "ScopeNotFound", "SegmentNotFound", "SegmentPosition", "SegmentRange",
    "SegmentSealed", "StreamConfiguration", "StreamInfo", "StreamManager", "StreamNotFound", "StreamState",
    "SuccessorInfo", "TooLarge", "Truncated", "WriteConflict", "hash_routing_key", "segment_epoch",
    "segment_id", "segment_number",
]
