"""The watermark and retention jobs at scale (issue 39): requests per tick, tick and cycle times.

On an in-process moto server, ``--streams`` watermarked streams (one segment, one writer that noted
time) and as many streams with a retention policy spread over the 16 retention buckets, then:

* watermarks: the AWS requests and wall time of an idle sensor tick (nothing moved) at 4, 40 and all
  streams, of a tick with 40 active streams (computed on the tick) and of one with every stream active
  (the tick launches runs; their work is done here one run after another, as run slots would), and
  the watermarks appended a second;
* retention: the cycle of every stream one after another (the single serial run of before), then
  each bucket's run (streams 8 at a time) and the cycle time with the buckets' runs fanned out over
  ``--slots`` run slots;
* the model for 10,000 streams at AWS latency (``--latency-ms`` per request).

"Before" figures are the issue's measurement of the old watermark tick (1 + 2 requests per idle
watermarked stream) and the serial retention run measured here. Moto answers far slower than
DynamoDB and the machine's cores are shared, so wall times are for comparing shapes, not AWS figures.

Run: ``.venv/bin/python -m bench.watermark_retention_jobs --streams 1000``.
"""

from __future__ import annotations

import argparse
import logging
import math
import time

from dagster import RunRequest, SkipReason, build_sensor_context

from bench.stack import moto_stack
from controlplane.parallel import WORKERS, in_parallel
from controlplane.retention import RetentionSettings, RetentionTasks
from controlplane.service import Controller
from controlplane.streams import RETENTION_BUCKETS, _bucket
from dagster_project.resources import RilletDeployment
from dagster_project.watermarks import INLINE_STREAMS, watermark_sensor
from dataplane.shards import SHARDS
from rillet.framing import frame
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from rillet.names import segment_name
from standalone.moto_server import MotoServer

MODEL_STREAMS = 10_000
EVENT = frame(b"x" * 96)


def _metered(moto: MotoServer, work):
    """``work()``'s result, its AWS requests and its wall time in seconds."""
    moto.meter.reset()
    started = time.perf_counter()
    result = work()
    wall = time.perf_counter() - started
    counts, _ = moto.meter.snapshot()
    return result, sum(counts.values()), wall


def _tick(resource: RilletDeployment):
    with build_sensor_context(resources={"rillet": resource}) as context:
        return watermark_sensor(context)


def _watermarks(moto: MotoServer, controller: Controller, resource: RilletDeployment, streams: int) -> dict:
    controller.streams.create_scope("wm")
    names = [f"w{i}" for i in range(streams)]

    def watermarked(name: str) -> None:
        controller.streams.create_stream("wm", name, StreamConfiguration(  # writers stay active while measured
            scaling_policy=ScalingPolicy.fixed(1), timestamp_aggregation_timeout_ms=86_400_000))
        controller.segments.append(segment_name("wm", name, 0), "w", 0, 1, EVENT)
        controller.watermarks.note_time("wm", name, "w", 1_000, {0: len(EVENT)})

    idle: dict[int, tuple[int, float]] = {}
    made = 0
    for size in sorted({4, 40, streams}):
        if size > streams:
            continue
        in_parallel(watermarked, names[made:size])
        made = size
        for _ in range(math.ceil(size / INLINE_STREAMS) + 1):  # compute what is due, runs' share too
            if isinstance(_tick(resource), list):
                controller.watermarks.run()
        outcome, requests, wall = _metered(moto, lambda: _tick(resource))
        assert isinstance(outcome, SkipReason) and outcome.skip_message.startswith("0 stream(s) due"), outcome
        idle[size] = (requests, wall)

    written = dict.fromkeys(names, 1)  # events each stream's writer appended

    def note(names_: list[str], t: int) -> None:
        """Each writer appends an event and notes time ``t`` after it."""
        def one(name: str) -> None:
            appended = controller.segments.append(segment_name("wm", name, 0), "w", written[name], 1, EVENT)
            written[name] += 1
            controller.watermarks.note_time("wm", name, "w", t, {0: appended.offset + len(EVENT)})
        in_parallel(one, names_)

    active_40 = names[:min(40, streams)]
    note(active_40, 2_000)
    outcome, inline_requests, inline_wall = _metered(moto, lambda: _tick(resource))
    assert isinstance(outcome, SkipReason), outcome

    note(names, 3_000)
    launched, launch_requests, launch_wall = _metered(moto, lambda: _tick(resource))
    runs = launched if isinstance(launched, list) else []
    assert all(isinstance(r, RunRequest) for r in runs)
    appended, run_wall = 0, []
    moto.meter.reset()
    for request in runs:
        shards = request.run_config["ops"]["compute_watermarks"]["config"]["shards"]
        started = time.perf_counter()
        appended += len(controller.watermarks.run(shards=shards).appended)
        run_wall.append(time.perf_counter() - started)
    counts, _ = moto.meter.snapshot()
    return {"idle": idle, "inline": (len(active_40), inline_requests, inline_wall),
            "launch": (len(runs), launch_requests, launch_wall),
            "runs": {"appended": appended, "requests": sum(counts.values()), "wall": run_wall}}


def _retention(moto: MotoServer, controller: Controller, streams: int, slots: int) -> dict:
    controller.streams.create_scope("rt")
    # half by size (truncated each cycle by a 100-byte limit), half by time (a day: not yet)
    policies = [RetentionPolicy.by_size(100), RetentionPolicy.by_time(86_400_000)]

    def with_policy(i: int) -> None:
        controller.streams.create_stream("rt", f"r{i}", StreamConfiguration(retention_policy=policies[i % 2]))
        controller.segments.append(segment_name("rt", f"r{i}", 0), "w", 0, 1, EVENT)

    in_parallel(with_policy, list(range(streams)))
    buckets = [[] for _ in range(RETENTION_BUCKETS)]
    for i in range(streams):
        buckets[_bucket("rt", f"r{i}", StreamConfiguration(retention_policy=policies[i % 2]))].append(f"r{i}")
    retention = controller.retention
    for bucket in range(RETENTION_BUCKETS):
        retention.run_bucket(bucket)  # the first records

    def grow(event_number: int) -> None:  # the size-limited streams grow by an event
        in_parallel(lambda i: controller.segments.append(segment_name("rt", f"r{i}", 0), "w", event_number, 1, EVENT),
                    list(range(0, streams, 2)))

    # before: one serial run over every bucket, and a time policy that cannot truncate yet read in full
    grow(1)
    with_shortcut = RetentionTasks._too_young_to_truncate
    RetentionTasks._too_young_to_truncate = lambda *_: False
    try:
        _, serial_requests, serial_wall = _metered(moto, lambda: [
            retention.cycle("rt", name) for names in buckets for name in names])
    finally:
        RetentionTasks._too_young_to_truncate = with_shortcut
    for bucket in range(RETENTION_BUCKETS):  # the size-limited streams record their tail again (unmetered)
        retention.run_bucket(bucket)
    grow(2)  # so this cycle truncates them again, as the serial one did
    per_bucket = []
    moto.meter.reset()
    for bucket in range(RETENTION_BUCKETS):
        started = time.perf_counter()
        retention.run_bucket(bucket)
        per_bucket.append(time.perf_counter() - started)
    counts, _ = moto.meter.snapshot()
    waves = math.ceil(RETENTION_BUCKETS / slots)
    fanned = sum(sorted(per_bucket, reverse=True)[i * slots] for i in range(waves))  # each wave: its slowest
    return {"serial": (serial_requests, serial_wall), "per_bucket": per_bucket, "fanned": fanned,
            "requests": sum(counts.values()), "slots": slots}


def run(streams: int = 1000, slots: int = 4, latency_ms: float = 8.0) -> dict:
    logging.disable(logging.INFO)  # the ticks' per-stream log lines
    with moto_stack() as (moto, deployment):
        controller = Controller.for_deployment(deployment)
        resource = RilletDeployment(endpoint_url=moto.url)
        watermarks = _watermarks(moto, controller, resource, streams)
        retention = _retention(moto, Controller.for_deployment(deployment, retention_settings=RetentionSettings()),
                               streams, slots)
    return {"streams": streams, "slots": slots, "latency_ms": latency_ms, "watermarks": watermarks,
            "retention": retention}


def report(r: dict) -> str:
    n, lat, slots = r["streams"], r["latency_ms"] / 1000, r["slots"]
    w, rt = r["watermarks"], r["retention"]
    lines = ["watermark sensor, idle tick (no writer's mark moved):"]
    for size, (requests, wall) in sorted(w["idle"].items()):
        lines.append(f"  {size:>6} watermarked streams: {requests} requests ({SHARDS} shard queries), {wall * 1000:.0f} ms"
                     f"   before: {1 + 2 * size} requests (1 + 2 a stream)")
    active, requests, wall = w["inline"]
    per_active = requests / max(active, 1)
    lines.append(f"  tick with {active} active streams (computed on the tick): {requests} requests "
                 f"({per_active:.1f} a stream), {wall:.2f} s, {active / max(wall, 1e-9):.0f} watermarks/s")
    runs, requests, wall = w["launch"]
    run_walls = w["runs"]["wall"]
    lines.append(f"  tick with all {n} streams active: {requests} requests, {wall:.2f} s, {runs} run(s) launched; "
                 f"the runs appended {w['runs']['appended']} watermarks with {w['runs']['requests']} requests, "
                 f"{sum(run_walls):.1f} s one after another (slowest run {max(run_walls, default=0):.1f} s), "
                 f"{w['runs']['appended'] / max(sum(run_walls), 1e-9):.0f} watermarks/s per run slot")
    serial_requests, serial_wall = rt["serial"]
    per_stream = rt["requests"] / max(n, 1)
    lines += [
        f"retention over {n} streams (half by size, each truncated this cycle; half by time, not yet due):",
        (f"  before, one serial run, time streams read in full: {serial_wall:.1f} s, "
        f"{serial_requests / n:.1f} requests a stream"),
        (f"  after, a run per bucket ({WORKERS} streams at once): buckets {min(rt['per_bucket']):.1f}-"
        f"{max(rt['per_bucket']):.1f} s, cycle {rt['fanned']:.1f} s over {slots} run slots; "
        f"{per_stream:.1f} requests a stream"),
    ]
    m = MODEL_STREAMS
    idle_before = (1 + 2 * m) * lat
    idle_after = math.ceil(SHARDS / WORKERS) * lat
    active_rate = slots * WORKERS / (per_active * lat)  # runs over every slot, each WORKERS streams at once
    serial_cycle = m * (serial_requests / n) * lat
    bucket_time = (m / RETENTION_BUCKETS) / WORKERS * per_stream * lat
    lines += [
        f"model, {m} streams at {r['latency_ms']:.0f} ms a request, {slots} run slots:",
        (f"  watermark idle tick: before {1 + 2 * m} serial requests = {idle_before:.0f} s; after {SHARDS} "
        f"requests, {WORKERS} at once = {idle_after * 1000:.0f} ms"),
        (f"  watermarks when every stream is active: before {1 / (per_active * lat):.0f} a second, serially in "
         f"the tick ({60 / (per_active * lat):.0f} streams fill Dagster's 60 s tick limit); after "
         f"{active_rate:.0f} a second over the runs "
        f"({m / active_rate:.1f} s for all {m}); a tick computes at most {INLINE_STREAMS} itself "
        f"({INLINE_STREAMS / WORKERS * per_active * lat:.2f} s)"),
        (f"  retention cycle: before one serial run {serial_cycle / 60:.1f} min; after {bucket_time:.0f} s a "
        f"bucket, {math.ceil(RETENTION_BUCKETS / slots) * bucket_time:.0f} s a cycle (period 30 min)"),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=4, help="run slots (dagster_max_concurrent_runs on AWS)")
    parser.add_argument("--latency-ms", type=float, default=8.0, help="an AWS request's latency, for the model")
    args = parser.parse_args()
    print(report(run(args.streams, args.slots, args.latency_ms)))


if __name__ == "__main__":
    main()
