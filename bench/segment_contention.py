"""What one committed append costs as concurrent appenders on one segment grow (issue 40).

N writers (distinct writer ids, threads) each append 1 KiB events to the same segment one at a time,
each waiting for its append's answer before the next, through ``SegmentStore.append`` in-process
against the moto server. The meter counts every DynamoDB request and prices its units from the real
item sizes (bench/cost.py); the figures are per committed append, with the appends a second (moto
answers one request at a time, so the rate is only comparable between rows of one run).

    python -m bench.segment_contention                  # 1, 4, 16 and 64 appenders
    python -m bench.segment_contention --appenders 1 16 --appends 20
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid

from bench.cost import usage
from dataplane import models
from dataplane.deployment import Deployment
from dataplane.segment_store import SegmentStore
from rillet.framing import frame
from standalone.moto_server import MotoServer, RequestMeter
from standalone.resources import create_resources

EVENT = frame(os.urandom(1020))  # one 1 KiB event: an inline block, as a trickle of events sends


def _row(store: SegmentStore, meter: RequestMeter, appenders: int, appends_each: int) -> dict:
    segment = f"bench{uuid.uuid4().hex[:8]}/data/0"
    store.create(segment)
    start = threading.Barrier(appenders)

    def appender() -> None:
        writer = uuid.uuid4().hex
        start.wait()
        for number in range(appends_each):
            store.append(segment, writer, number, 1, EVENT, after=number - 1)

    threads = [threading.Thread(target=appender) for _ in range(appenders)]
    meter.reset()
    meter.keep_records = True
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    _, records = meter.snapshot()
    meter.keep_records = False
    meter.reset()
    committed = store.info(segment).length // len(EVENT)
    assert committed == appenders * appends_each, (committed, appenders, appends_each)
    u = usage(records)
    return {"appenders": appenders, "appends": committed, "appends_per_s": committed / seconds,
            "requests": sum(u.requests.values()) / committed, "read_units": u.read_units / committed,
            "write_units": u.write_units / committed}


def run(appenders: tuple[int, ...] = (1, 4, 16, 64), appends: int = 256) -> dict:
    """``appends`` in all per row (at least one per appender)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    meter = RequestMeter()
    server = MotoServer(meter=meter).start()
    try:
        deployment = Deployment(endpoint_url=server.url)
        create_resources(deployment)
        models.bind(deployment)
        store = SegmentStore(deployment)
        return {"event_bytes": len(EVENT),
                "rows": [_row(store, meter, n, max(1, appends // n)) for n in appenders]}
    finally:
        server.stop()


def report(result: dict) -> str:
    lines = [(f"per committed append, concurrent appenders on one segment ({result['event_bytes']} B inline "
              "blocks, SegmentStore in-process on moto)"),
             f"  {'appenders':>9} {'appends':>7} {'appends/s':>9} {'requests':>8} {'read units':>10} {'write units':>11}"]
    for r in result["rows"]:
        lines.append(f"  {r['appenders']:>9} {r['appends']:>7} {r['appends_per_s']:>9.1f} {r['requests']:>8.2f} "
                     f"{r['read_units']:>10.2f} {r['write_units']:>11.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appenders", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--appends", type=int, default=256, help="appends in all per row")
    args = parser.parse_args()
    print(report(run(tuple(args.appenders), args.appends)))


if __name__ == "__main__":
    main()
