"""The append path's scale signals (dataplane/scale_signals.py): which appends write the scale mark.

An append writes the mark's index keys only when its rates cross a threshold, so the
``scale-candidates`` index is written once per crossing, not once per append; a segment whose traffic
stops is due when its rates will have decayed under the merge thresholds; and a segment whose append
requests near what one segment commits is hot whatever its events.
"""

from __future__ import annotations

import math

import pytest

from controlplane.autoscale import AutoScaleSettings, decide
from dataplane.models import META_KEY, SegmentMeta
from dataplane.rates import WINDOWS_S, Rates
from dataplane.scale_signals import (
    APPEND_REQUEST_SPLIT,
    SUBLOG_APPEND_REQUEST_SPLIT,
    WAITING_SPLIT,
    ScaleThresholds,
    append_actions,
)
from dataplane.segment_store import SegmentInfo
from rillet.models import ScalingPolicy, SegmentRange

NOW = 10_000_000
T = 10.0
THRESHOLDS = ScaleThresholds(by_bytes=False, target=T)
QUIET = (0.0, 0.0, 0.0, 0.0)


def _head(scale_at: int | None, scaling: ScaleThresholds | None = THRESHOLDS,
          sublog_shards: int | None = None) -> SegmentMeta:
    return SegmentMeta("sc/st/0", META_KEY, created_ms=0, scaling=scaling.to_item() if scaling else None,
                       scale_at=scale_at, sublog_shards=sublog_shards)


def _rates(events=QUIET, appends=QUIET) -> Rates:
    return Rates(NOW, tuple(events), QUIET, tuple(appends))


QUIET_RATES = _rates()


def _marked_at(actions: list) -> int | None:
    """The due time an append's actions set, None when they leave the index keys alone."""
    values = [a.values[1].value for a in actions if a.values[0].path == ["sa"]]
    return int(values[0]["N"]) if values else None


def test_the_append_that_crosses_the_split_threshold_marks_the_segment_due_now_and_the_next_ones_write_nothing():
    warm, hot = _rates((4 * T, 0, 0, 0)), _rates((6 * T, 0, 0, 0))
    later = NOW + 600_000  # marked for its cold time
    assert _marked_at(append_actions(_head(later), warm, hot, NOW)) == NOW
    assert append_actions(_head(NOW), hot, hot, NOW) == []  # hot already, and due: nothing written
    assert append_actions(_head(later), hot, hot, NOW) == []  # no crossing: the auto-scaler set that time


def test_an_append_to_an_unmarked_warm_segment_marks_it_for_when_it_would_be_cold():
    warm = _rates((T, T, T, T))  # 20-minute rate at 2x the half target it must fall under
    at = _marked_at(append_actions(_head(None), warm, warm, NOW))
    assert at == NOW + math.ceil(WINDOWS_S[3] * math.log(2) * 1000) + 1
    assert append_actions(_head(NOW + 1), warm, warm, NOW) == []  # marked: nothing written
    assert append_actions(_head(None), QUIET_RATES, QUIET_RATES, NOW) == []  # cold: waits for a neighbour


def test_a_segment_of_a_fixed_stream_never_signals():
    hot = _rates((100 * T, 100 * T, 100 * T, 100 * T), (100.0,) * 4)
    assert append_actions(_head(None, scaling=None), QUIET_RATES, hot, NOW) == []


def test_append_requests_near_what_a_segment_commits_make_it_hot_whatever_its_events():
    busy = _rates(appends=(APPEND_REQUEST_SPLIT + 5, 0, 0, 0))
    assert THRESHOLDS.hot(busy) and not THRESHOLDS.cold(busy)
    assert not THRESHOLDS.cold(_rates(appends=(0, 0, 0, APPEND_REQUEST_SPLIT / 2)))  # a merge would make it hot
    settings = AutoScaleSettings(windows_ms=(2_000, 5_000, 10_000, 20_000), cooldown_ms=1_000, mute_ms=30_000)
    old = NOW - 60_000
    segments = [(SegmentRange(segment_id=0, low=0.0, high=1.0),
                 SegmentInfo("sc/st/0", 0, 100, False, old, (1.0, 1.0, 1.0, 1.0), QUIET, None,
                             (2.5 * APPEND_REQUEST_SPLIT, 0.0, 0.0, 0.0)))]
    decision = decide(ScalingPolicy.by_event_rate(int(T), 4, 1), segments, NOW, 0, settings)
    assert decision.seal == [0] and len(decision.new_ranges) == 2  # max(2, int(2.5))
    assert "append requests/s" in decision.reason, decision.reason


def test_a_sub_log_segment_is_hot_only_near_what_its_batches_commit():
    """A sub-log segment commits hundreds of appends a second: at the chain's 40 it is not hot (a split
    would only multiply the segments every writer writes), at SUBLOG_APPEND_REQUEST_SPLIT it is."""
    busy_chain = _rates(appends=(4 * APPEND_REQUEST_SPLIT, 0, 0, 0))
    busy_sublog = _rates(appends=(SUBLOG_APPEND_REQUEST_SPLIT + 5, 0, 0, 0))
    assert _marked_at(append_actions(_head(NOW + 600_000), QUIET_RATES, busy_chain, NOW)) == NOW
    assert append_actions(_head(NOW + 600_000, sublog_shards=8), QUIET_RATES, busy_chain, NOW) == []
    assert _marked_at(append_actions(_head(NOW + 600_000, sublog_shards=8), busy_chain, busy_sublog, NOW)) == NOW
    settings = AutoScaleSettings(windows_ms=(2_000, 5_000, 10_000, 20_000), cooldown_ms=1_000, mute_ms=30_000)
    policy, old = ScalingPolicy.by_event_rate(int(T), 4, 1), NOW - 60_000

    def decided(appends: float, split: float):
        info = SegmentInfo("sc/st/0", 0, 100, False, old, (1.0, 1.0, 1.0, 1.0), QUIET, None, (appends, 0.0, 0.0, 0.0),
                           append_split=split)
        return decide(policy, [(SegmentRange(segment_id=0, low=0.0, high=1.0), info)], NOW, 0, settings)

    assert decided(4 * APPEND_REQUEST_SPLIT, SUBLOG_APPEND_REQUEST_SPLIT) is None
    assert decided(2.5 * SUBLOG_APPEND_REQUEST_SPLIT, SUBLOG_APPEND_REQUEST_SPLIT).seal == [0]


def test_appends_waiting_for_each_other_make_a_segment_hot_whatever_it_commits():
    """Offered load: a segment that commits few appends (at AWS latency the chain commits a few dozen a
    second) is hot once more than WAITING_SPLIT appends wait on average, and cold only under half of it."""
    waiting = Rates(NOW, QUIET, QUIET, (12.0, 0, 0, 0), (WAITING_SPLIT + 0.5, 0, 0, 0))
    assert THRESHOLDS.hot(waiting) and not THRESHOLDS.cold(waiting)
    assert _marked_at(append_actions(_head(NOW + 600_000), QUIET_RATES, waiting, NOW)) == NOW
    assert not THRESHOLDS.cold(Rates(NOW, QUIET, QUIET, QUIET, (0, 0, 0, WAITING_SPLIT / 2)))
    assert THRESHOLDS.cold(Rates(NOW, QUIET, QUIET, QUIET, (0.4 * WAITING_SPLIT,) * 4))
    settings = AutoScaleSettings(windows_ms=(2_000, 5_000, 10_000, 20_000), cooldown_ms=1_000, mute_ms=30_000)
    info = SegmentInfo("sc/st/0", 0, 100, False, NOW - 60_000, (1.0,) * 4, QUIET, None, (12.0, 0.0, 0.0, 0.0),
                       waiting_rates=(15.0, 3.0, 1.5, 0.5))
    decision = decide(ScalingPolicy.by_event_rate(int(T), 4, 1), [(SegmentRange(segment_id=0, low=0.0, high=1.0), info)],
                      NOW, 0, settings)
    assert decision.seal == [0] and len(decision.new_ranges) == 4  # as many as wait, within the scale factor
    assert "15.0 appends waiting" in decision.reason, decision.reason


def test_the_waiting_rate_is_the_mean_number_of_appends_waiting():
    """Little's law on the decayed sums: 10 appends a second, each having waited 0.3 s, keep 3 waiting."""
    rates = Rates.empty(0)
    for i in range(1, 2_401):  # 240 s of appends at 10 a second: two of the 2-minute windows
        rates = rates.record(i * 100, 1, 10, 1, waited_s=0.3)
    assert rates.waiting[0] == pytest.approx(3.0, rel=0.15)
    assert Rates.from_item(rates.to_item(), rates.at_ms).waiting == pytest.approx(rates.waiting, rel=1e-5)
    assert Rates.from_item({"t": 0, "e": [0] * 4, "b": [0] * 4}, 0).waiting == QUIET  # a head from before
