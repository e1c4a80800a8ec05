"""A model, not a measurement: how many appends a second one segment commits, and what its DynamoDB
partition takes, on the chain and in sub-log mode (issue 40), at AWS-like latency and with more
concurrent appenders than moto can serve.

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
* ``sublog`` is dataplane/sublog_path.py as built (docs/dataplane.md, "Sub-logs"): an appender reads the
  head and its writer's state, puts its block in one of ``shards`` pending partitions and polls it; the
  holder of the segment's lease reads the head with the lease and every pending shard at once, takes the
  writers' states from the blocks' copies, and commits up to 48 one-block writers in one transaction,
  whose batch entry copies the blocks' bytes onto the segment's partition (``event_bytes`` each, twice the
  units: a transaction's write). See ``sublog`` for what it charges and leaves out.

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
# A batch is one TransactWriteItems of at most 100 actions: the head, the batch entry, one update per item
# taken (its offset set, its bytes removed), one per writer (its state) and a successor's mark.
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


def sublog(sim: Simulation, appenders: int, shards: int = 8, poll_ms: float = 5.0, poll_max_ms: float = 20.0,
           lease_ms: float = 500.0, transaction_factor: float = 2.0, event_bytes: int = 1024,
           think_ms: float = 0.0) -> Callable[[], int]:
    """dataplane/sublog_path.py as built; what it returns counts the committed blocks. An appender reads the
    head (consistent), then its writer's state and the segment's lease (one BatchGetItem: the lease is an
    item of its own, off the segment's partition), puts its block with a copy of that state (about 100 B
    more) in a pending shard (by a hash of writer and event number: at random here), takes the lease (a
    conditional put, 1 unit) if it was free, and polls its item (eventually consistent, every ``poll_ms``
    growing by half up to ``poll_max_ms``) until a batch commits it, then deletes it. The lease holder
    batches: the head with the lease (one BatchGetItem) and every pending shard read at once (consistent;
    answered when the slowest is), then, on the writers' states copied in their blocks (each appender's
    previous block is committed before it reads, so a copy always holds here and no state is read), one
    transaction (``transaction_factor`` times a request's latency, twice each write's units, charged when
    refused too) of the head's advance, the batch entry, the lease, each block's item and each writer's
    state, at most 48 one-block writers; the transaction that commits its own block hands the lease to the
    oldest block left (marking its item), whose appender sees it on its next poll. An appender whose block
    waited a fifth of a lease reads the head again and takes a lease that ran out. Left out: seal,
    resends, conditional appends. ``event_bytes``: each block's size, which the batch entry copies onto
    the segment's partition (twice its units: a transaction's write). ``think_ms``: each appender's pause
    between two appends, to set the rate offered rather than take all the segment commits."""
    head = {"length": 0, "lease": None, "until": 0.0}
    put_at: dict[tuple[int, int], float] = {}
    shard_of: dict[tuple[int, int], int] = {}
    pending: set[tuple[int, int]] = set()
    offsets: dict[tuple[int, int], int] = {}
    handed: dict[tuple[int, int], object] = {}

    def appender(me: int) -> Iterator:
        for number in itertools.count():
            started, item, shard = sim.now, (me, number), sim.random.randrange(shards)
            yield ("request", lambda: None, _charge(segment_read=1))  # the head
            free = yield ("request", lambda: head["lease"] is None or head["until"] < sim.now,
                          _charge_shard(me % shards, read=2))  # its writer's state and the lease: one BatchGetItem
            yield ("request", lambda i=item, n=shard: _put(n, i),
                   _charge_shard(shard, write=math.ceil((event_bytes + 200) / 1024)))
            token = None
            if free:
                token = yield ("request", lambda i=item: _take(i), _charge_shard("lease", write=1))
            check_at, poll = sim.now + lease_ms / 5, poll_ms
            while item not in offsets:
                if token is not None:
                    yield from lead(item, token)
                    token = None
                    if item in offsets:
                        break
                yield ("sleep", poll)
                poll = min(poll * 1.5, poll_max_ms)
                state = yield ("request", lambda i=item: (i in offsets, handed.pop(i, None)),
                               _charge_shard(shard, read=0.5))
                if state[0]:
                    if state[1] is not None:  # a lease handed to it, unused: released
                        yield ("request", lambda t=state[1]: _release(t), _charge_shard("lease", write=1))
                    break
                if state[1] is not None:
                    token = state[1]
                elif sim.now >= check_at:
                    check_at = sim.now + lease_ms / 5
                    free = yield ("request", lambda: head["lease"] is None or head["until"] < sim.now,
                                  _charge(segment_read=1))
                    if free:
                        token = yield ("request", lambda i=item: _take(i), _charge_shard("lease", write=1))
            if token is not None:  # taken after a batch had committed its block: released, as _batch_rounds does
                yield ("request", lambda t=token: _release(t), _charge_shard("lease", write=1))
            yield ("request", lambda: None, _charge_shard(shard, write=1))  # its item deleted
            sim.totals.latencies_ms.append(sim.now - started)
            if think_ms:
                yield ("sleep", think_ms)

    def lead(mine: tuple[int, int], token: object) -> Iterator:
        for _ in range(8):
            length, found, lease = yield ("request", lambda: (head["length"], sorted(pending, key=put_at.__getitem__),
                                                               head["lease"]),
                                          _query_charge, 1.0, shards + 1)  # the head and lease, the shards
            if lease is not token:
                return
            if mine not in found:
                yield ("request", lambda: _release(token), _charge_shard("lease", write=1))
                return
            taken = found[:(MAX_TRANSACTION_ACTIONS - 4) // 2]  # an item and a state per one-block writer
            rest = [i for i in found if i not in taken]
            successor = (rest[0] if rest else None) if mine in taken else token
            applied = yield ("request", lambda t=taken, s=successor, n=length: _commit(n, t, s),
                             _transaction_charge(taken, successor), transaction_factor)
            if applied and mine in taken:
                return
        yield ("request", lambda: _release(token), _charge_shard("lease", write=1))  # as _batch_rounds gives up

    def _release(token: object) -> None:
        if head["lease"] is token:
            head["lease"] = None

    def _take(item: tuple[int, int]) -> object | None:
        if head["lease"] is not None and head["until"] >= sim.now:
            return None
        head["lease"], head["until"] = object(), sim.now + lease_ms
        return head["lease"]

    def _charge_shard(shard: int, read: float = 0.0, write: float = 0.0) -> Callable[[Totals, object], None]:
        def charge(totals: Totals, result: object) -> None:
            totals.sublog_read += read
            totals.sublog_write += write
            totals.shard_write[shard] += write
        return charge

    def _query_charge(totals: Totals, answer: tuple) -> None:
        """The head's and the lease's consistent reads and a consistent query of every pending shard."""
        totals.segment_read += 1
        totals.sublog_read += 1 + shards + len(answer[1]) * (event_bytes + 200) / 4096
        totals.requests += shards

    def _transaction_charge(taken: list[tuple[int, int]], successor: object) -> Callable[[Totals, bool], None]:
        """Twice each write's units: the head (about 1.5 KB: 2 units) and the batch entry (the blocks'
        bytes) on the segment's partition; the lease's put (1 unit) in its own; per block its item's
        update (charged on its old size, with the block) in its shard; per writer its state (1 unit) in
        its writer's shard; a successor's mark."""
        item_wu = 2 * math.ceil((event_bytes + 200) / 1024)

        def charge(totals: Totals, applied: bool) -> None:
            totals.segment_write += 2 * (2 + math.ceil(event_bytes * len(taken) / 1024))
            totals.sublog_write += 2
            totals.shard_write["lease"] += 2
            for item in taken:
                totals.sublog_write += item_wu + 2
                totals.shard_write[shard_of[item]] += item_wu
                totals.shard_write[("w", item[0] % shards)] += 2  # its writer's shard, a partition of its own
            if isinstance(successor, tuple):
                totals.sublog_write += 2
                totals.shard_write[shard_of[successor]] += 2
            totals.refused += not applied
        return charge

    def _put(shard: int, item: tuple[int, int]) -> None:
        pending.add(item)
        put_at[item], shard_of[item] = sim.now, shard

    def _commit(length: int, taken: list[tuple[int, int]], successor: object) -> bool:
        """All or nothing: the head's length as read, each block still pending (not the lease)."""
        if head["length"] != length or any(i not in pending for i in taken):
            return False
        for item in taken:
            offsets[item] = head["length"]
            head["length"] += 1
            pending.discard(item)
        sim.totals.batches += 1
        if successor is None:
            head["lease"] = None
        elif isinstance(successor, tuple):
            head["lease"], head["until"] = object(), sim.now + lease_ms
            handed[successor] = head["lease"]
        else:
            head["until"] = sim.now + lease_ms
        return True

    for me in range(appenders):
        sim.start(appender(me))
    return lambda: head["length"]


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
    lines = ["model (not measured): one segment, appenders each sending one block at a time (the chain's of 1 KiB)",
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
    parser.add_argument("--event-bytes", type=int, default=1024, help="each sub-log block's size")
    parser.add_argument("--think-ms", type=float, default=0.0,
                        help="each sub-log appender's pause between appends (sets the rate offered)")
    args = parser.parse_args()
    protocols = list(PROTOCOLS) if args.protocol == "both" else [args.protocol]
    sublog_options = {"event_bytes": args.event_bytes, "think_ms": args.think_ms}
    print(report([run(p, n, args.rtt_ms, args.seconds, **(sublog_options if p == "sublog" else {}))
                  for p in protocols for n in args.appenders]))


if __name__ == "__main__":
    main()
