"""Write N MB through the SDK (``EventWriterConfig.cost_optimized()``) into standalone, read it back,
and price every request.

Prints events/s and MB/s; the AWS requests per MB appended and per MB read (DynamoDB requests and
request units, S3 PUT and GET); the modeled cost per GB at on-demand list prices (bench/cost.py);
and, on the same moto server, the minimal raw boto3 calls that store and fetch the same bytes (one
PutObject / GetObject per block of the writer's batch size), as throughput ratios. The catch-up
comparison (the batch read, the bytes alone, raw GetObject of the same objects) runs in a process of its
own, as a reader on AWS does not share its interpreter with S3 (moto serves from a thread of this one).

Run: ``make bench`` (all benchmarks) or ``.venv/bin/python -m bench.data_path --mb 32``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
import uuid
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import boto3

import rillet
from bench.cost import PRICES, RequestCounter, function_gb_seconds, usage
from rillet.framing import frame, unframe, unframe_batch
from rillet.segments import DEFAULT_READ_SIZE, PREFETCH, SegmentClient, locate_window
from standalone.stack import Stack, StackConfig

MB = 1024 * 1024
CATCH_UP_ROUNDS = 7  # timed rounds of the catch-up comparison (medians are printed)


def _meter_window(stack: Stack) -> None:
    stack.requests.reset()
    stack.invocations.reset()


def _usage(stack: Stack, function: str, kinds: dict[str, int] | None = None):
    """The window's usage; function duration modeled (``cost.FUNCTION_MS``): the read API's requests by
    kind as the reader counted them, every append as one append."""
    _, records = stack.requests.snapshot()
    invocations = stack.invocations.invocations.get(function, 0)
    return usage(records, invocations, function_gb_seconds(function, kinds or {function: invocations}))


def _per_mb(u, mb: float) -> dict[str, float]:
    ddb = sum(n for (svc, _), n in u.requests.items() if svc == "dynamodb")
    return {
        "dynamodb_requests": ddb / mb,
        "dynamodb_write_units": u.write_units / mb,
        "dynamodb_read_units": u.read_units / mb,
        "s3_put": u.requests[("s3", "PutObject")] / mb,
        "s3_get": u.requests[("s3", "GetObject")] / mb,
        "lambda_invocations": u.lambda_requests / mb,
    }


def _warm_read_function(segments: SegmentClient, scope: str, segment: int) -> None:
    """A few concurrent requests, so every worker of the read function has served one before timing
    (a worker's first request pays its imports and clients: about a second in standalone)."""
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda _: segments.locate(scope, "data", segment, 0, 1), range(6)))


def _catch_up_bytes(segments: SegmentClient, scope: str, segment: int) -> int:
    """Read a segment's bytes as SegmentEventReader fetches them (a window of DEFAULT_READ_SIZE widened to
    twice what the last answer covered, the next range located as soon as an answer comes, up to PREFETCH
    object GETs in flight), without splitting them into events; returns how many bytes."""
    total, fetches = 0, deque()
    answer = segments.locate(scope, "data", segment, 0, DEFAULT_READ_SIZE)
    while True:
        ahead = (segments.locate_later(scope, "data", segment, answer.next_offset,
                                       locate_window(DEFAULT_READ_SIZE, answer))
                 if answer.next_offset < answer.length else None)
        for location in answer.locations:
            fetches.append(segments.fetch_later(location))
            if len(fetches) >= PREFETCH:
                total += len(fetches.popleft().result())
        if ahead is None:
            break
        answer = ahead.result()
    return total + sum(len(f.result()) for f in fetches)


def _catch_up_figures(controller_url: str, moto_url: str, bucket: str, scope: str, segment: int,
                      objects: list[str], events: int, rounds: int = CATCH_UP_ROUNDS) -> dict[str, float]:
    """Seconds of the batch read, of the bytes alone and of raw GetObject of ``objects``, each the median
    of ``rounds`` (after one round that warms the function workers and this process's clients), and the
    median of each round's ratios to raw GetObject: the three run back to back in a round, so a machine
    that is busier for a moment weighs on both sides of a ratio."""
    factory = rillet.EventStreamClientFactory(scope, controller_url)
    s3 = boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1")
    _warm_read_function(factory.connection.segments, scope, segment)
    runs: dict[str, list[float]] = {"batch_s": [], "bytes_s": [], "raw_s": []}
    figures: dict[str, float] = {}
    for round_ in range(rounds + 1):
        started = time.perf_counter()
        reader = factory.create_stream_reader("data", rillet.BytesSerializer())
        count = sum(len(batch) for batch in reader.iter_events())
        batch_s = time.perf_counter() - started
        assert count == events, f"read {count} events in batches, wrote {events}"
        started = time.perf_counter()
        figures["bytes"] = _catch_up_bytes(factory.connection.segments, scope, segment)
        bytes_s = time.perf_counter() - started
        started = time.perf_counter()
        figures["raw"] = sum(len(s3.get_object(Bucket=bucket, Key=key)["Body"].read()) for key in objects)
        raw_s = time.perf_counter() - started
        assert figures["bytes"] <= figures["raw"] + MB, figures
        if round_:
            for name, seconds in (("batch_s", batch_s), ("bytes_s", bytes_s), ("raw_s", raw_s)):
                runs[name].append(seconds)
    medians = {name: statistics.median(seconds) for name, seconds in runs.items()}
    # both read the segment's bytes (figures["bytes"]); raw GetObject reads its objects whole
    ratios = {f"{name}_ratio": statistics.median(raw * figures["bytes"] / (figures["raw"] * seconds)
                                                 for raw, seconds in zip(runs["raw_s"], runs[f"{name}_s"]))
              for name in ("batch", "bytes")}
    return figures | medians | ratios


def run(total_mb: int = 32, event_size: int = 1024, rate_mb_s: float | None = None,
        inflight: int | None = None) -> dict:
    events = total_mb * MB // event_size
    payload = os.urandom(event_size)
    with Stack(StackConfig.ephemeral()) as stack:
        stack.requests.keep_records = True
        scope = "bench" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        manager.create_stream(scope, "data", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
        factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
        # The cost profile: its 1.2 s budget, less the round trip, fills ~1 MB blocks at 1 MB/s
        # (bench.latency measures the default's).
        config = rillet.EventWriterConfig.cost_optimized(**({} if inflight is None else {"max_inflight_blocks": inflight}))
        writer = factory.create_event_writer("data", rillet.BytesSerializer(), config)
        _ = factory.connection.segments  # discover the data endpoints before timing

        _meter_window(stack)
        started = time.perf_counter()
        longest_round_trip_s = 0.0  # the longest smoothed round trip seen: it sets the shortest hold
        for i in range(events):
            writer.write_event(payload, routing_key="k")
            if rate_mb_s and i % 256 == 0:
                longest_round_trip_s = max(longest_round_trip_s, writer.round_trip_s() or 0.0)
                ahead = (i * event_size / MB) / rate_mb_s - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
        writer.flush()
        write_s = time.perf_counter() - started
        write = _usage(stack, "append")
        round_trip_s = writer.round_trip_s()
        longest_round_trip_s = max(longest_round_trip_s, round_trip_s or 0.0)
        writer.close()

        s3 = boto3.client("s3", endpoint_url=stack.moto.url, region_name="us-east-1")
        (segment,) = factory.connection.controller.current_segments(scope, "data")
        objects = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=stack.deployment.bucket, Prefix=f"segments/{scope}/data/") for o in page.get("Contents", [])]

        _warm_read_function(factory.connection.segments, scope, segment.segment_id)
        counter = RequestCounter(factory.connection.segments)
        _meter_window(stack)
        started = time.perf_counter()
        reader = factory.create_stream_reader("data", rillet.BytesSerializer())
        count = sum(1 for _ in reader)
        read_s = time.perf_counter() - started
        read = _usage(stack, "read", dict(counter.kinds))
        read_gets = stack.requests.snapshot()[0][("s3", "GetObject")]
        assert count == events, f"read {count} events, wrote {events}"

        # The same catch-up through the batch read (StreamReader.read_events: a block decoded at once), at
        # the level of bytes (locations and object GETs, no event framing), and raw GetObject of the very
        # objects that hold them, in another process: on AWS, S3 does not share the reader's interpreter,
        # and here moto serves from a thread of this one.
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
            catch_up = child.submit(_catch_up_figures, stack.controller_url, stack.moto.url, stack.deployment.bucket,
                                    scope, segment.segment_id, objects, events).result()
        decode_s = _decode_seconds(payload, MB * 4 // (event_size + 4))

        # The baseline: the same bytes in blocks of the writer's batch size, one PUT (GET) each.
        block_size = rillet.EventWriterConfig().batch_size_bytes
        blocks = [os.urandom(block_size) for _ in range(max(1, total_mb * MB // block_size))]
        started = time.perf_counter()
        for i, block in enumerate(blocks):
            s3.put_object(Bucket=stack.deployment.bucket, Key=f"raw/{scope}/{i}", Body=block)
        raw_write_s = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(len(blocks)):
            s3.get_object(Bucket=stack.deployment.bucket, Key=f"raw/{scope}/{i}")["Body"].read()
        raw_read_s = time.perf_counter() - started

    gb = total_mb / 1024
    return {
        "total_mb": total_mb, "event_size": event_size, "events": events, "rate_mb_s": rate_mb_s,
        "inflight": config.max_inflight_blocks,
        "write": {"seconds": write_s, "events_per_s": events / write_s, "mb_per_s": total_mb / write_s,
                  "per_mb": _per_mb(write, total_mb), "dollars_per_gb": {k: v / gb for k, v in write.dollars().items()},
                  "raw_mb_per_s": total_mb / raw_write_s, "budget_s": config.max_latency_ms / 1000,
                  "round_trip_s": round_trip_s, "longest_round_trip_s": longest_round_trip_s},
        "read": {"seconds": read_s, "events_per_s": events / read_s, "mb_per_s": total_mb / read_s,
                 "per_mb": _per_mb(read, total_mb), "dollars_per_gb": {k: v / gb for k, v in read.dollars().items()},
                 "raw_mb_per_s": total_mb / raw_read_s, "objects": len(objects), "gets": read_gets,
                 "bytes_mb_per_s": catch_up["bytes"] / MB / catch_up["bytes_s"],
                 "raw_objects_mb_per_s": catch_up["raw"] / MB / catch_up["raw_s"],
                 "bytes_ratio": catch_up["bytes_ratio"], "batch_ratio": catch_up["batch_ratio"],
                 "batch_events_per_s": events / catch_up["batch_s"], "batch_mb_per_s": total_mb / catch_up["batch_s"],
                 "decode_events_per_s": {name: n / s for name, (n, s) in decode_s.items()}},
    }


def _decode_seconds(payload: bytes, count: int) -> dict[str, tuple[int, float]]:
    """Decoding alone, on one core: a 4 MiB block of ``count`` frames split into one EventBatch (the
    batch read) and into a Frame per event (``unframe``: what the group reader builds on); best of 5,
    in CPU time (the process's own, so a busy machine does not count against it)."""
    block = bytearray(b"".join(frame(payload) for _ in range(count)))
    best = {}
    for name, decode in (("frames", unframe), ("batch", unframe_batch)):
        runs = []
        for _ in range(5):
            started = time.process_time()
            decode(block)
            runs.append(time.process_time() - started)
        best[name] = (count, min(runs))
    return best


def report(result: dict) -> str:
    lines = [f"data path: {result['total_mb']} MB as {result['events']} events of {result['event_size']} B"
             + (f", paced at {result['rate_mb_s']} MB/s" if result["rate_mb_s"] else ", unpaced")
             + f", {result['inflight']} blocks in flight"]
    for side in ("write", "read"):
        r = result[side]
        lines.append(f"  {side}: {r['events_per_s']:,.0f} events/s, {r['mb_per_s']:.1f} MB/s "
                     f"(raw boto3 S3 {r['raw_mb_per_s']:.1f} MB/s, ratio {r['mb_per_s'] / r['raw_mb_per_s']:.2f})")
        per = ", ".join(f"{k} {v:.2f}" for k, v in r["per_mb"].items())
        lines.append(f"    per MB: {per}")
        cost = ", ".join(f"{k} ${v:.5f}" for k, v in r["dollars_per_gb"].items())
        lines.append(f"    modeled $/GB: {cost}")
    r = result["read"]
    lines.append(f"  read GETs {r['gets']} for {r['objects']} objects holding the bytes; catch-up of the bytes alone "
                 f"(locations + object GETs, no event framing) {r['bytes_mb_per_s']:.1f} MB/s vs raw GetObject of the "
                 f"same objects {r['raw_objects_mb_per_s']:.1f} MB/s, ratio {r['bytes_ratio']:.2f} (median of rounds)")
    lines.append(f"  batch read (StreamReader.read_events) {r['batch_events_per_s']:,.0f} events/s, "
                 f"{r['batch_mb_per_s']:.1f} MB/s vs the per-event read above {r['events_per_s']:,.0f} events/s; "
                 f"ratio to raw GetObject of the same objects {r['batch_ratio']:.2f} (median of rounds) "
                 f"(per-event {r['mb_per_s'] / r['raw_objects_mb_per_s']:.2f})")
    decode = r["decode_events_per_s"]
    lines.append(f"  decoding a 4 MiB block on one core: batch {decode['batch']:,.0f} events/s, "
                 f"a Frame per event {decode['frames']:,.0f} events/s")
    lines.append(f"  Kinesis on-demand ingest for comparison: ${PRICES['kinesis_on_demand_ingest_gb']:.2f}/GB")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=32)
    parser.add_argument("--event-size", type=int, default=1024)
    parser.add_argument("--rate-mb-s", type=float, default=None, help="pace the writer (e.g. 1 for 1 MB/s)")
    parser.add_argument("--inflight", type=int, default=None, help="the writer's max_inflight_blocks")
    args = parser.parse_args()
    print(report(run(args.mb, args.event_size, args.rate_mb_s, args.inflight)))


if __name__ == "__main__":
    main()
