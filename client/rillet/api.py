"""Request and response bodies of the control API (the SDK and the server share these models).

Data-path requests (appends and reads) carry binary bodies; their metadata travels in the headers
named here.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rillet.errors import InvalidArgument
from rillet.models import (
    INCARNATION,
    ReaderGroupConfig,
    ScopeInfo,
    SegmentPosition,
    SegmentRange,
    SegmentSlice,
    StreamConfiguration,
    StreamCutBody,
    StreamState,
    SuccessorInfo,
)

# The IAM identity a standalone stack started with --simulate-identities takes a request to come from
# (deployed functions ignore it: only the signed identity in the request context counts). The SDK sends
# it on every request when RILLET_SIMULATED_IDENTITY is set (``rillet --as ARN``).
SIMULATED_IDENTITY = "x-rillet-identity"
SIMULATED_IDENTITY_ENV = "RILLET_SIMULATED_IDENTITY"

# Headers of the data path.
WRITER_ID = "x-rillet-writer-id"
EVENT_NUMBER = "x-rillet-event-number"
EVENT_COUNT = "x-rillet-event-count"
EXPECTED_OFFSET = "x-rillet-expected-offset"
AFTER_EVENT = "x-rillet-after-event"
RAW_BYTES = "x-rillet-raw"
# How long ago (ms, the writer's monotonic clock) the block was first sent: a resend older than the
# server's writer expiry window, from a writer id it no longer knows, is refused (WriterExpired).
BLOCK_AGE_MS = "x-rillet-block-age-ms"
OFFSET = "x-rillet-offset"
NEXT_OFFSET = "x-rillet-next-offset"
START_OFFSET = "x-rillet-start-offset"
LENGTH = "x-rillet-length"
SEALED = "x-rillet-sealed"
END_OF_SEGMENT = "x-rillet-end-of-segment"

# The largest event number, count, offset, time or batch id a request may carry: a signed 64-bit field
# as in Pravega (Java longs), and far inside DynamoDB's 38-digit numbers. Segment ids are 64-bit.
INT63_MAX = 2**63 - 1
SEGMENT_ID_MAX = 2**64 - 1


class _Body(BaseModel):
    """A request or response body. A value out of range is the typed InvalidArgument the server answers
    (400), wherever the body is built: in an SDK call, in domain code, or parsed from the wire."""

    model_config = ConfigDict(extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:  # what BaseModel.__init__ does, plus parse_answer's ``extra`` (pydantic calls __init__ without it)
            self.__pydantic_validator__.validate_python(data, self_instance=self, extra=_ANSWER_EXTRA.get())
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()[:5])
            raise InvalidArgument(f"invalid {type(self).__name__}: {problems}") from None


Answer = TypeVar("Answer", bound=BaseModel)
# "ignore" while parse_answer validates: a body's own __init__ (above) validates its fields anew.
_ANSWER_EXTRA: ContextVar[Literal["ignore"] | None] = ContextVar("answer_extra", default=None)


def parse_answer(model: type[Answer], data: Any) -> Answer:
    """The server's answer as ``model``, without the fields this SDK does not know: a later release of
    the server may add fields to an answer, and an SDK deployed before it keeps reading it (as the AWS
    SDKs do). Requests stay strict: the server refuses a field it does not know (400)."""
    token = _ANSWER_EXTRA.set("ignore")
    try:
        return model.model_validate(data, extra="ignore")
    finally:
        _ANSWER_EXTRA.reset(token)


class CreateScopeRequest(_Body):
    scope: str


class CreateStreamRequest(_Body):
    stream: str
    configuration: StreamConfiguration = StreamConfiguration()


class Created(_Body):
    created: bool = Field(description="False when the object already existed (creation is idempotent).")


class Accepted(_Body):
    accepted: bool = True


class Deleted(_Body):
    deleted: bool = Field(description="False when there was nothing to delete.")


class ScopeList(_Body):
    scopes: list[ScopeInfo]
    next_token: str | None = None


class StreamList(_Body):
    streams: list[str]
    next_token: str | None = None


class StreamStatus(_Body):
    scope: str
    stream: str
    state: StreamState


class SegmentList(_Body):
    segments: list[SegmentRange]


class PositionList(_Body):
    positions: list[SegmentPosition]
    incarnation: int | None = Field(None, description=INCARNATION)


class CutPosition(_Body):
    segment_id: int = Field(ge=0, le=SEGMENT_ID_MAX)
    offset: int = Field(ge=0, le=INT63_MAX)


class TruncateRequest(_Body):
    """A stream cut to truncate at: an offset for each segment; the segments must tile the key space."""

    positions: list[CutPosition] = Field(min_length=1)
    incarnation: int | None = Field(None, ge=0, le=INT63_MAX, description=INCARNATION)


class SliceList(_Body):
    slices: list[SegmentSlice]
    size_bytes: int = Field(description="Bytes between the two cuts: the sum of the slices' lengths.")


class ScaleRequest(_Body):
    seal: list[int] = Field(min_length=1, description="Ids of current segments to seal.")
    new_ranges: list[tuple[float, float]] = Field(
        min_length=1, description="Key ranges [low, high) of the new segments; together exactly the sealed ranges.")


class ScaleStatus(_Body):
    epoch: int
    status: str = Field(description="DONE or IN_PROGRESS")


class Successors(_Body):
    successors: list[SuccessorInfo]


class Endpoints(_Body):
    """Where the data path is served (Function URLs on AWS). Fields may be added: a client ignores the
    ones it does not know, so a newer deployment's answer still parses."""

    model_config = ConfigDict(extra="ignore")

    append_url: str
    read_url: str
    tails_url: str | None = Field(default=None, description=(
        "Where waiting readers send tail checks (a small function of its own); absent from deployments "
        "older than it, whose read API serves them."))

    @property
    def tail_check_url(self) -> str:
        """Where to send tail checks: the tails API, or the read API of a deployment without one."""
        return self.tails_url or self.read_url


class AppendAck(_Body):
    offset: int | None = Field(description="Where the block starts; null for a duplicate of an older block.")
    length: int = Field(description="The segment's length right after the block.")
    duplicate: bool = False


class SegmentStatus(_Body):
    segment: str
    start_offset: int
    length: int
    sealed: bool
    created_at_ms: int
    stream_incarnation: int | None = Field(None, description=(
        "The incarnation of the stream the segment was created for (the stream's created_at_ms); null for "
        "segments created before incarnations were recorded."))
    event_rates: list[float] = Field(description="Events/s decayed over 2, 5, 10 and 20 minutes.")
    byte_rates: list[float] = Field(description="Bytes/s decayed over 2, 5, 10 and 20 minutes.")


class PlanPart(_Body):
    offset: int
    length: int
    object_key: str | None = Field(None, description="The S3 object holding these bytes; null: read them "
                                                     "through the read API (small appends kept inline).")
    object_offset: int = 0


class ReadPlan(_Body):
    """Where a segment's bytes are, for readers that fetch S3 objects directly (Spark executors)."""

    bucket: str
    parts: list[PlanPart]


MAX_TAIL_SEGMENTS = 100  # segments one tail check may name (one BatchGetItem on the server)


class SegmentTail(_Body):
    """A segment's start, length and sealed flag, from an eventually consistent read: it may lag a
    commit by a moment, never run ahead of one. ``found`` false: no such segment was seen (which, for a
    segment created a moment ago, can also mean not yet)."""

    segment_id: int
    found: bool
    start_offset: int = 0
    length: int = 0
    sealed: bool = False


class SegmentTails(_Body):
    tails: list[SegmentTail] = Field(description="One per segment asked, in the order asked.")


class ReadLocation(_Body):
    """Bytes [offset, offset + length) of a segment: inline (``data``), or in one S3 object, fetched
    with an HTTP GET of ``url`` carrying the header ``Range: <range>`` (the URL is signed for it)."""

    offset: int
    length: int
    url: str | None = Field(None, description="A presigned GET of one S3 object, valid for expires_in_s.")
    range: str | None = Field(None, description="The Range header to send with url (bytes=first-last).")
    data: str | None = Field(None, description="The bytes themselves, base64: small appends kept inline.")


class ReadLocations(_Body):
    """Where the bytes [offset, next_offset) of a segment are, and the segment's state (as a read's
    x-rillet-* headers say it)."""

    offset: int
    next_offset: int
    start_offset: int
    length: int
    sealed: bool
    end_of_segment: bool
    expires_in_s: int
    locations: list[ReadLocation]


class ErrorBody(_Body):
    code: str
    message: str
    details: dict | None = None


# -- reader groups ---------------------------------------------------------------------------------


class CreateReaderGroupRequest(_Body):
    group: str
    config: ReaderGroupConfig


INSTANCE_TOKEN = r"^[A-Za-z0-9_-]{1,64}$"  # a reader instance's random token: one short string per online reader


class JoinRequest(_Body):
    """A reader joining. Its instance token tells a repeated join (after a lost answer) from a second
    reader taking a name already online; without one, a join is accepted by name."""

    instance: str | None = Field(None, pattern=INSTANCE_TOKEN, description=(
        "A random token the reader instance chose: the same token joins again; another is refused with "
        "409 AlreadyExists while the reader of that name is online."))


class SegmentOffset(_Body):
    """A reader's offset in one segment of one stream ("scope/stream")."""

    stream: str
    segment_id: int = Field(ge=0, le=SEGMENT_ID_MAX)
    offset: int = Field(ge=0, le=INT63_MAX)


class AssignedSegment(_Body):
    stream: str
    segment: SegmentRange
    offset: int = Field(ge=0, description="Where to start reading if the reader does not know better.")
    end_offset: int | None = Field(None, description="Stop here (the group's end stream cut); null: read to the end.")
    incarnation: int | None = Field(None, description=INCARNATION)


class SyncRequest(_Body):
    """What a reader tells its group: its positions, segments it finished, a checkpoint it passed."""

    positions: list[SegmentOffset] = []
    completed: list[SegmentOffset] = Field([], description="Segments read to their end, with the end offset.")
    checkpoint: str | None = Field(None, description="The checkpoint this reader has passed.")
    instance: str | None = Field(None, pattern=INSTANCE_TOKEN, description=(
        "The token the reader joined with: if another instance joined under its name since, the answer is "
        "409 ReaderNotInReaderGroup. Null: the reader of that name, whichever."))


class Assignment(_Body):
    """The reader's segments as the group now sees them; segments missing from it were taken away."""

    generation: int
    segments: list[AssignedSegment]
    checkpoint: str | None = Field(None, description="A checkpoint the reader must pass next.")
    silent: bool = Field(False, description="The checkpoint is internal: pass it without emitting an event.")
    end_of_data: bool = Field(False, description="Every segment of every stream has been read to the end.")


class OfflineRequest(_Body):
    position: list[SegmentOffset] | None = Field(
        None, description="The reader's last position; null: the last one it reported.")
    instance: str | None = Field(None, pattern=INSTANCE_TOKEN, description=(
        "Only if the reader online under that name is this instance (a reader's own goodbye, which must "
        "not take a newcomer of its name offline). Null: whichever reader has the name."))


class CheckpointRequest(_Body):
    name: str = Field(min_length=1, max_length=255)
    silent: bool = False


class CheckpointInfo(_Body):
    name: str
    complete: bool
    silent: bool = False
    cuts: list[StreamCutBody] = []


GROUP_INCARNATION = ("The group's incarnation: random, new with every create of a group under its name; null: "
                     "a group created before incarnations were recorded.")


class ReaderGroupInfo(_Body):
    scope: str
    group: str
    config: ReaderGroupConfig
    online_readers: list[str]
    outstanding_checkpoints: list[str]
    last_checkpoint: CheckpointInfo | None = None
    unassigned_segments: int
    incarnation: str | None = Field(None, description=GROUP_INCARNATION)


class TruncationCutRequest(StreamCutBody):
    """A MANUAL_RELEASE_AT_USER_STREAMCUT group's acknowledged cut, and which group acknowledges it."""

    group_incarnation: str | None = Field(None, max_length=64, description=(
        "Only if the group is still this incarnation (ReaderGroupInfo.incarnation): a cut sent for a group "
        "that was deleted, and its name created again, is refused (404 ReaderGroupNotFound) rather than "
        "acknowledged for the new group. Null: whichever group has the name."))


class StreamCutList(_Body):
    cuts: list[StreamCutBody]


class UnreadBytes(_Body):
    unread_bytes: int


# -- transactions ----------------------------------------------------------------------------------


class BeginTxnRequest(_Body):
    lease_ms: int | None = Field(None, gt=0, description="Default: the deployment's default lease.")


class PingTxnRequest(_Body):
    lease_ms: int = Field(gt=0)


# The transactions one micro-batch of a streaming writer may commit together (one per Spark partition):
# the sink record keeps their ids in one DynamoDB item, which holds some 11,000 (docs/limits.md).
MAX_BATCH_TXNS = 4096


class CommitBatchRequest(_Body):
    batch_id: int = Field(ge=0, le=INT63_MAX)
    txn_ids: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        max_length=MAX_BATCH_TXNS, description="At most 4,096: coalesce a micro-batch to fewer partitions.")


class CommitBatchResult(_Body):
    committed: bool = Field(description="False when this batch is the sink's last committed batch again (a "
                            "re-execution: its transactions were aborted). An older batch id is IllegalState.")


class CommitTxnRequest(_Body):
    timestamp_ms: int | None = Field(None, ge=0, le=INT63_MAX, description="Event time of the transaction, for watermarks.")
    writer_id: str | None = Field(None, max_length=64)


# -- watermarks ------------------------------------------------------------------------------------


class NoteTimeRequest(_Body):
    """A writer's noted time and its position: every segment of its map at the offset after its writes."""

    timestamp_ms: int = Field(ge=0, le=INT63_MAX)
    position: list[CutPosition] = Field(min_length=1)


class WatermarkBody(_Body):
    lower_ms: int = Field(description="Every event after the cut has at least this time.")
    upper_ms: int = Field(description="Every event before the cut has at most this time.")
    cut: StreamCutBody
