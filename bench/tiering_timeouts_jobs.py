"""Throughput of tiering and of the transaction-timeout job, before and after issue 39.

Before is today's serial code path, reproduced: one DeleteItem per entry (``DELETE_BATCH = 1``) and one
segment, or one transaction, at a time, with the sensors' old limit of 100 a tick. After is the batched
deletes (TransactWriteItems of up to 100 conditioned deletes) and the bounded fan-out.

Two figures for each:

* **standalone**: wall time on an in-process moto server. moto answers one request at a time, so
  threads overlap little there: the batching shows, the fan-out hardly does.
* **AWS model**: the requests each run made here, counted per operation, priced at ``LATENCY_MS``
  (assumed p50s, constants, not measurements), one item's requests in sequence and ``workers`` items
  at once: run time = sum of (count x latency) / workers. Capped by what the sensor hands a run per
  tick (run limit / tick interval).

Run: ``python -m bench.tiering_timeouts_jobs`` (``--segments``, ``--entries``, ``--txns``).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import dataclass

from bench.append_cost import LATENCY_MS as APPEND_LATENCY_MS
from bench.stack import moto_stack
from controlplane.models import TxnRecord, stream_pk, txn_sk
from controlplane.service import Controller
from controlplane.transactions import TIMEOUT_RUN_LIMIT, TIMEOUT_WORKERS
from dataplane import storage_writer
from dataplane.journal import StoreSettings, tier_shard
from dataplane.models import ENTRY_PREFIX, META_KEY, IndexEntry, SegmentMeta
from dataplane.storage_writer import TIER_RUN_LIMIT, TIER_WORKERS
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from standalone.moto_server import MotoServer

# Assumed AWS p50 latencies in ms (same region, warm connections): those bench.append_cost states, and
# the operations these jobs add. A TransactWriteItems of up to 100 small deletes on one partition is
# taken as about twice a single write; a LIST of a small prefix as a small S3 GET.
LATENCY_MS = {op.split(" ", 1)[1]: p50 for op, (p50, _) in APPEND_LATENCY_MS.items() if op.startswith(("dynamodb", "s3"))}
LATENCY_MS.update({"TransactWriteItems": 12.0, "BatchGetItem": 5.0, "BatchWriteItem": 10.0,
                   "ListObjectsV2": 20.0, "DeleteObjects": 30.0, "GetObject": 15.0, "HeadObject": 10.0})
TIER_TICK_S, TIMEOUT_TICK_S = 60, 10  # the sensors' default intervals
OLD_TICK_LIMIT = 100  # what the tiering and timeout sensors handed a run before
EVENT = frame(b"x" * 800)  # inline appends whose index entry is under 1 KB: one write unit to delete
# A DynamoDB partition takes about 1,000 write units a second: a segment's deletes go no faster than
# that, whatever the round trips allow. A delete of an entry under 1 KB costs 1 unit, 2 in a transaction.
PARTITION_WCU_S = 1_000


@dataclass
class Measured:
    items: int  # segments passed, or transactions aborted
    deletes: int
    bytes: int
    seconds: float  # standalone wall time
    requests: Counter  # operation -> count
    workers: int
    units_per_delete: int  # write units a delete of one entry costs
    tick_limit: int
    tick_s: int

    @property
    def chain_s(self) -> float:
        """The modelled AWS time of the run's requests, one after another."""
        return sum(LATENCY_MS[op] * n for op, n in self.requests.items()) / 1000

    @property
    def aws_seconds(self) -> float:
        """Each item's round trips in sequence, ``workers`` items at once; no faster than each segment's
        partition takes its deletes."""
        partition_s = self.deletes * self.units_per_delete / PARTITION_WCU_S
        return max(self.chain_s, partition_s) / min(self.workers, self.items)

    @property
    def sustained(self) -> float:
        """The share of the run's modelled pace a deployment keeps up: 1, unless the sensor hands out
        fewer items a second (its run limit a tick) than a run gets through."""
        return min(1.0, (self.tick_limit / self.tick_s) / (self.items / self.aws_seconds))

    def aws_per_s(self, count: float) -> float:
        """``count`` (of the run) a second at AWS latencies, kept up tick after tick."""
        return count / self.aws_seconds * self.sustained


def _meter(moto: MotoServer, action) -> tuple[float, Counter]:
    moto.meter.reset()
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    counts, _ = moto.meter.snapshot()
    return seconds, Counter({op: n for (_, op), n in counts.items()})


def _clone(template: str, name: str) -> None:
    """A copy of ``template``'s head record and index under ``name``: the appends without their cost."""
    meta = SegmentMeta.get(template, META_KEY, consistent_read=True)
    SegmentMeta(name, META_KEY, length=meta.length, start=meta.start, created_ms=meta.created_ms,
                writers=meta.writers.as_dict(), inline_bytes=meta.inline_bytes, tier_shard=tier_shard(name),
                tier_at=meta.tier_at, content=meta.content).save()
    with IndexEntry.batch_write() as batch:
        for e in IndexEntry.query(template, IndexEntry.sk.startswith(ENTRY_PREFIX), consistent_read=True):
            batch.save(IndexEntry(name, e.sk, offset=e.offset, size=e.size, data=e.data, writer=e.writer,
                                  first=e.first, last=e.last, created_ms=e.created_ms, incarnation=e.incarnation))


def _tiering(controller: Controller, moto: MotoServer, segments: int, entries: int, batched: bool) -> Measured:
    store = controller.segments
    template = f"bench/template-{batched}/0"
    store.create(template)
    for n in range(entries):
        store.append(template, "w", n, 1, EVENT)
    names = [f"bench/{'after' if batched else 'before'}{i}/0" for i in range(segments)]
    for name in names:
        _clone(template, name)
    workers = TIER_WORKERS if batched else 1
    saved = storage_writer.DELETE_BATCH
    storage_writer.DELETE_BATCH = saved if batched else 1  # before: one DeleteItem per entry
    try:
        runs = []
        seconds, requests = _meter(moto, lambda: runs.append(store.tier_many(names, workers)))
    finally:
        storage_writer.DELETE_BATCH = saved
    run = runs[0]
    assert run.deletes == segments * entries, run.summary()
    return Measured(segments, run.deletes, run.bytes_moved, seconds, requests, workers, 2 if batched else 1,
                    TIER_RUN_LIMIT if batched else OLD_TICK_LIMIT, TIER_TICK_S)


def _timeouts(controller: Controller, moto: MotoServer, txns: int, width: int, parallel: bool) -> Measured:
    stream = f"w{width}-{'after' if parallel else 'before'}"
    controller.streams.create_stream("bench", stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(width)))
    items = []
    for _ in range(txns):
        txn = controller.transactions.begin("bench", stream, lease_ms=5_000)
        TxnRecord.get(stream_pk("bench", stream), txn_sk(txn.txn_id)).update(
            actions=[TxnRecord.lease_expiry_ms.set(1), TxnRecord.deadline_ms.set(1)])
        items.append(f"bench/{stream}/{txn.txn_id}")
    workers = TIMEOUT_WORKERS if parallel else 1
    runs = []
    seconds, requests = _meter(moto, lambda: runs.append(controller.transactions.abort_all_if_expired(items, workers)))
    assert len(runs[0].aborted) == txns, runs[0].summary()
    return Measured(txns, 0, 0, seconds, requests, workers, 1, TIMEOUT_RUN_LIMIT if parallel else OLD_TICK_LIMIT,
                    TIMEOUT_TICK_S)


def run(segments: int = 16, entries: int = 400, txns: int = 64, widths: tuple[int, ...] = (1, 4)) -> dict:
    with moto_stack() as (moto, deployment):
        controller = Controller.for_deployment(deployment, StoreSettings(tier_min_age_ms=0))
        controller.streams.create_scope("bench")
        tiering = {label: _tiering(controller, moto, segments, entries, batched)
                   for label, batched in (("before", False), ("after", True))}
        timeouts = {(width, label): _timeouts(controller, moto, txns, width, parallel)
                    for width in widths for label, parallel in (("before", False), ("after", True))}
        return {"segments": segments, "entries": entries, "txns": txns, "tiering": tiering, "timeouts": timeouts}


def report(result: dict) -> str:
    lines = [(f"tiering: {result['segments']} segments of {result['entries']} inline entries of {len(EVENT)} B a run "
              f"(standalone on moto; AWS model at the p50s in LATENCY_MS, {PARTITION_WCU_S:,} WCU/s a partition)")]
    lines.append("  deletes and bytes a second of a run; segments a minute kept up tick after tick")
    lines.append(f"  {'':<7} {'workers':>7} {'requests':<52} {'standalone del/s':>16} {'B/s':>10} "
                 f"{'AWS del/s':>10} {'AWS B/s':>11} {'AWS seg/min':>11}")
    for label, m in result["tiering"].items():
        ops = ", ".join(f"{op} {n}" for op, n in sorted(m.requests.items()) if op in (
            "DeleteItem", "TransactWriteItems", "PutObject", "Query", "UpdateItem", "GetItem"))
        lines.append(f"  {label:<7} {m.workers:>7} {ops:<52} {m.deletes / m.seconds:>16,.0f} {m.bytes / m.seconds:>10,.0f} "
                     f"{m.deletes / m.aws_seconds:>10,.0f} {m.bytes / m.aws_seconds:>11,.0f} {m.aws_per_s(m.items) * 60:>11,.0f}")
    lines.append(f"transaction timeouts: {result['txns']} expired transactions a run, by stream width")
    lines.append(f"  {'':<14} {'workers':>7} {'requests/abort':>14} {'AWS ms/abort':>12} {'standalone/s':>12} "
                 f"{'AWS aborts/s':>12}")
    for (width, label), m in result["timeouts"].items():
        lines.append(f"  {width} seg, {label:<7} {m.workers:>7} {sum(m.requests.values()) / m.items:>14.1f} "
                     f"{m.chain_s / m.items * 1000:>12.0f} {m.items / m.seconds:>12.1f} {m.aws_per_s(m.items):>12.1f}")
    lines.append(f"  (AWS figures capped by the sensor: {OLD_TICK_LIMIT} before, {TIMEOUT_RUN_LIMIT} after, "
                 f"a {TIMEOUT_TICK_S} s tick; tiering {OLD_TICK_LIMIT} before, {TIER_RUN_LIMIT} after, a {TIER_TICK_S} s tick)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=16)
    parser.add_argument("--entries", type=int, default=400)
    parser.add_argument("--txns", type=int, default=64)
    args = parser.parse_args()
    print(report(run(args.segments, args.entries, args.txns)))


if __name__ == "__main__":
    main()
