"""Whole histories under injected AWS faults: is any event lost, changed, duplicated or reordered?

Writers (each restarting once halfway, as an application redeploying would) write
``w<writer>:k<key>:<seq>`` with routing key ``w<writer>-k<key>`` through the SDK into a standalone
stack whose append, read and controller handlers see throttling, 5xx, connection resets, answers
lost after the request was applied, and crashes before and after mutating requests
(standalone/faults.py). Meanwhile a driver scales the stream through the StreamManager, and a reader
group reads with members joining, leaving (reader_offline at their position) and rejoining. A
sweeper runs in this process every second with a 2 s grace period, as the standalone Dagster sensor
would (more often), to finish workflows that a crashed invocation left half done.

The History checker (tests/history.py) then counts over the whole history: acknowledged events lost
or read twice, keys read out of write order, events whose future failed as "not stored" but were
read, events read that nobody wrote, and futures that never resolved.

Run: ``.venv/bin/python -m bench.fault_history`` (4 writers x 1,000 events, 2 scales, the issue's
rates); ``--help`` for the sizes, the rates and the seed.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import Future, wait
from dataclasses import dataclass, field

import rillet
from controlplane.service import Controller
from controlplane.sweeper import Sweeper
from rillet import ScalingPolicy, StreamConfiguration, UTF8StringSerializer
from rillet.reader_group import ReaderGroupManager, group_config
from standalone.faults import KINDS, FaultConfig, FaultRates, read_records
from standalone.stack import Stack, StackConfig
from tests.history import Anomalies, History, event_text, failure_outcome

ISSUE_RATES = FaultRates(throttle=0.30, server_error=0.05, reset=0.05, answer_lost=0.05, crash=0.03)
SER = UTF8StringSerializer()
STREAM, GROUP = "s", "g"


@dataclass(frozen=True)
class Settings:
    writers: int = 4
    events_per_writer: int = 1000
    keys_per_writer: int = 5
    scales: int = 2
    rates: FaultRates = ISSUE_RATES
    functions: tuple[str, ...] = ("append", "read", "tails", "controller")
    seed: int = 7
    max_attempts: int = 2  # botocore attempts per AWS call in the handlers (see standalone/faults.py)
    writer_retry_timeout_s: float = 60.0  # EventWriterConfig.retry_timeout_s
    write_pause_s: float = 0.002  # between two events of a writer, so that scales land mid-writing
    deadline_s: float = 900.0  # the whole run, after the stack is up
    settle_s: float = 3.0  # reading on after every acknowledged event was read, for late duplicates


@dataclass
class Result:
    settings: Settings
    anomalies: Anomalies
    faults: dict[str, int]  # injected, per kind
    aws_requests: int  # answered by moto (faults that never reached it excluded)
    scales: list[int]  # the epochs the driver's scales produced
    membership: list[str]  # reader joins and leaves, in order
    client_errors: dict[str, int]  # errors the harness saw and retried (setup, scales, reads, leaving)
    sweeps: dict[str, int]  # sweeper outcomes
    wall_s: float
    notes: list[str] = field(default_factory=list)  # harness threads that failed or hung


def _kind(error: BaseException) -> str:
    """The error's type, with its code when the type alone says nothing (an untyped RilletError)."""
    name = type(error).__name__
    code = getattr(error, "code", name)
    return name if code in (name, "") else f"{name}({code})"


class _Run:
    def __init__(self, settings: Settings, stack: Stack, scope: str) -> None:
        self.settings = settings
        self.stack = stack
        self.url = stack.controller_url
        self.scope = scope
        self.history = History()
        self.manager = rillet.StreamManager(self.url)
        self.factory = rillet.EventStreamClientFactory(scope, self.url)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.written = 0
        self.total = settings.writers * settings.events_per_writer
        self.scales: list[int] = []
        self.membership: list[str] = []
        self.client_errors: Counter = Counter()
        self.sweeps: Counter = Counter()
        self.notes: list[str] = []
        self.deadline = time.monotonic() + settings.deadline_s

    # -- helpers ---------------------------------------------------------------------------------

    def guarded(self, name: str, body) -> threading.Thread:
        def run() -> None:
            try:
                body()
            except BaseException as e:  # noqa: BLE001 - reported with the figures
                self.notes.append(f"{name} died: {e!r}")
        return threading.Thread(target=run, name=name, daemon=True)

    def retrying(self, what: str, call, done_on: tuple[type[BaseException], ...] = (), after_stop: bool = False):
        """Repeat ``call`` until it answers (the application's own retry around the SDK's); an error in
        ``done_on`` means an earlier attempt whose answer was lost already did it. Once the run is
        stopping, only calls ``after_stop`` (a reader joining or leaving, which it must finish to leave the
        group as it found it) go on retrying, until the deadline."""
        while True:
            try:
                return call()
            except done_on:
                return None
            except rillet.RilletError as e:
                with self.lock:
                    self.client_errors[f"{what}: {_kind(e)}"] += 1
                if time.monotonic() > self.deadline or (self.stop.is_set() and not after_stop):
                    raise
                time.sleep(0.3)

    def progress(self) -> float:
        with self.lock:
            return self.written / self.total

    def until(self, fraction: float) -> None:
        while self.progress() < fraction and not self.stop.is_set():
            time.sleep(0.02)

    # -- actors ----------------------------------------------------------------------------------

    def setup(self) -> None:
        self.retrying("create scope", lambda: self.manager.create_scope(self.scope))
        self.retrying("create stream", lambda: self.manager.create_stream(
            self.scope, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))))
        self.groups = groups = ReaderGroupManager(self.scope, self.url)
        # Every reader here leaves by reader_offline at its position, so the lease outlasts the run: a
        # reader held past its lease by a loaded machine would be taken offline and the events it returned
        # after its last sync read again by design (docs/sdk.md, "Leases"), which this history would count
        # as duplicates. Leases are tested on their own (tests/integration/test_reader_group_leases.py).
        lease_ms = int(self.settings.deadline_s * 1000) + 60_000
        self.retrying("create reader group", lambda: groups.create_reader_group(GROUP, group_config(
            [f"{self.scope}/{STREAM}"], automatic_checkpoint_interval_ms=0, group_refresh_time_ms=200,
            reader_lease_ms=lease_ms)))

    def writer(self, w: int) -> None:
        s = self.settings
        # The former default (one request per round trip): the most requests per event, so the most
        # faults injected per run; the budget changes when blocks leave, not what the writer guarantees.
        config = rillet.EventWriterConfig.lowest_latency(retry_timeout_s=s.writer_retry_timeout_s)
        writer = self.retrying("create writer", lambda: self.factory.create_event_writer(STREAM, SER, config))
        futures: list[Future] = []
        for i in range(s.events_per_writer):
            if i == s.events_per_writer // 2:  # restart: the old writer resolves everything first
                self.retire(w, writer, futures)
                writer = self.retrying("create writer", lambda: self.factory.create_event_writer(STREAM, SER, config))
                futures = []
            key, seq = i % s.keys_per_writer, i // s.keys_per_writer
            event = event_text(w, key, seq)
            self.history.attempt(event)
            future = writer.write_event(event, routing_key=f"w{w}-k{key}")
            future.add_done_callback(lambda f, e=event: self.resolved(e, f))
            futures.append(future)
            with self.lock:
                self.written += 1
            time.sleep(s.write_pause_s)
        self.retire(w, writer, futures)

    def resolved(self, event: str, future: Future) -> None:
        error = future.exception()
        if error is None:
            self.history.acknowledge(event)
        else:
            self.history.fail(event, _kind(error), failure_outcome(error))

    def retire(self, w: int, writer: rillet.EventStreamWriter, futures: list[Future]) -> None:
        """Wait (until the run's deadline) for the writer's futures, then close it; a writer whose futures
        hang is left open, and its events count as unresolved."""
        _, pending = wait(futures, timeout=max(0.0, self.deadline - time.monotonic()))
        if pending:
            self.notes.append(f"writer w{w}: {len(pending)} futures unresolved at the deadline")
            return
        writer.close()

    def driver(self) -> None:
        s = self.settings
        for i in range(s.scales):
            self.until((i + 1) / (s.scales + 1))
            current = self.retrying("stream info", lambda: self.manager.get_stream_info(
                self.scope, STREAM)).current_segments
            if i % 2 == 0 or len(current) < 2:
                target = max(current, key=lambda seg: seg.high - seg.low)
                middle = (target.low + target.high) / 2
                seal, ranges = [target.segment_id], [(target.low, middle), (middle, target.high)]
            else:
                a, b = min(itertools.pairwise(current), key=lambda p: p[1].high - p[0].low)
                seal, ranges = [a.segment_id, b.segment_id], [(a.low, b.high)]
            self.scales.append(self.scale(seal, ranges))

    def scale(self, seal: list[int], ranges: list[tuple[float, float]]) -> int:
        """Scale until the sealed segments are gone from the current set (an attempt whose answer was lost
        may have done it), then wait until the scale is complete; returns the epoch."""
        while True:
            try:
                epoch = self.manager.scale_stream(self.scope, STREAM, seal, ranges)
                break
            except rillet.RilletError as e:
                with self.lock:
                    self.client_errors[f"scale: {_kind(e)}"] += 1
                info = self.retrying("stream info", lambda: self.manager.get_stream_info(self.scope, STREAM))
                if not {seg.segment_id for seg in info.current_segments} & set(seal):
                    epoch = info.current_epoch
                    break
                if time.monotonic() > self.deadline:
                    raise
                time.sleep(0.5)
        while not self.retrying("check scale", lambda: self.manager.check_scale(self.scope, STREAM, epoch)):
            time.sleep(0.2)
        return epoch

    def reader(self, reader_id: str, join_at: float, leave_at: float | None = None,
               rejoin_at: float | None = None) -> None:
        self.until(join_at)
        reader = self.join(reader_id)
        while not self.stop.is_set():
            if leave_at is not None and self.progress() >= leave_at:
                self.leave(reader)
                leave_at = None
                self.until(rejoin_at)
                reader = self.join(reader_id)
            try:
                read = reader.read_next_event(timeout_ms=200)
            except rillet.ReaderNotInReaderGroup:
                with self.lock:
                    self.client_errors["read: ReaderNotInReaderGroup"] += 1
                reader = self.join(reader_id)
                continue
            except rillet.RilletError as e:
                with self.lock:
                    self.client_errors[f"read: {_kind(e)}"] += 1
                time.sleep(0.2)
                continue
            if read is not None and not read.is_checkpoint:
                self.history.read(reader_id, read.event)
        self.leave(reader)

    def join(self, reader_id: str) -> rillet.EventStreamReader:
        def attempt() -> rillet.EventStreamReader:
            try:
                return self.factory.create_reader(reader_id, GROUP, SER)
            except rillet.AlreadyExists:
                # An earlier attempt joined and its answer was lost (a function that crashed after the
                # join, say): that instance, which nothing reads with, is taken offline, as an application
                # does, before the next attempt (a new reader object carries another instance token).
                self.groups.get_reader_group(GROUP).reader_offline(reader_id, None)
                raise

        reader = self.retrying("join", attempt, after_stop=True)
        self.membership.append(f"{reader_id} joined at {self.progress():.0%}")
        return reader

    def leave(self, reader: rillet.EventStreamReader) -> None:
        """reader_offline at the reader's position, repeated until it is known to have happened."""
        position = reader.get_position()
        self.retrying("leave", lambda: reader.group.reader_offline(reader.reader_id, position),
                      done_on=(rillet.ReaderNotInReaderGroup,), after_stop=True)
        self.membership.append(f"{reader.reader_id} left at {self.progress():.0%}")

    def sweeper(self) -> None:
        sweeper = Sweeper(Controller.for_deployment(self.stack.deployment).streams, grace_ms=2000)
        while not self.stop.wait(1.0):
            for outcome in sweeper.sweep():
                self.sweeps[f"{outcome.workflow.split()[0]} {outcome.outcome}"] += 1


def run(settings: Settings | None = None) -> Result:
    settings = settings or Settings()
    record_dir = tempfile.mkdtemp(prefix="rillet-faults-")
    faults = FaultConfig(rates=settings.rates, seed=settings.seed, functions=settings.functions,
                         max_attempts=settings.max_attempts, record_dir=record_dir)
    try:
        with Stack(StackConfig.ephemeral(faults=faults, POWERTOOLS_LOG_LEVEL="CRITICAL")) as stack:
            started = time.monotonic()
            r = _Run(settings, stack, "faults")
            r.setup()
            writers = [r.guarded(f"writer-{w}", lambda w=w: r.writer(w)) for w in range(settings.writers)]
            readers = [r.guarded("r0", lambda: r.reader("r0", 0.0)),
                       r.guarded("r1", lambda: r.reader("r1", 0.0, leave_at=0.4, rejoin_at=0.7)),
                       r.guarded("r2", lambda: r.reader("r2", 0.5))]
            helpers = [r.guarded("driver", r.driver), r.guarded("sweeper", r.sweeper)]
            for thread in readers + helpers:
                thread.start()
            while len(r.membership) < 2 and time.monotonic() < r.deadline:  # r0 and r1 are in the group
                time.sleep(0.05)
            for thread in writers:
                thread.start()
            for thread in [*writers, helpers[0]]:
                thread.join(max(0.1, r.deadline - time.monotonic()))
            while r.history.unread_acknowledged() and time.monotonic() < r.deadline:
                time.sleep(0.2)
            time.sleep(settings.settle_s)
            r.stop.set()
            for thread in readers + helpers:
                thread.join(30)
            r.notes += [f"{t.name} still running at the end" for t in writers + readers + helpers if t.is_alive()]
            wall = time.monotonic() - started
            counts, _ = stack.requests.snapshot()
            return Result(settings, r.history.anomalies(), dict(read_records(record_dir)), sum(counts.values()),
                          r.scales, r.membership, dict(r.client_errors), dict(r.sweeps), wall, r.notes)
    finally:
        shutil.rmtree(record_dir, ignore_errors=True)


def report(result: Result) -> str:
    s, a = result.settings, result.anomalies

    def examples(items: list[str]) -> str:
        return f"{len(items)}" + (f" (e.g. {', '.join(items[:5])})" if items else "")

    lines = [
        (f"Fault history: {s.writers} writers x {s.events_per_writer} events, {s.keys_per_writer} keys each, "
        f"{s.scales} scales, faults in {', '.join(s.functions)}, seed {s.seed}, botocore max_attempts "
        f"{s.max_attempts}"),
        (f"  rates per AWS attempt: throttle {s.rates.throttle:.0%}, 5xx {s.rates.server_error:.0%}, "
        f"reset {s.rates.reset:.0%}, answer lost {s.rates.answer_lost:.0%}, crash {s.rates.crash:.0%} (mutating)"),
        f"  events written            {a.attempted}",
        f"  acknowledged              {a.acknowledged}",
        f"  failed, known not stored  {a.failed_not_stored}",
        (f"  outcome unknown           {a.outcome_unknown} ({a.outcome_unknown_read} of them read, "
         f"{len(a.unknown_read_late)} after later events of their key)"),
        f"  failed, proving nothing   {examples(a.failed_unproven)}",
        f"  unresolved futures        {examples(a.unresolved)}",
        f"  lost                      {examples(a.lost)}",
        f"  duplicated                {examples(a.duplicated)}",
        f"  reordered keys            {examples(a.reordered_keys)}",
        f"  failed but stored         {examples(a.failed_but_stored)}",
        f"  read, never written       {examples(a.phantoms)}",
        f"  futures failed with       {a.failure_types or '-'}",
        (f"  faults injected           {', '.join(f'{k} {result.faults.get(k, 0)}' for k in KINDS)} "
        f"(total {sum(result.faults.values())}; {result.aws_requests} requests reached moto)"),
        f"  scales                    epochs {result.scales}",
        f"  reader group              {'; '.join(result.membership)}",
        f"  errors retried by the app {result.client_errors or '-'}",
        f"  sweeper                   {result.sweeps or 'nothing to finish'}",
        f"  wall time                 {result.wall_s:.1f} s",
    ]
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Settings()
    parser.add_argument("--writers", type=int, default=d.writers)
    parser.add_argument("--events", type=int, default=d.events_per_writer, help="events per writer")
    parser.add_argument("--scales", type=int, default=d.scales)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--functions", default=",".join(d.functions), help="where to inject faults")
    parser.add_argument("--max-attempts", type=int, default=d.max_attempts, help="botocore attempts per call")
    for kind, rate in vars(d.rates).items():
        parser.add_argument(f"--{kind.replace('_', '-')}", type=float, default=rate, help="rate per attempt")
    args = parser.parse_args()
    rates = FaultRates(args.throttle, args.server_error, args.reset, args.answer_lost, args.crash)
    print(report(run(Settings(writers=args.writers, events_per_writer=args.events, scales=args.scales, rates=rates,
                              functions=tuple(args.functions.split(",")), seed=args.seed,
                              max_attempts=args.max_attempts))))


if __name__ == "__main__":
    main()
