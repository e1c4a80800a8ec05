"""Scale signals: the append path marks the segments auto-scaling should look at, so its job polls none.

Pravega's segment store tells the controller when a segment's rate crosses a threshold; here the
append path does it on the head record it updates anyway, at no extra request. A segment of a stream
scaled by event or byte rate carries its stream's thresholds (``scaling``: the policy's unit and
target, copied at creation and when the policy changes) and, while it is a candidate, a mark:
``scale_shard``/``scale_at``, which put it in the sparse ``scale-candidates`` index under ``sc#<n>``
(dataplane.shards) by the time the auto-scaler should look at it (controlplane/autoscale.py).

* A segment is created marked, due once its longest rate window has passed (none is cold before).
* An append whose rates cross a split threshold (hot after it, not before) makes it due now. Besides
  the policy's rules, a segment is hot when its append requests near what one segment commits a
  second (``APPEND_REQUEST_SPLIT`` on the chain, ``SUBLOG_APPEND_REQUEST_SPLIT`` in sub-log mode;
  docs/limits.md), or when its appends wait for each other (``WAITING_SPLIT``), whatever its events
  and bytes: the first sees what committed, the second what was offered, so a segment saturated at a
  request latency where it commits fewer appends than the first threshold still splits.
* An append to an unmarked segment that is not cold marks it, due when its rates would fall under the
  merge thresholds if no more appends came: an idle segment's rates only decay, so that time is known
  now, and a segment that goes quiet is looked at without any append.
* Any other append leaves the keys alone, so it writes nothing to the index.

The auto-scaler moves a mark to the next time something could change, or clears it once the segment
is cold and waits only for a neighbour or a policy change (which mark it again); sealing clears it.
So a settled idle stream is in the index nowhere, and a tick pays only for what is due.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pynamodb.exceptions import UpdateError

from dataplane import rates as rate_windows  # WINDOWS_S read at call time, as rates.py reads it
from dataplane.journal import _failed_condition
from dataplane.models import SegmentMeta
from dataplane.rates import Rates
from dataplane.shards import query_every_shard, shard_key

SCALE_PREFIX = "sc"  # the index's partition keys: sc#<n> by segment name
# Pravega's thresholds, as multiples of the policy's target: hot over the 2-, 5- or 10-minute window,
# cold under all four (the 20-minute one under half).
HOT_FACTORS = (5.0, 2.0, 1.0)
COLD_FACTORS = (1.0, 1.0, 1.0, 0.5)
# Append requests a second at which a segment is hot whatever its events and bytes: two thirds of the
# 60 commits a second one segment takes at the low end of the protocol model (docs/limits.md, "One
# segment's commits"). Over the 2-, 5- or 10-minute window, with the policy's cooldowns; a segment is
# cold only under half of it on every window, so that a merge of two never makes a hot one.
APPEND_REQUEST_SPLIT = 40.0
# The same for a segment in sub-log mode (dataplane/sublog_path.py), which commits its appends in
# batches: a third of the 1,500 a second the model gives 100 writers at 5 ms a request, 60% of its 836 at
# 10 ms (docs/limits.md, "Sub-logs"). Splitting such a segment at the chain's 40 would multiply segments
# without relieving anything: each writer writes every segment its routing keys reach.
SUBLOG_APPEND_REQUEST_SPLIT = 500.0
# Appends waiting behind other appenders, on average over the 2-, 5- or 10-minute window (dataplane/rates.py),
# at which a segment is hot: at least one append always queued means its writers offer about as much as it
# commits (a single-server queue holds one waiting at about 62 % busy), so more of them only wait longer.
# A lone writer, however fast, waits for no one; a segment is cold only under half of it on every window.
WAITING_SPLIT = 1.0


def append_request_split(sublog_shards: int | None) -> float:
    """The append requests a second at which a segment is hot (see above), by its append mode."""
    return SUBLOG_APPEND_REQUEST_SPLIT if sublog_shards else APPEND_REQUEST_SPLIT


def scale_shard(segment: str) -> str:
    return shard_key(SCALE_PREFIX, segment)


def first_check_ms(created_ms: int) -> int:
    """When a new segment is first looked at: no segment is cold before its longest window has passed
    (a hot one is marked due by the append that makes it hot)."""
    return created_ms + int(rate_windows.WINDOWS_S[-1] * 1000) + 1


@dataclass(frozen=True)
class ScaleThresholds:
    """A stream's policy as the append path needs it: the unit of its rate and the target (events a
    second, or KB a second), two small attributes on the head record; and the segment's append request
    split (:func:`append_request_split`, from its mode)."""

    by_bytes: bool
    target: float
    append_split: float = APPEND_REQUEST_SPLIT

    @classmethod
    def from_item(cls, item: dict, append_split: float = APPEND_REQUEST_SPLIT) -> ScaleThresholds:
        return cls(item["u"] == "b", float(item["t"]), append_split)

    def to_item(self) -> dict:
        return {"u": "b" if self.by_bytes else "e", "t": self.target}

    def policy_rates(self, rates: Rates) -> tuple[float, ...]:
        return tuple(r / 1024 for r in rates.bytes) if self.by_bytes else rates.events

    def hot(self, rates: Rates) -> bool:
        """Above a split threshold (the cooldowns and window ages are the auto-scaler's to check)."""
        policy = self.policy_rates(rates)
        return any(r > f * self.target for r, f in zip(policy, HOT_FACTORS)) \
            or any(a > self.append_split for a in rates.appends[:len(HOT_FACTORS)]) \
            or any(q > WAITING_SPLIT for q in rates.waiting[:len(HOT_FACTORS)])

    def _cold_levels(self, rates: Rates) -> list[tuple[float, float, float]]:
        """(rate, the level it must fall under, its window in seconds) of every rule of coldness."""
        policy = [(r, f * self.target, w) for r, f, w in zip(self.policy_rates(rates), COLD_FACTORS, rate_windows.WINDOWS_S)]
        return policy + [(a, self.append_split / 2, w) for a, w in zip(rates.appends, rate_windows.WINDOWS_S)] \
            + [(q, WAITING_SPLIT / 2, w) for q, w in zip(rates.waiting, rate_windows.WINDOWS_S)]

    def cold(self, rates: Rates) -> bool:
        return all(r < level for r, level, _ in self._cold_levels(rates))

    def cold_at(self, rates: Rates) -> int:
        """When the rates, decaying without appends from ``rates.at_ms``, are all under the merge levels
        (``rates.at_ms`` itself when they are already)."""
        waits_s = [w * math.log(r / level) for r, level, w in self._cold_levels(rates) if r >= level > 0]
        return rates.at_ms + math.ceil(max(waits_s) * 1000) + 1 if waits_s else rates.at_ms


def append_actions(meta: SegmentMeta, before: Rates, after: Rates, now_ms: int) -> list:
    """What an append's head-record update sets for scaling (see the module docstring): nothing, or the
    two index keys. ``before`` and ``after`` are the rates at ``now_ms`` without and with the append."""
    if meta.scaling is None:
        return []  # not auto-scaled
    thresholds = ScaleThresholds.from_item(meta.scaling.as_dict(), append_request_split(meta.sublog_shards))
    hot = thresholds.hot(after)
    if hot and not thresholds.hot(before) and (meta.scale_at is None or meta.scale_at > now_ms):
        return mark_actions(meta.pk, now_ms)
    if meta.scale_at is None and not thresholds.cold(after):
        return mark_actions(meta.pk, now_ms if hot else thresholds.cold_at(after))
    return []


def mark_actions(segment: str, at_ms: int) -> list:
    return [SegmentMeta.scale_shard.set(scale_shard(segment)), SegmentMeta.scale_at.set(at_ms)]


def unmark_actions() -> list:
    return [SegmentMeta.scale_shard.remove(), SegmentMeta.scale_at.remove()]


def due_candidates(now_ms: int, limit: int) -> list[tuple[str, int]]:
    """(segment, its mark) of the marked segments due by ``now_ms``, earliest first: one query per shard
    of the index, in parallel (``limit`` each, so at most ``limit`` from every shard before the cut)."""
    due = query_every_shard(SCALE_PREFIX, lambda key: SegmentMeta.scale_candidates.query(
        key, SegmentMeta.scale_at <= now_ms, limit=limit), SegmentMeta)
    return [(m.pk, int(m.scale_at)) for m in sorted(due, key=lambda m: m.scale_at)[:limit]]


def _update_if(segment: str, actions: list, condition) -> bool:
    try:
        SegmentMeta(segment, "m").update(actions=actions, condition=condition)
        return True
    except UpdateError as e:
        if not _failed_condition(e):
            raise
        return False


def move_mark(segment: str, read_at: int, at_ms: int) -> bool:
    """Move the mark the auto-scaler read (``read_at``) to ``at_ms``; False if an append or another
    evaluation moved or cleared it meanwhile (then that one stands)."""
    return _update_if(segment, mark_actions(segment, at_ms), SegmentMeta.scale_at == read_at)


def clear_mark(segment: str, read_at: int, read_length: int) -> bool:
    """Clear the mark the auto-scaler read, only if no append committed since it read the segment
    (``read_length``): an append in between may have left it warm while seeing it marked."""
    return _update_if(segment, unmark_actions(), (SegmentMeta.scale_at == read_at) & (SegmentMeta.length == read_length))


def watch(segment: str, thresholds: ScaleThresholds | None, due_ms: int, stream_incarnation: int) -> bool:
    """Give an open segment of ``stream_incarnation`` its stream's thresholds and mark it due at
    ``due_ms`` (None: its stream no longer auto-scales, so thresholds and mark go): when a policy
    changes, and for segments created before marks existed. False if the segment is sealed or gone."""
    actions = ([SegmentMeta.scaling.set(thresholds.to_item()), *mark_actions(segment, due_ms)] if thresholds
               else [SegmentMeta.scaling.remove(), *unmark_actions()])
    condition = SegmentMeta.pk.exists() & (SegmentMeta.sealed == False) & (
        SegmentMeta.stream_incarnation.does_not_exist() | (SegmentMeta.stream_incarnation == stream_incarnation))
    return _update_if(segment, actions, condition)
