"""Request units of one append as the number of writer ids that ever appended to a segment grows.

Every SDK writer instance appends under a fresh random writer id (uuid4 hex, as the SDK makes them),
so a segment written by short-lived producers sees ever more ids. This appends one 1 KiB event from
each of N distinct ids through ``SegmentStore.append`` (in-process, against the moto server), then
measures a few appends of each kind: a writer id never seen, the most recent writer, and the oldest
one (whose state a bounded head record would have moved out). For each it prints the AWS requests and
the DynamoDB request units priced from the real item sizes (bench/cost.py), and the head record's size.

    python -m bench.writer_count            # 10, 1,000 and 10,000 writer ids
    python -m bench.writer_count --quick    # 10 and 300
"""

from __future__ import annotations

import argparse
import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import boto3

from bench.cost import item_size, usage
from bench.stack import moto_stack
from dataplane import models
from dataplane.segment_store import SegmentStore
from rillet.framing import frame
from standalone.moto_server import RequestMeter

EVENT = frame(os.urandom(1020))  # one 1 KiB event: an inline block, as a trickle of events sends
SAMPLES = 3  # appends measured per kind
THREADS = 4  # appenders adding new writer ids (moto answers one request at a time; this hides latency)


def _append_new_writers(store: SegmentStore, segment: str, ids: list[str], *, first_alone: bool) -> None:
    """``first_alone`` appends ``ids[0]`` before the others start, so it is surely the least recently
    active writer (appends racing in the pool finish in any order, and retries move them later)."""
    def first_block(writer: str) -> None:
        store.append(segment, writer, 0, 1, EVENT, after=-1)

    if first_alone and ids:
        first_block(ids[0])
        ids = ids[1:]
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(first_block, ids))


def _measure(meter: RequestMeter, appends: list) -> dict:
    meter.reset()
    meter.keep_records = True
    try:
        for append in appends:
            append()
        _, records = meter.snapshot()
    finally:
        meter.keep_records = False
        meter.reset()
    u = usage(records)
    n = len(appends)
    return {"requests": sum(u.requests.values()) / n, "read_units": u.read_units / n, "write_units": u.write_units / n}


def run(counts: tuple[int, ...] = (10, 1000, 10_000), progress=None) -> dict:
    """``progress`` is called with each row as it is measured (the largest counts take minutes)."""
    meter = RequestMeter()
    rows = []
    with moto_stack(meter, bind=True) as (server, deployment):
        store = SegmentStore(deployment)
        dynamodb = boto3.client("dynamodb", endpoint_url=server.url, region_name=deployment.region)
        segment = f"bench{uuid.uuid4().hex[:8]}/data/0"
        store.create(segment)
        writers: list[str] = []  # in the order they first appended
        next_event: dict[str, int] = {}

        def again(writer: str):
            def append() -> None:
                store.append(segment, writer, next_event[writer], 1, EVENT, after=next_event[writer] - 1)
                next_event[writer] += 1
            return append

        def new_writer() -> None:
            writer = uuid.uuid4().hex
            store.append(segment, writer, 0, 1, EVENT, after=-1)
            writers.append(writer)
            next_event[writer] = 1

        for count in counts:
            fresh = [uuid.uuid4().hex for _ in range(count - len(writers))]
            try:
                _append_new_writers(store, segment, fresh, first_alone=not writers)
            except Exception as error:  # noqa: BLE001 - the figure is the failure itself (e.g. the 400 KB item limit)
                rows.append({"writers": count, "failed": f"{type(error).__name__}: {error}"[:200]})
                if progress:
                    progress(rows[-1])
                break
            writers.extend(fresh)
            next_event.update(dict.fromkeys(fresh, 1))
            row = {"writers": count,
                   "new writer": _measure(meter, [new_writer] * SAMPLES),
                   "recent writer": _measure(meter, [again(writers[-1])] * SAMPLES),
                   "oldest writer": _measure(meter, [again(writers[0])] * SAMPLES)}
            head = dynamodb.get_item(TableName=deployment.segments_table, ConsistentRead=True,
                                     Key={"pk": {"S": segment}, "sk": {"S": models.META_KEY}})["Item"]
            row["head_record_bytes"] = item_size(head)
            rows.append(row)
            if progress:
                progress(row)
    return {"event_bytes": len(EVENT), "rows": rows}


def report(result: dict) -> str:
    lines = [f"request units per append vs writer ids ({result['event_bytes']} B inline blocks, "
             + "SegmentStore in-process on moto; reads strongly consistent)",
             f"  {'writer ids':>10}  {'head record':>11}  {'kind of append':<14} {'requests':>8} "
             + f"{'read units':>10} {'write units':>11}"]
    for row in result["rows"]:
        if "failed" in row:
            lines.append(f"  {row['writers']:>10,}  appends failed: {row['failed']}")
            continue
        for kind in ("new writer", "recent writer", "oldest writer"):
            m = row[kind]
            lines.append(f"  {row['writers']:>10,}  {row['head_record_bytes'] / 1000:>8.1f} KB  {kind:<14} "
                         + f"{m['requests']:>8.1f} {m['read_units']:>10.1f} {m['write_units']:>11.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 and 300 writer ids")
    args = parser.parse_args()
    result = run((10, 300) if args.quick else (10, 1000, 10_000),
                 progress=lambda row: print(report({"event_bytes": len(EVENT), "rows": [row]}), flush=True))
    print(report(result))


if __name__ == "__main__":
    main()
