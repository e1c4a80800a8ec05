"""Auto-scaling decisions from the segments' decayed traffic rates, as Pravega decides them.

The append path keeps each segment's event, byte and append-request rates decayed over four windows
(2, 5, 10 and 20 minutes by default) in its head record, at no extra request. From them, for a stream
whose scaling policy is by event rate or by byte rate (KB/s) with target ``T``:

* a segment is **hot** when its 2-window rate exceeds 5 T, its 5-window rate 2 T, or its 10-window
  rate T (each only once the segment is older than that window): it splits into
  ``min(scale factor, max(2, rate / T))`` equal pieces. It is hot too when its append requests over
  one of those windows near what one segment commits (``APPEND_REQUEST_SPLIT`` a second on the chain,
  ``SUBLOG_APPEND_REQUEST_SPLIT`` in sub-log mode: dataplane/scale_signals.py and docs/limits.md),
  or when its appends wait for each other (more than ``WAITING_SPLIT`` waiting on average: offered
  load, which a segment saturated at AWS latency shows while it commits few), whatever its events and
  bytes;
* a segment is **cold** when all four rates are below T (the 20-window one below T / 2), its append
  requests and waiting appends below half their thresholds, and it is older than the 20-minute window: two adjacent
  cold segments merge, never below the policy's minimum number of segments.

A segment younger than the cooldown is never scaled (a fresh split does not split or merge again
at once), and a stream that scaled less than the mute period ago is left alone, so a stream does not
flap. At most one decision per stream per evaluation: the hottest split first, otherwise a merge.

Which streams are looked at: only those with a segment the append path marked as a scale candidate
(dataplane/scale_signals.py), when its mark is due. ``AutoScaler.tick`` reads the due marks from every
shard of the ``scale-candidates`` index, decides for their streams from the marked segments and their
neighbours, and moves each mark to the next time something could change without an append, or clears
it. An idle auto-scaled stream whose segments are settled is marked nowhere, and costs a tick nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

from controlplane.models import StreamRecord
from controlplane.parallel import in_parallel
from controlplane.streams import AUTOSCALED, MAX_CURRENT_SEGMENTS, StreamTasks, scale_thresholds
from dataplane.rates import WINDOWS_S, Rates
from dataplane.scale_signals import (
    COLD_FACTORS,
    HOT_FACTORS,
    WAITING_SPLIT,
    clear_mark,
    due_candidates,
    move_mark,
    watch,
)
from dataplane.segment_store import SegmentInfo
from dataplane.shards import query_every_shard
from rillet.errors import SegmentNotFound, StreamNotFound, WriteConflict
from rillet.keyspace import split_evenly
from rillet.models import ScaleType, ScalingPolicy, SegmentRange, StreamConfiguration, StreamState
from rillet.names import segment_name
from rillet.units import human_duration


@dataclass(frozen=True)
class AutoScaleSettings:
    windows_ms: tuple[int, ...] = tuple(int(w * 1000) for w in WINDOWS_S)  # those the rates decay over
    cooldown_ms: int = 600_000
    mute_ms: int = 600_000
    # A decision's segments are looked at again this long after it, in case its run did not apply it
    # (a run that did sealed them, which took their marks away).
    decided_recheck_ms: int = 300_000
    # Marked segments of a stream in a workflow (scaling, updating, truncating) are looked at again
    # this long after.
    busy_recheck_ms: int = 60_000
    # Due marks one tick takes, the earliest of all shards' (the rest wait for the next tick),
    # so that a tick after a burst of creations stays within the sensor's time.
    tick_limit: int = 200
    # The wall time a tick spends deciding: the streams not reached keep their due marks for the next
    # tick, so a burst of candidates (every segment of a thousand streams just created) never takes a
    # tick past Dagster's 60-second limit for a sensor, nor starves the code server that evaluates it.
    tick_budget_s: float = 20.0

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


@dataclass(frozen=True)
class StreamScale:
    """A decision the tick made for a stream at its current epoch."""

    scope: str
    stream: str
    epoch: int
    decision: ScaleDecision


def policy_rates(policy: ScalingPolicy, info: SegmentInfo) -> tuple[float, ...]:
    if policy.scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC:
        return tuple(r / 1024 for r in info.byte_rates)
    return info.event_rates


def rate_unit(policy: ScalingPolicy) -> str:
    return "KB/s" if policy.scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC else "events/s"


def segment_heat(policy: ScalingPolicy, info: SegmentInfo, age: int, settings: AutoScaleSettings) -> tuple[float, str] | None:
    """(how many times its threshold the segment runs, why it is hot), or None when it is not hot now."""
    if age <= settings.cooldown_ms:
        return None
    target = float(policy.target_rate)
    windows = settings.windows_ms
    rates = policy_rates(policy, info)
    # (rate, times the target it must pass, window): the rule that made the segment hot is named
    rules = [(r, f, w) for r, f, w in zip(rates, HOT_FACTORS, windows) if r > f * target and age > w]
    if rules:
        rate, factor, window = rules[0]
        return (max(rates[:len(HOT_FACTORS)]) / target,
                f"{rate:.1f} {rate_unit(policy)} over {human_duration(window)} > {factor:g}x the target {target:g}")
    split = info.append_split
    appends = [(a, w) for a, w in zip(info.append_rates, windows[:len(HOT_FACTORS)]) if a > split and age > w]
    if appends:
        rate, window = appends[0]
        why = f"{rate:.1f} append requests/s over {human_duration(window)} > {split:g}, near what one segment commits"
        return max(info.append_rates[:len(HOT_FACTORS)]) / split, why
    waiting = [(q, w) for q, w in zip(info.waiting_rates, windows[:len(HOT_FACTORS)]) if q > WAITING_SPLIT and age > w]
    if waiting:
        queued, window = waiting[0]
        why = (f"{queued:.1f} appends waiting for each other on average over {human_duration(window)} > "
               f"{WAITING_SPLIT:g}: its writers offer more than it commits")
        # in as many pieces as appends wait, and one (within the policy's scale factor): each piece's
        # writers then wait for about one another
        return 1.0 + max(info.waiting_rates[:len(HOT_FACTORS)]) / WAITING_SPLIT, why
    return None


def segment_cold(policy: ScalingPolicy, info: SegmentInfo, age: int, settings: AutoScaleSettings) -> bool:
    target = float(policy.target_rate)
    return age > settings.cooldown_ms and age > settings.windows_ms[-1] \
        and all(r < f * target for r, f in zip(policy_rates(policy, info), COLD_FACTORS)) \
        and all(a < info.append_split / 2 for a in info.append_rates) \
        and all(q < WAITING_SPLIT / 2 for q in info.waiting_rates)


def decide(policy: ScalingPolicy, segments: list[tuple[SegmentRange, SegmentInfo]], now_ms: int,
           last_scale_ms: int, settings: AutoScaleSettings, width: int | None = None) -> ScaleDecision | None:
    """The scale a stream needs now, if any (``segments`` in key order with their current info: all the
    current segments, or some of them with ``width`` the number of current segments)."""
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS or now_ms - last_scale_ms < settings.mute_ms:
        return None
    width = len(segments) if width is None else width
    target = float(policy.target_rate)
    hottest: tuple[float, SegmentRange, str] | None = None
    cold: list[bool] = []
    for segment, info in segments:
        age = now_ms - info.created_ms
        heat = segment_heat(policy, info, age, settings)
        if heat is not None and (hottest is None or heat[0] > hottest[0]):
            hottest = (heat[0], segment, heat[1])
        cold.append(segment_cold(policy, info, age, settings))
    if hottest is not None:
        heat, segment, why = hottest
        # Never wider than a stream may be: a split that would be takes the room left, if any.
        pieces = min(policy.scale_factor, max(2, int(heat)), MAX_CURRENT_SEGMENTS - width + 1)
        if pieces >= 2:
            ranges = split_evenly(segment.low, segment.high, pieces)
            return ScaleDecision([segment.segment_id], [(r.low, r.high) for r in ranges],
                                 f"segment {segment.segment_id} is hot ({why}): split in {pieces}")
    if width > policy.min_num_segments:
        for i in range(len(segments) - 1):
            (a, _), (b, _) = segments[i], segments[i + 1]
            if cold[i] and cold[i + 1] and a.high == b.low:
                return ScaleDecision([a.segment_id, b.segment_id], [(a.low, b.high)],
                                     f"segments {a.segment_id} and {b.segment_id} are cold (under the target "
                                     f"{target:g} {rate_unit(policy)} over {human_duration(settings.windows_ms[-1])} "
                                     f"and each shorter window): merge")
    return None


def next_check(policy: ScalingPolicy, info: SegmentInfo, now_ms: int, last_scale_ms: int,
               settings: AutoScaleSettings) -> int | None:
    """When a segment that took part in no decision now could, if no append came (appends that cross a
    threshold mark it themselves): once the mute, its cooldown or a window's age stops holding a hot
    segment back, or once its rates have decayed under the merge thresholds. None when it is cold
    already: it waits for a neighbour to cool (whose own mark brings the stream back) or for a policy
    change (which marks every segment)."""
    thresholds = replace(scale_thresholds(policy), append_split=info.append_split)
    rates = Rates(now_ms, info.event_rates, info.byte_rates, info.append_rates, info.waiting_rates)
    unmuted = last_scale_ms + settings.mute_ms
    mature = info.created_ms + settings.cooldown_ms + 1
    if thresholds.hot(rates):
        ready = max(unmuted, mature, info.created_ms + settings.windows_ms[0] + 1)
        # Nothing holds it back but the room a split needs (or a window it has not reached): not every tick.
        return ready if ready > now_ms else now_ms + settings.decided_recheck_ms
    cold_at = max(thresholds.cold_at(rates), unmuted, mature, info.created_ms + settings.windows_ms[-1] + 1)
    return cold_at if cold_at > now_ms else None


@dataclass
class TickReport:
    """What a tick looked at, for the sensor to say when it decides nothing: the streams with a due mark,
    and those among them with a segment hot but held back by its cool-down or the stream's mute
    (``rillet stream rates`` says which and for how long)."""

    streams: int = 0
    held_back: list[str] = field(default_factory=list)  # at most ``streams`` names


class AutoScaler:
    """Decides for the streams whose segments are marked due in the ``scale-candidates`` index."""

    # Deployments (endpoint, metadata table) whose old ``autoscale`` stream index this process found
    # empty: the backfill of streams created before scale signals then costs no more requests.
    _backfilled: ClassVar[set[tuple[str | None, str]]] = set()

    def __init__(self, streams: StreamTasks, settings: AutoScaleSettings | None = None) -> None:
        self.streams = streams
        self.settings = settings or AutoScaleSettings.from_env()
        self.last_tick = TickReport()

    def candidates(self, now_ms: int) -> list[tuple[str, int]]:
        """(segment, its mark) of the scale candidates due by ``now_ms``, earliest first."""
        return due_candidates(now_ms, self.settings.tick_limit)

    def tick(self, now_ms: int) -> list[StreamScale]:
        """Decide for every stream with a due candidate (a few at once: each is a few round trips), and
        move or clear the marks it read. At most ``tick_limit`` candidates a shard and ``tick_budget_s`` of
        deciding a tick, earliest due first."""
        self.backfill(now_ms)
        marks: dict[tuple[str, str], dict[int, int]] = {}
        for name, at in self.candidates(now_ms):
            scope, stream, sid = name.split("/")
            marks.setdefault((scope, stream), {})[int(sid)] = at
        self.last_tick = TickReport(streams=len(marks))
        deadline = time.monotonic() + self.settings.tick_budget_s

        def decide_in_time(item: tuple[tuple[str, str], dict[int, int]]) -> StreamScale | None:
            return self._decide_for(*item[0], item[1], now_ms) if time.monotonic() < deadline else None

        scales = in_parallel(decide_in_time, list(marks.items()))
        return [s for s in scales if s is not None]

    def evaluate(self, scope: str, stream: str, now_ms: int) -> tuple[int, ScaleDecision | None]:
        """(current epoch, the scale the stream needs now or None), from all its current segments."""
        record = self.streams.store.get_stream(scope, stream)
        if record.state != StreamState.ACTIVE.value:
            return record.current_epoch, None
        policy = StreamConfiguration.model_validate(record.configuration).scaling_policy
        epoch = self.streams.store.get_epoch(scope, stream, record.current_epoch)
        segments = self.streams.current_segments(scope, stream, record)
        infos = [(s, self.streams.segments.info(segment_name(scope, stream, s.segment_id))) for s in segments]
        return record.current_epoch, decide(policy, infos, now_ms, epoch.created_ms if record.current_epoch else 0,
                                            self.settings)

    def _decide_for(self, scope: str, stream: str, due: dict[int, int], now_ms: int) -> StreamScale | None:
        """The decision for one stream from its due candidates and their neighbours (a stream record, an
        epoch record and a head record or three per candidate), and each candidate's next mark."""
        try:
            record = self.streams.store.get_stream(scope, stream)
        except StreamNotFound:
            return None  # deleted: its segments and their marks go with it
        names = {sid: segment_name(scope, stream, sid) for sid in due}
        policy = StreamConfiguration.model_validate(record.configuration).scaling_policy
        if record.state != StreamState.ACTIVE.value:
            for sid, at in due.items():  # a workflow in flight: its end may change everything
                move_mark(names[sid], at, now_ms + self.settings.busy_recheck_ms)
            return None
        if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS:
            for sid in due:  # a policy change the update could not apply to this segment
                watch(names[sid], None, now_ms, int(record.created_ms))
            return None
        epoch = self.streams.store.get_epoch(scope, stream, record.current_epoch)
        current = [SegmentRange(segment_id=int(s), low=lo, high=hi) for s, lo, hi in epoch.segments]
        position = {s.segment_id: i for i, s in enumerate(current)}
        around = sorted({j for sid in due if sid in position for j in (position[sid] - 1, position[sid], position[sid] + 1)
                         if 0 <= j < len(current)})
        try:
            infos = {current[j].segment_id: self.streams.segments.info(segment_name(scope, stream, current[j].segment_id))
                     for j in around}
        except SegmentNotFound:
            return None  # deleted meanwhile
        last_scale = int(epoch.created_ms) if record.current_epoch else 0
        decision = decide(policy, [(current[j], infos[current[j].segment_id]) for j in around], now_ms, last_scale,
                          self.settings, width=len(current))
        unheld = replace(self.settings, cooldown_ms=-1)  # segment_heat knows no mute: decide() holds it
        if decision is None and any(segment_heat(policy, info, now_ms - info.created_ms, unheld) is not None
                                    for sid, info in infos.items() if sid in due):
            self.last_tick.held_back.append(f"{scope}/{stream}")  # list.append: safe from the tick's threads
        for sid, at in due.items():
            info = infos.get(sid)
            if info is None:  # not current: a segment of a scale that never finished, or of an older incarnation
                move_mark(names[sid], at, now_ms + self.settings.decided_recheck_ms)
                continue
            if info.scale_at is None or info.scale_at > now_ms:
                continue  # moved since the index was read (an append, another tick): that mark stands
            if decision is not None:
                move_mark(names[sid], info.scale_at, now_ms + self.settings.decided_recheck_ms)
                continue
            at = next_check(policy, info, now_ms, last_scale, self.settings)
            if at is None:
                clear_mark(names[sid], info.scale_at, info.length)
            else:
                move_mark(names[sid], info.scale_at, at)
        return None if decision is None else StreamScale(scope, stream, int(record.current_epoch), decision)

    def backfill(self, now_ms: int) -> int:
        """Mark the segments of the streams still in the metadata table's old ``autoscale`` index
        (auto-scaled streams created before scale signals) and take the streams out of it; returns how
        many. Once per process for each deployment: after it finds the index empty it asks no more."""
        deployment = self.streams.store.deployment
        key = (deployment.endpoint_url, deployment.metadata_table)
        if key in AutoScaler._backfilled:
            return 0
        streams = query_every_shard(AUTOSCALED, StreamRecord.autoscaled.query, StreamRecord)
        for found in streams:
            try:
                record = self.streams.store.get_stream(found.scope, found.stream)
                policy = StreamConfiguration.model_validate(record.configuration).scaling_policy
                self.streams.watch_scaling(record, policy)
                self.streams.store.update(record, [StreamRecord.autoscale.remove()],
                                          f"stream {found.scope}/{found.stream} changed concurrently")
            except (StreamNotFound, WriteConflict):
                continue  # gone, or changed meanwhile: the next tick's query finds it again if it is still there
        if not streams:
            AutoScaler._backfilled.add(key)
        return len(streams)
