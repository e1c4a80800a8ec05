"""The ``rillet`` CLI's own throughput: ``stream write`` of JSON lines from stdin (routed by a field)
and ``stream read`` of them back to a pipe, as real console-script processes against a standalone stack.
Run: ``.venv/bin/python -m bench.cli_throughput``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import rillet
from standalone.stack import Stack, StackConfig

RILLET = str(Path(sys.executable).with_name("rillet"))


def startup_s(runs: int = 5) -> float:
    """Median wall seconds of ``rillet --version``: what every command pays before its first request."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([RILLET, "--version"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(events: int = 20_000, segments: int = 3) -> dict:
    lines = "".join(json.dumps({"order": i, "customer": f"c{i % 100}", "note": "x" * 60}) + "\n"
                    for i in range(events))
    with Stack(StackConfig.ephemeral()) as stack:
        scope = "cli" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        manager.create_stream(scope, "orders", rillet.StreamConfiguration(
            scaling_policy=rillet.ScalingPolicy.fixed(segments)))
        base = [RILLET, "--endpoint", stack.controller_url, "stream"]
        started = time.perf_counter()
        subprocess.run([*base, "write", f"{scope}/orders", "--key-field", "customer"], input=lines, text=True,
                       check=True, capture_output=True)
        write_s = time.perf_counter() - started
        started = time.perf_counter()
        read = subprocess.run([*base, "read", f"{scope}/orders"], text=True, check=True, capture_output=True)
        read_s = time.perf_counter() - started
        manager.create_stream(scope, "baseline", rillet.StreamConfiguration(
            scaling_policy=rillet.ScalingPolicy.fixed(segments)))
        factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
        started = time.perf_counter()
        with factory.create_event_writer("baseline", rillet.UTF8StringSerializer()) as writer:
            for line in lines.splitlines():
                writer.write_event(line, routing_key=json.loads(line)["customer"])
        sdk_write_s = time.perf_counter() - started
    assert read.stdout.count("\n") == events
    return {"events": events, "mb": len(lines) / 1e6, "segments": segments, "write_s": write_s, "read_s": read_s,
            "sdk_write_s": sdk_write_s, "startup_s": startup_s()}


def report(r: dict) -> str:
    return "\n".join([
        f"rillet CLI, {r['events']} JSON lines ({r['mb']:.1f} MB) over {r['segments']} segments, process start included",
        (f"  stream write --key-field  {r['write_s']:6.1f} s  {r['events'] / r['write_s']:8,.0f} events/s  "
        f"{r['mb'] / r['write_s']:5.2f} MB/s"),
        (f"  SDK writer, in-process   {r['sdk_write_s']:6.1f} s  {r['events'] / r['sdk_write_s']:8,.0f} events/s  "
         f"{r['mb'] / r['sdk_write_s']:5.2f} MB/s"),
        (f"  stream read (to a pipe)   {r['read_s']:6.1f} s  {r['events'] / r['read_s']:8,.0f} events/s  "
        f"{r['mb'] / r['read_s']:5.2f} MB/s"),
        f"  rillet --version          {r['startup_s']:6.2f} s  (process start, median of 5)"])


def main() -> None:
    print(report(run()))


if __name__ == "__main__":
    main()
