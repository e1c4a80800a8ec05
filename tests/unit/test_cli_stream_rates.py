"""``rillet stream rates`` in text: the policy's thresholds, the cool-down and mute left, the decision now
and the last one, and each segment's rates under their window's column (from a StreamRates built here:
no server)."""

from __future__ import annotations

import json

from rillet import cli
from rillet.cli import segments as cli_segments
from rillet.models import (
    AutoScaleDecision,
    ScalingPolicy,
    SegmentRange,
    SegmentRates,
    StreamRates,
    StreamState,
    WindowRate,
)

NOW = 1_800_000_000_000
WINDOWS = (120_000, 300_000, 600_000, 1_200_000)


def _windows(events: tuple[float, ...], age_ms: int, auto: bool = True) -> list[WindowRate]:
    return [WindowRate(window_ms=w, events_per_s=e, bytes_per_s=e * 2048, append_requests_per_s=e / 10,
                       policy_rate=e if auto else None,
                       split_above=(f * 10 if auto and f else None), merge_below=(m * 10 if auto else None),
                       window_passed=age_ms > w)
            for w, e, f, m in zip(WINDOWS, events, (5.0, 2.0, 1.0, None), (1.0, 1.0, 1.0, 0.5))]


def _rates(auto: bool, last: AutoScaleDecision | None = None) -> StreamRates:
    policy = ScalingPolicy.by_event_rate(10, 2, 1) if auto else ScalingPolicy.fixed(1)
    young = SegmentRates(segment=SegmentRange(segment_id=(1 << 32) | 1, low=0.0, high=0.5), created_ms=NOW - 180_000,
                         age_ms=180_000, cooldown_left_ms=420_000, windows=_windows((1234.5, 0.0, 0.0, 0.0), 180_000, auto),
                         status="hot-in-cooldown" if auto else "fixed",
                         why="1234.5 events/s over 2m > 5x the target 10, but it is younger than the cool-down (7m left)",
                         next_check_ms=NOW + 420_001)
    old = SegmentRates(segment=SegmentRange(segment_id=(1 << 32) | 2, low=0.5, high=1.0), created_ms=NOW - 3_600_000,
                       age_ms=3_600_000, cooldown_left_ms=0, windows=_windows((3.0, 3.0, 3.0, 3.0), 3_600_000, auto),
                       status="cold" if auto else "fixed", why="under the merge thresholds on every window",
                       next_check_ms=None)
    return StreamRates(scope="demo", stream="s", state=StreamState.ACTIVE, scaling_policy=policy, auto_scaled=auto,
                       unit="events/s" if auto else None, cooldown_ms=600_000, mute_ms=600_000,
                       mute_left_ms=420_000 if auto else 0, append_request_split=40.0, epoch=1,
                       epoch_created_ms=NOW - 180_000, now_ms=NOW, segments=[young, old],
                       decision_now="none: the stream scaled 3m ago and is left alone for 7m more (the mute)",
                       last_decision=last)


def test_an_auto_scaled_stream_shows_thresholds_cool_down_and_decisions():
    last = AutoScaleDecision(decided_ms=NOW - 180_000, epoch=0, outcome="scaled to epoch 1",
                             reason="segment 0 is hot (60.0 events/s over 2m > 5x the target 10): split in 2")
    text = cli_segments.rates_text(_rates(True, last))
    lines = text.splitlines()
    assert lines[0] == "stream     demo/s (ACTIVE, epoch 1)"
    assert lines[1].startswith("scaling    events:10,2,1: auto-scaled by events/s, target 10 events/s a segment")
    assert lines[2] == ("split      a segment over 50 events/s over 2m or 20 events/s over 5m or 10 events/s over 10m "
                        "(each once the segment is older than the window), or over 40 append requests/s or 1 waiting "
                        "(appends waiting for each other, on average)")
    assert lines[3] == "merge      two neighbours each under 10/10/10/5 events/s over 2m/5m/10m/20m and under 20 " \
                       "append requests/s and 0.5 waiting"
    assert lines[4] == ("cool-down  10m: a segment younger than that never scales; after a scale the stream is left "
                        "alone 10m (mute); the stream scaled 3m ago: left alone 7m more")
    assert lines[5] == "now        none: the stream scaled 3m ago and is left alone for 7m more (the mute)"
    assert lines[6] == ("last       3m ago at epoch 0: segment 0 is hot (60.0 events/s over 2m > 5x the target 10): "
                        "split in 2; scaled to epoch 1")
    assert "segment 1 (id 4294967297) [0.0000, 0.5000): age 3m, cool-down 7m left, next look in 7m\n" in text
    assert "segment 2 (id 4294967298) [0.5000, 1.0000): age 1h, cool-down over, no look due" in text
    assert "  hot-in-cooldown: 1234.5 events/s over 2m > 5x the target 10, but it is younger" in text
    # each figure right-aligned under its window, a window the segment has not passed starred
    block = lines[lines.index(next(line for line in lines if line.startswith("segment 1 "))) + 1:][:7]
    assert [row.split()[0] for row in block] == ["window", "events/s", "KB/s", "appends/s", "waiting", "split", "merge"]
    header, *rows = block
    assert header.split()[1:] == ["2m", "5m*", "10m*", "20m*"]
    ends = [header.index(label) + len(label) for label in ("2m", "5m*", "10m*", "20m*")]
    for row in rows:
        assert [row[:end].rstrip()[-1] != " " for end in ends] == [True] * 4, row
    assert rows[0].split()[1:] == ["1234", "0.0", "0.0", "0.0"]  # 1,000 and more without decimals
    assert rows[1].split()[1:] == ["2469", "0.0", "0.0", "0.0"]  # KB/s: bytes / 1024
    assert rows[3].split()[1:] == ["0.0"] * 4  # waiting
    assert rows[4].split()[2:] == ["50", "20", "10", "-"] and rows[5].split()[2:] == ["10", "10", "10", "5"]
    assert text.endswith("* the segment is not older than this window yet: its split rule waits, and its rates are over "
                         "its life so far")


def test_a_fixed_stream_says_it_does_not_auto_scale():
    text = cli_segments.rates_text(_rates(False).model_copy(update={
        "decision_now": "none: the scaling policy is fixed, so the stream never scales by itself"}))
    lines = text.splitlines()
    assert lines[1].startswith("scaling    fixed:1: does not auto-scale")
    assert not any(line.startswith(("split ", "merge ", "cool-down ")) for line in lines)
    assert "now        none: the scaling policy is fixed, so the stream never scales by itself" in lines
    assert "last       none recorded since epoch 1 began (3m ago)" in lines
    assert not any(line.lstrip().startswith(("split above", "merge below")) for line in lines)


class _Controller:
    def __init__(self, rates: StreamRates) -> None:
        self.rates = rates

    def stream_rates(self, scope: str, stream: str) -> StreamRates:
        assert (scope, stream) == ("demo", "s")
        return self.rates


class _Connection:
    def __init__(self, endpoint: str) -> None:
        self.controller = _Controller(_rates(True))


def test_the_command_prints_text_or_json(capsys, monkeypatch):
    monkeypatch.setattr(cli_segments, "Connection", _Connection)
    assert cli.main(["stream", "rates", "demo/s"]) == 0
    assert capsys.readouterr().out.startswith("stream     demo/s (ACTIVE, epoch 1)\n")
    assert cli.main(["--json", "stream", "rates", "demo/s"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["scope"], data["stream"]) == ("demo", "s") and data["cooldown_ms"] == 600_000 and data["last_decision"] is None
    assert [s["cooldown_left_ms"] for s in data["segments"]] == [420_000, 0]
    assert cli.main(["stream", "rates", "no-slash"]) == 2  # a bad name is invalid input
