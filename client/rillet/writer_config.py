"""EventWriterConfig: a writer's batching, retry and back-pressure bounds (see rillet.writer for how a
write travels under them), and WriteAck, where an acknowledged event landed."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from rillet.framing import MAX_BLOCK_SIZE, MAX_EVENT_SIZE

# The cost profile's budget: about a second of events per block once the round trip is taken off
# (blocks as large as the former one-second linger's, so dollars per GB as low or lower).
COST_OPTIMIZED_LATENCY_MS = 1200

@dataclass(frozen=True)
class EventWriterConfig:
    """Batching and retry bounds of a writer: the trade-off between latency and dollars per GB.

    ``max_latency_ms`` is the main knob (see the module docstring): the writer holds an event for at
    most the budget less the round trip it measures, so an event is typically acknowledged within the
    budget, and a block carries everything written during that hold. Each request costs about the
    same whatever its size, so a longer budget means larger blocks and fewer requests per GB. The
    default, 250 ms, is the shortest budget on the measured frontier (docs/benchmarks.md) that keeps a
    1 KiB-event stream under $0.04 per GB at 1 MB/s and $0.40 at 100 events/s, for a modeled ack p99
    under 300 ms. ``lowest_latency()`` sends a block as soon as the one before it is answered (one
    request per round trip, the former default); ``cost_optimized()`` waits about a second (one
    block per second: under $0.01 per GB at 1 MB/s).

    ``retry_timeout_s`` is the most an event waits for its outcome, from ``write_event`` (Kafka's
    ``delivery.timeout.ms``): flush and close return within it. ``buffer_bytes`` and ``max_block_s``
    are the back-pressure (Kafka's ``buffer.memory`` and ``max.block.ms``): the default buffer holds
    16 full blocks in flight, so it only fills when the service is slower than the writer.
    """

    batch_size_bytes: int = MAX_EVENT_SIZE  # a block leaves once this much gathered (4 MiB: one request's most)
    max_latency_ms: int = 250  # write to acknowledgement: an event is held at most this less the round trip
    retry_timeout_s: float = 300.0  # the most an event waits from write_event for an outcome, then OutcomeUnknown
    max_concurrency: int = 16
    max_inflight_blocks: int = 3  # per segment: a block's upload overlaps the commit of the one before
    idle_writer_id_s: float = 3600.0  # a segment's writer id unacknowledged this long is replaced by a new one
    # Keep each event's routing key and time with it, as Kafka keeps a record's key and timestamp (readers
    # see them as ``routing_key`` and ``timestamp_ms``; Spark as columns). Costs 11 bytes and the key's per
    # event; readers need this SDK version or later (rillet.framing).
    store_key_and_time: bool = False
    buffer_bytes: int = 64 * 1024 * 1024  # events written and not yet resolved; beyond it write_event blocks
    max_block_s: float = 60.0  # how long write_event blocks on a full buffer, then WriterBufferFull

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size_bytes <= MAX_BLOCK_SIZE:
            raise ValueError(f"batch_size_bytes must be between 1 and {MAX_BLOCK_SIZE}")
        if (self.max_latency_ms < 0 or self.retry_timeout_s <= 0 or self.max_concurrency < 1
                or self.max_inflight_blocks < 1 or self.idle_writer_id_s <= 0
                or self.buffer_bytes < 1 or self.max_block_s < 0):
            raise ValueError("max_latency_ms >= 0, retry_timeout_s > 0, max_concurrency >= 1, "
                             "max_inflight_blocks >= 1, idle_writer_id_s > 0, buffer_bytes >= 1 "
                             "and max_block_s >= 0")

    @classmethod
    def lowest_latency(cls, **overrides: Any) -> EventWriterConfig:
        """The lowest latency per request: no budget to spend, so a partial block leaves as soon as
        nothing of its segment is in flight and carries what gathered during the round trip before
        (Pravega's behaviour; the default before the latency budget). One request per round trip
        whatever the rate: dollars per GB are highest at low rates."""
        return cls(**{"max_latency_ms": 0, **overrides})

    @classmethod
    def cost_optimized(cls, **overrides: Any) -> EventWriterConfig:
        """The lowest dollars per GB: a budget of about a second, so blocks are large (about 1 MB at
        1 MB/s: one S3 PUT and a few small DynamoDB writes per MB), at about a second of latency."""
        return cls(**{"max_latency_ms": COST_OPTIMIZED_LATENCY_MS, "batch_size_bytes": MAX_EVENT_SIZE, **overrides})


_dataclass_init = EventWriterConfig.__init__


def _init_accepting_linger_ms(self: EventWriterConfig, *args: Any, linger_ms: int | None = None, **kwargs: Any) -> None:
    """``linger_ms``, the previous release's knob, still accepted for this release (then removed), as the
    ``max_latency_ms`` it became: code written against that release keeps working, warned."""
    if linger_ms is not None:
        if "max_latency_ms" in kwargs:
            raise TypeError("EventWriterConfig: give max_latency_ms, not also the deprecated linger_ms")
        warnings.warn("EventWriterConfig(linger_ms=...) is deprecated and will be removed in the next release: "
                      "use max_latency_ms, the latency budget that replaced it", DeprecationWarning, stacklevel=2)
        kwargs["max_latency_ms"] = linger_ms
    _dataclass_init(self, *args, **kwargs)


EventWriterConfig.__init__ = _init_accepting_linger_ms  # type: ignore[method-assign]


@dataclass(frozen=True)
class WriteAck:
    """Where an acknowledged event landed: its segment and the offset of its frame."""

    segment_id: int
    offset: int
