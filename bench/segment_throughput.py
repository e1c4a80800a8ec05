"""Aggregate write throughput of 8 writers over streams of 1, 4 and 16 segments, through the SDK in
standalone, next to the request rate the same moto server sustains for raw PutItem calls.

Each writer (its own EventWriter, in its own thread) writes 1 KiB events under many routing keys, so
every writer feeds every segment. Appends of different segments do not conflict, so on AWS this
scales with segments; in standalone every request goes through one moto server that answers one
request at a time, and the append function has a few worker processes, so the figure to compare is
the AWS requests per second the run made against the raw PutItem ceiling.

    python -m bench.segment_throughput            # 32 MB per run
    python -m bench.segment_throughput --quick    # 4 MB per run, 1 and 4 segments
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid

import boto3

import rillet
from standalone.stack import Stack, StackConfig

WRITERS = 8
EVENT_BYTES = 1024
ROUTING_KEYS = 256  # per writer: enough that every segment gets its share


def _raw_put_item_rate(stack: Stack, requests: int) -> float:
    """PutItem calls per second from WRITERS threads, 1 KiB items: moto's ceiling for small requests."""
    table = stack.deployment.segments_table
    payload = "x" * EVENT_BYTES
    per_thread = requests // WRITERS

    def put(thread: int) -> None:
        client = boto3.client("dynamodb", endpoint_url=stack.moto.url, region_name=stack.deployment.region)
        for i in range(per_thread):
            client.put_item(TableName=table, Item={"pk": {"S": f"raw/{thread}"}, "sk": {"S": f"e#{i}"},
                                                   "d": {"S": payload}})

    threads = [threading.Thread(target=put, args=(t,)) for t in range(WRITERS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return per_thread * WRITERS / (time.perf_counter() - started)


def _write(stack: Stack, scope: str, segments: int, total_mb: int) -> dict:
    stream = f"s{segments}"
    manager = rillet.StreamManager(stack.controller_url)
    manager.create_stream(scope, stream, rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(segments)))
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    writers = [factory.create_event_writer(stream, rillet.BytesSerializer()) for _ in range(WRITERS)]
    _ = factory.connection.segments  # discover the data endpoints before timing
    events = total_mb * 2**20 // EVENT_BYTES // WRITERS
    payload = os.urandom(EVENT_BYTES)

    def write(index: int) -> None:
        writer = writers[index]
        for i in range(events):
            writer.write_event(payload, routing_key=f"{index}-{i % ROUTING_KEYS}")
        writer.flush()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    stack.requests.reset()
    stack.invocations.reset()
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    counts, _ = stack.requests.snapshot()
    appends = stack.invocations.invocations.get("append", 0)
    for writer in writers:
        writer.close()
    total = events * WRITERS
    return {"segments": segments, "events": total, "seconds": seconds, "events_per_s": total / seconds,
            "mb_per_s": total * EVENT_BYTES / 2**20 / seconds, "aws_requests_per_s": sum(counts.values()) / seconds,
            "append_invocations": appends, "kib_per_append": total * EVENT_BYTES / 1024 / max(1, appends)}


def run(segment_counts: tuple[int, ...] = (1, 4, 16), total_mb: int = 32, raw_requests: int = 4000) -> dict:
    with Stack(StackConfig.ephemeral()) as stack:
        scope = "bench" + uuid.uuid4().hex[:8]
        rillet.StreamManager(stack.controller_url).create_scope(scope)
        rows = [_write(stack, scope, n, total_mb) for n in segment_counts]
        raw = _raw_put_item_rate(stack, raw_requests)
        workers = stack.config.workers["append"]
    return {"writers": WRITERS, "event_bytes": EVENT_BYTES, "total_mb": total_mb, "append_workers": workers,
            "rows": rows, "raw_put_item_per_s": raw}


def report(result: dict) -> str:
    lines = [f"aggregate write throughput: {result['writers']} writers, {result['total_mb']} MB of "
             + f"{result['event_bytes']} B events per run, standalone ({result['append_workers']} append workers, "
             + "one moto server)",
             f"  {'segments':>8} {'events/s':>10} {'MB/s':>7} {'KiB per append':>15} {'AWS requests/s':>15}"]
    for r in result["rows"]:
        lines.append(f"  {r['segments']:>8} {r['events_per_s']:>10,.0f} {r['mb_per_s']:>7.1f} "
                     + f"{r['kib_per_append']:>15.0f} {r['aws_requests_per_s']:>15,.0f}")
    base = result["rows"][0]["mb_per_s"]
    lines.append("  scaling vs 1 segment: " + ", ".join(f"{r['segments']} segments x{r['mb_per_s'] / base:.2f}"
                                                        for r in result["rows"]))
    lines.append(f"  raw boto3 PutItem on the same moto server, {result['writers']} threads: "
                 + f"{result['raw_put_item_per_s']:,.0f} requests/s (the ceiling of AWS requests/s above)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 MB per run, 1 and 4 segments")
    args = parser.parse_args()
    print(report(run((1, 4), 4, 1000) if args.quick else run()))


if __name__ == "__main__":
    main()
