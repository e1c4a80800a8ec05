"""AWS requests per stream per retention cycle, and the wall time of one cycle over N streams.

Creates N streams with a size-based retention policy on an in-process moto server, appends a few
events to each, runs one cycle so each has a retention-set record, then meters a second cycle over
every bucket (what the Dagster runs do, one bucket each): a *steady* cycle, in which each stream is
looked at and nothing needs truncating. It also meters one cycle that truncates a stream.

Run: ``.venv/bin/python -m bench.retention_cycle --streams 1000``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from bench.stack import moto_stack
from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from controlplane.streams import RETENTION_BUCKETS
from rillet.framing import frame
from rillet.models import RetentionPolicy, StreamConfiguration
from rillet.names import segment_name


def run(streams: int = 1000) -> dict:
    with moto_stack() as (moto, deployment):
        controller = Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))
        tasks = controller.streams
        tasks.create_scope("bench")
        policy = StreamConfiguration(retention_policy=RetentionPolicy.by_size(1 << 30))  # keep 1 GiB: steady
        for i in range(streams):
            tasks.create_stream("bench", f"s{i}", policy)
            controller.segments.append(segment_name("bench", f"s{i}", 0), "w", 0, 1, frame(b"x" * 100))
        for bucket in range(RETENTION_BUCKETS):
            controller.retention.run_bucket(bucket)  # the first records: a steady state from here on

        moto.meter.reset()
        started = time.perf_counter()
        decisions = [d for bucket in range(RETENTION_BUCKETS) for d in controller.retention.run_bucket(bucket)]
        wall_s = time.perf_counter() - started
        counts, _ = moto.meter.snapshot()
        assert len(decisions) == streams and all(d.outcome == "kept" for d in decisions)

        tasks.create_stream("bench", "busy", StreamConfiguration(retention_policy=RetentionPolicy.by_size(100)))
        for n in range(3):
            controller.segments.append(segment_name("bench", "busy", 0), "w", n, 1, frame(b"x" * 96))
            controller.retention.cycle("bench", "busy")
        controller.segments.append(segment_name("bench", "busy", 0), "w", 3, 1, frame(b"x" * 96))
        moto.meter.reset()
        decision = controller.retention.cycle("bench", "busy")
        truncating, _ = moto.meter.snapshot()
        assert decision.outcome == "truncated", decision
    return {"streams": streams, "wall_s": wall_s, "requests": counts, "truncating_requests": truncating}


def _per_stream(counts: Counter, streams: int) -> str:
    return ", ".join(f"{op} {n / streams:.2f}" for (_, op), n in sorted(counts.items(), key=lambda kv: -kv[1]))


def report(result: dict) -> str:
    streams = result["streams"]
    total = sum(result["requests"].values())
    return "\n".join([
        (f"retention cycle over {streams} steady streams (one segment each): {result['wall_s']:.1f} s wall, "
         f"{total / streams:.2f} AWS requests per stream ({_per_stream(result['requests'], streams)})"),
        (f"  a cycle that truncates one stream: {sum(result['truncating_requests'].values())} requests "
         f"({_per_stream(result['truncating_requests'], 1)})"),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    print(report(run(parser.parse_args().streams)))


if __name__ == "__main__":
    main()
