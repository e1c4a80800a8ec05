"""Auto-scaling end to end with synthetic traffic, on a stack of its own with short rate windows.

The stack's append workers decay the segments' rates over 1, 2, 3 and 4 s (RILLET_RATE_WINDOWS_S)
instead of 2, 5, 10 and 20 minutes; the test process reads the same rates with the same windows
(dataplane.rates.WINDOWS_S patched, AutoScaleSettings given explicitly). A stream scaled by event
rate (target 10 events/s, factor 2, minimum 1 segment) gets a burst from two writer threads well
above 5x the target: the appends mark the segment a scale candidate, and the auto-scaler splits it
(the Dagster sensor, which reads only marked segments, requests the run once, and scale_stream_job
applies it). The burst stops there; a trickle of events
goes to the halves; during the mute period every evaluation returns None although, without the mute,
the cold halves would already be merged (and not before they are older than the longest window);
after it, the halves merge back into one segment, which gets another trickle. Meanwhile a reader
group of two readers reads, and the recorded history shows every acknowledged event read exactly
once, with per-key order kept across the split and the merge.
"""

from __future__ import annotations

import threading
import time
import traceback

import pytest
from dagster import RunRequest, SkipReason, build_sensor_context

import rillet
from controlplane import autoscale as autoscale_module
from controlplane import models as control_models
from controlplane.autoscale import AutoScaleSettings, decide
from controlplane.service import Controller
from dagster_project.autoscale import autoscale_sensor, scale_stream_job
from dagster_project.resources import RilletDeployment
from dataplane import models as data_models
from dataplane import rates
from dataplane.deployment import Deployment
from rillet import ScalingPolicy, StreamConfiguration, UTF8StringSerializer
from rillet.names import segment_name
from rillet.reader_group import ReaderGroupManager, group_config
from standalone.resources import bind_all
from standalone.stack import Stack, StackConfig

try:
    from history import History, event_text
except ModuleNotFoundError:  # tests/ is a package
    from tests.history import History, event_text

SER = UTF8StringSerializer()
WINDOWS_S = (1.0, 2.0, 3.0, 4.0)
# The mute must outlast the split job (seconds on a busy machine) plus the longest window after the
# trickle that follows it, so that the halves get cold within it: 12 s (7 s flaked when the job took 5 s).
COOLDOWN_MS, MUTE_MS = 2_000, 12_000
SETTINGS = AutoScaleSettings(windows_ms=tuple(int(w * 1000) for w in WINDOWS_S), cooldown_ms=COOLDOWN_MS,
                             mute_ms=MUTE_MS)
TARGET = 10  # events/s per segment: hot above 50 on the 1 s window, cold below 10 (and 5 on the 4 s one)
WRITERS, KEYS, RATE_PER_WRITER = 2, 8, 40  # ~80 events/s in the burst
READERS = ("r1", "r2")


@pytest.fixture(scope="module")
def fast_stack():
    config = StackConfig.ephemeral(RILLET_RATE_WINDOWS_S=",".join(f"{w:g}" for w in WINDOWS_S),
                                   RILLET_SCALE_COOLDOWN_MS=str(COOLDOWN_MS), RILLET_SCALE_MUTE_MS=str(MUTE_MS))
    config.workers = {"controller": 2, "append": 2, "read": 2, "tails": 1}
    meta, data = control_models.MetadataItem.Meta, data_models.SegmentMeta.Meta
    previous = Deployment(region=meta.region, endpoint_url=meta.host, metadata_table=meta.table_name,
                          segments_table=data.table_name)
    with Stack(config) as stack:
        yield stack
    bind_all(previous)  # the stack bound the models to its own moto


@pytest.fixture
def short_windows(monkeypatch):
    """This process decays rates and decides with the stack's windows, cooldown and mute."""
    monkeypatch.setattr(rates, "WINDOWS_S", WINDOWS_S)
    monkeypatch.setattr(autoscale_module.AutoScaleSettings, "from_env", classmethod(lambda cls: SETTINGS))


class Traffic:
    def __init__(self, url: str, scope: str) -> None:
        self.factory = rillet.EventStreamClientFactory(scope, url)
        self.history = History()
        self.errors: list[str] = []
        self.stop_writing = threading.Event()
        self.stop_reading = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, name: str, body) -> None:
        def run() -> None:
            try:
                body()
            except BaseException:  # noqa: BLE001 - reported by the test
                self.errors.append(f"{name}: {traceback.format_exc()}")
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def writer(self, w: int, first_seq: int = 0, events: int | None = None, rate: float = RATE_PER_WRITER) -> None:
        writer = self.factory.create_event_writer("s", SER, rillet.EventWriterConfig(max_latency_ms=10))
        futures = []
        i, started = 0, time.monotonic()
        while not self.stop_writing.is_set() and (events is None or i < events):
            key, seq = i % KEYS, first_seq + i // KEYS
            event = event_text(w, key, seq)
            self.history.attempt(event)
            future = writer.write_event(event, routing_key=f"w{w}-k{key}")
            future.add_done_callback(lambda f, e=event: f.exception() is None and self.history.acknowledge(e))
            futures.append((event, future))
            i += 1
            time.sleep(max(0.0, started + i / rate - time.monotonic()))  # paced
        writer.flush()
        for event, future in futures:
            if future.exception(timeout=30) is not None:
                self.errors.append(f"writer {w}: {event} failed: {future.exception()!r}")
        writer.close()

    def join(self, prefix: str) -> None:
        for thread in [t for t in self.threads if t.name.startswith(prefix)]:
            thread.join(30)
            assert not thread.is_alive(), thread.name

    def trickle(self, first_seq: int) -> None:
        """Every writer writes one event per key, slowly (a continuation of its sequences)."""
        for w in range(WRITERS):
            self.start(f"trickle-{first_seq}-{w}", lambda w=w: self.writer(w, first_seq, events=KEYS, rate=20))

    def reader(self, reader_id: str) -> None:
        reader = self.factory.create_reader(reader_id, "g", SER)
        while not self.stop_reading.is_set():
            read = reader.read_next_event(timeout_ms=200)
            if read is not None and not read.is_checkpoint:
                self.history.read(reader_id, read.event)
        reader.close()


def _wait_for_decision(controller: Controller, scope: str, limit_s: float):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        epoch, decision = controller.autoscaler.evaluate(scope, "s", int(time.time() * 1000))
        if decision is not None:
            return epoch, decision
        time.sleep(0.25)
    raise AssertionError(f"no scaling decision within {limit_s} s")


def _request_through_dagster(resource: RilletDeployment, scope: str, epoch: int, decision,
                             limit_s: float = 10) -> RunRequest:
    """The sensor asks for the run once: its segments' marks move past the next tick (they are looked at
    again after ``decided_recheck_ms``, with the same run key, in case the run did not apply it). Its
    ticks may skip for a moment first: on a loaded machine the burst's rate over the 2 s window can dip
    back under the threshold between the controller's decision and the sensor's tick."""
    deadline = time.monotonic() + limit_s
    while True:
        with build_sensor_context(resources={"rillet": resource}) as context:
            requests = autoscale_sensor(context)
        if not isinstance(requests, SkipReason) or time.monotonic() >= deadline:
            break
        time.sleep(0.25)
    assert isinstance(requests, list) and len(requests) == 1, requests
    (request,) = requests
    assert isinstance(request, RunRequest)
    assert request.run_key == f"scale-{scope}/s-{epoch}-{decision.key}"
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(autoscale_sensor(context), SkipReason)
    config = request.run_config["ops"]["scale_stream"]["config"]
    assert config["seal"] == decision.seal and [tuple(r) for r in config["new_ranges"]] == decision.new_ranges
    return request


def _run_job(resource: RilletDeployment, request: RunRequest, epoch: int) -> None:
    result = scale_stream_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource})
    assert result.success
    assert result.output_for_node("scale_stream") == f"scaled to epoch {epoch + 1}"


@pytest.mark.timeout(240)
def test_a_burst_splits_the_stream_and_the_cold_halves_merge_back_without_flapping(fast_stack, short_windows,
                                                                                     unique):
    url, scope = fast_stack.controller_url, unique
    manager = rillet.StreamManager(url)
    manager.create_scope(scope)
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(TARGET, 2, 1)))
    ReaderGroupManager(scope, url).create_reader_group("g", group_config(
        [f"{scope}/s"], automatic_checkpoint_interval_ms=0, group_refresh_time_ms=200))
    resource = RilletDeployment(endpoint_url=fast_stack.moto.url)
    traffic = Traffic(url, scope)
    try:
        # the control plane in process, on the stack's moto (the fixture restores the models' binding)
        controller = Controller.for_deployment(Deployment(endpoint_url=fast_stack.moto.url))
        controller.autoscaler.settings = SETTINGS
        with build_sensor_context(resources={"rillet": resource}) as context:
            assert isinstance(autoscale_sensor(context), SkipReason)  # no traffic yet
        for r in READERS:
            traffic.start(r, lambda r=r: traffic.reader(r))
        for w in range(WRITERS):
            traffic.start(f"writer-{w}", lambda w=w: traffic.writer(w))

        # the burst makes the only segment hot: split into two halves
        epoch, split = _wait_for_decision(controller, scope, limit_s=20)
        assert epoch == 0 and len(split.seal) == 1
        assert split.new_ranges == [(0.0, 0.5), (0.5, 1.0)], split  # min(factor 2, rate / target)
        request = _request_through_dagster(resource, scope, epoch, split)
        traffic.stop_writing.set()  # the burst ends
        traffic.join("writer-")
        _run_job(resource, request, epoch)
        split_ms = controller.store.get_epoch(scope, "s", 1).created_ms
        traffic.stop_writing.clear()
        traffic.trickle(first_seq=5_000)  # a few events in the halves, far below the target

        # during the mute nothing is decided, although without it the halves would merge once cold
        unmuted = AutoScaleSettings(windows_ms=SETTINGS.windows_ms, cooldown_ms=COOLDOWN_MS, mute_ms=0)
        would_have = []
        while time.time() * 1000 < split_ms + MUTE_MS - 300:
            now = int(time.time() * 1000)
            epoch, decision = controller.autoscaler.evaluate(scope, "s", now)
            assert (epoch, decision) == (1, None), decision
            current = controller.streams.current_segments(scope, "s")
            infos = [(s, controller.segments.info(segment_name(scope, "s", s.segment_id))) for s in current]
            counterfactual = decide(ScalingPolicy.by_event_rate(TARGET, 2, 1), infos, now, split_ms, unmuted)
            assert counterfactual is None or len(counterfactual.new_ranges) == 1, counterfactual  # never a split
            would_have.append((now - split_ms, counterfactual is not None))
            time.sleep(0.3)
        assert any(merge for _, merge in would_have), f"the halves never got cold within the mute: {would_have}"
        assert not any(merge for age, merge in would_have if age < SETTINGS.windows_ms[3]), \
            f"halves younger than the longest window must not merge: {would_have}"

        # after the mute: the two cold halves merge back into one segment
        epoch, merge = _wait_for_decision(controller, scope, limit_s=20)
        assert epoch == 1 and merge.new_ranges == [(0.0, 1.0)] and len(merge.seal) == 2, merge
        request = _request_through_dagster(resource, scope, epoch, merge)
        traffic.join("trickle-")
        _run_job(resource, request, epoch)
        assert [(s.low, s.high) for s in controller.streams.current_segments(scope, "s")] == [(0.0, 1.0)]
        # right after the merge: muted again, and one segment is the minimum anyway
        assert controller.autoscaler.evaluate(scope, "s", int(time.time() * 1000)) == (2, None)
        traffic.trickle(first_seq=10_000)  # and a few in the merged segment
        deadline = time.monotonic() + 40
        while (traffic.history.unread_acknowledged() or any(t.is_alive() for t in traffic.threads
                                                            if t.name not in READERS)) \
                and time.monotonic() < deadline and not traffic.errors:
            time.sleep(0.2)
        time.sleep(1.0)  # let a late duplicate show up
    finally:
        traffic.stop_writing.set()
        traffic.stop_reading.set()
        for t in traffic.threads:
            t.join(15)
    assert not traffic.errors, "\n".join(traffic.errors)
    assert len(traffic.history.acknowledged) == len(traffic.history.attempted) > 100
    problems = traffic.history.check()
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])
    info = manager.get_stream_info(scope, "s")
    assert info.current_epoch == 2 and len(info.current_segments) == 1
