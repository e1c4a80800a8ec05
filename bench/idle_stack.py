"""An idle standalone stack: its CPU use and its Dagster run queue, with a few streams under retention.

Starts the whole stack as ``make up`` does (moto, the three functions, Dagster with standalone's sensor
intervals and a retention cycle every minute), creates auto-scaled streams with retention policies, a
few events and a writer's time note each,
lets Dagster settle, then leaves it idle for a few minutes and reports:

* the CPU time of the stack's whole process tree (this process, the function workers, Dagster's
  webserver, daemon, code server and every run it launched) as a share of one core,
* the runs Dagster launched meanwhile, and the most runs queued or in progress at any sample.

Run: ``.venv/bin/python -m bench.idle_stack --minutes 3``. Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import rillet
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from standalone.stack import Stack, StackConfig

_TICKS = os.sysconf("SC_CLK_TCK")
_ACTIVE = ["QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"]


def _labelled_cpu_s(root: int) -> Counter:
    """Own user + system CPU seconds of ``root``'s live descendants by what they are, and the CPU of
    descendants already reaped (finished runs, mostly) under ``reaped``: where an idle stack's CPU goes."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        stats[int(entry)] = [*fields, command]
        children.setdefault(int(fields[1]), []).append(int(entry))
    labels = [("dagster api grpc", "dagster code server (sensors, schedules)"), ("dagster._daemon", "dagster daemon"),
              ("dagster_webserver", "dagster webserver"), ("execute_run", "dagster runs"), ("dagster", "dagster other"),
              ("multiprocessing", "function workers")]
    by_label: Counter = Counter()
    pending = [root]
    while pending:
        pid = pending.pop()
        if pid in stats:
            fields, command = stats[pid][:-1], stats[pid][-1]
            label = "stack process (moto, gateways)" if pid == root else next(
                (name for marker, name in labels if marker in command), "other")
            by_label[label] += (int(fields[11]) + int(fields[12])) / _TICKS
            by_label["reaped"] += (int(fields[13]) + int(fields[14])) / _TICKS
        pending += children.get(pid, [])
    return by_label


def _runs(dagster_url: str, statuses: list[str] | None = None) -> list[dict]:
    run_filter = f"(filter: {{statuses: [{', '.join(statuses)}]}})" if statuses else "(limit: 10000)"
    query = "{ runsOrError" + run_filter + " { ... on Runs { results { runId status jobName } } } }"
    request = urllib.request.Request(f"{dagster_url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["data"]["runsOrError"]["results"]


def run(minutes: float = 3, settle_s: float = 90, streams: int = 2, events: int = 100) -> dict:
    """Each stream has a retention policy, scales by event rate (so auto-scaling watches it) and has had
    a writer note time (so the watermark job knew it); then nothing is written."""
    config = StackConfig.ephemeral(with_dagster=True)
    config.log_dir = tempfile.mkdtemp(prefix="rillet-idle-logs-")
    with Stack(config) as stack:
        stack.wait_for_dagster()
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope("idle")
        factory = rillet.EventStreamClientFactory("idle", stack.controller_url)

        def create(i: int) -> None:
            policy = RetentionPolicy.by_size(10_000) if i % 2 == 0 else RetentionPolicy.by_time(60_000)
            manager.create_stream("idle", f"s{i}", StreamConfiguration(
                retention_policy=policy, scaling_policy=ScalingPolicy.by_event_rate(1_000, 2, 1)))
            if events:
                with factory.create_event_writer(f"s{i}", rillet.JsonSerializer()) as writer:
                    for n in range(events):
                        writer.write_event({"n": n, "pad": "x" * 100})
                    writer.note_time(int(time.time() * 1000))
            else:  # the time note alone, as a writer that wrote nothing sends it (a writer per stream is slow)
                manager.controller.note_time("idle", f"s{i}", "w", int(time.time() * 1000),
                                             [{"segment_id": 0, "offset": 0}])

        created_from = time.monotonic()
        with ThreadPoolExecutor(4) as pool:  # setting up 1,000 streams one at a time takes most of an hour
            for done, _ in enumerate(pool.map(create, range(streams)), 1):
                if done % 100 == 0:
                    print(f"  {done} streams set up in {time.monotonic() - created_from:.0f} s", flush=True)
        time.sleep(settle_s)  # the code location loads, the first ticks and runs happen

        runs_before = {r["runId"] for r in _runs(stack.dagster_url)}
        labelled_before, started = _labelled_cpu_s(os.getpid()), time.monotonic()
        most_active, samples = 0, 0
        while time.monotonic() - started < minutes * 60:
            most_active = max(most_active, len(_runs(stack.dagster_url, _ACTIVE)))
            samples += 1
            time.sleep(5)
        elapsed = time.monotonic() - started
        by_part = _labelled_cpu_s(os.getpid())
        by_part.subtract(labelled_before)  # a process that started meanwhile counts from 0
        cpu = sum(by_part.values())  # the whole tree: live processes' own time and what they reaped
        new_runs = [r for r in _runs(stack.dagster_url) if r["runId"] not in runs_before]
        return {"minutes": elapsed / 60, "streams": streams, "cpu_s": cpu, "core_share": cpu / elapsed,
                "runs": len(new_runs), "runs_by_job": dict(Counter(r["jobName"] for r in new_runs)),
                "most_active_runs": most_active, "samples": samples, "load_1m": os.getloadavg()[0],
                "cpu_by_part": {k: round(v, 1) for k, v in by_part.most_common()}, "logs": config.log_dir}


def report(r: dict) -> str:
    jobs = ", ".join(f"{job} {n}" for job, n in sorted(r["runs_by_job"].items())) or "none"
    return "\n".join([
        f"idle standalone stack, {r['streams']} streams (retention, auto-scaled, time noted), {r['minutes']:.1f} min:",
        f"  CPU of the whole process tree   {r['cpu_s']:.1f} s = {100 * r['core_share']:.1f} % of one core",
        f"  Dagster runs launched           {r['runs']} ({jobs})",
        f"  most runs queued or in progress {r['most_active_runs']} (sampled every 5 s, {r['samples']} samples)",
        f"  load average (1 min, machine)   {r['load_1m']:.2f}",
        "  CPU seconds by part (live processes' own time; 'reaped': processes that ended, mostly runs):",
        *[f"    {part:<42} {seconds:6.1f}" for part, seconds in r["cpu_by_part"].items()],
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--settle-s", type=float, default=90)
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--events", type=int, default=100,
                        help="events written to each stream first (0: only a time note, no writer)")
    args = parser.parse_args()
    print(report(run(args.minutes, args.settle_s, args.streams, args.events)))
