"""A stream has at most MAX_CURRENT_SEGMENTS current segments (docs/limits.md): its epoch, transaction
and cut records list them all, and a reader group's state refuses to grow past some 1,150. Auto-scaling
never splits a stream past the limit (a manual scale past it is refused, tests/integration)."""

from __future__ import annotations

from controlplane.autoscale import AutoScaleSettings, decide
from controlplane.streams import MAX_CURRENT_SEGMENTS
from dataplane.segment_store import SegmentInfo
from rillet.keyspace import segment_id
from rillet.models import ScalingPolicy, SegmentRange

SETTINGS = AutoScaleSettings(windows_ms=(2_000, 5_000, 10_000, 20_000), cooldown_ms=1_000, mute_ms=30_000)
NOW = 1_000_000
OLD = NOW - 60_000
TARGET = 10
HOT = (100.0 * TARGET, 0.0, 0.0, 0.0)
WARM = (float(TARGET), float(TARGET), float(TARGET), float(TARGET))  # neither hot nor cold: no merge


def _stream(width: int) -> list[tuple[SegmentRange, SegmentInfo]]:
    """``width`` segments tiling [0, 1), the first hot."""
    out = []
    for i in range(width):
        sid = segment_id(0, i)
        out.append((SegmentRange(segment_id=sid, low=i / width, high=(i + 1) / width if i + 1 < width else 1.0),
                    SegmentInfo(f"sc/st/{sid}", 0, 100, False, OLD, HOT if i == 0 else WARM, (0.0,) * 4)))
    return out


def test_a_stream_at_the_limit_does_not_split():
    assert decide(ScalingPolicy.by_event_rate(TARGET, 8, 1), _stream(MAX_CURRENT_SEGMENTS), NOW, 0, SETTINGS) is None


def test_a_split_near_the_limit_takes_only_the_room_left():
    decision = decide(ScalingPolicy.by_event_rate(TARGET, 8, 1), _stream(MAX_CURRENT_SEGMENTS - 1), NOW, 0, SETTINGS)
    assert decision is not None and len(decision.new_ranges) == 2
