"""Auto-scaling decisions from the segments' decayed traffic rates, as Pravega decides them.

The append path keeps each segment's event and byte rates decayed over four windows (2, 5, 10 and
20 minutes by default) in its head record, at no extra request. From them, for a stream whose
scaling policy is by event rate or by byte rate (KB/s) with target ``T``:

* a segment is **hot** when its 2-window rate exceeds 5 T, its 5-window rate 2 T, or its 10-window
  rate T (each only once the segment is older than that window): it splits into
  ``min(scale factor, max(2, rate / T))`` equal pieces;
* a segment is **cold** when all four rates are below T (the 20-window one below T / 2) and it is
  older than the 20-minute window: two adjacent cold segments merge, never below the policy's
  minimum number of segments.

A segment younger than the cooldown is never scaled (a fresh split does not split or merge again
at once), and a stream that scaled less than the mute period ago is left alone, so a stream does not
flap. At most one decision per stream per evaluation: the hottest split first, otherwise a merge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from controlplane.models import StreamRecord
from controlplane.streams import AUTOSCALED, MAX_CURRENT_SEGMENTS, StreamTasks
from dataplane.rates import WINDOWS_S
from dataplane.segment_store import SegmentInfo
from dataplane.shards import query_every_shard
from rillet.cli_format import human_duration
from rillet.keyspace import split_evenly
from rillet.models import ScaleType, ScalingPolicy, SegmentRange, StreamConfiguration, StreamState
from rillet.names import segment_name


@dataclass(frozen=True)
class AutoScaleSettings:
    windows_ms: tuple[int, ...] = tuple(int(w * 1000) for w in WINDOWS_S)  # those the rates decay over
    cooldown_ms: int = 600_000
    mute_ms: int = 600_000

    @classmethod
    def from_env(cls) -> AutoScaleSettings:
        env = os.environ
        return cls(cooldown_ms=int(env.get("RILLET_SCALE_COOLDOWN_MS", cls.cooldown_ms)),
                   mute_ms=int(env.get("RILLET_SCALE_MUTE_MS", cls.mute_ms)))


@dataclass(frozen=True)
class ScaleDecision:
    seal: list[int]
    new_ranges: list[tuple[float, float]]
    reason: str

    @property
    def key(self) -> str:
        """Deterministic: the same decision on the same segments gets the same run key."""
        return "-".join(str(s) for s in self.seal) + ("-split" if len(self.new_ranges) > len(self.seal) else "-merge")


def _rates(policy: ScalingPolicy, info: SegmentInfo) -> tuple[float, ...]:
    if policy.scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC:
        return tuple(r / 1024 for r in info.byte_rates)
    return info.event_rates


def decide(policy: ScalingPolicy, segments: list[tuple[SegmentRange, SegmentInfo]], now_ms: int,
           last_scale_ms: int, settings: AutoScaleSettings) -> ScaleDecision | None:
    """The scale a stream needs now, if any (``segments`` in key order with their current info)."""
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS or now_ms - last_scale_ms < settings.mute_ms:
        return None
    target = float(policy.target_rate)
    w2, w5, w10, w20 = settings.windows_ms
    unit = "KB/s" if policy.scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC else "events/s"
    hottest: tuple[float, SegmentRange, str] | None = None
    cold: list[bool] = []
    for segment, info in segments:
        age = now_ms - info.created_ms
        r2, r5, r10, r20 = _rates(policy, info)
        mature = age > settings.cooldown_ms
        # (rate, times the target it must pass, window): the rule that made the segment hot is named
        rules = [(r, factor, window) for r, factor, window in ((r2, 5, w2), (r5, 2, w5), (r10, 1, w10))
                 if mature and r > factor * target and age > window]
        if rules and (hottest is None or max(r2, r5, r10) > hottest[0]):
            rate, factor, window = rules[0]
            why = f"{rate:.1f} {unit} over {human_duration(window)} > {factor}x the target {target:g}"
            hottest = (max(r2, r5, r10), segment, why)
        cold.append(mature and age > w20 and r2 < target and r5 < target and r10 < target and r20 < target / 2)
    if hottest is not None:
        rate, segment, why = hottest
        # Never wider than a stream may be: a split that would be takes the room left, if any.
        pieces = min(policy.scale_factor, max(2, int(rate / target)), MAX_CURRENT_SEGMENTS - len(segments) + 1)
        if pieces >= 2:
            ranges = split_evenly(segment.low, segment.high, pieces)
            return ScaleDecision([segment.segment_id], [(r.low, r.high) for r in ranges],
                                 f"segment {segment.segment_id} is hot ({why}): split in {pieces}")
    if len(segments) > policy.min_num_segments:
        for i in range(len(segments) - 1):
            (a, _), (b, _) = segments[i], segments[i + 1]
            if cold[i] and cold[i + 1] and a.high == b.low:
                return ScaleDecision([a.segment_id, b.segment_id], [(a.low, b.high)],
                                     f"segments {a.segment_id} and {b.segment_id} are cold (under the target "
                                     f"{target:g} {unit} over {human_duration(w20)} and each shorter window): merge")
    return None


class AutoScaler:
    """Evaluates the auto-scaled streams (those in the sparse ``autoscale`` index)."""

    def __init__(self, streams: StreamTasks, settings: AutoScaleSettings | None = None) -> None:
        self.streams = streams
        self.settings = settings or AutoScaleSettings.from_env()

    def candidates(self) -> list[tuple[str, str]]:
        return [(r.scope, r.stream) for r in query_every_shard(AUTOSCALED, StreamRecord.autoscaled.query)]

    def evaluate(self, scope: str, stream: str, now_ms: int) -> tuple[int, ScaleDecision | None]:
        """(current epoch, the scale the stream needs now or None)."""
        record = self.streams.store.get_stream(scope, stream)
        if record.state != StreamState.ACTIVE.value:
            return record.current_epoch, None
        policy = StreamConfiguration.model_validate(record.configuration).scaling_policy
        epoch = self.streams.store.get_epoch(scope, stream, record.current_epoch)
        segments = self.streams.current_segments(scope, stream, record)
        infos = [(s, self.streams.segments.info(segment_name(scope, stream, s.segment_id))) for s in segments]
        return record.current_epoch, decide(policy, infos, now_ms, epoch.created_ms if record.current_epoch else 0,
                                            self.settings)
