"""Auto-scaling sees offered load, not only commits: a segment whose writers wait for each other is hot at
any request latency.

At AWS latency one segment's chain commits a few dozen appends a second, however many writers offer more
(about 12 at 10 ms a request from 16 writers): its commits never reach the append-request threshold (40 a
second), so a saturated segment never split. Each committed append now adds the time it waited behind other
appenders' claims to the segment's waiting rate (dataplane/rates.py); more than one append waiting on average
makes it hot (dataplane/scale_signals.WAITING_SPLIT).

Here 16 writers, each awaiting its append before the next, share one segment of a stream scaled by event rate
with a target its events never reach, every AWS request made 5 or 10 ms slower; the rates decay over 1 to 4 s
and the cool-down is 1 s. The segment is then due to the auto-scaler's tick, which splits it, naming the waiting as the reason. A
lone writer as fast as it can go, at the same latency, waits for no one and is not split.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from controlplane.autoscale import AutoScaler, AutoScaleSettings
from dataplane import rates
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name
from standalone.aws_latency import aws_latency

WINDOWS_S = (1.0, 2.0, 3.0, 4.0)
SETTINGS = AutoScaleSettings(windows_ms=tuple(int(w * 1000) for w in WINDOWS_S), cooldown_ms=1_000, mute_ms=60_000)
TARGET = 10_000  # events/s a segment: far above what the writers reach, so only the waiting can make it hot
APPENDING_S = 3.0  # longer than the cool-down and the 1 s window
EVENT = frame(b"e" * 100)


def _append_for(controller, segment: str, writers: int, seconds: float) -> int:
    """``writers`` threads, each appending one event at a time (awaiting each), for ``seconds``; the appends made."""
    made: list[int] = []
    start = threading.Barrier(writers)

    def write() -> None:
        writer, number = uuid.uuid4().hex, 0
        start.wait()
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            controller.segments.append(segment, writer, number, 1, EVENT, after=number - 1)
            number += 1
        made.append(number)

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(made)


def _saturate(controller, unique: str, writers: int, latency_ms: float, monkeypatch):
    monkeypatch.setattr(rates, "WINDOWS_S", WINDOWS_S)
    c, scope, stream = controller, unique, "s"
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, stream, StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(TARGET, 4, 1)))
    segment = segment_name(scope, stream, 0)
    time.sleep(SETTINGS.cooldown_ms / 1000)  # the segment is past its cool-down while the writers wait
    with aws_latency(latency_ms):
        appended = _append_for(c, segment, writers, APPENDING_S)
    info = c.segments.info(segment)
    now = int(time.time() * 1000)
    # The tick decides for the streams with a due mark, earliest first within its budget: the session's shared
    # tables hold hundreds of other tests' marks, so this asks for the stream's decision itself, as the tick
    # would once it reaches the mark (its marking and budget are tests/unit/test_scale_signals.py's).
    due = info.scale_at is not None and info.scale_at <= now
    _, decision = AutoScaler(c.streams, SETTINGS).evaluate(scope, stream, now)
    return appended, info, due, decision


@pytest.mark.parametrize("latency_ms", [5, 10])
def test_a_segment_whose_writers_wait_for_each_other_splits_at_aws_latency(controller, unique, monkeypatch,
                                                                          latency_ms):
    appended, info, due, decision = _saturate(controller, unique, 16, latency_ms, monkeypatch)
    committed_per_s = appended / APPENDING_S
    # what made the segment hot is not its commits: they stay under the append-request threshold
    assert committed_per_s < info.append_split, committed_per_s
    assert max(info.waiting_rates[:3]) > 1, info.waiting_rates
    assert due, info.scale_at
    assert decision is not None
    assert decision.seal == [0] and len(decision.new_ranges) >= 2
    assert "waiting" in decision.reason, decision.reason


def test_a_lone_writer_at_full_speed_waits_for_no_one_and_is_not_split(controller, unique, monkeypatch):
    appended, info, _, decision = _saturate(controller, unique, 1, 10, monkeypatch)
    assert appended > 10
    assert info.waiting_rates == (0.0, 0.0, 0.0, 0.0)
    assert decision is None
