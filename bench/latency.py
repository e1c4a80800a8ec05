"""Append latency: how long an event waits for its acknowledgement, and until a tailing reader has it.

For each writer profile (``default``: ``EventWriterConfig()``, a 250 ms latency budget; ``cost``:
``cost_optimized()``; ``lowest``: ``lowest_latency()``; ``<n>ms``: a latency budget of n ms) and each
rate, one writer paces 1 KiB events into a one-segment stream of a standalone stack while a
reader-group reader tails it. Each event carries the time it was written (``time.perf_counter``, one
clock for writer and reader in this process). Printed per cell: append-ack latency p50/p99 (write_event
to its future's answer), write-to-read latency p50/p99 (write_event to ``read_next_event`` returning it),
ack-to-read p50/p99 (the answer reaching the writer to the reader having the event; 0 if the reader
had it first), the append requests the writer sent per GB of payload (what the cost of a profile follows from),
and the writer's smoothed append round trip at the end: it holds an event for its budget less that,
so a budget's ack p99 should be within the budget plus the round trip's own spread.
The run starts with an unreported warm-up cell, and each cell with one unmeasured event (written
and read). Everything runs in one process on the machine's cores, as standalone does, so the
figures include the server's time on a shared CPU.

Run: ``.venv/bin/python -m bench.latency`` (``--seconds``, ``--rates``, ``--profiles``, ``--warmup``;
``--quick`` for a smoke run; ``--frontier`` for the budgets 50-1,000 ms at 100 events/s and 1 MB/s).
"""

from __future__ import annotations

import argparse
import struct
import threading
import time
import uuid
from concurrent.futures import Future

import rillet
from standalone.stack import Stack, StackConfig

STAMP = struct.Struct(">dq")  # the time write_event was called, and the event's sequence number
PROFILES = ("default", "cost")
FRONTIER = ("50ms", "100ms", "250ms", "500ms", "1000ms")
MB_S = 1e6 / 1024  # 1 MB/s of 1 KiB events
GB = 1e9


def writer_config(profile: str) -> rillet.EventWriterConfig:
    """``default``, ``cost``, ``lowest``, or a budget such as ``250ms``."""
    named = {"default": rillet.EventWriterConfig, "cost": rillet.EventWriterConfig.cost_optimized,
             "lowest": rillet.EventWriterConfig.lowest_latency}
    if profile in named:
        return named[profile]()
    if not profile.endswith("ms") or not profile[:-2].isdigit():
        raise ValueError(f"a profile is default, cost, lowest or a budget such as 250ms, not {profile!r}")
    return rillet.EventWriterConfig(max_latency_ms=int(profile[:-2]))


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (the largest value for p99 of fewer than 100 samples)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))]


def _cell(stack: Stack, scope: str, stream: str, profile: str, rate: float, seconds: float, event_size: int) -> dict:
    manager = rillet.StreamManager(stack.controller_url)
    manager.create_stream(scope, stream, rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
    groups = rillet.ReaderGroupManager(scope, stack.controller_url)
    groups.create_reader_group(stream, rillet.group_config([f"{scope}/{stream}"]))
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    reader = factory.create_reader("tail", stream, rillet.BytesSerializer())
    events = max(1, round(rate * seconds))
    read_latency: list[float] = []
    read_at: dict[int, float] = {}
    warm, done_reading = threading.Event(), threading.Event()

    def tail() -> None:
        seen = set()
        while len(seen) < events and not done_reading.is_set():
            read = reader.read_next_event(timeout_ms=500)
            if read is None or read.event is None:
                continue
            written_at, seq = STAMP.unpack_from(read.event)
            if seq < 0:
                warm.set()
            elif seq not in seen:
                seen.add(seq)
                read_at[seq] = time.perf_counter()
                read_latency.append(read_at[seq] - written_at)
        done_reading.set()

    tailer = threading.Thread(target=tail, name="latency-tail")
    tailer.start()
    writer = factory.create_event_writer(stream, rillet.BytesSerializer(), writer_config(profile))
    segments = writer.connection.segments
    requests: list[int] = []
    append = segments.append
    segments.append = lambda *a, **k: requests.append(1) or append(*a, **k)
    ack_latency: list[float] = []
    acked_at: dict[int, float] = {}
    lock = threading.Lock()

    def on_ack(written_at: float, seq: int, future: Future) -> None:
        answered = time.perf_counter()
        if future.exception() is None:
            with lock:
                ack_latency.append(answered - written_at)
                acked_at[seq] = answered

    padding = b"x" * (event_size - STAMP.size)
    # One unmeasured event first, read by the reader too: the figures are of a running pipeline, not
    # of the first request of a fresh stream and a cold stack.
    writer.write_event(STAMP.pack(time.perf_counter(), -1) + padding, routing_key="k").result(timeout=60)
    warm.wait(timeout=60)
    requests.clear()
    started = time.perf_counter()
    for seq in range(events):
        due = started + seq / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        written_at = time.perf_counter()
        future = writer.write_event(STAMP.pack(written_at, seq) + padding, routing_key="k")
        future.add_done_callback(lambda f, t=written_at, n=seq: on_ack(t, n, f))
    writer.flush()
    round_trip_ms = (writer.round_trip_s() or 0.0) * 1000
    writer.close()
    tailer.join(timeout=60)
    done_reading.set()
    tailer.join()
    reader.close()
    # Ack to read: how long after its writer learned an event was stored a tailing reader had it (0 when
    # the reader had it first: the tail check saw the commit before the answer reached the writer).
    after_ack = [max(0.0, read_at[n] - acked_at[n]) for n in read_at if n in acked_at]
    return {"profile": profile, "rate": rate, "events": events, "acked": len(ack_latency), "read": len(read_latency),
            "ack_p50_ms": percentile(ack_latency, 0.50) * 1000, "ack_p99_ms": percentile(ack_latency, 0.99) * 1000,
            "read_p50_ms": percentile(read_latency, 0.50) * 1000, "read_p99_ms": percentile(read_latency, 0.99) * 1000,
            "after_ack_p50_ms": percentile(after_ack, 0.50) * 1000, "after_ack_p99_ms": percentile(after_ack, 0.99) * 1000,
            "append_requests": len(requests), "requests_per_gb": len(requests) / (events * event_size / GB),
            "budget_ms": writer.config.max_latency_ms, "round_trip_ms": round_trip_ms}


def run(rates: tuple[float, ...] = (1, 100, 1000), profiles: tuple[str, ...] = PROFILES, seconds: float = 15,
        event_size: int = 1024, warmup_s: float = 3) -> list[dict]:
    """Each cell in its own stream of one stack, after an unreported warm-up cell (100 events/s for
    ``warmup_s``) so that every append and read worker has started: the figures are of a warm
    deployment, not of cold starts."""
    with Stack(StackConfig.ephemeral()) as stack:
        scope = "latency" + uuid.uuid4().hex[:8]
        rillet.StreamManager(stack.controller_url).create_scope(scope)
        _cell(stack, scope, "warmup", "default", 100, warmup_s, event_size)
        return [_cell(stack, scope, f"{profile}-{int(rate)}", profile, rate, seconds, event_size)
                for profile in profiles for rate in rates]


def report(results: list[dict]) -> str:
    lines = ["append latency, 1 KiB events into one segment, standalone (ms; requests per GB of payload)",
             (f"{'profile':<8} {'events/s':>8} {'events':>7} {'acked':>6} {'read':>6} {'ack p50':>8} {'ack p99':>8} "
              f"{'read p50':>9} {'read p99':>9} {'ack>read p50':>13} {'ack>read p99':>13} {'requests':>9} {'req/GB':>10}")]
    lines += [f"{r['profile']:<8} {r['rate']:>8g} {r['events']:>7} {r['acked']:>6} {r['read']:>6} "
              f"{r['ack_p50_ms']:>8.1f} {r['ack_p99_ms']:>8.1f} {r['read_p50_ms']:>9.1f} {r['read_p99_ms']:>9.1f} "
              f"{r['after_ack_p50_ms']:>13.1f} {r['after_ack_p99_ms']:>13.1f} "
              f"{r['append_requests']:>9} {r['requests_per_gb']:>10.0f}" for r in results]
    lines.append("the writer's budget and its smoothed append round trip at the end of each cell (ms):")
    lines += [f"  {r['profile']} at {r['rate']:g} events/s: budget {r['budget_ms']}, round trip {r['round_trip_ms']:.1f}, "
              f"budget + round trip {r['budget_ms'] + r['round_trip_ms']:.1f}" for r in results]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15, help="how long each cell writes")
    parser.add_argument("--rates", type=float, nargs="+", default=[1, 100, 1000], help="events per second")
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES), help="default, cost, lowest or budgets (250ms)")
    parser.add_argument("--warmup", type=float, default=3, help="seconds of unreported writing first")
    parser.add_argument("--quick", action="store_true", help="2 s per cell at 10 and 100 events/s, 1 s warm-up")
    parser.add_argument("--frontier", action="store_true", help="the budgets 50-1,000 ms at 100 events/s and 1 MB/s")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.rates, args.warmup = 2, [10, 100], 1
    if args.frontier:
        args.rates, args.profiles = [100, MB_S], list(FRONTIER)
    for profile in args.profiles:
        writer_config(profile)  # a typo fails before the stack starts
    print(report(run(tuple(args.rates), tuple(args.profiles), args.seconds, warmup_s=args.warmup)))


if __name__ == "__main__":
    main()
