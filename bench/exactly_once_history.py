"""Exactly once across concurrent commit finishers and a stream name deleted and created again.

Two histories run side by side through the SDK against a standalone stack (no injected faults: the
races come from the concurrency itself).

* Transactions (stream ``tx``): each transaction gets ``events_per_txn`` events ``w<txn>:k<key>:<seq>``
  and is then committed by two ``commit()`` calls at once, the second one a few ms late: from a second
  client's ``get_txn`` (resumed before the first commit starts, so its call reaches the server) or from
  the same transaction object on another thread. Every ``abort_every``-th transaction is aborted
  instead. Reading the whole stream afterwards must show every committed transaction's events exactly
  once and back to back in each segment, and nothing of an aborted one.
* Re-created name (stream ``re``): writers append ``w<writer>:k<incarnation>:<seq>``, the incarnation
  being the one their writer object was created against, while a driver seals the stream, reads it
  whole (the incarnation's final contents), deletes it and creates it again, ``recreates`` times.
  A writer whose write fails moves on with a new writer. Each incarnation must hold exactly the
  events acknowledged against it, each once, and no event tagged with another incarnation.

The History checker (tests/history.py) counts lost, duplicated, reordered, failed-but-stored and
phantom events of each; this module adds the transaction-contiguity and incarnation checks.

Run: ``.venv/bin/python -m bench.exactly_once_history``; ``--help`` for the sizes.
"""

from __future__ import annotations

import argparse
import itertools
import random
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import wait
from dataclasses import dataclass, field

import rillet
from bench.fault_history import _kind
from rillet import ScalingPolicy, StreamConfiguration, TxnState, UTF8StringSerializer
from standalone.stack import Stack, StackConfig
from tests.history import NOT_STORED, Anomalies, History, event_text, failure_outcome, parse_event

SER = UTF8StringSerializer()
TXN_STREAM, RE_STREAM = "tx", "re"


@dataclass(frozen=True)
class Settings:
    transactions: int = 40
    events_per_txn: int = 6
    keys_per_txn: int = 3
    abort_every: int = 5  # every n-th transaction is aborted instead of committed
    late_ms: float = 30.0  # the second commit call starts 0..late_ms after the first
    writers: int = 3
    events_per_writer: int = 300
    batch: int = 5  # events a re-create writer writes before waiting for their futures
    recreates: int = 3
    writer_retry_timeout_s: float = 10.0
    seed: int = 25
    deadline_s: float = 600.0


@dataclass
class Result:
    settings: Settings
    txn_anomalies: Anomalies
    not_contiguous: list[str]  # committed transactions with another event between two of theirs
    txn_states: dict[str, int]  # final state per transaction
    commit_calls: dict[str, int]  # outcome of each commit call ("first"/"second": ok or error type)
    both_commits_ok: int  # transactions whose two commit calls both answered COMMITTED
    re_anomalies: Anomalies
    misplaced: list[str]  # events found in an incarnation other than the one tagged
    incarnations: list[int]  # events read per incarnation (the last one is the final one)
    writer_failures: dict[str, int]  # failed write futures per (incarnation sealed or not, error type)
    stale_typed_failures: int  # writes against a sealed incarnation refused with a typed error
    wall_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return (self.txn_anomalies.violations + self.re_anomalies.violations + len(self.not_contiguous)
                + len(self.misplaced) + len(self.notes))


class _Run:
    def __init__(self, settings: Settings, stack: Stack, scope: str) -> None:
        self.settings = settings
        self.url = stack.controller_url
        self.scope = scope
        self.manager = rillet.StreamManager(self.url)
        self.factory = rillet.EventStreamClientFactory(scope, self.url)
        self.other = rillet.EventStreamClientFactory(scope, self.url)  # the second client's connection
        self.rng = random.Random(settings.seed)
        self.lock = threading.Lock()
        self.deadline = time.monotonic() + settings.deadline_s
        self.notes: list[str] = []
        # transactions
        self.txns = History()
        self.txn_events: dict[int, list[str]] = {}
        self.txn_states: Counter = Counter()
        self.commit_calls: Counter = Counter()
        self.both_ok = 0
        self.committed: set[int] = set()
        # re-created name
        self.recreated = History()
        self.incarnation = 0
        self.sealed = 0  # incarnations below this one are sealed (or being sealed)
        self.transition = threading.Lock()  # held while a writer is created and while the name changes
        self.contents: list[list[str]] = []  # events read per incarnation, sealed
        self.writer_failures: Counter = Counter()
        self.acknowledged_in: Counter = Counter()  # acknowledged events per incarnation
        self.stale_typed = 0
        self.writers_done = threading.Event()

    def guarded(self, name: str, body) -> threading.Thread:
        def run() -> None:
            try:
                body()
            except BaseException as e:  # noqa: BLE001 - reported with the figures
                self.notes.append(f"{name} died: {e!r}")
        return threading.Thread(target=run, name=name, daemon=True)

    def setup(self) -> None:
        self.manager.create_scope(self.scope)
        self.manager.create_stream(self.scope, TXN_STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
        self.create_re_stream()

    def create_re_stream(self) -> None:
        self.manager.create_stream(self.scope, RE_STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))

    # -- transactions committed twice --------------------------------------------------------------

    def transactions(self) -> None:
        s = self.settings
        config = rillet.EventWriterConfig()
        writer = self.factory.create_transactional_writer(TXN_STREAM, SER, config)
        second = self.other.create_transactional_writer(TXN_STREAM, SER, config)
        for n in range(s.transactions):
            txn = writer.begin(lease_ms=60_000)
            events = [event_text(n, i % s.keys_per_txn, i // s.keys_per_txn) for i in range(s.events_per_txn)]
            self.txn_events[n] = events
            futures = []
            for i, event in enumerate(events):
                self.txns.attempt(event)
                futures.append(txn.write_event(event, routing_key=f"t{n}-k{i % s.keys_per_txn}"))
            txn.flush()
            if (n + 1) % s.abort_every == 0:
                txn.abort()
            else:
                self.commit_twice(n, txn, second)
            state = txn.check_status()
            self.txn_states[state.value] += 1
            for event, future in zip(events, futures):
                if state == TxnState.COMMITTED and future.exception() is None:
                    self.txns.acknowledge(event)
                elif state == TxnState.COMMITTED:
                    self.txns.fail(event, _kind(future.exception()), failure_outcome(future.exception()))
                else:
                    self.txns.fail(event, f"txn {state.value}", NOT_STORED)
            if state == TxnState.COMMITTED:
                self.committed.add(n)

    def commit_twice(self, n: int, txn, second_writer) -> None:
        """The first commit on this thread; the second, ``late`` later, from the second client (even n) or
        from the same object on another thread (odd n)."""
        other = second_writer.get_txn(txn.txn_id) if n % 2 == 0 else txn
        late = self.rng.uniform(0, self.settings.late_ms) / 1000
        outcomes: dict[str, str] = {}

        def call(name: str, target, delay: float) -> None:
            time.sleep(delay)
            try:
                target.commit(timeout_s=60)
                outcomes[name] = "ok"
            except (rillet.RilletError, TimeoutError) as e:
                outcomes[name] = _kind(e)

        late_call = threading.Thread(target=call, args=("second", other, late))
        late_call.start()
        call("first", txn, 0.0)
        late_call.join(90)
        for name in ("first", "second"):
            self.commit_calls[f"{name}: {outcomes.get(name, 'hung')}"] += 1
        if outcomes.get("first") == outcomes.get("second") == "ok":
            self.both_ok += 1

    def check_transactions(self) -> list[str]:
        """Read the whole stream into the History; list committed transactions not back to back."""
        reads = list(self.factory.create_stream_reader(TXN_STREAM, SER))
        by_txn: dict[tuple[int, int], list] = defaultdict(list)
        for r in reads:
            self.txns.read("batch", r.event)
            by_txn[(int(parse_event(r.event)[0][1:]), r.pointer.segment_id)].append(r.pointer)
        broken = []
        for (n, sid), pointers in sorted(by_txn.items()):
            pointers.sort(key=lambda p: p.offset)
            if any(a.offset + a.length != b.offset for a, b in itertools.pairwise(pointers)):
                broken.append(f"txn {n} in segment {sid}: {[(p.offset, p.length) for p in pointers]}")
        return broken

    # -- a stream name deleted and created again ---------------------------------------------------

    def new_writer(self) -> tuple[rillet.EventStreamWriter, int]:
        config = rillet.EventWriterConfig(retry_timeout_s=self.settings.writer_retry_timeout_s)
        while True:
            with self.transition:
                try:
                    return self.factory.create_event_writer(RE_STREAM, SER, config), self.incarnation
                except rillet.RilletError as e:
                    self.notes.append(f"creating a writer failed outside a transition: {_kind(e)}")
                    if time.monotonic() > self.deadline:
                        raise

    def writer(self, w: int) -> None:
        s = self.settings
        seq = 0
        while seq < s.events_per_writer and time.monotonic() < self.deadline:
            writer, incarnation = self.new_writer()
            failed, first = False, seq
            while seq < s.events_per_writer and not failed:
                stale = self.pace(seq, seq - first, incarnation)
                if stale and seq >= s.events_per_writer - s.batch:
                    break  # the last batch goes to the new incarnation
                batch = []
                for _ in range(min(s.batch, s.events_per_writer - seq)):
                    event = event_text(w, incarnation, seq)
                    seq += 1
                    self.recreated.attempt(event)
                    batch.append((event, writer.write_event(event, routing_key=f"w{w}")))
                wait([f for _, f in batch], timeout=s.writer_retry_timeout_s * 3)
                for event, future in batch:
                    if not future.done():
                        continue  # counted as unresolved
                    error = future.exception()
                    if error is None:
                        self.recreated.acknowledge(event)
                        with self.lock:
                            self.acknowledged_in[incarnation] += 1
                        continue
                    failed = True
                    self.recreated.fail(event, _kind(error), failure_outcome(error))
                    with self.lock:
                        sealed = incarnation < self.sealed
                        self.writer_failures[f"{'sealed' if sealed else 'current'} incarnation: {_kind(error)}"] += 1
                        self.stale_typed += sealed and failure_outcome(error) == NOT_STORED
                if stale:
                    break  # one batch through the old writer after the re-create (it must be refused): move on
            try:
                writer.close()
            except rillet.RilletError:
                pass  # its failures are already recorded per event

    def pace(self, seq: int, written_here: int, incarnation: int) -> bool:
        """Keep a writer that wrote a batch into its incarnation at most a batch past its share until the
        driver starts sealing, and its last batch for the final incarnation: every incarnation gets events,
        and writes are in flight when a seal lands. True: the driver announced a new incarnation."""
        s = self.settings
        share = s.events_per_writer / (s.recreates + 1)
        reserved = s.events_per_writer - s.batch
        while time.monotonic() < self.deadline:
            capped = self.sealed < s.recreates and seq >= share * (self.sealed + 1) + s.batch and written_here >= s.batch
            if not capped and not (incarnation < s.recreates and seq >= reserved):
                return False
            if self.incarnation != incarnation:
                return True
            time.sleep(0.01)
        return False

    def driver(self) -> None:
        s = self.settings
        total = s.writers * s.events_per_writer
        for i in range(s.recreates):
            while not self.writers_done.is_set() and (len(self.recreated.attempted) < total * (i + 1) / (s.recreates + 1)
                                                      or self.acknowledged_in[self.incarnation] < s.batch):
                time.sleep(0.02)
            with self.transition:
                with self.lock:
                    self.sealed = self.incarnation + 1
                self.manager.seal_stream(self.scope, RE_STREAM)
                self.contents.append(self.read_incarnation())
                self.manager.delete_stream(self.scope, RE_STREAM)
                self.create_re_stream()
                with self.lock:
                    self.incarnation += 1

    def read_incarnation(self) -> list[str]:
        events = [r.event for r in self.factory.create_stream_reader(RE_STREAM, SER)]
        for event in events:
            self.recreated.read(f"incarnation {len(self.contents)}", event)
        return events

    def check_incarnations(self) -> list[str]:
        return [f"{event} in incarnation {i}" for i, events in enumerate(self.contents)
                for event in events if int(parse_event(event)[1][1:]) != i]


def run(settings: Settings | None = None) -> Result:
    settings = settings or Settings()
    with Stack(StackConfig.ephemeral(POWERTOOLS_LOG_LEVEL="CRITICAL")) as stack:
        started = time.monotonic()
        r = _Run(settings, stack, "exactly-once")
        r.setup()
        writers = [r.guarded(f"writer-{w}", lambda w=w: r.writer(w)) for w in range(settings.writers)]
        others = [r.guarded("transactions", r.transactions), r.guarded("driver", r.driver)]
        for thread in writers + others:
            thread.start()
        for thread in writers:
            thread.join(max(0.1, r.deadline - time.monotonic()))
        r.writers_done.set()
        for thread in others:
            thread.join(max(0.1, r.deadline - time.monotonic()))
        r.notes += [f"{t.name} still running at the end" for t in writers + others if t.is_alive()]
        with r.transition:  # the final incarnation, sealed so that nothing more arrives
            r.manager.seal_stream(r.scope, RE_STREAM)
            r.contents.append(r.read_incarnation())
        not_contiguous = r.check_transactions()
        return Result(settings, r.txns.anomalies(), not_contiguous, dict(r.txn_states), dict(r.commit_calls),
                      r.both_ok, r.recreated.anomalies(), r.check_incarnations(), [len(c) for c in r.contents],
                      dict(r.writer_failures), r.stale_typed, time.monotonic() - started, r.notes)


def report(result: Result) -> str:
    s, t, a = result.settings, result.txn_anomalies, result.re_anomalies

    def examples(items: list[str]) -> str:
        return f"{len(items)}" + (f" (e.g. {', '.join(items[:5])})" if items else "")

    lines = [
        f"Exactly-once history (seed {s.seed})",
        (f"  transactions: {s.transactions} x {s.events_per_txn} events, every {s.abort_every}th aborted, "
         f"each other one committed twice (second call 0-{s.late_ms:g} ms late)"),
        f"    final states              {result.txn_states}",
        f"    commit calls              {result.commit_calls}",
        f"    both calls COMMITTED      {result.both_commits_ok}",
        f"    events acknowledged       {t.acknowledged} of {t.attempted} ({t.failed_not_stored} aborted)",
        f"    lost                      {examples(t.lost)}",
        f"    duplicated                {examples(t.duplicated)}",
        f"    reordered keys            {examples(t.reordered_keys)}",
        f"    aborted but read          {examples(t.failed_but_stored)}",
        f"    read, never written       {examples(t.phantoms)}",
        f"    not back to back          {examples(result.not_contiguous)}",
        f"  re-created name: {s.writers} writers x {s.events_per_writer} events, {s.recreates} delete + create",
        f"    events per incarnation    {result.incarnations}",
        f"    events written            {a.attempted}",
        f"    acknowledged              {a.acknowledged}",
        (f"    failed, known not stored  {a.failed_not_stored} ({result.stale_typed_failures} against a sealed "
         "incarnation)"),
        (f"    outcome unknown           {a.outcome_unknown} ({a.outcome_unknown_read} of them read, "
         f"{len(a.unknown_read_late)} after later events of their key)"),
        f"    writer failures           {result.writer_failures or '-'}",
        f"    failed, proving nothing   {examples(a.failed_unproven)}",
        f"    unresolved futures        {examples(a.unresolved)}",
        f"    lost                      {examples(a.lost)}",
        f"    duplicated                {examples(a.duplicated)}",
        f"    reordered keys            {examples(a.reordered_keys)}",
        f"    failed but stored         {examples(a.failed_but_stored)}",
        f"    read, never written       {examples(a.phantoms)}",
        f"    in another incarnation    {examples(result.misplaced)}",
        f"  anomalies                   {result.violations}",
        f"  wall time                   {result.wall_s:.1f} s",
    ]
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Settings()
    parser.add_argument("--transactions", type=int, default=d.transactions)
    parser.add_argument("--events-per-txn", type=int, default=d.events_per_txn)
    parser.add_argument("--writers", type=int, default=d.writers)
    parser.add_argument("--events", type=int, default=d.events_per_writer, help="events per re-create writer")
    parser.add_argument("--recreates", type=int, default=d.recreates)
    parser.add_argument("--late-ms", type=float, default=d.late_ms, help="the second commit's delay, at most")
    parser.add_argument("--seed", type=int, default=d.seed)
    args = parser.parse_args()
    print(report(run(Settings(transactions=args.transactions, events_per_txn=args.events_per_txn,
                              writers=args.writers, events_per_writer=args.events, recreates=args.recreates,
                              late_ms=args.late_ms, seed=args.seed))))


if __name__ == "__main__":
    main()
