"""Modeled AWS cost per GB and append-ack latency of the writer's latency budgets, from real appends.

For 1 KiB events at several rates into one segment, the block size a writer configuration sends
follows from how it batches (``EventWriterConfig``, see rillet.writer): a partial block grows for the
budget (``max_latency_ms``) less the round trip the writer measures (its mean, which the writer's
smoothed round trip tracks), or leaves once full; with no budget left it leaves when nothing of its
segment is in flight, or with the answer of the block that is. Blocks of those sizes are then
appended for real (``SegmentStore.append`` in-process on moto, as the append function calls it), and
their requests and DynamoDB request units priced from the real item sizes (bench/cost.py). Inline
blocks are later packed into S3 chunks by tiering; a measured tiering pass adds its share. Lambda is
priced per invocation and for the modeled duration of the AWS calls.

Latency is modeled, not measured: AWS per-request latencies are the stated assumptions in
``LATENCY_MS`` (not measurements), summed along the sequence of requests an append made here (they
are sequential in the code). The round trip is taken as log-normal with that p50 and p99, an event's
wait in the writer follows from steady arrivals (in a block that grew for ``h`` seconds, its first
event waited ``h``, the next ``h - 1/rate``, ...), and the ack quantiles are those of the sum of the
two (computed, not added: the sum of two p99s would assume the worst of both always coincide).

    python -m bench.append_cost            # profiles and the frontier, 1-1,000 events/s and 1 MB/s, and
                                           # a month of one stream beside Kinesis
    python -m bench.append_cost --quick    # 1 and 100 events/s, fewer appends
"""

from __future__ import annotations

import argparse
import math
import os
import uuid

from bench.cost import PRICES, observability_dollars, usage
from bench.stack import moto_stack
from dataplane.deployment import Deployment
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet import EventWriterConfig
from rillet.framing import frame
from standalone.moto_server import RequestMeter

EVENT = frame(os.urandom(1024))  # a 1 KiB event as the writer frames it
GIB = 2**30
HOURS_PER_MONTH = 730
PROFILES = {"lowest": EventWriterConfig.lowest_latency(), "default": EventWriterConfig(),
            "cost": EventWriterConfig.cost_optimized()}
FRONTIER_MS = (50, 100, 250, 500, 1000)  # budgets of the frontier table
LAMBDA_GB = 0.5  # the append function's memory (infra/terraform/lambda.tf)
TIER_RUN = 64  # inline blocks in the measured tiering pass (real passes pack up to 8 MiB)
Z99 = 2.3263  # the standard normal's 99th percentile

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
    "10 events/s": 10,
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


class RoundTrip:
    """An append's round trip as a log-normal variable with the modeled p50 and p99 (seconds)."""

    def __init__(self, p50_s: float, p99_s: float) -> None:
        self.p50_s = p50_s
        self.sigma = math.log(p99_s / p50_s) / Z99
        self.mean_s = p50_s * math.exp(self.sigma**2 / 2)  # what the writer's smoothed round trip tracks

    def exceeds(self, seconds: float) -> float:
        """P(round trip > seconds)."""
        if seconds <= 0:
            return 1.0
        return 0.5 * math.erfc(math.log(seconds / self.p50_s) / self.sigma / math.sqrt(2))


def batching(config: EventWriterConfig, events_per_s: float, trip: RoundTrip) -> tuple[int, list[float]]:
    """The events in a block, and the waits (seconds) in the writer of equally likely events.

    With budget left after the round trip, a block grows for that hold (or until full) and then
    leaves: steady arrivals put the first event ``hold`` before it leaves, the next ``1/rate`` less.
    Without (a budget at or under the round trip), a partial block leaves when nothing of its segment
    is in flight, or with the answer of the block that is: one block per round trip while the segment
    is busy (for the share of time it is), holding what arrived during it; an event that finds nothing
    in flight leaves at once, one that finds a block in flight waits for its answer."""
    full = max(1, config.batch_size_bytes // len(EVENT))
    hold = max(0.0, config.max_latency_ms / 1000 - trip.mean_s)
    if hold > 0:
        if 1 + events_per_s * hold > full:
            hold = (full - 1) / events_per_s  # full before the hold runs out
        events = 1 + math.floor(events_per_s * hold + 1e-9)
        return events, [hold - j / events_per_s for j in range(events)]
    busy = min(1.0, events_per_s * trip.mean_s)
    events = max(1, min(full, round(events_per_s * trip.mean_s)))
    grid = 200
    waits = [0.0] * round(grid * (1 - busy)) + [trip.mean_s * (i + 0.5) / grid for i in range(round(grid * busy))]
    return events, waits


def ack_quantile(q: float, waits: list[float], trip: RoundTrip) -> float:
    """The ``q`` quantile (seconds) of an event's wait in the writer plus its block's round trip."""

    def exceeds(x: float) -> float:
        return sum(trip.exceeds(x - w) for w in waits) / len(waits)

    low, high = 0.0, max(waits) + trip.p50_s * math.exp(trip.sigma * 6)
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if exceeds(middle) > 1 - q else (low, middle)
    return high


class _Appender:
    """Real appends of given block sizes, each priced and its sequence of requests recorded."""

    def __init__(self, deployment: Deployment, meter: RequestMeter) -> None:
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


def kinesis_month(events_per_s: float, event_bytes: int = 1024) -> dict[str, float]:
    """A month of Kinesis ingest of the same events, one record each, at a steady rate (bench/cost.py
    prices). On-demand: the stream-hour plus ingest, each record rounded up to 1 KiB. Provisioned: the
    fewest shards for the rate (1 MiB/s and 1,000 records/s of ingest each) plus PUT payload units (each
    record rounded up to 25 KB)."""
    seconds = HOURS_PER_MONTH * 3600
    records = events_per_s * seconds
    shards = math.ceil(max(events_per_s * event_bytes / 2**20, events_per_s / 1000))
    return {
        "on_demand": HOURS_PER_MONTH * PRICES["kinesis_on_demand_stream_hour"]
        + records * math.ceil(event_bytes / 1024) * 1024 / GIB * PRICES["kinesis_on_demand_ingest_gb"],
        "provisioned": HOURS_PER_MONTH * shards * PRICES["kinesis_shard_hour"]
        + records * math.ceil(event_bytes / 25_600) * PRICES["kinesis_put_payload_unit"],
    }


def gib_per_month(events_per_s: float) -> float:
    return events_per_s * 1024 * HOURS_PER_MONTH * 3600 / GIB


def run(rates: dict[str, float] | None = None, appends: int = 4,
        profiles: dict[str, EventWriterConfig] | None = None) -> dict:
    """A row per rate and profile (default: ``default`` and ``cost``): the block the profile sends,
    the requests and request units of one real append of it, dollars per GiB and the modeled ack
    latency; and Kinesis beside it."""
    rates = rates or RATES
    profiles = profiles or {name: PROFILES[name] for name in ("default", "cost")}
    meter = RequestMeter(keep_records=True)
    rows = []
    with moto_stack(meter, bind=True) as (_, deployment):
        appender = _Appender(deployment, meter)
        measured: dict[int, dict] = {}

        def at(block_events: int) -> dict:
            if block_events not in measured:
                measured[block_events] = appender.measure(block_events, appends)
            return measured[block_events]

        for name, events_per_s in rates.items():
            for profile, config in profiles.items():
                # The block size depends on the round trip, which depends on the block (inline or S3,
                # its transfer time): iterate to the fixed point (two or three rounds).
                block_events, seen = 1, set()
                while block_events not in seen:
                    seen.add(block_events)
                    m = at(block_events)
                    trip = RoundTrip(*(ms / 1000 for ms in _path_ms(m["operations"], m["block_bytes"])))
                    block_events, waits = batching(config, events_per_s, trip)
                m = at(block_events)
                p50_ms, p99_ms = _path_ms(m["operations"], m["block_bytes"])
                trip = RoundTrip(p50_ms / 1000, p99_ms / 1000)
                block_events, waits = batching(config, events_per_s, trip)
                dollars = _dollars_per_gib(m, p50_ms)
                rows.append({"rate": name, "events_per_s": events_per_s, "profile": profile,
                             "max_latency_ms": config.max_latency_ms, **m,
                             "request_ms": {"p50": p50_ms, "p99": p99_ms},
                             "ack_ms": {"p50": ack_quantile(0.5, waits, trip) * 1000,
                                        "p99": ack_quantile(0.99, waits, trip) * 1000},
                             "dollars_per_gib": dollars,
                             "dollars_per_month": dollars["total"] * gib_per_month(events_per_s),
                             "kinesis_month": kinesis_month(events_per_s)})
    return {"latency_ms": LATENCY_MS, "rows": rows}


def report(result: dict) -> str:
    lines = ["modeled append cost and latency, 1 KiB events into one segment (request units from real "
             + "appends on moto; AWS latencies are the assumptions in LATENCY_MS)",
             f"  {'rate':<15}{'profile':<9}{'budget':>7}{'block':>9} {'requests per append':<52}{'RU r/w':>9}"
             + f"{'$/GB':>9}{'ack p50':>9}{'p99':>8}{'+logs':>8}{'+traces if Active':>18}"]
    for r in result["rows"]:
        reqs = ", ".join(f"{k.split()[1]} {v:g}" for k, v in r["requests"].items())
        ru = f"{r['read_units']:.1f}/{r['write_units']:.1f}"
        seen = observability_dollars("append", round(GIB / r["block_bytes"]), active=True)
        lines.append(f"  {r['rate']:<15}{r['profile']:<9}{r['max_latency_ms']:>5}ms{r['block_bytes'] / 1024:>7.0f}KB "
                     + f"{reqs:<52}{ru:>9}{r['dollars_per_gib']['total']:>9.4f}"
                     + f"{r['ack_ms']['p50']:>7.0f}ms{r['ack_ms']['p99']:>6.0f}ms{seen['logs']:>8.4f}{seen['tracing']:>18.4f}")
    lines.append("  $/GB is ingest only (DynamoDB, S3 PUTs, Lambda requests and duration, tiering's share); the last "
                 "columns are what the append function's START/END/REPORT lines add per GB, and what Active tracing "
                 "would (var.data_path_tracing; 5 % of requests at volume), not in $/GB (bench/cost.py "
                 "observability_dollars); keeping the data costs "
                 f"${PRICES['s3_standard_gb_month']} per GB-month in S3 Standard once tiered (the index's small items "
                 "per block, in DynamoDB, are not priced here)")
    return "\n".join(lines)


def frontier_report(result: dict) -> str:
    """Dollars per GB and modeled ack latency per budget, at 100 events/s and 1 MB/s."""
    rows = {(r["profile"], r["rate"]): r for r in result["rows"]}
    rates = ("100 events/s", "1 MB/s")
    lines = ["latency budget frontier, 1 KiB events, one segment (modeled; the measured p99 is bench.latency's)",
             f"  {'budget':<18}" + "".join(f"{rate + ': $/GB':>22}{'ack p50':>9}{'p99':>8}" for rate in rates)]
    for profile in dict.fromkeys(p for p, _ in rows):
        cells = [rows[(profile, rate)] for rate in rates]
        label = f"{cells[0]['max_latency_ms']} ms" + (f" ({profile})" if not profile.endswith("ms") else "")
        lines.append(f"  {label:<18}" + "".join(f"{c['dollars_per_gib']['total']:>22.4f}{c['ack_ms']['p50']:>7.0f}ms"
                                                  f"{c['ack_ms']['p99']:>6.0f}ms" for c in cells))
    return "\n".join(lines)


def month_report(result: dict) -> str:
    """A month of one stream per rate: the default writer and the cost profile beside Kinesis."""
    rows = {(r["profile"], r["rate"]): r for r in result["rows"]}
    lines = ["a month (730 h) of one stream of 1 KiB events, ingest only: Rillet (modeled ack p50/p99) and Kinesis",
             f"  {'rate':<15}{'GiB':>8}{'default $':>11}{'p50/p99 ms':>12}{'cost $':>9}{'p50/p99 ms':>12}"
             + f"{'Kinesis on-demand $':>21}{'provisioned $':>15}"]
    for rate in dict.fromkeys(r for _, r in rows):
        d, c = rows[("default", rate)], rows[("cost", rate)]
        k = d["kinesis_month"]
        lines.append(f"  {rate:<15}{gib_per_month(d['events_per_s']):>8.0f}{d['dollars_per_month']:>11.2f}"
                     + f"{d['ack_ms']['p50']:>6.0f}/{d['ack_ms']['p99']:<5.0f}{c['dollars_per_month']:>9.2f}"
                     + f"{c['ack_ms']['p50']:>6.0f}/{c['ack_ms']['p99']:<5.0f}{k['on_demand']:>21.2f}{k['provisioned']:>15.2f}")
    lines.append("  Rillet: appends and tiering only (no storage, reads or per-stream background work); Kinesis: "
                 + "ingest with 24 h retention, its put latency not modeled")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two rates, fewer appends, no frontier")
    args = parser.parse_args()
    if args.quick:
        print(report(run({k: RATES[k] for k in ("1 event/s", "100 events/s")}, appends=2)))
        return
    result = run(profiles=PROFILES)
    print(report(result))
    print()
    print(month_report(result))
    frontier = {f"{ms}ms": EventWriterConfig(max_latency_ms=ms) for ms in FRONTIER_MS}
    print()
    print(frontier_report(run({k: RATES[k] for k in ("100 events/s", "1 MB/s")},
                              profiles={**frontier, **PROFILES})))


if __name__ == "__main__":
    main()
