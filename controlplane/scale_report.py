"""Why a stream has (not) scaled: its segments' rates as the auto-scaler sees them, and its last decision.

``stream_rates`` reads what an evaluation of the whole stream reads (``AutoScaler.evaluate``): the
stream record, its current epoch record and each current segment's head record (rates decayed to
now), and judges them with the auto-scaler's own functions (``decide``, ``segment_heat``,
``segment_cold``, ``policy_rates`` and the factors of dataplane/scale_signals.py), so what it says is
what a tick would decide, thresholds, cool-down and mute included. It runs on request only: the
auto-scaler's tick reads and writes nothing more for it.

``remember_decision`` is how a decision and its outcome are kept: the scale run (dagster_project/
autoscale.py), once it has applied or failed to apply a decision, writes them on the stream's current
epoch record (``EpochRecord.scale_decision``), one small update per run; the next run overwrites them.
So the record of the epoch a decision created says why it exists, and a decision that could not be
applied is on the epoch it was made at. An epoch made otherwise (creation, a manual scale, a rolling
transaction) carries none until a run writes one.
"""

from __future__ import annotations

import math
from dataclasses import replace

from pynamodb.exceptions import UpdateError

from controlplane.autoscale import (
    AutoScaler,
    decide,
    policy_rates,
    rate_unit,
    segment_cold,
    segment_heat,
)
from controlplane.models import EpochRecord, epoch_sk, stream_pk
from controlplane.parallel import in_parallel
from controlplane.store import MetadataStore, failed_condition
from controlplane.streams import MAX_CURRENT_SEGMENTS
from dataplane.scale_signals import APPEND_REQUEST_SPLIT, COLD_FACTORS, HOT_FACTORS, WAITING_SPLIT
from dataplane.segment_store import SegmentInfo
from rillet.errors import SegmentNotFound, WriteConflict
from rillet.models import (
    AutoScaleDecision,
    ScaleType,
    ScalingPolicy,
    SegmentRange,
    SegmentRates,
    StreamConfiguration,
    StreamRates,
    StreamState,
    WindowRate,
)
from rillet.names import segment_name
from rillet.units import rounded_duration, short_duration

# A recorded reason or outcome is cut to this many characters (the reasons the auto-scaler writes are
# about 150), which bounds what a decision adds to an epoch record.
DECISION_TEXT_MAX = 500
_READ_ATTEMPTS = 3  # a scale between reading the epoch and its segments' heads: read again


def _cut(text: str) -> str:
    return text if len(text) <= DECISION_TEXT_MAX else text[:DECISION_TEXT_MAX - 1] + "…"


def _lived(age_ms: int, window_ms: int) -> float:
    """The share of a steady rate that a decayed sum started ``age_ms`` ago holds over ``window_ms``:
    ``1 - exp(-age / window)`` (dataplane/rates.py), 1 once the window has passed. A young segment's
    rate divided by it is its rate over the life it has had, not spread over a window it has not lived."""
    if age_ms >= window_ms:
        return 1.0
    return max(1e-9, -math.expm1(-max(age_ms, 0) / window_ms))


def _windows(policy: ScalingPolicy, info: SegmentInfo, age: int, windows_ms: tuple[int, ...]) -> list[WindowRate]:
    auto = policy.scale_type != ScaleType.FIXED_NUM_SEGMENTS
    target = float(policy.target_rate)
    rates = policy_rates(policy, info) if auto else None
    lived = [_lived(age, w) for w in windows_ms]
    return [WindowRate(window_ms=w, events_per_s=info.event_rates[i] / lived[i], bytes_per_s=info.byte_rates[i] / lived[i],
                       append_requests_per_s=info.append_rates[i] / lived[i],
                       waiting_appends=info.waiting_rates[i] / lived[i],
                       policy_rate=rates[i] / lived[i] if rates else None,
                       split_above=HOT_FACTORS[i] * target if auto and i < len(HOT_FACTORS) else None,
                       merge_below=COLD_FACTORS[i] * target if auto else None,
                       window_passed=age > w)
            for i, w in enumerate(windows_ms)]


def _status(policy: ScalingPolicy, info: SegmentInfo, age: int, autoscaler: AutoScaler) -> tuple[str, str]:
    """(status, why) of one segment, by the auto-scaler's rules: held back by its cool-down or window ages
    is said as such."""
    settings = autoscaler.settings
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS:
        return "fixed", "the scaling policy is fixed: the segment never scales by itself"
    heat = segment_heat(policy, info, age, settings)
    if heat is not None:
        return "hot", heat[1]
    held = segment_heat(policy, info, age, replace(settings, cooldown_ms=-1))
    if held is not None:
        return "hot-in-cooldown", (f"{held[1]}, but it is younger than the cool-down "
                                   f"({short_duration(settings.cooldown_ms - age)} left)")
    if segment_cold(policy, info, age, settings):
        return "cold", (f"under the merge thresholds on every window: it merges with a cold neighbour while "
                        f"the stream has more than {policy.min_num_segments} "
                        f"segment{'' if policy.min_num_segments == 1 else 's'}")
    oldest = max(settings.cooldown_ms, settings.windows_ms[-1]) + 1
    if segment_cold(policy, info, max(age, oldest), settings):
        return "cold-too-young", (f"under the merge thresholds, but no segment merges before it is older than "
                                  f"the longest window and the cool-down "
                                  f"({short_duration(oldest - age)} left)")
    return "steady", f"between the split and merge thresholds (target {policy.target_rate:g} {rate_unit(policy)})"


def _decision_now(policy: ScalingPolicy, state: str, infos: list[tuple[SegmentRange, SegmentInfo]],
                  statuses: list[str], now_ms: int, last_scale_ms: int, autoscaler: AutoScaler) -> str:
    settings = autoscaler.settings
    if policy.scale_type == ScaleType.FIXED_NUM_SEGMENTS:
        return "none: the scaling policy is fixed, so the stream never scales by itself"
    if state != StreamState.ACTIVE.value:
        return f"none while the stream is {state} (the auto-scaler looks again once it is ACTIVE)"
    decision = decide(policy, infos, now_ms, last_scale_ms, settings)
    if decision is not None:
        return decision.reason
    if now_ms - last_scale_ms < settings.mute_ms:
        return (f"none: the stream scaled {rounded_duration(now_ms - last_scale_ms)} ago and is left alone for "
                f"{short_duration(settings.mute_ms - (now_ms - last_scale_ms))} more (the mute)")
    numbers = {status: [str(s.number) for (s, _), st in zip(infos, statuses) if st == status] for status in statuses}
    if numbers.get("hot"):  # hot, yet no split: no room left
        return (f"none: segment {', '.join(numbers['hot'])} is hot, but the stream has the most segments it may "
                f"have ({MAX_CURRENT_SEGMENTS})")
    if numbers.get("hot-in-cooldown"):  # a split waits for the cool-down alone: merges are beside the point
        return f"none: segment {', '.join(numbers['hot-in-cooldown'])} would split but is in its cool-down"
    why = ["no segment is hot"]
    if len(infos) <= policy.min_num_segments:
        why.append(f"the stream is at its minimum of {policy.min_num_segments} "
                   f"segment{'' if policy.min_num_segments == 1 else 's'}")
    else:
        why.append("no two neighbouring segments are both cold")
    return "none: " + " and ".join(why)


def stream_rates(autoscaler: AutoScaler, scope: str, stream: str, now_ms: int) -> StreamRates:
    """Each current segment's rates over the policy's windows with their thresholds, its cool-down left and
    its status; the mute left, what the auto-scaler would decide now, and the last decision recorded.
    A stream record, an epoch record and one head record per current segment (8 at once)."""
    streams, settings = autoscaler.streams, autoscaler.settings
    for attempt in range(_READ_ATTEMPTS):
        record = streams.store.get_stream(scope, stream)
        epoch = streams.store.get_epoch(scope, stream, record.current_epoch)
        segments = [SegmentRange(segment_id=int(s), low=lo, high=hi) for s, lo, hi in epoch.segments]
        try:
            infos = in_parallel(lambda s: streams.segments.info(segment_name(scope, stream, s.segment_id)), segments)
            break
        except SegmentNotFound:  # scaled (or deleted) meanwhile: the next read says which
            if attempt == _READ_ATTEMPTS - 1:
                raise WriteConflict(f"stream {scope}/{stream} scaled while its rates were read; try again") from None
    policy = StreamConfiguration.model_validate(record.configuration).scaling_policy
    auto = policy.scale_type != ScaleType.FIXED_NUM_SEGMENTS
    last_scale = int(epoch.created_ms) if record.current_epoch else 0  # as the auto-scaler counts the mute
    views, statuses = [], []
    for segment, info in zip(segments, infos):
        age = now_ms - int(info.created_ms)
        status, why = _status(policy, info, age, autoscaler)
        statuses.append(status)
        views.append(SegmentRates(segment=segment, created_ms=int(info.created_ms), age_ms=age,
                                  cooldown_left_ms=max(0, settings.cooldown_ms - age),
                                  windows=_windows(policy, info, age, settings.windows_ms), status=status, why=why,
                                  next_check_ms=info.scale_at))
    pairs = list(zip(segments, infos))
    recorded = epoch.scale_decision
    return StreamRates(
        scope=scope, stream=stream, state=StreamState(record.state), scaling_policy=policy, auto_scaled=auto,
        unit=rate_unit(policy) if auto else None, cooldown_ms=settings.cooldown_ms, mute_ms=settings.mute_ms,
        mute_left_ms=max(0, settings.mute_ms - (now_ms - last_scale)) if auto else 0,
        # by the segments' append mode (dataplane.scale_signals.append_request_split): the lowest
        append_request_split=min((i.append_split for i in infos), default=APPEND_REQUEST_SPLIT),
        waiting_split=WAITING_SPLIT,
        epoch=int(record.current_epoch),
        epoch_created_ms=int(epoch.created_ms), now_ms=now_ms, segments=views,
        decision_now=_decision_now(policy, record.state, pairs, statuses, now_ms, last_scale, autoscaler),
        last_decision=AutoScaleDecision.model_validate(recorded) if recorded else None)


def remember_decision(store: MetadataStore, scope: str, stream: str, epoch: int | None, reason: str,
                      outcome: str, now_ms: int) -> bool:
    """Keep an auto-scale decision (made at ``epoch``) and what its run did on the stream's current epoch
    record, replacing the one there (see the module docstring); a stream record read and one update of an
    existing epoch record of this incarnation of the stream. False if there was none to write on (the
    stream deleted, or its epoch record of another incarnation)."""
    record = store.get_stream(scope, stream)
    decision = AutoScaleDecision(decided_ms=now_ms, epoch=epoch, reason=_cut(reason), outcome=_cut(outcome))
    try:
        EpochRecord(stream_pk(scope, stream), epoch_sk(int(record.current_epoch))).update(
            actions=[EpochRecord.scale_decision.set(decision.model_dump(mode="json"))],
            condition=EpochRecord.pk.exists() & (EpochRecord.created_ms >= int(record.created_ms)))
    except UpdateError as e:
        if not failed_condition(e):
            raise
        return False
    return True

