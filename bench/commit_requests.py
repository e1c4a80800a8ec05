"""Requests and request units of a transaction's begin + commit, by the stream's segment count and by
how many transactions the stream already committed (issue 38: a commit reads its own work, not every
transaction the stream kept, which stay a day after they finish).

Each begin + commit runs for real on moto through the control plane in-process (as the controller
function calls it), with one event appended to each of the transaction's segments, every AWS request
metered; units are priced from the real item sizes (bench/cost.py). Times are not measured.

    python -m bench.commit_requests [--quick]
"""

from __future__ import annotations

import argparse
import uuid

from bench.cost import usage
from bench.stack import moto_stack
from controlplane.service import Controller
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name, txn_segment_token
from standalone.moto_server import RequestMeter


def _begin_and_commit(controller: Controller, scope: str, stream: str) -> None:
    txn = controller.transactions.begin(scope, stream)
    for sid, _, _ in controller.transactions._get(scope, stream, txn.txn_id).segments:
        controller.segments.append(segment_name(scope, stream, txn_segment_token(int(sid), txn.txn_id)),
                                   "w", 0, 1, frame(b"e" * 100))
    controller.transactions.commit(scope, stream, txn.txn_id)


def run(widths: tuple[int, ...], kept: tuple[int, ...]) -> list[tuple]:
    """(segments, commit number, requests, DynamoDB requests, write units, read units, items queried)."""
    meter = RequestMeter(keep_records=True)
    rows = []
    with moto_stack(meter) as (_, deployment):
        controller = Controller.for_deployment(deployment)
        scope = "commit" + uuid.uuid4().hex[:6]
        controller.streams.create_scope(scope)
        for width in widths:
            stream = f"s{width}"
            controller.streams.create_stream(scope, stream, StreamConfiguration(
                scaling_policy=ScalingPolicy.fixed(width)))
            for n in range(1, max(kept) + 1):
                meter.reset()
                _begin_and_commit(controller, scope, stream)
                if n in kept:
                    counts, records = meter.snapshot()
                    used = usage(records)
                    queried = sum(len((r.response or {}).get("Items", [])) for r in records
                                  if r.service == "dynamodb" and r.operation == "Query")
                    rows.append((width, n, sum(counts.values()),
                                 sum(v for (svc, _), v in counts.items() if svc == "dynamodb"),
                                 used.write_units, used.read_units, queried))
    return rows


def report(rows: list[tuple]) -> str:
    lines = ["begin + commit of a transaction with one 100-byte event per segment (moto, in-process)",
             "| segments | commit no. | requests | of them DynamoDB | write units | read units | items queried |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {w} | {n} | {r} | {d} | {wu:.0f} | {ru:.1f} | {q} |" for w, n, r, d, wu, ru, q in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 and 16 segments, commits 1 and 10 (else also 256 "
                                                             "segments, and commit 100 of one segment)")
    args = parser.parse_args()
    print(report(run((1, 16), (1, 10)) if args.quick else run((1, 16, 256), (1, 10)) + run((1,), (100,))))


if __name__ == "__main__":
    main()
