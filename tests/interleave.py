"""A deterministic scheduler over the AWS requests of a few actors, for systematic interleaving tests.

Each actor is a function run in its own thread. Every DynamoDB or S3 request an actor makes first
stops and waits until the scheduler lets that actor go; at most one actor runs at a time, so a run is
fully decided by the sequence of actors the scheduler picks (its *schedule*). :func:`explore`
enumerates schedules depth-first (stateless model checking, as in CHESS): each run follows a prefix
of choices and then always picks the first actor that can go; afterwards the last choice point with
an untried actor is flipped. ``max_switches`` bounds how often a run switches away from an actor that
could have gone on (a preemption bound), which keeps the count of schedules polynomial while still
covering every interleaving with that few switches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import botocore.client
from dataplane_model import SimulatedCrash

_STEP_TIMEOUT_S = 60


@dataclass
class Actor:
    name: str
    run: Callable[[], object]
    # Dies (raises SimulatedCrash) instead of making a request for which this returns True; it gets
    # the request's operation name and how many requests of that name the actor made before it.
    crash_before: Callable[[str, int], bool] | None = None
    result: object = None
    error: BaseException | None = None
    operations: list[str] = field(default_factory=list)
    _go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    _thread: threading.Thread | None = None
    _done: bool = False


class _Run:
    """One execution of the actors under a schedule chosen step by step."""

    def __init__(self, actors: list[Actor], choose: Callable[[list[str], str | None], str]) -> None:
        self.actors = {a.name: a for a in actors}
        self.choose = choose
        self.parked = threading.Condition()
        self.waiting: set[str] = set()
        self.by_thread: dict[int, Actor] = {}

    def before_request(self, operation: str) -> None:
        actor = self.by_thread.get(threading.get_ident())
        if actor is None:
            return  # the test's own thread (setup, checks): not scheduled
        count = actor.operations.count(operation)
        actor.operations.append(operation)
        with self.parked:
            self.waiting.add(actor.name)
            self.parked.notify_all()
        if not actor._go.acquire(timeout=_STEP_TIMEOUT_S):
            raise RuntimeError(f"actor {actor.name} was never scheduled")
        if actor.crash_before is not None and actor.crash_before(operation, count):
            raise SimulatedCrash(f"{actor.name} died before {operation} #{count + 1}")

    def _body(self, actor: Actor) -> None:
        self.by_thread[threading.get_ident()] = actor
        if not actor._go.acquire(timeout=_STEP_TIMEOUT_S):  # the first step starts the actor
            return
        try:
            actor.result = actor.run()
        except BaseException as e:  # noqa: BLE001 - kept for the test to judge
            actor.error = e
        finally:
            with self.parked:
                actor._done = True
                self.parked.notify_all()

    def _settled(self) -> bool:
        return all(a._done or a.name in self.waiting for a in self.actors.values())

    def execute(self) -> list[str]:
        schedule: list[str] = []
        for actor in self.actors.values():
            actor._thread = threading.Thread(target=self._body, args=(actor,), daemon=True)
            actor._thread.start()
        # Before its first step an actor counts as waiting.
        with self.parked:
            self.waiting.update(self.actors)
        last = None
        while True:
            with self.parked:
                if not self.parked.wait_for(self._settled, timeout=_STEP_TIMEOUT_S):
                    raise RuntimeError("an actor neither finished nor reached its next request")
                enabled = [n for n, a in self.actors.items() if not a._done and n in self.waiting]
                if not enabled:
                    break
                pick = self.choose(enabled, last)
                self.waiting.discard(pick)
            schedule.append(pick)
            last = pick
            self.actors[pick]._go.release()
        for actor in self.actors.values():
            actor._thread.join(_STEP_TIMEOUT_S)
        return schedule


@contextmanager
def _scheduled(run: _Run) -> Iterator[None]:
    original = botocore.client.BaseClient._make_api_call

    def patched(client, operation_name, api_params):
        run.before_request(operation_name)
        return original(client, operation_name, api_params)

    botocore.client.BaseClient._make_api_call = patched
    try:
        yield
    finally:
        botocore.client.BaseClient._make_api_call = original


def run_schedule(actors: list[Actor], plan: list[tuple[str, str | None]]) -> list[str]:
    """Run the actors by ``plan``: each ``(name, operation)`` lets that actor go until it is about to
    make ``operation`` (not made yet) or, for ``None``, until it finishes. After the plan, the actors
    that are left run one after the other to the end. Returns the schedule run."""
    pending = list(plan)
    by_name = {a.name: a for a in actors}

    def about_to(name: str) -> str | None:
        ops = by_name[name].operations
        return ops[-1] if ops else None

    def choose(enabled: list[str], last: str | None) -> str:
        while pending:
            name, stop = pending[0]
            if name in enabled and (stop is None or about_to(name) != stop or not by_name[name].operations):
                return name
            pending.pop(0)
        return last if last in enabled else enabled[0]

    run = _Run(actors, choose)
    with _scheduled(run):
        return run.execute()


class _Explorer:
    """Chooses by a forced prefix of a schedule, then by default; records the untried branches."""

    def __init__(self, prefix: list[str], switches: int, max_switches: int) -> None:
        self.prefix, self.switches, self.max_switches = prefix, switches, max_switches
        self.taken: list[str] = []
        self.branches: list[tuple[list[str], int]] = []

    def choose(self, enabled: list[str], last: str | None) -> str:
        depth = len(self.taken)
        if depth < len(self.prefix):
            pick = self.prefix[depth]
            assert pick in enabled, f"schedule {self.prefix} is not reproducible"
        else:
            pick = last if last in enabled else enabled[0]
            cost = self.switches + (1 if last in enabled else 0)  # leaving an actor that could go on
            if cost <= self.max_switches:
                self.branches += [(self.taken + [other], cost) for other in enabled if other != pick]
        self.taken.append(pick)
        return pick


def explore(make_actors: Callable[[], list[Actor]], check: Callable[[list[Actor], list[str]], None],
            max_switches: int = 2, max_runs: int = 2000) -> int:
    """Run every schedule with at most ``max_switches`` preemptions; ``check`` judges each run
    (``make_actors`` sets up a fresh case each time). Returns the number of schedules run."""
    stack: list[tuple[list[str], int]] = [([], 0)]  # (forced prefix of choices, its preemptions)
    runs = 0
    while stack:
        prefix, switches = stack.pop()
        runs += 1
        assert runs <= max_runs, f"more than {max_runs} schedules: shrink the case or the bound"
        explorer = _Explorer(prefix, switches, max_switches)
        actors = make_actors()
        run = _Run(actors, explorer.choose)
        with _scheduled(run):
            schedule = run.execute()
        check(actors, schedule)
        stack.extend(reversed(explorer.branches))
    return runs
