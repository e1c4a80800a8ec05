"""Where an append's time goes: the append Lambda handler profiled in-process on full-size blocks.

The data-path benchmark shows the SDK's write throughput well below one raw PutObject per block; this
splits one append request into its parts (the AWS calls it makes, the base64 decoding every binary
Function URL body needs, the frame count and the content hash), next to a raw PutObject of the same
bytes, all against the same moto server.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import pstats
import time
import uuid

import boto3

import rillet
from rillet import api
from rillet.framing import frame
from standalone.gateway import _Context, build_event
from standalone.stack import Stack, StackConfig

EVENTS_PER_BLOCK = 4000  # of 1 KiB: the largest whole number of events under the 4 MiB block limit
PARTS = {  # (file suffix, function name) of each part, as cProfile names them
    "AWS calls, DynamoDB": ("pynamodb/connection/base.py", "dispatch"),
    "AWS calls, all": ("botocore/client.py", "_make_api_call"),
    "base64 decode": ("~", "<built-in method binascii.a2b_base64>"),
    "frame count": ("rillet/framing.py", "count_frames"),
}


def _cumulative_ms(stats: pstats.Stats, suffix: str, name: str) -> float:
    return 1000 * sum(ct for (path, _, function), (_, _, _, ct, _) in stats.stats.items()
                      if function == name and path.endswith(suffix))


def run(blocks: int = 8) -> dict:
    with Stack(StackConfig.ephemeral()) as stack:
        scope = "bench" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        manager.create_stream(scope, "data", rillet.StreamConfiguration(scaling_policy=rillet.ScalingPolicy.fixed(1)))
        os.environ.update({**stack.deployment.to_env(), "POWERTOOLS_TRACE_DISABLED": "true",
                           "POWERTOOLS_METRICS_DISABLED": "true", "POWERTOOLS_LOG_LEVEL": "WARNING"})
        from lambdas.append.handler import handler  # reads the deployment from the environment

        block = b"".join(frame(os.urandom(1024)) for _ in range(EVENTS_PER_BLOCK))
        events = [build_event("POST", f"/v1/segments/{scope}/data/0", {
            api.WRITER_ID: "bench", api.EVENT_NUMBER: str(i * EVENTS_PER_BLOCK),
            api.EVENT_COUNT: str(EVENTS_PER_BLOCK), "content-type": "application/octet-stream"},
            block, "localhost", "127.0.0.1") for i in range(blocks + 1)]
        context = _Context("append", 512, 30, "bench", time.time() + 300)
        assert handler(events[0], context)["statusCode"] == 200  # warm: imports, connections

        stack.requests.reset()
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.enable()
        for event in events[1:]:
            assert handler(event, context)["statusCode"] == 200
        profile.disable()
        handler_ms = 1000 * (time.perf_counter() - started) / blocks
        requests, _ = stack.requests.snapshot()

        started = time.perf_counter()  # cProfile does not see inside the hash's constructor: time it alone
        for _ in range(blocks):
            hashlib.blake2b(block, digest_size=8)
        hash_ms = 1000 * (time.perf_counter() - started) / blocks

        s3 = boto3.client("s3", endpoint_url=stack.moto.url, region_name="us-east-1")
        started = time.perf_counter()
        for i in range(blocks):
            s3.put_object(Bucket=stack.deployment.bucket, Key=f"raw/{scope}/{i}", Body=block)
        raw_ms = 1000 * (time.perf_counter() - started) / blocks

    stats = pstats.Stats(profile)
    parts = {name: _cumulative_ms(stats, *where) / blocks for name, where in PARTS.items()}
    parts["content hash"] = hash_ms
    return {"block_bytes": len(block), "blocks": blocks, "handler_ms": handler_ms, "parts_ms": parts,
            "requests_per_block": {f"{svc} {op}": n / blocks for (svc, op), n in sorted(requests.items())},
            "raw_put_ms": raw_ms}


def report(result: dict) -> str:
    parts = result["parts_ms"]
    lines = [f"append breakdown: {result['blocks']} blocks of {result['block_bytes'] / 2**20:.2f} MiB, "
             + "handler in-process (profiled, so every figure is somewhat inflated)",
             f"  whole handler     {result['handler_ms']:6.1f} ms per block",
             f"    AWS calls       {parts['AWS calls, all']:6.1f} ms (DynamoDB {parts['AWS calls, DynamoDB']:.1f}, "
             + f"S3 {parts['AWS calls, all'] - parts['AWS calls, DynamoDB']:.1f})"]
    lines += [f"    {name:<15} {parts[name]:6.1f} ms" for name in ("base64 decode", "frame count", "content hash")]
    lines.append("  requests per block: " + ", ".join(f"{k} {v:g}" for k, v in result["requests_per_block"].items()))
    lines.append(f"  raw PutObject     {result['raw_put_ms']:6.1f} ms per block (not profiled)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8)
    print(report(run(parser.parse_args().blocks)))


if __name__ == "__main__":
    main()
