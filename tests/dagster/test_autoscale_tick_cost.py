"""The auto-scaling sensor's cost per tick (issue 39): flat in the number of idle auto-scaled streams.

Before, each tick read every auto-scaled stream's record, epoch and segment heads (17 requests at 4
idle streams, 161 at 40). Now the sensor reads the scale candidates due in the sharded index; a new
segment's first look comes once its longest rate window has passed, and an idle stream at its minimum
width then leaves the index. Time passing is the sensor's clock moved forward. Every AWS request of
the process is counted at botocore's endpoint (tables of the test's own).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

import botocore.endpoint
import pytest
from dagster import RunRequest, SkipReason, build_sensor_context

from dagster_project import autoscale as sensor_module
from dagster_project.autoscale import autoscale_sensor
from dataplane.shards import SHARDS
from rillet.models import ScalingPolicy, StreamConfiguration

LATER_MS = 21 * 60_000  # past the longest rate window (20 minutes) and the cooldown


# Test speed only (botocore's loader shared: see tests/conftest.py), and the auto-scaler's own defaults.
pytestmark = pytest.mark.usefixtures("fast_botocore_sessions", "default_scale_settings")


@pytest.fixture
def requests(monkeypatch) -> Counter:
    """Every AWS request sent from here on, by operation name."""
    sent: Counter = Counter()
    make_request = botocore.endpoint.Endpoint.make_request

    def counted(self, operation_model, request_dict):
        sent[operation_model.name] += 1
        return make_request(self, operation_model, request_dict)

    monkeypatch.setattr(botocore.endpoint.Endpoint, "make_request", counted)
    return sent


def _tick(resource, monkeypatch, at_ms: int):
    monkeypatch.setattr(sensor_module, "now_ms", lambda: at_ms)
    with build_sensor_context(resources={"rillet": resource}) as context:
        return autoscale_sensor(context)


def _autoscaled_streams(controller, scope: str, count: int, minimum: int = 1) -> None:
    controller.streams.create_scope(scope)
    for i in range(count):
        controller.streams.create_stream(scope, f"s{i}", StreamConfiguration(
            scaling_policy=ScalingPolicy.by_event_rate(10, 2, minimum)))


def _idle_tick_requests(resource, monkeypatch, requests: Counter, at_ms: int) -> int:
    """Requests of a tick after a first one, at ``at_ms``, looked at every segment that was due."""
    assert isinstance(_tick(resource, monkeypatch, at_ms), SkipReason)
    requests.clear()
    assert isinstance(_tick(resource, monkeypatch, at_ms + 30_000), SkipReason)
    return sum(requests.values())


def test_an_idle_tick_costs_the_same_with_4_and_40_autoscaled_streams(isolated, unique, requests, monkeypatch):
    _, resource = isolated
    controller = resource.controller()
    _autoscaled_streams(controller, unique, 4)
    at_4 = _idle_tick_requests(resource, monkeypatch, requests, int(time.time() * 1000) + LATER_MS)
    _autoscaled_streams(controller, unique + "x", 36)
    at_40 = _idle_tick_requests(resource, monkeypatch, requests, int(time.time() * 1000) + LATER_MS)
    assert at_40 <= 2 * at_4 + 3, (at_4, at_40)
    assert at_4 == at_40 == SHARDS  # one query per index shard (the bare key found empty), nothing per stream
    # settled: cold at their minimum width, their segments are in the index no more
    assert controller.autoscaler.candidates(int(time.time() * 1000) + 10 * LATER_MS) == []


def test_cold_neighbours_merge_without_any_append(isolated, unique, monkeypatch):
    """An idle segment signals nothing, yet its first look (due when its longest window has passed)
    finds it and its neighbour cold: they merge."""
    _, resource = isolated
    controller = resource.controller()
    _autoscaled_streams(controller, unique, 1, minimum=2)
    controller.streams.update_stream(unique, "s0", StreamConfiguration(
        scaling_policy=ScalingPolicy.by_event_rate(10, 2, 1)))  # marks both due now; they are young yet
    assert isinstance(_tick(resource, monkeypatch, int(time.time() * 1000)), SkipReason)
    outcome = _tick(resource, monkeypatch, int(time.time() * 1000) + LATER_MS)
    (request,) = [r for r in outcome if r.tags["rillet/stream"] == f"{unique}/s0"]
    assert isinstance(request, RunRequest) and request.run_key.endswith("-merge")
    assert request.run_config["ops"]["scale_stream"]["config"]["new_ranges"] == [[0.0, 1.0]]


def test_a_tick_out_of_time_leaves_the_streams_it_did_not_reach_due_for_the_next(isolated, unique, monkeypatch):
    """A burst of due candidates (a thousand streams created together reach their first look together)
    is decided over several ticks, each within its time budget, none lost."""
    _, resource = isolated
    controller = resource.controller()
    _autoscaled_streams(controller, unique, 3, minimum=2)
    later = int(time.time() * 1000) + LATER_MS
    due = {name for name, _ in controller.autoscaler.candidates(later) if name.startswith(unique + "/")}
    assert len(due) == 6
    settings = controller.autoscaler.settings
    controller.autoscaler.settings = dataclasses.replace(settings, tick_budget_s=0.0)
    assert controller.autoscaler.tick(later) == []  # out of time before the first stream: nothing decided
    assert {n for n, _ in controller.autoscaler.candidates(later) if n.startswith(unique + "/")} == due
    controller.autoscaler.settings = settings
    controller.autoscaler.tick(later)  # the next tick, in time, looks at them all: at their minimum, they settle
    assert [n for n, _ in controller.autoscaler.candidates(later) if n.startswith(unique + "/")] == []
