"""A model, not a measurement: how many appends a second one segment commits, and what its DynamoDB
partition takes, under today's serial chain and under the sub-log layout docs/limits.md proposes
(issue 40), at AWS-like latency and with more concurrent appenders than moto can serve.

A discrete-event simulation of N appenders, each appending one block at a time (1 KiB events, as
bench.segment_contention does on moto). Every request takes a latency drawn from a log-normal of median
``rtt_ms`` (sigma 0.35: a p99 of about 2.3 times the median) and is applied at a uniform point of it
(between 30 and 70 per cent), so two requests that race are decided in the order DynamoDB would apply
them. The partitions have no throughput limit here: the units each takes a second are counted and
compared with DynamoDB's per-partition limits (3,000 read and 1,000 write units a second).

* ``chain`` is dataplane/append_path.py as it is: read the head record (consistent, 1 read unit), claim
  the entry at its length (a conditional put of the 1 KiB block, 2 write units, charged on a refusal
  too), advance the head (1 write unit). A loser pauses (StoreSettings: a random part of half its
  claim's round trip, doubling per loss, at most 1 s; from its second loss a ticket, 1 write unit,
  and a pause of three round trips per appender ahead), reads the head again, and completes a claim
  it paused for that is still there (the help that keeps a dead owner from stalling the segment).
* ``sublog`` is the layout docs/dataplane.md designs ("Designed, not built: sub-logs"): an appender
  puts its block in one of ``shards`` sub-log partitions (by a hash of writer and event number; 2 write
  units, and 1 for its entry in a sparse local index of pending items), then looks whether its item is
  the oldest pending one of its shard (a consistent query of that index, 1 read unit), and polls its
  own item every ``poll_ms`` (eventually consistent, half a unit). The appender with the oldest item of
  its shard queries every shard's index (consistent; sent at once, answered when the slowest is)
  while reading the head (1 read unit); if its item is the oldest of all, or the oldest or its own is
  older than ``takeover_ms``, it commits a batch in one transaction of at most 100 actions (the head's
  advance on the length read, the batch entry listing the items' keys, each item's offset set and
  ``pending`` removed, conditioned on it, and each writer's last event number in a state item sharded
  by writer: all refused if any part is stale, then sent once more without the items the cancellation
  names; so up to 49 one-block writers a batch), whose latency is ``transaction_factor`` times a request's and whose units
  are twice each write's, charged when refused too. Only the head and the batch entry load the
  segment's partition, once per batch, not per append. Left out: tiering's tombstones, the successors
  of items dropped after a refusal, seal.

Run it: ``python -m bench.append_protocol_model`` (both protocols, 1 to 100 appenders, 10 ms);
``--rtt-ms 15 --protocol chain`` compares with bench.segment_contention --request-ms 10, whose requests
take about 15 ms (moto's 5 ms, which answers one request at a time, and the 10 ms added).
"""

from __future__ import annotations

import argparse
import collections
import heapq
import itertools
import math
import random
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

READ_LIMIT, WRITE_LIMIT = 3000, 1000  # DynamoDB's units a second for one partition
CLAIM_WU = 2  # a 1 KiB block with its keys: bench.segment_contention measures 3 write units an append
KEY_BYTES = 60  # a batch entry lists the keys of its sub-log items
# A batch is one TransactWriteItems of at most 100 actions: the head, the batch entry, one update per item
# taken (its offset set, its pending attribute removed) and one per writer (its last event number).
MAX_TRANSACTION_ACTIONS = 100


@dataclass
class Totals:
    """What a run cost: requests and units, on the segment's partition and on the sub-logs'."""

    requests: int = 0
    segment_read: float = 0.0
    segment_write: float = 0.0
    sublog_read: float = 0.0
    sublog_write: float = 0.0
    refused: int = 0
    batches: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    shard_write: collections.Counter = field(default_factory=collections.Counter)  # write units by sub-log shard


class Simulation:
    """Processes are generators that yield ("request", apply, units[, latency factor[, fan-out]]) or
    ("sleep", ms); ``apply`` runs at the moment DynamoDB applies the request and its result is sent back
    into the generator. A fan-out of n is n requests sent at once and answered when the slowest is."""

    def __init__(self, rtt_ms: float, seed: int) -> None:
        self.rtt_ms, self.now = rtt_ms, 0.0
        self.random = random.Random(seed)
        self.queue: list = []
        self.order = itertools.count()
        self.totals = Totals()

    def start(self, process: Iterator) -> None:
        self._resume(process, None)

    def _at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.queue, (when, next(self.order), action))

    def _resume(self, process: Iterator, value: object) -> None:
        try:
            step = process.send(value)
        except StopIteration:
            return
        if step[0] == "sleep":
            self._at(self.now + step[1], lambda: self._resume(process, None))
            return
        _, apply, charge, factor, fan_out = (*step, *(1.0, 1)[len(step) - 3:])  # the last two are optional
        self.totals.requests += 1
        latency = self.rtt_ms * factor * max(math.exp(self.random.gauss(0, 0.35)) for _ in range(fan_out))
        applied_at = self.now + latency * self.random.uniform(0.3, 0.7)
        box: list = []

        def applied() -> None:
            box.append(apply())
            charge(self.totals, box[0])

        self._at(applied_at, applied)
        self._at(self.now + latency, lambda: self._resume(process, box[0]))

    def run(self, until_ms: float) -> None:
        while self.queue and self.queue[0][0] <= until_ms:
            self.now, _, action = heapq.heappop(self.queue)
            action()


def _charge(**units: float) -> Callable[[Totals, object], None]:
    def charge(totals: Totals, result: object) -> None:
        for name, amount in units.items():
            setattr(totals, name, getattr(totals, name) + amount)
    return charge


def chain(sim: Simulation, appenders: int, pause_ms: float = 5.0, pause_max_ms: float = 1000.0,
          served: str = "last", next_pause: str = "doubling", ticket_after: int = 2) -> Callable[[], int]:
    """Today's protocol (dataplane/append_path.py); what it returns counts the committed blocks (the
    head's length).
    Two variants, for what they would change: ``served="highest"``, a holder's commit sets the ticket
    served only when its own is higher (today a holder that commits late sends it back), and
    ``next_pause="round_trip"``, a holder its ticket says is next pauses a random part of one round trip
    (today it pauses as an appender without a ticket, within a window that doubles with each loss);
    ``ticket_after``, the losses before an appender takes a ticket (2 today)."""
    head = {"length": 0, "tickets": 0, "served": 0}
    claims: dict[int, object] = {}

    def appender(me: int) -> Iterator:
        while True:
            started, lost, ticket, paused_for = sim.now, 0, None, None
            own = object()
            while True:
                length, last_served = yield ("request", lambda: (head["length"], head["served"]),
                                             _charge(segment_read=1))
                if paused_for is not None and paused_for[0] == length and claims.get(length) is paused_for[1]:
                    yield ("request", lambda t=length: _advance(t), _charge(segment_write=1))  # help it
                    continue
                claiming = sim.now
                won = yield ("request", lambda t=length, o=own: claims.setdefault(t, o) is o, _claim_charge)
                if won:
                    yield ("request", lambda t=length, k=ticket: _advance(t, k), _charge(segment_write=1))
                    sim.totals.latencies_ms.append(sim.now - started)
                    break
                lost += 1
                paused_for = (length, claims[length])
                round_trip = max(pause_ms, sim.now - claiming)
                if ticket is None and lost >= ticket_after:
                    ticket = yield ("request", _take_ticket, _charge(segment_write=1))
                    last_served = head["served"]
                ahead = None if ticket is None else ticket - last_served - 1
                if ahead is not None and ahead > 0:
                    pause = min(pause_max_ms, ahead * 3 * round_trip) * sim.random.uniform(0.75, 1.25)
                elif ahead is not None and next_pause == "round_trip":
                    pause = sim.random.uniform(0, round_trip)
                else:
                    pause = min(pause_max_ms, sim.random.uniform(0, round_trip / 2 * 2 ** min(lost - 1, 10)))
                yield ("sleep", pause)

    def _claim_charge(totals: Totals, won: bool) -> None:
        totals.segment_write += CLAIM_WU
        totals.refused += not won

    def _advance(tail: int, ticket: int | None = None) -> bool:
        if head["length"] != tail:
            return False
        head["length"] = tail + 1
        if ticket is not None and (served == "last" or ticket > head["served"]):
            head["served"] = ticket
        return True

    def _take_ticket() -> int:
        head["tickets"] += 1
        return head["tickets"]

    for me in range(appenders):
        sim.start(appender(me))
    return lambda: head["length"]


def sublog(sim: Simulation, appenders: int, shards: int = 32, poll_ms: float = 10.0,
           takeover_ms: float = 200.0, transaction_factor: float = 2.0) -> Callable[[], int]:
    """The proposed layout (docs/dataplane.md, "Designed, not built: sub-logs"): per-append items in
    sub-log partitions, committed a batch at a time by one transaction; what it returns counts the
    committed blocks. Each block lands on a shard by a hash of its writer and first event number (at
    random here) with a ``pending`` attribute, the sort key of a sparse local secondary index that the
    commit's update removes it from: a consistent query of it answers exactly what is pending."""
    head = {"length": 0}
    put_at: dict[tuple[int, int], float] = {}
    shard_of: dict[tuple[int, int], int] = {}
    pending: list[set[tuple[int, int]]] = [set() for _ in range(shards)]
    committed: set[tuple[int, int]] = set()

    def appender(me: int) -> Iterator:
        for number in itertools.count():
            started, item, shard = sim.now, (me, number), sim.random.randrange(shards)
            # the item (1 KiB and its keys: 2 units) and its entry in the local index (1 unit)
            yield ("request", lambda i=item, n=shard: _put(n, i), _charge_shard(shard, write=3))
            while True:
                oldest = yield ("request", lambda n=shard: _oldest(pending[n]), _charge_shard(shard, read=1))
                if oldest == item or sim.now - started >= takeover_ms:
                    yield from batch(item)
                yield ("sleep", poll_ms * sim.random.uniform(0.5, 1.5))
                done = yield ("request", lambda i=item: i in committed, _charge_shard(shard, read=0.5))
                if done:
                    sim.totals.latencies_ms.append(sim.now - started)
                    break

    def batch(mine: tuple[int, int]) -> Iterator:
        """The appender with the oldest pending item of its shard (its shard's query said so, off the
        segment's partition) batches if its item is the oldest of all shards, or the oldest is older than
        ``takeover_ms`` (its appender died or stalls); any appender whose own item waited that long
        batches too. A transaction refused for items a concurrent batch took names them in its
        cancellation reasons: sent once more without them."""
        length, found = yield ("request", lambda: (head["length"], [i for n in pending for i in n]),
                               _query_charge, 1.0, shards + 1)
        if not found or mine in committed:
            return
        oldest = _oldest(found)
        if oldest != mine and sim.now - put_at[oldest] < takeover_ms and sim.now - put_at[mine] < takeover_ms:
            return
        taken, writers = [], set()
        for item in sorted(found, key=put_at.__getitem__):
            if 2 + len(taken) + 1 + len(writers | {item[0]}) > MAX_TRANSACTION_ACTIONS:
                break
            taken.append(item)
            writers.add(item[0])
        for _ in range(2):
            stale = yield ("request", lambda t=taken: _commit(length, t), _transaction_charge(taken),
                           transaction_factor)
            taken = [item for item in taken if item not in (stale or ())]
            if not stale or not taken:
                return

    def _charge_shard(shard: int, read: float = 0.0, write: float = 0.0) -> Callable[[Totals, object], None]:
        def charge(totals: Totals, result: object) -> None:
            totals.sublog_read += read
            totals.sublog_write += write
            totals.shard_write[shard] += write
        return charge

    def _query_charge(totals: Totals, answer: tuple[int, list]) -> None:
        """The head's consistent read and a consistent query of every shard's local index, sent at once."""
        totals.segment_read += 1
        totals.sublog_read += shards + len(answer[1]) * 150 / 4096
        totals.requests += shards

    def _transaction_charge(taken: list[tuple[int, int]]) -> Callable[[Totals, set | None], None]:
        """Twice each write's units, refused or not: the head (under 1 KB) and the batch entry (its list of
        keys) on the segment's partition; per item, its update (the offset set, ``pending`` removed; its
        1 KiB block kept: 2 units) in its shard's, and its leaving the local index (1 unit, not doubled);
        per writer, its state item (1 unit) in the shard of its writer's states (a hash of the writer)."""
        def charge(totals: Totals, stale: set | None) -> None:
            totals.segment_write += 2 * (1 + math.ceil((200 + KEY_BYTES * len(taken)) / 1024))
            for item in taken:
                totals.sublog_write += 5
                totals.shard_write[shard_of[item]] += 5
            for writer in {me for me, _ in taken}:
                totals.sublog_write += 2
                totals.shard_write[writer % shards] += 2
            totals.refused += stale != set()
        return charge

    def _put(shard: int, item: tuple[int, int]) -> None:
        pending[shard].add(item)
        put_at[item], shard_of[item] = sim.now, shard

    def _oldest(items: object) -> tuple[int, int] | None:
        return min(items, key=put_at.__getitem__, default=None)

    def _commit(length: int, taken: list[tuple[int, int]]) -> set[tuple[int, int]] | None:
        """All or nothing: the head's length as read, and each item still pending. The items no longer
        pending (an empty set: committed), or None when the head moved."""
        if head["length"] != length:
            return None
        stale = {item for item in taken if item in committed}
        if stale:
            return stale
        head["length"] = length + 1
        sim.totals.batches += 1
        for item in taken:
            committed.add(item)
            pending[shard_of[item]].discard(item)
        return set()

    for me in range(appenders):
        sim.start(appender(me))
    return lambda: len(committed)


PROTOCOLS = {"chain": chain, "sublog": sublog}


def run(protocol: str = "chain", appenders: int = 16, rtt_ms: float = 10.0, seconds: float = 20.0,
        seed: int = 1, **options: float) -> dict:
    sim = Simulation(rtt_ms, seed)
    count_committed = PROTOCOLS[protocol](sim, appenders, **options)
    sim.run(seconds * 1000)
    t, committed = sim.totals, count_committed()
    latencies = sorted(t.latencies_ms) or [math.nan]
    return {"protocol": protocol, "appenders": appenders, "rtt_ms": rtt_ms,
            "appends_per_s": committed / seconds,
            "requests_per_append": t.requests / max(committed, 1),
            "segment_read_per_s": t.segment_read / seconds, "segment_write_per_s": t.segment_write / seconds,
            "segment_share": max(t.segment_read / seconds / READ_LIMIT, t.segment_write / seconds / WRITE_LIMIT),
            "sublog_write_per_s": t.sublog_write / seconds, "sublog_read_per_s": t.sublog_read / seconds,
            "shard_share": max(t.shard_write.values(), default=0) / seconds / WRITE_LIMIT
            if protocol == "sublog" else None,  # the hottest shard's writes (its reads are far lower)
            "refused_per_append": t.refused / max(committed, 1),
            "appends_per_batch": committed / t.batches if t.batches else 1.0,
            "p50_ms": statistics.median(latencies), "p99_ms": latencies[int(len(latencies) * 0.99)]}


def report(rows: list[dict]) -> str:
    lines = ["model (not measured): one segment, appenders each sending one 1 KiB-event block at a time",
             (f"  {'protocol':<8} {'rtt ms':>6} {'appenders':>9} {'appends/s':>9} {'req/append':>10} "
              f"{'seg RU/s':>8} {'seg WU/s':>8} {'of limit':>8} {'a shard':>7} {'per batch':>9} {'refused':>7} {'p50 ms':>7} {'p99 ms':>7}")]
    for r in rows:
        lines.append(f"  {r['protocol']:<8} {r['rtt_ms']:>6g} {r['appenders']:>9} {r['appends_per_s']:>9.1f} "
                     f"{r['requests_per_append']:>10.2f} {r['segment_read_per_s']:>8.0f} "
                     f"{r['segment_write_per_s']:>8.0f} {r['segment_share']:>8.0%} {'-' if r['shard_share'] is None else format(r['shard_share'], '.0%'):>7} "
                     f"{r['appends_per_batch']:>9.1f} "
                     f"{r['refused_per_append']:>7.2f} {r['p50_ms']:>7.0f} {r['p99_ms']:>7.0f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=[*PROTOCOLS, "both"], default="both")
    parser.add_argument("--appenders", type=int, nargs="+", default=[1, 4, 16, 64, 100])
    parser.add_argument("--rtt-ms", type=float, default=10.0, help="median request latency")
    parser.add_argument("--seconds", type=float, default=20.0, help="simulated seconds per row")
    args = parser.parse_args()
    protocols = list(PROTOCOLS) if args.protocol == "both" else [args.protocol]
    print(report([run(p, n, args.rtt_ms, args.seconds) for p in protocols for n in args.appenders]))


if __name__ == "__main__":
    main()
