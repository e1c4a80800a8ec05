"""Write N MB through the SDK (``EventWriterConfig.cost_optimized()``) into standalone, read it back,
and price every request.

Prints events/s and MB/s; the AWS requests per MB appended and per MB read (DynamoDB requests and
request units, S3 PUT and GET); the modeled cost per GB at on-demand list prices (bench/cost.py);
and, on the same moto server, the minimal raw boto3 calls that store and fetch the same bytes (one
PutObject / GetObject per block of the writer's batch size), as throughput ratios.

Run: ``make bench`` (all benchmarks) or ``.venv/bin/python -m bench.data_path --mb 32``.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

import boto3

import rillet
from bench.cost import PRICES, usage
from standalone.stack import Stack, StackConfig

MB = 1024 * 1024


def _meter_window(stack: Stack) -> None:
    stack.requests.reset()
    stack.invocations.reset()


def _usage(stack: Stack, function: str):
    _, records = stack.requests.snapshot()
    return usage(records, stack.invocations.invocations.get(function, 0), stack.invocations.gb_seconds.get(function, 0.0))


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
        # The cost profile: its 1 s linger fills ~1 MB blocks at 1 MB/s (bench.latency measures the default's).
        config = rillet.EventWriterConfig.cost_optimized(**({} if inflight is None else {"max_inflight_blocks": inflight}))
        writer = factory.create_event_writer("data", rillet.BytesSerializer(), config)
        _ = factory.connection.segments  # discover the data endpoints before timing

        _meter_window(stack)
        started = time.perf_counter()
        for i in range(events):
            writer.write_event(payload, routing_key="k")
            if rate_mb_s and i % 256 == 0:
                ahead = (i * event_size / MB) / rate_mb_s - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
        writer.flush()
        write_s = time.perf_counter() - started
        write = _usage(stack, "append")
        writer.close()

        _meter_window(stack)
        started = time.perf_counter()
        reader = factory.create_stream_reader("data", rillet.BytesSerializer())
        count = sum(1 for _ in reader)
        read_s = time.perf_counter() - started
        read = _usage(stack, "read")
        assert count == events, f"read {count} events, wrote {events}"

        # The baseline: the same bytes in blocks of the writer's batch size, one PUT (GET) each.
        s3 = boto3.client("s3", endpoint_url=stack.moto.url, region_name="us-east-1")
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
                  "raw_mb_per_s": total_mb / raw_write_s},
        "read": {"seconds": read_s, "events_per_s": events / read_s, "mb_per_s": total_mb / read_s,
                 "per_mb": _per_mb(read, total_mb), "dollars_per_gb": {k: v / gb for k, v in read.dollars().items()},
                 "raw_mb_per_s": total_mb / raw_read_s},
    }


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
