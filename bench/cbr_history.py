"""Consumption-based retention history: reader-group creates, resets, deletes and checkpoint publishes racing
a running retention schedule, with the real controller on its own moto server (issue 31).

One single-segment stream (fixed(1): a position is a plain offset) under consumption-based retention with a
minimum of 0 bytes, so a cycle truncates as far as its subscribers allow. A writer appends 100-byte events;
group threads each run a series of groups (a fresh name per lifetime), each created at the head or at an
earlier cut, publishing acknowledged cuts that move forward (automatic groups by checkpoints, manual groups by
``update_truncation_cut``), sometimes reset back, then deleted; one thread runs retention cycles in a loop.
Every step is logged with monotonic times, and the acknowledged cut each step left is read back from the
subscriber record (a publish may be dropped as contended, so the log holds what retention saw).

The check: each cycle's new head must not pass the acknowledged cut of any group registered (create done)
before the cycle began and not being deleted before it ended. The group's cut during the cycle is any value it
could have had then: the one in force at the cycle's start, and those of steps overlapping the cycle, so only a
truncation past all of them is a violation. Also: the head never moves back, and at the end the subscriber
set is exactly the live groups, none truncated past.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from dataplane.deployment import Deployment
from rillet.api import SegmentOffset, SyncRequest
from rillet.errors import RilletError
from rillet.framing import frame
from rillet.models import (
    ReaderGroupConfig,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamCutBody,
    StreamDataRetention,
    StreamRange,
)
from rillet.names import segment_name
from standalone.moto_server import MotoServer
from standalone.resources import bind_all, create_resources

EVENT = frame(b"h" * 96)  # 100 bytes: every cut the harness picks is on an event boundary
EVENT_SIZE = len(EVENT)
STREAM = "s"


@dataclass
class Settings:
    groups: int = 3  # concurrent group threads
    duration_s: float = 20.0
    seed: int = 1


@dataclass
class Step:
    """One step on a group: its kind, when it ran, and the acknowledged offset it left (None: the step
    failed before registering anything)."""

    group: str
    kind: str  # create, publish, reset, delete
    start: float
    end: float
    offset: int | None
    ok: bool = True
    head_after: int = 0  # the stream's head read right after the step


@dataclass
class Cycle:
    start: float
    end: float
    head: int  # the stream's head after the cycle


@dataclass
class Result:
    settings: Settings
    operations: dict[str, int]
    failures: dict[str, int]
    advances: int  # publishes that moved a group's acknowledged cut forward
    cycles: int
    truncations: int  # cycles that moved the head
    events: int
    final_head: int
    violations: list[str]
    behind_head: list[str]  # live groups registered (create or reset) at a cut the head had passed
    wall_s: float
    notes: list[str] = field(default_factory=list)


class _Run:
    def __init__(self, settings: Settings, controller: Controller, scope: str) -> None:
        self.settings, self.controller, self.scope = settings, controller, scope
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.steps: list[Step] = []
        self.cycles: list[Cycle] = []
        self.live: set[str] = set()
        self.events = 0
        self.failures: Counter = Counter()
        self.notes: list[str] = []

    # -- helpers --------------------------------------------------------------------------------------

    def head(self) -> int:
        (position,) = self.controller.streams.head(self.scope, STREAM)
        return position.offset

    def tail(self) -> int:
        (position,) = self.controller.streams.tail(self.scope, STREAM)
        return position.offset

    def acknowledged(self, group: str) -> int | None:
        """The offset the group's subscriber record holds (what retention reads), None without one."""
        for sub in self.controller.retention.subscribers(self.scope, STREAM):
            if sub.group == f"{self.scope}/{group}":
                return int(sub.cut[0][3])
        return None

    def config(self, start: int | None, retention: StreamDataRetention) -> ReaderGroupConfig:
        positions = None if start is None else self.controller.streams.resolve_cut(self.scope, STREAM, {0: start})
        return ReaderGroupConfig(streams=[StreamRange(scope=self.scope, stream=STREAM, start=positions)],
                                 automatic_checkpoint_interval_ms=0, retention_type=retention)

    def log(self, step: Step) -> None:
        with self.lock:
            self.steps.append(step)

    def step(self, group: str, kind: str, body) -> bool:
        """Run one step, log it with the acknowledged offset read back after it."""
        started = time.monotonic()
        try:
            body()
            ok = True
        except RilletError as e:
            ok = False
            with self.lock:
                self.failures[f"{kind} {type(e).__name__}"] += 1
        ended = time.monotonic()
        self.log(Step(group, kind, started, ended, self.acknowledged(group), ok, self.head()))
        return ok

    def an_earlier_cut(self, at_least: int | None = None, lag: bool = False) -> int:
        """An event boundary between ``at_least`` (the head by default) and the tail; with ``lag``, in the
        lower half, so a group stays behind and retention has something to hold back. A publish passes
        its acknowledged offset, not the head: it moves on from where it read, whatever was truncated."""
        low, high = self.head() if at_least is None else at_least, self.tail()
        low = -(-low // EVENT_SIZE) * EVENT_SIZE
        if lag:
            high = low + (high - low) // 2
        return low if high <= low else random.randrange(low, high + 1, EVENT_SIZE)

    def guarded(self, name: str, body) -> threading.Thread:
        """A thread whose death is noted and stops the run."""
        def run_body() -> None:
            try:
                body()
            except BaseException as e:  # noqa: BLE001 - reported, and the run stops
                with self.lock:
                    self.notes.append(f"{name} died: {type(e).__name__}: {e}")
                self.stop.set()
        return threading.Thread(target=run_body, name=name, daemon=True)

    # -- actors ---------------------------------------------------------------------------------------

    def writer(self) -> None:
        name = segment_name(self.scope, STREAM, 0)
        while not self.stop.is_set():
            self.controller.segments.append(name, "w", self.events, 1, EVENT)
            self.events += 1
            time.sleep(0.005)

    def retention(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.controller.retention.cycle(self.scope, STREAM)
            except RilletError as e:
                with self.lock:
                    self.failures[f"cycle {type(e).__name__}"] += 1
            head = self.head()
            with self.lock:
                self.cycles.append(Cycle(started, time.monotonic(), head))
            time.sleep(random.uniform(0, 0.03))

    def group_thread(self, t: int) -> None:
        """A series of groups, a fresh name each, one after the other."""
        lifetime = 0
        while not self.stop.is_set():
            self.lifetime(f"g{t}-{lifetime}")
            lifetime += 1

    def lifetime(self, group: str) -> None:
        """Create the group, publish and sometimes reset it a few times, delete it (unless the run ends)."""
        groups = self.controller.reader_groups
        retention = random.choice([StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT,
                                   StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT])
        start = None if random.random() < 0.5 else self.an_earlier_cut()
        if not self.step(group, "create", lambda: groups.create(self.scope, group, self.config(start, retention))):
            return
        with self.lock:
            self.live.add(group)
        for _ in range(random.randint(2, 8)):
            if self.stop.is_set():
                return  # left live: the end check needs subscribers
            if random.random() < 0.2:
                back = None if random.random() < 0.3 else self.an_earlier_cut()
                self.step(group, "reset",
                          lambda back=back: groups.reset(self.scope, group, self.config(back, retention)))
            else:
                self.step(group, "publish", lambda: self.publish(group, retention))
            time.sleep(random.uniform(0, 0.02))
        with self.lock:
            self.live.discard(group)  # from here the group may be gone: the checker stops relying on it
        for _ in range(5):  # nothing else touches the group: a refusal shows among the failures
            if self.step(group, "delete", lambda: groups.delete(self.scope, group)):
                break

    def publish(self, group: str, retention: StreamDataRetention) -> None:
        """Acknowledge a cut between the group's acknowledged one and the tail."""
        offset = self.an_earlier_cut(self.acknowledged(group) or 0, lag=True)
        groups = self.controller.reader_groups
        if retention == StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT:
            cut = StreamCutBody(scope=self.scope, stream=STREAM,
                                positions=self.controller.streams.resolve_cut(self.scope, STREAM, {0: offset}))
            groups.update_truncation_cut(self.scope, group, cut)
            return
        groups.add_reader(self.scope, group, "r")  # a reset dropped it; adding it again is harmless
        groups.sync(self.scope, group, "r", SyncRequest())
        name = f"cp-{uuid.uuid4().hex[:8]}"
        groups.initiate_checkpoint(self.scope, group, name)
        groups.sync(self.scope, group, "r", SyncRequest(
            positions=[SegmentOffset(stream=f"{self.scope}/{STREAM}", segment_id=0, offset=offset)], checkpoint=name))


def check(steps: list[Step], cycles: list[Cycle]) -> list[str]:
    """Every truncation against every group that existed throughout it; and the head never moves back."""
    violations = []
    by_group: dict[str, list[Step]] = {}
    for s in sorted(steps, key=lambda s: s.start):
        by_group.setdefault(s.group, []).append(s)
    previous = 0
    for c in cycles:
        if c.head < previous:
            violations.append(f"head moved back from {previous} to {c.head} (cycle at {c.start:.3f})")
        previous = max(previous, c.head)
        for group, history in by_group.items():
            create = history[0]
            if create.kind != "create" or not create.ok or create.end >= c.start:
                continue
            if any(s.kind == "delete" and s.start < c.end for s in history):
                continue
            in_force = [s.offset for s in history if s.end <= c.start and s.offset is not None][-1:]
            overlapping = [s.offset for s in history if s.start < c.end and s.end > c.start and s.offset is not None]
            possible = in_force + overlapping
            if possible and c.head > max(possible):
                violations.append(f"cycle {c.start:.3f}-{c.end:.3f} truncated to {c.head} past {group}'s "
                                  f"acknowledged {max(possible)} (steps: "
                                  f"{[(s.kind, round(s.start, 3), round(s.end, 3), s.offset) for s in history]})")
    return violations


def _advances(steps: list[Step]) -> int:
    last: dict[str, int | None] = {}
    advanced = 0
    for s in sorted(steps, key=lambda s: s.start):
        before, last[s.group] = last.get(s.group), s.offset
        advanced += s.kind == "publish" and None not in (before, s.offset) and s.offset > before
    return advanced


def run(settings: Settings | None = None) -> Result:
    settings = settings or Settings()
    random.seed(settings.seed)
    server = MotoServer().start()
    try:
        deployment = Deployment(endpoint_url=server.url)
        create_resources(deployment)
        bind_all(deployment)
        controller = Controller.for_deployment(deployment, retention_settings=RetentionSettings(frequency_ms=1))
        scope = "cbr" + uuid.uuid4().hex[:8]
        controller.streams.create_scope(scope)
        policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10**9)
        controller.streams.create_stream(scope, STREAM, StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(1), retention_policy=policy))
        r = _Run(settings, controller, scope)
        started = time.monotonic()
        threads = [r.guarded("writer", r.writer), r.guarded("retention", r.retention),
                   *[r.guarded(f"group-{t}", lambda t=t: r.group_thread(t)) for t in range(settings.groups)]]
        for thread in threads:
            thread.start()
        r.stop.wait(settings.duration_s)
        r.stop.set()
        for thread in threads:
            thread.join(60)
        r.notes += [f"{t.name} still running at the end" for t in threads if t.is_alive()]
        # the end state: one more cycle, then exactly the live groups subscribe, none truncated past
        controller.retention.cycle(scope, STREAM)
        head = r.head()
        violations = check(r.steps, r.cycles)
        live = {f"{scope}/{g}" for g in r.live}
        subscribers = {s.group: int(s.cut[0][3]) for s in controller.retention.subscribers(scope, STREAM)}
        if set(subscribers) != live:
            violations.append(f"subscribers at the end {sorted(subscribers)} are not the live groups {sorted(live)}")
        # A create or reset at an explicit cut the head passed after this harness read it registers behind the
        # head (the controller accepts a start before the head, as it would an old saved cut): nothing of it
        # was truncated after it registered, so it is counted, not a violation.
        last = {f"{scope}/{s.group}": s for s in sorted(r.steps, key=lambda s: s.start)}
        behind = {g for g, o in subscribers.items() if g in last and o < last[g].head_after}
        violations += [f"final head {head} past {g}'s acknowledged {o}" for g, o in subscribers.items()
                       if head > o and g not in behind]
        behind_head = [f"{g} at {subscribers[g]}, head {last[g].head_after}" for g in sorted(behind)]
        heads = [c.head for c in r.cycles]
        truncations = sum(1 for a, b in zip([0, *heads], heads) if b > a)
        operations = Counter(f"{s.kind}{'' if s.ok else ' failed'}" for s in r.steps)
        return Result(settings, dict(operations), dict(r.failures), _advances(r.steps), len(r.cycles), truncations,
                      r.events, head, violations, behind_head, time.monotonic() - started, r.notes)
    finally:
        server.stop()


def report(result: Result) -> str:
    s, ops = result.settings, result.operations
    lines = [
        f"CBR history: {s.groups} group threads, {s.duration_s:.0f} s, seed {s.seed}",
        f"  events appended        {result.events}",
        "  group steps            " + ", ".join(f"{k} {ops.get(k, 0)}" for k in ("create", "publish", "reset",
                                                                                   "delete")),
        f"  cuts moved forward     {result.advances}",
        f"  steps refused          {dict(result.failures) or '-'}",
        f"  retention cycles       {result.cycles} ({result.truncations} truncations, final head {result.final_head})",
        f"  violations             {len(result.violations)}",
        f"  live, behind the head  {result.behind_head or '-'}",
        f"  wall time              {result.wall_s:.1f} s",
    ]
    lines += [f"  violation: {v}" for v in result.violations[:20]]
    lines += [f"  note: {n}" for n in result.notes]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Settings()
    parser.add_argument("--groups", type=int, default=d.groups, help="concurrent group threads")
    parser.add_argument("--duration", type=float, default=d.duration_s, help="seconds")
    parser.add_argument("--seed", type=int, default=d.seed)
    args = parser.parse_args()
    result = run(Settings(groups=args.groups, duration_s=args.duration, seed=args.seed))
    print(report(result))
    raise SystemExit(1 if result.violations or result.notes else 0)


if __name__ == "__main__":
    main()
