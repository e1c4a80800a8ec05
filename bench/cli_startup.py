"""How long the ``rillet`` console script takes to start: ``--version``, ``--help`` and a command that
makes one request (``scope list``, against a standalone stack), as real processes. CPU seconds (user +
system, from the children's rusage) are what a loop of CLI calls pays on a loaded machine; wall
seconds include waiting for the cores. Also import times (``python -X importtime``): ``rillet.cli``, the
console script's own import, before which Ctrl-C is Python's, and ``rillet.cli.run``, what every command
imports before it parses its arguments.
Run: ``.venv/bin/python -m bench.cli_startup``.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from standalone.stack import Stack, StackConfig

RILLET = str(Path(sys.executable).with_name("rillet"))


def _timed(argv: list[str], runs: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus), "cpu_max_s": max(cpus)}


def import_time_s(module: str) -> float:
    """Cumulative import time of ``module`` as ``-X importtime`` reports it (its last line)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                          capture_output=True, text=True, check=True)
    return int(done.stderr.strip().splitlines()[-1].split("|")[1]) / 1e6


def run(runs: int = 7) -> dict[str, dict[str, float]]:
    results = {"rillet --version": _timed([RILLET, "--version"], runs),
               "rillet --help": _timed([RILLET, "--help"], runs)}
    with Stack(StackConfig.ephemeral()) as stack:
        results["rillet scope list"] = _timed([RILLET, "--endpoint", stack.controller_url, "scope", "list"], runs)
    for module in ("rillet.cli", "rillet.cli.run"):
        results[f"import {module}"] = {"wall_s": statistics.median(import_time_s(module) for _ in range(runs))}
    return results


def report(results: dict[str, dict[str, float]]) -> str:
    lines = ["CLI start-up (median of runs; CPU = user + system of the process)",
             f"{'command':<22} {'wall s':>8} {'CPU s':>8} {'CPU max s':>10}"]
    for name, r in results.items():
        lines.append(f"{name:<22} {r['wall_s']:>8.3f} {r.get('cpu_s', float('nan')):>8.3f} "
                     f"{r.get('cpu_max_s', float('nan')):>10.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
