"""Modeled AWS cost per GB and append-ack latency of the two writer profiles, from real appends.

For 1 KiB events at several rates into one segment, the block size each profile sends follows from
how it batches (``EventWriterConfig``): the default (adaptive) profile sends a block as soon as the
segment has none in flight (after a 5 ms linger), so a block holds the events that arrived during the
previous block's round trip; the cost profile (``cost_optimized()``) lingers 1 s, so a block holds a
second of events (both at most ``batch_size_bytes``). Blocks of
those sizes are then appended for real (``SegmentStore.append`` in-process on moto, as the append
function calls it), and their requests and DynamoDB request units priced from the real item sizes
(bench/cost.py). Inline blocks are later packed into S3 chunks by tiering; a measured tiering pass
adds its share. Lambda is priced per invocation and for the modeled duration of the AWS calls.

Latency is modeled, not measured: AWS per-request latencies are the stated assumptions in
``LATENCY_MS`` (not measurements), summed along the sequence of requests an append made here (they
are sequential in the code), plus the profile's wait before a block leaves.

    python -m bench.append_cost            # 1, 100, 1,000 events/s and 1 MB/s
    python -m bench.append_cost --quick    # 1 and 100 events/s, fewer appends
"""

from __future__ import annotations

import argparse
import math
import os
import uuid

from bench.cost import PRICES, usage
from dataplane import models
from dataplane.deployment import Deployment
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet import EventWriterConfig
from rillet.framing import frame
from standalone.moto_server import MotoServer, RequestMeter
from standalone.resources import create_resources

EVENT = frame(os.urandom(1024))  # a 1 KiB event as the writer frames it
GIB = 2**30
PROFILES = {"default": EventWriterConfig(), "cost": EventWriterConfig.cost_optimized()}
LAMBDA_GB = 0.5  # the append function's memory (infra/terraform/lambda.tf)
TIER_RUN = 64  # inline blocks in the measured tiering pass (real passes pack up to 8 MiB)

# Assumed AWS latencies in ms, (p50, p99), same region, warm function, reused connections. These are
# round figures in the ranges AWS and public measurements state (DynamoDB: single-digit ms; S3 PUT of
# a small object: tens of ms; a Function URL adds a few ms to a warm invocation), not measurements.
LATENCY_MS = {
    "client <-> Function URL -> warm Lambda": (10.0, 40.0),
    "dynamodb GetItem": (3.0, 10.0),
    "dynamodb Query": (4.0, 12.0),
    "dynamodb PutItem": (5.0, 15.0),
    "dynamodb UpdateItem": (5.0, 15.0),
    "dynamodb DeleteItem": (5.0, 15.0),
    "s3 PutObject": (25.0, 100.0),
    "s3 DeleteObject": (15.0, 50.0),
}
S3_MS_PER_MIB = (8.0, 16.0)  # transfer of a block's bytes to S3 from Lambda, on top of the PUT

RATES = {  # name -> events per second (of 1 KiB)
    "1 event/s": 1,
    "100 events/s": 100,
    "1,000 events/s": 1000,
    "1 MB/s": 1_000_000 / 1024,
}


def _path_ms(operations: list[str], block_bytes: int) -> tuple[float, float]:
    """p50 and an estimated p99 of one append: its requests one after another behind the Function URL.

    The p99 adds the root-sum-square of each step's p99 - p50 to the sum of the p50s, which assumes
    the steps' tails are independent (the sum of the p99s would assume they always coincide).
    """
    steps = [LATENCY_MS["client <-> Function URL -> warm Lambda"]]
    for op in operations:
        p50, p99 = LATENCY_MS[op]
        if op == "s3 PutObject":
            p50, p99 = p50 + S3_MS_PER_MIB[0] * block_bytes / 2**20, p99 + S3_MS_PER_MIB[1] * block_bytes / 2**20
        steps.append((p50, p99))
    p50 = sum(a for a, _ in steps)
    return p50, p50 + math.sqrt(sum((b - a) ** 2 for a, b in steps))


def _wait_quantile(q: float, events_per_s: float, profile: str, round_trip_s: float) -> float:
    """Seconds an event waits in the writer before its block leaves, at quantile ``q``."""
    config = PROFILES[profile]
    linger_s = config.linger_ms / 1000
    if profile == "cost":
        fill_s = config.batch_size_bytes / len(EVENT) / events_per_s  # a full block leaves before the linger ends
        if events_per_s * linger_s <= 1:
            return linger_s  # each event is alone in its block: it waits the whole linger
        return q * min(linger_s, fill_s)
    # Adaptive: an event that finds a block in flight waits for it (uniformly over its round trip), one
    # that finds none waits the short linger; a block is in flight for the segment's utilization of time.
    busy = min(1.0, events_per_s * round_trip_s)
    return linger_s if q <= 1 - busy else round_trip_s * (q - (1 - busy)) / busy


class _Appender:
    """Real appends of given block sizes, each priced and its sequence of requests recorded."""

    def __init__(self, server: MotoServer, meter: RequestMeter) -> None:
        deployment = Deployment(endpoint_url=server.url)
        create_resources(deployment)
        models.bind(deployment)
        self.meter = meter
        self.store = SegmentStore(deployment, StoreSettings(tier_min_age_ms=0))

    def measure(self, block_events: int, appends: int) -> dict:
        segment = f"bench{uuid.uuid4().hex[:8]}/data/0"
        self.store.create(segment)
        block = EVENT * block_events
        writer, number = uuid.uuid4().hex, 0

        def append() -> list:
            nonlocal number
            self.meter.reset()
            self.store.append(segment, writer, number, block_events, block, after=number - 1)
            number += block_events
            return self.meter.snapshot()[1]

        append()  # the writer's first block (its state is new); then steady-state blocks
        records = []
        for _ in range(appends):
            records.append(append())
        inline = len(block) <= self.store.settings.inline_max
        tier = None
        if inline:
            for _ in range(TIER_RUN - appends - 1):
                append()
            self.store.seal(segment)  # so the pass takes every entry at once (an open segment's pass is the same per entry)
            self.meter.reset()
            self.store.tier(segment)
            tier = usage(self.meter.snapshot()[1])
        per = [usage(r) for r in records]
        result = {
            "block_bytes": len(block), "block_events": block_events, "inline": inline,
            "operations": [f"{r.service} {r.operation}" for r in records[-1]],
            "requests": {f"{svc} {op}": sum(u.requests[(svc, op)] for u in per) / appends
                         for svc, op in sorted({k for u in per for k in u.requests})},
            "read_units": sum(u.read_units for u in per) / appends,
            "write_units": sum(u.write_units for u in per) / appends,
        }
        if tier is not None:  # its share per appended block
            result["tiering"] = {"requests": sum(tier.requests.values()) / TIER_RUN,
                                 "read_units": tier.read_units / TIER_RUN, "write_units": tier.write_units / TIER_RUN,
                                 "s3_put": tier.requests[("s3", "PutObject")] / TIER_RUN}
        return result


def _block_events(profile: str, events_per_s: float, round_trip_s: float) -> int:
    config = PROFILES[profile]
    seconds = config.linger_ms / 1000 if profile == "cost" else max(round_trip_s, config.linger_ms / 1000)
    return max(1, min(config.batch_size_bytes // len(EVENT), round(events_per_s * seconds)))


def _dollars_per_gib(m: dict, p50_ms: float) -> dict[str, float]:
    appends = GIB / m["block_bytes"]
    tier = m.get("tiering", {"read_units": 0.0, "write_units": 0.0, "s3_put": 0.0})
    aws_ms = p50_ms - LATENCY_MS["client <-> Function URL -> warm Lambda"][0]  # the function's own time
    parts = {
        "dynamodb": appends * ((m["write_units"] + tier["write_units"]) * PRICES["dynamodb_write_request_unit"]
                               + (m["read_units"] + tier["read_units"]) * PRICES["dynamodb_read_request_unit"]),
        "s3": appends * (m["requests"].get("s3 PutObject", 0) + tier["s3_put"]) * PRICES["s3_put"],
        "lambda": appends * (PRICES["lambda_request"] + LAMBDA_GB * math.ceil(aws_ms) / 1000 * PRICES["lambda_gb_second"]),
    }
    parts["total"] = sum(parts.values())
    return parts


def kinesis_dollars_per_gib(events_per_s: float, event_bytes: int = 1024) -> dict[str, float]:
    """Kinesis ingest of the same events, one record each, at a steady rate (bench/cost.py prices)."""
    gib_per_hour = events_per_s * event_bytes * 3600 / GIB
    records_per_gib = GIB / event_bytes
    shards = math.ceil(max(events_per_s * event_bytes / 2**20, events_per_s / 1000))
    return {
        "on_demand": math.ceil(event_bytes / 1024) * 1024 / event_bytes * PRICES["kinesis_on_demand_ingest_gb"]
        + PRICES["kinesis_on_demand_stream_hour"] / gib_per_hour,
        "provisioned": shards * PRICES["kinesis_shard_hour"] / gib_per_hour
        + records_per_gib * math.ceil(event_bytes / 25_600) * PRICES["kinesis_put_payload_unit"],
    }


def run(rates: dict[str, float] | None = None, appends: int = 4) -> dict:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    rates = rates or RATES
    meter = RequestMeter(keep_records=True)
    server = MotoServer(meter=meter).start()
    rows = []
    try:
        appender = _Appender(server, meter)
        measured: dict[int, dict] = {}

        def at(block_events: int) -> dict:
            if block_events not in measured:
                measured[block_events] = appender.measure(block_events, appends)
            return measured[block_events]

        for name, events_per_s in rates.items():
            for profile in ("default", "cost"):
                # The adaptive block size depends on the round trip, which depends on the block (inline
                # or S3, its transfer time): iterate to the fixed point (two or three rounds).
                block_events, seen = 1, set()
                while block_events not in seen:
                    seen.add(block_events)
                    m = at(block_events)
                    p50_ms, p99_ms = _path_ms(m["operations"], m["block_bytes"])
                    block_events = _block_events(profile, events_per_s, p50_ms / 1000)
                m = at(block_events)
                p50_ms, p99_ms = _path_ms(m["operations"], m["block_bytes"])
                ack_p50 = _wait_quantile(0.5, events_per_s, profile, p50_ms / 1000) * 1000 + p50_ms
                ack_p99 = _wait_quantile(0.99, events_per_s, profile, p99_ms / 1000) * 1000 + p99_ms
                rows.append({"rate": name, "events_per_s": events_per_s, "profile": profile, **m,
                             "request_ms": {"p50": p50_ms, "p99": p99_ms},
                             "ack_ms": {"p50": ack_p50, "p99": ack_p99},
                             "dollars_per_gib": _dollars_per_gib(m, p50_ms),
                             "kinesis_dollars_per_gib": kinesis_dollars_per_gib(events_per_s)})
    finally:
        server.stop()
    return {"latency_ms": LATENCY_MS, "rows": rows}


def report(result: dict) -> str:
    lines = ["modeled append cost and latency, 1 KiB events into one segment (request units from real "
             + "appends on moto; AWS latencies are the assumptions in LATENCY_MS)",
             f"  {'rate':<15}{'profile':<9}{'block':>9} {'requests per append':<44}{'RU r/w':>9}"
             + f"{'$/GB':>9}{'Kinesis OD':>11}{'prov.':>8}{'ack p50':>9}{'p99':>8}"]
    for r in result["rows"]:
        reqs = ", ".join(f"{k.split()[1]} {v:g}" for k, v in r["requests"].items())
        ru = f"{r['read_units']:.1f}/{r['write_units']:.1f}"
        k = r["kinesis_dollars_per_gib"]
        lines.append(f"  {r['rate']:<15}{r['profile']:<9}{r['block_bytes'] / 1024:>7.0f}KB {reqs:<44}{ru:>9}"
                     + f"{r['dollars_per_gib']['total']:>9.4f}{k['on_demand']:>11.3f}{k['provisioned']:>8.3f}"
                     + f"{r['ack_ms']['p50']:>7.0f}ms{r['ack_ms']['p99']:>6.0f}ms")
    lines.append("  $/GB is ingest only (DynamoDB, S3 PUTs, Lambda requests and duration, tiering's share); "
                 + "Kinesis: on-demand with its stream-hour, provisioned with its shard-hours and PUT units")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two rates, fewer appends")
    args = parser.parse_args()
    if args.quick:
        print(report(run({k: RATES[k] for k in ("1 event/s", "100 events/s")}, appends=2)))
    else:
        print(report(run()))


if __name__ == "__main__":
    main()
