"""Byte stream writes, which send at once (Pravega's byte writer semantics): append requests per MiB
and throughput by write size, through a standalone stack.

A write is handed to the writer's sender thread; what is written while a request is in flight leaves
with the next one (up to a 1 MiB block), so a fast writer pays few requests and a slow one pays a
request per write, in exchange for its bytes being readable and safe without a flush.
Run: ``.venv/bin/python -m bench.byte_stream``.
"""

from __future__ import annotations

import time
import uuid

import rillet
from standalone.stack import Stack, StackConfig


def run(total_mb: int = 8, write_sizes: tuple[int, ...] = (100, 4096, 65_536, 1 << 20)) -> list[dict]:
    results = []
    with Stack(StackConfig.ephemeral()) as stack:
        manager = rillet.StreamManager(stack.controller_url)
        scope = "bytes" + uuid.uuid4().hex[:8]
        manager.create_scope(scope)
        factory = rillet.ByteStreamClientFactory(scope, stack.controller_url)
        for size in write_sizes:
            stream = f"s{size}"
            manager.create_stream(scope, stream)
            writer = factory.create_byte_stream_writer(stream)
            segments = writer.connection.segments
            requests = []
            append = segments.append
            segments.append = lambda *a, _append=append, _requests=requests, **k: _requests.append(1) or _append(*a, **k)
            chunk = b"x" * size
            writes = total_mb * (1 << 20) // size
            started = time.perf_counter()
            for _ in range(writes):
                writer.write(chunk)
            writer.flush()
            elapsed = time.perf_counter() - started
            segments.append = append
            results.append({"write_bytes": size, "writes": writes, "requests": len(requests),
                            "requests_per_mib": len(requests) / total_mb, "mb_s": total_mb / elapsed})
    return results


def report(results: list[dict]) -> str:
    lines = ["byte stream writes (sent at once, coalesced behind the request in flight)",
             f"{'write size':>12} {'writes':>8} {'requests':>9} {'req/MiB':>8} {'MB/s':>7}"]
    lines += [f"{r['write_bytes']:>12} {r['writes']:>8} {r['requests']:>9} {r['requests_per_mib']:>8.1f} "
              f"{r['mb_s']:>7.1f}" for r in results]
    return "\n".join(lines)


def main() -> None:
    print(report(run()))


if __name__ == "__main__":
    main()
