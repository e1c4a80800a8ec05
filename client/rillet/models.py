"""Model types: stream configuration, policies, segments and stream information.

These pydantic models are the wire format of the control API as well as the SDK's public types, so
the server validates requests with exactly the rules the SDK applies (Pravega's rules for policy
values). Durations are milliseconds and sizes bytes, as in Pravega's own configuration.
"""

from __future__ import annotations

from datetime import timedelta
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from rillet.keyspace import KeyRange, segment_epoch, segment_number

MAX_TAG_COUNT = 128
MAX_TAG_LENGTH = 256
MAX_SUBLOG_SHARDS = 64  # as Terraform's sublog_shards
SUBLOG_SHARDS_HELP = ("Sub-log mode for the stream's segments created from now on (docs/dataplane.md, "
                      "\"Sub-logs\"): a segment's many writers commit in batches, for about five times a lone "
                      "writer's requests. The number of pending shards (8 to start with), 0 for the chain, "
                      "or null for the deployment's choice (Terraform sublog_shards).")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _millis(value: timedelta | int) -> int:
    return int(value.total_seconds() * 1000) if isinstance(value, timedelta) else int(value)


class ScaleType(str, Enum):
    FIXED_NUM_SEGMENTS = "FIXED_NUM_SEGMENTS"
    BY_RATE_IN_EVENTS_PER_SEC = "BY_RATE_IN_EVENTS_PER_SEC"
    BY_RATE_IN_KBYTES_PER_SEC = "BY_RATE_IN_KBYTES_PER_SEC"


class ScalingPolicy(_Model):
    """How many segments a stream has and when auto-scaling splits or merges them."""

    scale_type: ScaleType = ScaleType.FIXED_NUM_SEGMENTS
    target_rate: int = Field(0, ge=0, description="Events/s or KB/s per segment that auto-scaling aims for.")
    scale_factor: int = Field(0, ge=0, description="At most how many pieces a hot segment splits into.")
    min_num_segments: int = Field(1, gt=0, le=1000)

    @model_validator(mode="after")
    def _rates_are_positive_when_scaling(self) -> ScalingPolicy:
        if self.scale_type != ScaleType.FIXED_NUM_SEGMENTS:
            if self.target_rate <= 0:
                raise ValueError("target rate should be > 0")
            if self.scale_factor <= 0:
                raise ValueError("scale factor should be > 0, otherwise use a fixed scaling policy")
        return self

    @classmethod
    def fixed(cls, num_segments: int) -> ScalingPolicy:
        return cls(min_num_segments=num_segments)

    @classmethod
    def by_event_rate(cls, target_rate: int, scale_factor: int, min_num_segments: int) -> ScalingPolicy:
        return cls(scale_type=ScaleType.BY_RATE_IN_EVENTS_PER_SEC, target_rate=target_rate,
                   scale_factor=scale_factor, min_num_segments=min_num_segments)

    @classmethod
    def by_data_rate(cls, target_kbps: int, scale_factor: int, min_num_segments: int) -> ScalingPolicy:
        return cls(scale_type=ScaleType.BY_RATE_IN_KBYTES_PER_SEC, target_rate=target_kbps,
                   scale_factor=scale_factor, min_num_segments=min_num_segments)


class RetentionType(str, Enum):
    TIME = "TIME"
    SIZE = "SIZE"


class ConsumptionLimits(_Model):
    """Consumption-based retention: truncate behind the subscribers' acknowledged stream cuts.

    A subscriber that has not published a cut within ``subscriber_timeout_ms`` is ignored. With no
    subscriber registered, the plain time/size policy applies at once (as in Pravega). When the
    subscribers have all timed out, the maximum still applies, and after ``fallback_after_ms`` without
    an active subscriber the plain time/size policy applies (without a fallback, only the maximum).
    """

    subscriber_timeout_ms: int = Field(gt=0)
    fallback_after_ms: int | None = Field(None, gt=0)


class RetentionPolicy(_Model):
    """Time- or size-based retention with a minimum and an optional maximum limit.

    ``retention_param`` is the minimum (milliseconds or bytes) and ``retention_max`` the maximum;
    truncation keeps at least the minimum and at most the maximum. With ``consumption`` set, the
    stream is truncated at the subscribers' lower bound, kept within the same limits.
    """

    retention_type: RetentionType
    retention_param: int = Field(ge=0)
    retention_max: int | None = Field(None, ge=0)
    consumption: ConsumptionLimits | None = None

    @model_validator(mode="after")
    def _max_not_below_min(self) -> RetentionPolicy:
        if self.retention_max is not None and self.retention_max < self.retention_param:
            raise ValueError("retention max must be >= retention min")
        return self

    @classmethod
    def by_time(cls, minimum: timedelta | int, maximum: timedelta | int | None = None) -> RetentionPolicy:
        return cls(retention_type=RetentionType.TIME, retention_param=_millis(minimum),
                   retention_max=None if maximum is None else _millis(maximum))

    @classmethod
    def by_size(cls, minimum: int, maximum: int | None = None) -> RetentionPolicy:
        return cls(retention_type=RetentionType.SIZE, retention_param=minimum, retention_max=maximum)

    def with_consumption(self, subscriber_timeout: timedelta | int,
                         fallback_after: timedelta | int | None = None) -> RetentionPolicy:
        limits = ConsumptionLimits(
            subscriber_timeout_ms=_millis(subscriber_timeout),
            fallback_after_ms=None if fallback_after is None else _millis(fallback_after))
        return self.model_copy(update={"consumption": limits})


class StreamConfiguration(_Model):
    scaling_policy: ScalingPolicy = ScalingPolicy()
    retention_policy: RetentionPolicy | None = None
    timestamp_aggregation_timeout_ms: int = Field(
        0, ge=0, description="A writer that stops noting time is dropped from watermarks after this long.")
    tags: frozenset[str] = frozenset()
    rollover_size_bytes: int = Field(0, ge=0)
    sublog_shards: int | None = Field(None, ge=0, le=MAX_SUBLOG_SHARDS, description=SUBLOG_SHARDS_HELP)

    @model_serializer(mode="wrap")
    def _deployment_choice_unnamed(self, handler):
        """A configuration that leaves the mode to the deployment does not name it, so that an SDK from
        before the option (whose models refuse a field they do not know) still reads it."""
        data = handler(self)
        if self.sublog_shards is None:
            data.pop("sublog_shards", None)
        return data

    @field_validator("tags")
    @classmethod
    def _tags_within_limits(cls, tags: frozenset[str]) -> frozenset[str]:
        if len(tags) >= MAX_TAG_COUNT:
            raise ValueError(f"maximum number of tags allowed is {MAX_TAG_COUNT - 1}")
        for tag in tags:
            if not tag or len(tag) >= MAX_TAG_LENGTH:
                raise ValueError(f"a tag is 1 to {MAX_TAG_LENGTH - 1} characters")
        return tags


class StreamConfigurationChange(BaseModel):
    """A partial update of a stream's configuration: what it names changes, the rest stays as it is
    (``kafka-configs --alter``). ``retention_policy`` given as null removes the policy (kept forever);
    absent, it stays. ``tags`` replaces the tags; ``add_tags`` and ``remove_tags`` edit them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scaling_policy: ScalingPolicy | None = None
    retention_policy: RetentionPolicy | None = Field(
        None, description="The new retention policy; null removes it (data kept forever); absent keeps it.")
    timestamp_aggregation_timeout_ms: int | None = Field(None, ge=0)
    rollover_size_bytes: int | None = Field(None, ge=0)
    sublog_shards: int | None = Field(None, ge=0, le=MAX_SUBLOG_SHARDS, description=(
        "The stream's sub-log mode for the segments created from now on; null returns it to the "
        "deployment's choice; absent keeps it."))
    tags: frozenset[str] | None = Field(None, description="Replaces the tags.")
    # bounded as the tags are (StreamConfiguration validates the result: at most 127 tags)
    add_tags: frozenset[str] = Field(frozenset(), max_length=127)
    remove_tags: frozenset[str] = Field(frozenset(), max_length=127)

    def applied_to(self, config: StreamConfiguration) -> StreamConfiguration:
        given = self.model_fields_set
        fields = config.model_dump()
        for name in ("scaling_policy", "timestamp_aggregation_timeout_ms", "rollover_size_bytes", "tags"):
            if getattr(self, name) is not None:
                fields[name] = getattr(self, name)
        for name in ("retention_policy", "sublog_shards"):
            if name in given:
                fields[name] = getattr(self, name)
        fields["tags"] = (frozenset(fields["tags"]) | self.add_tags) - self.remove_tags
        return StreamConfiguration.model_validate(fields)


class StreamState(str, Enum):
    CREATING = "CREATING"
    ACTIVE = "ACTIVE"
    UPDATING = "UPDATING"
    SCALING = "SCALING"
    COMMITTING_TXN = "COMMITTING_TXN"
    TRUNCATING = "TRUNCATING"
    SEALING = "SEALING"
    SEALED = "SEALED"


class SegmentRange(_Model):
    """A segment of a stream with its key range."""

    segment_id: int = Field(ge=0)
    low: float = Field(ge=0.0, le=1.0)
    high: float = Field(ge=0.0, le=1.0)

    @property
    def epoch(self) -> int:
        return segment_epoch(self.segment_id)

    @property
    def number(self) -> int:
        return segment_number(self.segment_id)

    @property
    def key_range(self) -> KeyRange:
        return KeyRange(self.low, self.high)


class SegmentPosition(_Model):
    """A segment of a stream with an offset in it (an entry of a head or tail stream cut)."""

    segment: SegmentRange
    offset: int = Field(ge=0)


class SegmentSlice(_Model):
    """The bytes [start_offset, end_offset) of one segment: a unit of batch reading."""

    segment: SegmentRange
    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)


class StreamInfo(_Model):
    scope: str
    stream: str
    state: StreamState
    configuration: StreamConfiguration
    created_at_ms: int
    current_epoch: int
    current_segments: list[SegmentRange]
    head: list[SegmentPosition]
    tail: list[SegmentPosition]


class SuccessorInfo(_Model):
    """A successor of a sealed segment and all of that successor's predecessors."""

    segment: SegmentRange
    predecessors: list[SegmentRange]


class TxnState(str, Enum):
    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


class TxnInfo(_Model):
    scope: str
    stream: str
    txn_id: str
    state: TxnState
    epoch: int = Field(description="The epoch the transaction began in; its segments are that epoch's.")
    segments: list[SegmentRange]
    lease_expiry_ms: int = Field(description="When the lease ends (ms since the epoch); a ping sets it to now plus "
                                             "its lease. An open transaction is aborted once it passes.")
    max_expiry_ms: int = Field(description="The end of the maximum execution time: begin plus min(1,000 x the "
                                           "lease asked for at begin, the deployment's bound). A ping whose lease "
                                           "would end later is refused (TxnFailed MAX_EXECUTION_TIME_EXCEEDED).")


class StreamDataRetention(str, Enum):
    """Whether a reader group is a subscriber of its streams' consumption-based retention."""

    NONE = "NONE"
    MANUAL_RELEASE_AT_USER_STREAMCUT = "MANUAL_RELEASE_AT_USER_STREAMCUT"
    AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT = "AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT"


INCARNATION_SHORT = "the stream's created_at_ms: a name deleted and created again is another incarnation"
INCARNATION = ("The incarnation of the stream the positions were taken on (" + INCARNATION_SHORT + "); null: "
               "unknown (positions kept before incarnations were), taken to be the current one.")


class StreamCutBody(_Model):
    """A stream cut on the wire: every segment of the cut with its key range and offset."""

    scope: str
    stream: str
    positions: list[SegmentPosition]
    incarnation: int | None = Field(None, description=INCARNATION)


class StreamRange(_Model):
    """A stream a reader group reads, from ``start`` (its head by default) to ``end`` (unbounded by default)."""

    scope: str
    stream: str
    start: list[SegmentPosition] | None = None
    end: list[SegmentPosition] | None = None
    incarnation: int | None = Field(None, description=(
        "The stream incarnation the start and end cuts were taken on (" + INCARNATION_SHORT + "); another "
        "one than the stream's is refused with StreamRecreated. The controller sets the group's own."))

    @property
    def scoped_name(self) -> str:
        return f"{self.scope}/{self.stream}"


# The group's one DynamoDB item holds every outstanding checkpoint, each with up to one position per
# live segment (about 190 bytes) and the readers yet to pass it, so this caps the item's growth: ten on
# a group of 100 readers and 100 segments take it to about 225 KB of its 400 KB. Pravega's default is 3;
# more than a few outstanding only means checkpoints are begun faster than the readers pass them.
MAX_OUTSTANDING_CHECKPOINTS = 10


class ReaderGroupConfig(_Model):
    """Pravega's ReaderGroupConfig: what a group reads and how it checkpoints.

    ``generation`` is assigned by the controller and grows with every reset of the group.
    """

    streams: list[StreamRange] = Field(min_length=1)
    automatic_checkpoint_interval_ms: int = Field(30_000, ge=0, description="0 disables automatic checkpoints.")
    group_refresh_time_ms: int = Field(3_000, ge=0)
    reader_lease_ms: int = Field(60_000, gt=0, description=(
        "A reader not heard from for this long (it reads, so it syncs, every group_refresh_time_ms) is taken "
        "offline at its last reported position and its segments go to the others; coming back, it gets "
        "ReaderNotInReaderGroup. Must exceed group_refresh_time_ms."))
    max_outstanding_checkpoint_request: int = Field(3, gt=0, le=MAX_OUTSTANDING_CHECKPOINTS, description=(
        "Checkpoints that may be outstanding at once; initiating one more is IllegalState. At most 10: the "
        "group's state holds each one."))
    retention_type: StreamDataRetention = StreamDataRetention.NONE
    generation: int = 0

    @model_validator(mode="after")
    def _streams_unique(self) -> ReaderGroupConfig:
        names = [s.scoped_name for s in self.streams]
        if len(set(names)) != len(names):
            raise ValueError("a stream appears twice in the reader group configuration")
        return self

    @model_validator(mode="after")
    def _lease_outlasts_refresh(self) -> ReaderGroupConfig:
        if self.reader_lease_ms <= self.group_refresh_time_ms:
            raise ValueError("reader_lease_ms must exceed group_refresh_time_ms, or live readers lose their lease")
        return self


class ScopeInfo(_Model):
    scope: str
    created_at_ms: int


class ReaderGroupList(_Model):
    """A page of a scope's reader groups, by name."""

    groups: list[str]
    next_token: str | None = None


class TxnList(_Model):
    """A page of a stream's unfinished transactions (open, committing or aborting)."""

    transactions: list[TxnInfo]
    next_token: str | None = None


class ReaderSegment(_Model):
    """A segment an online reader holds: where the reader reported it had read to, and what is left."""

    stream: str = Field(description="scope/stream")
    segment: SegmentRange
    offset: int = Field(description="The offset the reader last reported (or was handed the segment at).")
    end_offset: int | None = Field(None, description="Where the group stops reading it (its end cut); null: its end.")
    unread_bytes: int = Field(description="From offset to the segment's present length (or end_offset).")


class ReaderStatus(_Model):
    """An online reader of a group: its segments and when it last synced."""

    reader: str
    last_seen_ms: int
    segments: list[ReaderSegment]
    unread_bytes: int = Field(description="The sum over its segments: what it has yet to read of what it holds.")


class ReaderStatusList(_Model):
    """A group's online readers (at most the group's online readers, each with at most its fair share)."""

    readers: list[ReaderStatus]


class AcknowledgedCut(_Model):
    """A subscriber group's acknowledged (truncation) cut in one stream: retention never truncates past it."""

    cut: StreamCutBody
    updated_ms: int = Field(description="When the subscriber last acknowledged a cut (or registered).")
    generation: int


class AcknowledgedCutList(_Model):
    """One acknowledged cut per stream the subscriber reads (none for a group that is no subscriber)."""

    cuts: list[AcknowledgedCut]


class RetentionDecision(_Model):
    """What the last retention cycle decided about a stream, and why."""

    decided_ms: int = Field(description="When the cycle decided (its clock).")
    outcome: str = Field(description="truncated, kept or skipped")
    reason: str
    retained_bytes: int = Field(description="Bytes between head and tail after the cycle.")
    cut: StreamCutBody | None = Field(None, description="The cut it truncated at; null: it truncated nothing.")


class SubscriberLag(_Model):
    """A subscriber of a stream's consumption-based retention and how far behind the tail it is."""

    group: str = Field(description="scope/group")
    generation: int
    cut: StreamCutBody = Field(description="Its acknowledged cut: retention never truncates past it.")
    updated_ms: int = Field(description="When it last acknowledged a cut (or registered).")
    active: bool | None = Field(description="Heard from within the subscriber timeout; null: the policy is not "
                                            "consumption-based, so subscribers hold nothing back.")
    lag_bytes: int = Field(description="Bytes between its acknowledged cut and the tail.")


class RetentionStatus(_Model):
    """A stream's last retention decision and its subscribers (all of them: one per subscriber group)."""

    last_decision: RetentionDecision | None = Field(description="Null until a retention cycle has run.")
    subscribers: list[SubscriberLag]


class WindowRate(_Model):
    """A segment's decayed rates over one of the auto-scaler's windows, and that window's thresholds. Over a
    window the segment has not lived yet (``window_passed`` false), its rates over its life so far."""

    window_ms: int
    events_per_s: float
    bytes_per_s: float
    append_requests_per_s: float = Field(description="Append requests (blocks and merges committed) a second.")
    waiting_appends: float = Field(0.0, description="Appends waiting behind other appenders, on average: what the "
                                                    "writers offer beyond what the segment commits.")
    policy_rate: float | None = Field(description="The rate the policy scales on, in its unit (events/s or KB/s); "
                                                  "null for a fixed policy.")
    split_above: float | None = Field(description="Hot above this policy rate (once the segment is older than the "
                                                  "window); null: no split rule on this window, or a fixed policy.")
    merge_below: float | None = Field(description="Cold only under this policy rate (on every window); null for a "
                                                  "fixed policy.")
    window_passed: bool = Field(description="The segment is older than the window: only then does its split rule apply.")


class SegmentRates(_Model):
    """One current segment as the auto-scaler sees it now."""

    segment: SegmentRange
    created_ms: int
    age_ms: int
    cooldown_left_ms: int = Field(description="How long until the segment may scale (0: it may); a segment younger "
                                              "than the cool-down never splits or merges.")
    windows: list[WindowRate]
    status: str = Field(description="hot, hot-in-cooldown, cold, cold-too-young, steady or fixed.")
    why: str = Field(description="The auto-scaler's reason for the status, in its words.")
    next_check_ms: int | None = Field(description="When auto-scaling looks at the segment next without an append "
                                                  "(its scale mark); null: not until an append crosses a threshold, a "
                                                  "neighbour's look or a policy change.")


class AutoScaleDecision(_Model):
    """The last auto-scale decision applied (or tried) since the stream's current epoch began."""

    decided_ms: int = Field(description="When the scale run applied or tried it.")
    epoch: int | None = Field(description="The epoch it was decided at (null: not known).")
    reason: str
    outcome: str = Field(description="scaled to epoch N, or not applied and why.")


class StreamRates(_Model):
    """Why a stream has (not) scaled: each current segment's rates over the policy's windows, the thresholds,
    the cool-down left, what the auto-scaler would decide now and the last decision it made."""

    scope: str
    stream: str
    state: StreamState
    scaling_policy: ScalingPolicy
    auto_scaled: bool = Field(description="False for a fixed policy: the stream never scales by itself.")
    unit: str | None = Field(description="events/s or KB/s: the policy's rate unit (null for a fixed policy).")
    cooldown_ms: int = Field(description="A segment younger than this never scales.")
    mute_ms: int = Field(description="After a scale the stream is left alone this long.")
    mute_left_ms: int = Field(description="How much of the mute remains (0: none).")
    waiting_split: float = Field(1.0, description="Appends waiting on average over the 2-, 5- or 10-minute window at "
                                                  "which a segment is hot whatever its events and bytes.")
    append_request_split: float = Field(description="Append requests a second over the 2-, 5- or 10-minute window at "
                                                    "which a segment is hot whatever its events and bytes.")
    epoch: int
    epoch_created_ms: int
    now_ms: int = Field(description="The controller's clock when it read the rates.")
    segments: list[SegmentRates]
    decision_now: str = Field(description="What the auto-scaler would decide from these rates now, and why.")
    last_decision: AutoScaleDecision | None = Field(description="Null when no auto-scale run has recorded one since "
                                                                "the current epoch began.")
