"""The auto-scaling sensor's ticks: AWS requests, wall time and scales decided, idle and active.

Creates N streams scaled by event rate (target 10 events/s, one segment each) on an in-process moto
server and meters ``AutoScaler.tick`` (what the Dagster sensor runs) with its clock moved past the
segments' first looks (21 minutes: the longest rate window):

* the *first looks*: every new segment is due once, found cold at its minimum width, and leaves the
  index (work proportional to the streams created, once);
* an *idle* tick afterwards: the index shard queries only, whatever N;
* an *active* tick: ``--hot`` streams get one append each that makes their segment hot (the append
  path marks it due now, in its own head-record update), and the tick decides their splits.

Before (polling every auto-scaled stream each tick: its record, epoch and segments' heads), issue 39
measured 17 requests a tick at 4 idle streams and 161 at 40: 1 + 4 per stream.

Run: ``.venv/bin/python -m bench.autoscale_ticks --streams 1000``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from bench.stack import moto_stack
from controlplane.autoscale import AutoScaleSettings
from controlplane.service import Controller
from dataplane.shards import SHARDS
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name
from standalone.moto_server import MotoServer

LATER_MS = 21 * 60_000  # past the longest rate window and the cooldown: every new segment is due
AWS_REQUEST_MS = 10  # a DynamoDB round trip from a Dagster task in the region, for the model
WORKERS = 8  # streams a tick decides at once (controlplane/parallel.py)


def polling_requests(streams: int) -> int:
    """Requests of a polling tick (before): the index query, then record, epoch and head per stream
    (one segment each), as issue 39 measured (17 at 4, 161 at 40)."""
    return 1 + 4 * streams


def _metered_tick(moto: MotoServer, controller: Controller, at_ms: int) -> tuple[int, Counter, float, int]:
    moto.meter.reset()
    started = time.perf_counter()
    scales = controller.autoscaler.tick(at_ms)
    wall_s = time.perf_counter() - started
    counts, _ = moto.meter.snapshot()
    return sum(counts.values()), counts, wall_s, len(scales)


def run(streams: int = 1000, hot: int = 100) -> dict:
    with moto_stack() as (moto, deployment):
        controller = Controller.for_deployment(deployment)
        # every due candidate in one tick, so that one tick shows the work of all of them
        controller.autoscaler.settings = AutoScaleSettings(tick_limit=max(streams, 200))
        tasks = controller.streams
        tasks.create_scope("bench")
        policy = StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(10, 2, 1))
        for i in range(streams):
            tasks.create_stream("bench", f"s{i}", policy)
        later = int(time.time() * 1000) + LATER_MS
        first = _metered_tick(moto, controller, later)
        idle = _metered_tick(moto, controller, later + 30_000)

        hot = min(hot, streams)
        moto.meter.reset()
        for i in range(hot):  # 6,600 events in one block: 55 events/s over the 2-minute window, > 5x 10
            controller.segments.append(segment_name("bench", f"s{i}", 0), "w", 0, 6_600, frame(b"x" * 100))
        appends, _ = moto.meter.snapshot()
        active = _metered_tick(moto, controller, later + 60_000)
        after = _metered_tick(moto, controller, later + 90_000)
    return {"streams": streams, "hot": hot, "first": first, "idle": idle, "active": active, "after": after,
            "append_requests": sum(appends.values()) / hot if hot else 0.0}


def _ops(counts: Counter) -> str:
    return ", ".join(f"{op} {n}" for (_, op), n in sorted(counts.items(), key=lambda kv: -kv[1]))


def report(result: dict) -> str:
    n, hot = result["streams"], result["hot"]
    first, idle, active, after = (result[k] for k in ("first", "idle", "active", "after"))
    per_due = (first[0] - idle[0]) / n  # requests per stream looked at
    per_hot = (active[0] - idle[0]) / hot if hot else 0.0
    lines = [
        f"auto-scaling ticks over {n} auto-scaled streams (one segment each), moto in process:",
        (f"  before (polling): {polling_requests(4)} requests at 4 idle streams, {polling_requests(40)} at 40 "
        f"(issue 39); {polling_requests(n)} at {n}, {polling_requests(10_000)} at 10,000"),
        f"  idle tick: {idle[0]} requests ({_ops(idle[1])}), {idle[2] * 1000:.0f} ms",
        (f"  first looks at {n} new segments (once, 21 min after creation): {first[0]} requests "
        f"({_ops(first[1])}), {per_due:.1f} per stream, {first[2]:.1f} s"),
        (f"  active tick, {hot} hot streams: {active[0]} requests ({_ops(active[1])}), {per_hot:.1f} per hot "
        f"stream, {active[2]:.2f} s, {active[3]} splits decided ({active[3] / active[2]:.0f} a second)"),
        f"  the tick after (decided marks moved on): {after[0]} requests, {after[3]} decisions",
        (f"  the appends that made them hot: {result['append_requests']:.2f} requests each (a writer's first append to a segment, "
        f"as without scale signals: the mark rides on the head-record update)"),
        (f"  model at 10,000 streams, {AWS_REQUEST_MS} ms a request, {WORKERS} streams at once: idle tick "
        f"{SHARDS} requests (~{AWS_REQUEST_MS * 3} ms: {SHARDS} queries, {WORKERS} at a time after the first); "
        f"a tick takes at most {AutoScaleSettings.tick_limit} due candidates, "
        f"~{AutoScaleSettings.tick_limit * per_hot * AWS_REQUEST_MS / WORKERS / 1000:.1f} s; "
        f"polling: {polling_requests(10_000)} serial requests, ~{polling_requests(10_000) * AWS_REQUEST_MS / 1000:.0f} s"),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--hot", type=int, default=100)
    args = parser.parse_args()
    print(report(run(args.streams, args.hot)))


if __name__ == "__main__":
    main()
