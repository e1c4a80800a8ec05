"""What a reader costs while it waits at the tail, and how soon it sees the first event after waiting.

Starts a standalone stack, creates an empty stream of 1 segment and one of 4, and leaves a
``StreamReader`` at the tail of each for ``--seconds`` (calling ``read_next_event(timeout_ms=1000)``
in a loop, as an application does), metering from ``--settle-s`` on, once its checks have backed off. Every request the reader sends is counted by kind (tail checks,
reads, plans, object GETs); the DynamoDB requests the read and tails functions make are metered by
the moto server and priced with bench/cost.py. Function duration is *modeled* per request
(``cost.FUNCTION_MS``: a constant per request kind, billed at the memory of the function that serves
it: tail checks at the tails function's 128 MB), not taken from the emulation's wall time. The
window's cost is scaled to a day.

The stack runs one tails worker, as Lambda serves a lone reader's checks from one warm instance (each
instance keeps its own grant cache, and reads the grant count once per cache period).

Then it measures the wake-up latency (the read function's workers warmed first: a worker's first
request of a route pays its imports, in standalone up to a second): after the reader has idled
``--idle-s`` (its tail checks backed off to their slowest), one event is written and the time from the write's acknowledgement to
``read_next_event`` returning it is taken, ``--probes`` times.

Run: ``.venv/bin/python -m bench.idle_reader --seconds 20``.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import rillet
from bench.cost import (
    FUNCTION_MS,
    PRICES,
    TAIL_CHECK_CPU_MS,
    TAILS_MEMORY_MB,
    RequestCounter,
    cpu_share_ms,
    function_gb_seconds,
    observability_dollars,
    usage,
)
from rillet.segments import TailBackoff
from standalone.stack import Stack, StackConfig

DAY_S = 86_400


def _idle_cost(stack: Stack, factory, scope: str, stream: str, seconds: float, settle_s: float) -> dict:
    reader = factory.create_stream_reader(stream, rillet.BytesSerializer())
    counter = RequestCounter(factory.connection.segments)
    reader.read_next_event(timeout_ms=int(settle_s * 1000))  # reach the tail, and the slowest cadence, before metering
    while reader._backoff.delay_s < reader._backoff.max_s:  # a slow start (a loaded machine) is still ramping up
        reader.read_next_event(timeout_ms=500)
    stack.requests.reset()
    stack.invocations.reset()
    counter.reset()
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        assert reader.read_next_event(timeout_ms=1000) is None
    elapsed = time.monotonic() - started
    _, records = stack.requests.snapshot()
    kinds = dict(counter.kinds)
    invocations = sum(kinds.values())
    u = usage(records, invocations, function_gb_seconds("read", kinds))
    per_day = {k: v * DAY_S / elapsed for k, v in u.dollars().items()}
    ddb = sum(n for (svc, _), n in u.requests.items() if svc == "dynamodb")
    return {"stream": stream, "seconds": elapsed, "requests_by_kind": kinds,
            "dynamodb_by_operation": {op: n for (svc, op), n in u.requests.items() if svc == "dynamodb"},
            "function_requests_per_s": invocations / elapsed, "dynamodb_requests_per_s": ddb / elapsed,
            "read_units_per_s": u.read_units / elapsed,
            "invocations_by_function": dict(stack.invocations.invocations),
            "wall_gb_seconds": sum(stack.invocations.gb_seconds.get(f, 0.0) for f in ("read", "tails")),
            "modeled_gb_seconds": u.lambda_gb_seconds,
            "dollars_per_day": per_day}


def _wake_latency(factory, stream: str, idle_s: float, probes: int) -> list[float]:
    reader = factory.create_stream_reader(stream, rillet.BytesSerializer())
    writer = factory.create_event_writer(stream, rillet.BytesSerializer())
    segments = factory.connection.segments
    (segment,) = factory.connection.controller.current_segments(factory.scope, stream)
    with ThreadPoolExecutor(6) as pool:  # every read worker serves a locations request before the probes
        list(pool.map(lambda _: segments.locate(factory.scope, stream, segment.segment_id, 0, 1), range(6)))
    latencies = []
    try:
        for _ in range(probes):
            reader.read_next_event(timeout_ms=0)
            got: list[float] = []

            def wait_for_event(arrivals: list[float]) -> None:
                deadline = time.monotonic() + idle_s + 30
                while time.monotonic() < deadline:
                    if reader.read_next_event(timeout_ms=1000) is not None:
                        arrivals.append(time.monotonic())
                        return

            waiting = threading.Thread(target=wait_for_event, args=(got,))
            waiting.start()
            time.sleep(idle_s)
            writer.write_event(b"x", routing_key="k").result()
            acknowledged = time.monotonic()
            waiting.join()
            latencies.append(got[0] - acknowledged)
    finally:
        writer.close()
    return latencies


def run(seconds: float = 20, idle_s: float = 10, probes: int = 3, settle_s: float = 5) -> dict:
    config = StackConfig.ephemeral()
    # One tails worker: Lambda serves a lone reader's checks, one at a time, from one warm instance, and
    # each instance reads the grant count once per cache period (two workers would read it twice).
    config.workers = {**config.workers, "tails": 1}
    with Stack(config) as stack:
        stack.requests.keep_records = True
        scope = "idle" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
        results = []
        for segments in (1, 4):
            stream = f"s{segments}"
            manager.create_stream(scope, stream, rillet.StreamConfiguration(
                scaling_policy=rillet.ScalingPolicy.fixed(segments)))
            results.append({"segments": segments, **_idle_cost(stack, factory, scope, stream, seconds, settle_s)})
        latencies = _wake_latency(factory, "s1", idle_s, probes) if probes else []
    return {"idle": results, "wake_latency_s": latencies, "idle_s": idle_s}


def tail_check_dollars(memory_mb: int, ms: float) -> float:
    """One tail check of one segment: a request, ``ms`` at ``memory_mb``, half a read unit."""
    return (PRICES["lambda_request"] + ms / 1000 * memory_mb / 1024 * PRICES["lambda_gb_second"]
            + PRICES["dynamodb_read_request_unit"] / 2)


def report(r: dict) -> str:
    lines = [("idle StreamReader at the tail of an empty stream (function duration modeled per request, "
             f"bench/cost.py FUNCTION_MS; tail checks at the tails function's {TAILS_MEMORY_MB} MB):")]
    for x in r["idle"]:
        d = x["dollars_per_day"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(x["requests_by_kind"].items()))
        lines += [
            f"  {x['segments']} segment(s), {x['seconds']:.0f} s: {x['function_requests_per_s']:.2f} function requests/s "
            f"({kinds}), {x['dynamodb_requests_per_s']:.2f} DynamoDB requests/s, {x['read_units_per_s']:.2f} read units/s; DynamoDB "
            + ", ".join(f"{op} {n}" for op, n in sorted(x["dynamodb_by_operation"].items()))
            + "; invocations " + ", ".join(f"{f} {n}" for f, n in sorted(x["invocations_by_function"].items())),
            (f"    modeled $/day: total ${d['total']:.5f} (function requests ${d['lambda_requests']:.4f}, "
            f"duration ${d['lambda_duration']:.4f}, DynamoDB reads ${d['dynamodb_reads']:.4f}, S3 ${d['s3_get'] + d['s3_put']:.4f});"
            f" GB-s modeled {x['modeled_gb_seconds']:.3f} vs emulation wall {x['wall_gb_seconds']:.3f}"),
        ]
    if r["wake_latency_s"]:
        lat = r["wake_latency_s"]
        lines.append(f"  first event after {r['idle_s']:.0f} s idle reaches the reader in: "
                     + ", ".join(f"{x:.2f} s" for x in lat) + f" (max {max(lat):.2f} s, median {statistics.median(lat):.2f} s)")
    per_day = DAY_S / TailBackoff.max_s
    model_ms = FUNCTION_MS["tails"]["tails"]
    lines.append(f"  a day of tail checks of 1 segment, one per {TailBackoff.max_s} s (before grant-cache reads): "
                 + "; ".join(f"{mb} MB ${tail_check_dollars(mb, model_ms) * per_day:.5f}" for mb in (TAILS_MEMORY_MB, 512))
                 + f" ({model_ms} ms each, bench/cost.py FUNCTION_MS)")
    throttled = {mb: model_ms - TAIL_CHECK_CPU_MS + cpu_share_ms(TAIL_CHECK_CPU_MS, mb) for mb in (TAILS_MEMORY_MB, 512)}
    lines.append(f"    if the check's CPU ({TAIL_CHECK_CPU_MS} ms of a core) ran at the memory's share of a vCPU: "
                 + "; ".join(f"{mb} MB {ms:.1f} ms ${tail_check_dollars(mb, ms) * per_day:.5f}"
                             for mb, ms in throttled.items()))
    quiet = observability_dollars("tails", per_day)
    traced = observability_dollars("read", per_day, 1 / TailBackoff.max_s, active=True)
    lines.append(f"  logs and traces of that day (bench/cost.py): ${quiet['logs'] + quiet['tracing']:.5f} as the tails "
                 f"function is deployed (PassThrough tracing, no system log lines below WARN); with Active tracing "
                 f"and START/END/REPORT lines, logs ${traced['logs']:.5f} and traces ${traced['tracing']:.4f}: a lone "
                 "client's checks all fall in X-Ray's one-a-second reservoir")
    lines.append(f"  Kinesis on-demand idles at ${PRICES['kinesis_on_demand_stream_hour'] * 24:.2f}/day per stream")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--idle-s", type=float, default=10)
    parser.add_argument("--probes", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=5, help="idle this long before metering")
    args = parser.parse_args()
    print(report(run(args.seconds, args.idle_s, args.probes, args.settle_s)))
