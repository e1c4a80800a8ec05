"""Many pipelined blocks against few append workers: does throughput hold?

A writer may have several blocks of one segment in flight; the server commits a block only after the
writer's previous one. A block that arrives first is answered OutOfOrder at once (after at most
~100 ms of re-reading the head record), and the writer resends it, so no invocation idles while it
waits. This benchmark writes the same bytes with 8 and with 72 blocks in flight through standalone's
default append workers (3) and prints the throughput of each, the ratio, the append invocations per
block and the slowest invocation.

Run: ``.venv/bin/python -m bench.inflight_appends --mb 16``.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

import rillet
from standalone.stack import Stack, StackConfig

MB = 1024 * 1024
BLOCK = 64 * 1024  # small blocks, so that many are in flight at once


def _write(stack: Stack, inflight: int, total_mb: int, event_size: int) -> dict:
    scope = "inflight" + uuid.uuid4().hex[:8]
    manager = rillet.StreamManager(stack.controller_url)
    manager.create_scope(scope)
    manager.create_stream(scope, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    config = rillet.EventWriterConfig(batch_size_bytes=BLOCK, max_inflight_blocks=inflight,
                                      max_concurrency=max(16, inflight))
    payload = os.urandom(event_size)
    events = total_mb * MB // event_size
    with factory.create_event_writer("s", rillet.BytesSerializer(), config) as writer:
        _ = factory.connection.segments  # discover the data endpoints before timing
        stack.invocations.reset()
        started = time.perf_counter()
        futures = [writer.write_event(payload, routing_key="k") for _ in range(events)]
        writer.flush()
        seconds = time.perf_counter() - started
    failed = sum(1 for f in futures if f.exception() is not None)
    invocations = stack.invocations.invocations.get("append", 0)
    blocks = total_mb * MB // BLOCK
    return {"inflight": inflight, "seconds": seconds, "mb_per_s": total_mb / seconds, "failed": failed,
            "invocations_per_block": invocations / blocks,
            "slowest_invocation_s": stack.invocations.slowest.get("append", 0.0)}


def run(total_mb: int = 16, event_size: int = 1024, inflights: tuple[int, ...] = (8, 72)) -> list[dict]:
    with Stack(StackConfig.ephemeral()) as stack:
        return [_write(stack, n, total_mb, event_size) for n in inflights]


def report(results: list[dict]) -> str:
    lines = [f"pipelined appends through {StackConfig().workers['append']} append workers, {BLOCK // 1024} KiB blocks:"]
    for r in results:
        lines.append(f"  {r['inflight']:>3} blocks in flight: {r['mb_per_s']:.1f} MB/s, "
                     f"{r['invocations_per_block']:.2f} append invocations per block, "
                     f"slowest invocation {r['slowest_invocation_s'] * 1000:.0f} ms, {r['failed']} events failed")
    if len(results) >= 2:
        lines.append(f"  throughput ratio {results[-1]['inflight']} / {results[0]['inflight']} in flight: "
                     f"{results[-1]['mb_per_s'] / results[0]['mb_per_s']:.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=16)
    args = parser.parse_args()
    print(report(run(args.mb)))


if __name__ == "__main__":
    main()
