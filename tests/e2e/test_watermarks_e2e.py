"""Watermarks end to end: two EventStreamWriters note their event times, a reader asks for its time window.

Writer A is fast (18 batches of three events, event time +30 ms per event, 40 ms between batches),
writer B slow (10 batches of one event, +10 ms, 120 ms between batches). Each writes a batch of events that carry
their own event time, then calls note_time(t) with the time of its last event. A third thread runs
the watermark computation every 150 ms (controller.watermarks.compute in process against the stack's
moto). A reader of a reader group reads concurrently, a little slower than they write, and after
every event asks
get_current_time_window("scope/stream"):

* every event read is no later than the window's upper bound, when there is one;
* every event read is no earlier than any lower bound observed before it (the window brackets);
* the lower bounds never decrease, and both bounds are seen.

A writer's batch with its note_time and a computation exclude each other (the writers' batches may
overlap). The upper bound
promises that events *before* a watermark's cut are no later than its highest noted time; a writer
that appended events after noting time but before another writer's later position would break that
promise for its own later event times, so the test lets each computation see only noted batches.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import traceback

import pytest
from dagster import SkipReason, build_sensor_context

import rillet
from controlplane import models as control_models
from controlplane.service import Controller
from dagster_project.resources import RilletDeployment
from dagster_project.watermarks import watermark_sensor
from dataplane import models as data_models
from dataplane.deployment import Deployment
from rillet import ScalingPolicy, StreamConfiguration, UTF8StringSerializer
from rillet.reader_group import ReaderGroupManager, TimeWindow, group_config
from standalone.resources import bind_all

SER = UTF8StringSerializer()
T0 = 1_700_000_000_000
LIMIT_S = 60
READ_PAUSE_S = 0.015
# name -> (batches, events per batch, event-time step per event in ms, pause between batches in s)
# A writes for about twice as long as B, so that B closes while A is still writing, however the load
# stretches their round trips (at 18 batches the two finished together under load, and B's close
# could come last, with no writer left to move the watermark past its mark).
WRITERS = {"A": (36, 3, 30, 0.04), "B": (10, 1, 10, 0.12)}


@contextlib.contextmanager
def bound_to(stack):
    meta, data = control_models.MetadataItem.Meta, data_models.SegmentMeta.Meta
    previous = Deployment(region=meta.region, endpoint_url=meta.host, metadata_table=meta.table_name,
                          segments_table=data.table_name)
    try:
        yield Controller.for_deployment(Deployment(endpoint_url=stack.moto.url))
    finally:
        bind_all(previous)


class BatchesAndComputations:
    """Writers' batches may run together; a computation waits for the running ones and holds new ones
    back (so it is never starved), then runs alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._batches = 0
        self._computing = False
        self._waiting = 0

    @contextlib.contextmanager
    def batch(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._computing and not self._waiting)
            self._batches += 1
        try:
            yield
        finally:
            with self._cond:
                self._batches -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def computation(self):
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: self._batches == 0 and not self._computing)
            self._waiting -= 1
            self._computing = True
        try:
            yield
        finally:
            with self._cond:
                self._computing = False
                self._cond.notify_all()


def _time(event: str) -> int:
    return int(event.split(":")[3])


@pytest.mark.timeout(180)
def test_readers_time_windows_bracket_the_event_times(stack, url, unique):
    scope, stream = unique, f"{unique}/s"
    manager = rillet.StreamManager(url)
    manager.create_scope(scope)
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2),
                                                          timestamp_aggregation_timeout_ms=30_000))
    factory = rillet.EventStreamClientFactory(scope, url)
    ReaderGroupManager(scope, url).create_reader_group("g", group_config(
        [stream], automatic_checkpoint_interval_ms=0, group_refresh_time_ms=200))
    reader = factory.create_reader("r1", "g", SER)
    assert reader.get_current_time_window(stream) == TimeWindow(None, None)  # no writer noted time yet

    turns = BatchesAndComputations()
    stop = threading.Event()
    errors: list[str] = []
    written: list[str] = []
    noted: dict[str, list[int]] = {name: [] for name in WRITERS}
    computed = []

    def guarded(name, body):
        def run():
            try:
                body()
            except BaseException:  # noqa: BLE001 - reported by the test
                errors.append(f"{name}: {traceback.format_exc()}")
        return threading.Thread(target=run, name=name, daemon=True)

    def write(name: str) -> None:
        batches, per_batch, step, pause = WRITERS[name]
        writer = factory.create_event_writer("s", SER, rillet.EventWriterConfig(max_latency_ms=2))
        t, seq = T0, 0
        for _ in range(batches):
            with turns.batch():
                futures = []
                for _ in range(per_batch):
                    t += step
                    event = f"{name}:k{seq % 4}:{seq}:{t}"
                    futures.append(writer.write_event(event, routing_key=f"{name}{seq % 4}"))
                    written.append(event)
                    seq += 1
                for f in futures:
                    f.result(timeout=30)
                writer.note_time(t)
                noted[name].append(t)
            time.sleep(pause)
        writer.close()  # removes its mark

    stack_controller = {}

    def compute() -> None:
        with bound_to(stack) as controller:
            stack_controller["c"] = controller
            while not stop.is_set():
                with turns.computation():
                    watermark = controller.watermarks.compute(scope, "s")
                if watermark is not None:
                    computed.append(watermark)
                time.sleep(0.15)

    threads = [guarded(f"writer-{n}", lambda n=n: write(n)) for n in WRITERS] + [guarded("watermarks", compute)]
    for thread in threads:
        thread.start()

    reads: list[tuple[str, TimeWindow]] = []
    started = time.monotonic()
    try:
        idle_since = None
        while time.monotonic() - started < LIMIT_S and not errors:
            if not any(t.is_alive() for t in threads[:len(WRITERS)]):
                stop.set()  # the writers are done: stop computing
            read = reader.read_next_event(timeout_ms=200)
            if read is None:
                if stop.is_set() and not any(t.is_alive() for t in threads) and len(reads) >= len(written):
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 1.0:
                        break
                continue
            idle_since = None
            if not read.is_checkpoint:
                reads.append((read.event, reader.get_current_time_window(stream)))
                time.sleep(READ_PAUSE_S)  # a reader slower than the writers: behind the latest watermarks
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        reader.close()
    assert not errors, "\n".join(errors)
    assert sorted(e for e, _ in reads) == sorted(written), "every written event is read once"
    assert len(computed) >= 4 and all(b.lower_ms > a.lower_ms for a, b in itertools.pairwise(computed))

    latest_lower = None
    highest_read = None
    lowers = []
    for event, window in reads:
        t = _time(event)
        if latest_lower is not None:
            assert t >= latest_lower, f"{event} read after the window's lower bound was {latest_lower}"
        highest_read = t if highest_read is None else max(highest_read, t)
        if window.upper_ms is not None:
            assert highest_read <= window.upper_ms, f"{event} (and earlier ones) read, upper bound {window.upper_ms}"
        if window.lower_ms is not None:
            assert latest_lower is None or window.lower_ms >= latest_lower, "a lower bound decreased"
            latest_lower = window.lower_ms
        else:
            assert latest_lower is None, "the lower bound disappeared"
        lowers.append(window.lower_ms)
    assert sum(w.lower_ms is not None for _, w in reads) >= 10, [w for _, w in reads][:20]
    assert sum(w.upper_ms is not None for _, w in reads) >= 10, [w for _, w in reads][:20]
    # the watermarks follow the slow writer while it writes (B's times are the lower bounds, A's the upper),
    # and once it closed (which removes its mark) the fast one alone moves them on
    assert any(w.lower_ms <= noted["B"][-1] < w.upper_ms for w in computed)
    assert computed[-1].lower_ms > noted["B"][-1]

    # the Dagster sensor does the same work on its tick (nothing new here: the writers left)
    try:
        with build_sensor_context(resources={"rillet": RilletDeployment(endpoint_url=stack.moto.url)}) as context:
            outcome = watermark_sensor(context)
        assert isinstance(outcome, SkipReason) and "appended" in outcome.skip_message
        assert stream not in outcome.skip_message
    finally:
        bind_all(Deployment(endpoint_url=stack.moto.url))
