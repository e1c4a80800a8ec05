"""What one committed append costs as concurrent appenders on one segment grow (issue 40).

N writers (distinct writer ids, threads) each append 1 KiB events to the same segment one at a time,
each waiting for its append's answer before the next, through ``SegmentStore.append`` in-process
against the moto server. The meter counts every DynamoDB request and prices its units from the real
item sizes (bench/cost.py); the figures are per committed append, with the appends a second (moto
answers one request at a time, so the rate is only comparable between rows of one run).

    python -m bench.segment_contention                  # 1, 4, 16 and 64 appenders
    python -m bench.segment_contention --appenders 1 16 --appends 20
    python -m bench.segment_contention --request-ms 10   # the commits a second at AWS-like latency
    python -m bench.segment_contention --no-tickets      # appenders that lose the tail take no ticket
    python -m bench.segment_contention --sublogs 8       # the segment in sub-log mode, with 8 shards
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from bench.cost import usage
from bench.stack import moto_stack
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.framing import frame
from standalone.aws_latency import aws_latency
from standalone.moto_server import RequestMeter

EVENT = frame(os.urandom(1020))  # one 1 KiB event: an inline block, as a trickle of events sends


def _row(store: SegmentStore, meter: RequestMeter, appenders: int, appends_each: int) -> dict:
    segment = f"bench{uuid.uuid4().hex[:8]}/data/0"
    store.create(segment, sublogs=True)
    start = threading.Barrier(appenders)
    latencies_ms: list[float] = []  # list.append is atomic under the GIL

    def appender() -> None:
        writer = uuid.uuid4().hex
        start.wait()
        for number in range(appends_each):
            sent = time.perf_counter()
            store.append(segment, writer, number, 1, EVENT, after=number - 1)
            latencies_ms.append((time.perf_counter() - sent) * 1000)

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
    latencies_ms.sort()
    return {"appenders": appenders, "appends": committed, "appends_per_s": committed / seconds,
            "requests": sum(u.requests.values()) / committed, "read_units": u.read_units / committed,
            "write_units": u.write_units / committed, "p50_ms": latencies_ms[len(latencies_ms) // 2],
            "p99_ms": latencies_ms[min(len(latencies_ms) - 1, len(latencies_ms) * 99 // 100)],
            "max_ms": latencies_ms[-1]}


def run(appenders: tuple[int, ...] = (1, 4, 16, 64), appends: int = 256, request_ms: float = 0.0,
        tickets: bool = True, sublog_shards: int = 0) -> dict:
    """``appends`` in all per row (at least one per appender); ``request_ms`` is a pause before every
    request, as the network and DynamoDB's own latency add on AWS (moto itself answers in about 1 ms);
    ``tickets=False`` measures appenders that pause without a place in the queue, as before tickets,
    in the same sitting (the figures of two sittings differ with the machine's load); ``sublog_shards``
    puts the segment in sub-log mode (dataplane/sublog_path.py) with that many shards."""
    meter = RequestMeter()
    with moto_stack(meter, bind=True) as (_, deployment), aws_latency(request_ms), _tickets(tickets):
        store = SegmentStore(deployment, StoreSettings(sublog_shards=sublog_shards))
        return {"event_bytes": len(EVENT), "request_ms": request_ms, "tickets": tickets, "sublogs": sublog_shards,
                "rows": [_row(store, meter, n, max(1, appends // n)) for n in appenders]}


@contextmanager
def _tickets(taken: bool) -> Iterator[None]:
    """Unless ``taken``, every ticket's add fails, as a throttled one does: the append goes on without one."""
    if taken:
        yield
        return
    SegmentStore._take_ticket = staticmethod(lambda meta: None)  # shadows AppendPath's for this run
    try:
        yield
    finally:
        del SegmentStore._take_ticket


def report(result: dict) -> str:
    mode = f", sub-logs of {result['sublogs']} shards" if result.get("sublogs") else ""
    lines = [(f"per committed append, concurrent appenders on one segment ({result['event_bytes']} B inline "
              f"blocks, SegmentStore in-process on moto, {result['request_ms']:g} ms added to every request"
              f"{'' if result['tickets'] else ', no tickets'}"
              f"{mode})"),
             (f"  {'appenders':>9} {'appends':>7} {'appends/s':>9} {'requests':>8} {'read units':>10} "
              f"{'write units':>11} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}")]
    for r in result["rows"]:
        lines.append(f"  {r['appenders']:>9} {r['appends']:>7} {r['appends_per_s']:>9.1f} {r['requests']:>8.2f} "
                     f"{r['read_units']:>10.2f} {r['write_units']:>11.2f} {r['p50_ms']:>7.0f} {r['p99_ms']:>7.0f} "
                     f"{r['max_ms']:>7.0f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appenders", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--appends", type=int, default=256, help="appends in all per row")
    parser.add_argument("--request-ms", type=float, default=0.0,
                        help="a pause before every request, as AWS's latency adds (e.g. 5 or 10)")
    parser.add_argument("--no-tickets", action="store_true",
                        help="appenders that keep losing the tail take no ticket (as before tickets)")
    parser.add_argument("--sublogs", type=int, default=0, metavar="SHARDS",
                        help="the segment in sub-log mode with this many shards (0: the chain)")
    args = parser.parse_args()
    print(report(run(tuple(args.appenders), args.appends, args.request_ms, tickets=not args.no_tickets,
                     sublog_shards=args.sublogs)))


if __name__ == "__main__":
    main()
