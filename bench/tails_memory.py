"""How much memory and CPU a tails function instance needs: is 128 MB safe, and what does it cost?

Lambda kills an instance that exceeds its memory, so the tails function's 128 MB (infra/terraform/lambda.tf)
must hold the Python runtime, the handler's imports and what serving requests adds. Measured two ways
against a standalone stack's tables (a stream of 3 segments):

* a process that imports only ``lambdas.tails.handler`` and then serves ``--requests`` tail checks
  in-process, as a Lambda instance does: its peak RSS (VmHWM) after the import and after the requests,
  and the CPU time of a request (moto answers from another process), with the read handler's for
  comparison;
* the standalone stack's tails workers after serving tail checks over HTTP (they also hold the
  gateway's modules, so this overstates a Lambda instance).

On Lambda the runtime's own bootstrap adds to the first figure. The CPU time matters because Lambda
gives a function CPU in proportion to its memory (one vCPU at 1,769 MB): if a tail check's CPU ran at
128 MB's share it would take about 14 times as long (bench/cost.py ``TAIL_CHECK_CPU_MS``).

Run: ``.venv/bin/python -m bench.tails_memory``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid

import rillet
from standalone.stack import Stack, StackConfig

# Runs in a fresh interpreter: the handler module and what serving adds, nothing of this benchmark.
_SERVE = r'''
import importlib, json, sys, time, uuid
from types import SimpleNamespace

def peak_mb():
    return next(int(l.split()[1]) // 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))

module, target, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
bare = peak_mb()
handler = importlib.import_module(module).handler
imported = peak_mb()
from standalone.gateway import build_event

def serve():
    event = build_event("GET", target, {}, b"", "localhost", "127.0.0.1")
    context = SimpleNamespace(function_name="tails", memory_limit_in_mb=128, aws_request_id=str(uuid.uuid4()),
                              invoked_function_arn="arn:aws:lambda:local:000000000000:function:tails")
    assert handler(event, context)["statusCode"] == 200

serve()  # the first request loads the DynamoDB client: not a warm request's CPU
cpu = time.process_time()
for _ in range(requests):
    serve()
cpu_ms = (time.process_time() - cpu) / requests * 1000
print(json.dumps({"bare_mb": bare, "imported_mb": imported, "served_mb": peak_mb(), "cpu_ms": cpu_ms}))
'''


def _peak_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM"))


def run(requests: int = 200) -> dict:
    with Stack(StackConfig.ephemeral()) as stack:
        scope = "mem" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        manager.create_stream(scope, "s", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(3)))
        target = f"/v1/segments/{scope}/s/tails?segments=0,1,2"
        env = {**os.environ, **stack.deployment.to_env(), "POWERTOOLS_TRACE_DISABLED": "true",
               "POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "WARNING"}
        alone = {}
        for name in ("tails", "read"):
            out = subprocess.run([sys.executable, "-c", _SERVE, f"lambdas.{name}.handler", target, str(requests)],
                                 env=env, capture_output=True, text=True, check=True, timeout=300).stdout
            alone[name] = json.loads(out.splitlines()[-1])
        segments = rillet.Connection(stack.controller_url).segments
        for _ in range(requests):
            segments.tails(scope, "s", [0, 1, 2])
        workers = [_peak_mb(pid) for pid in stack.functions["tails"].worker_pids()]
    return {"requests": requests, "alone": alone, "standalone_workers_mb": workers}


def report(r: dict) -> str:
    lines = [f"peak RSS (VmHWM) of a process that imports one handler and serves {r['requests']} tail checks:"]
    for name, x in r["alone"].items():
        lines.append(f"  {name}: interpreter {x['bare_mb']} MB, after the import {x['imported_mb']} MB, "
                     f"after the requests {x['served_mb']} MB; CPU {x['cpu_ms']:.2f} ms a request")
    lines.append("  standalone tails workers after as many tail checks over HTTP (with the gateway's modules): "
                 + ", ".join(f"{mb} MB" for mb in r["standalone_workers_mb"]))
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    print(report(run(args.requests)))
