"""The watermark sensor's cost per tick (issue 39): flat in the number of idle watermarked streams, a
stream whose writers are gone leaves the watermark set, and a tick with much to do launches runs.

Every AWS request of the process is counted at botocore's endpoint (tables of the test's own, so the
tick sees only this test's streams).
"""

from __future__ import annotations

from collections import Counter

import botocore.endpoint
import pytest
from dagster import RunRequest, SkipReason, build_sensor_context

from dagster_project import watermarks as sensor_module
from dagster_project.watermarks import watermark_job, watermark_sensor
from dataplane.shards import SHARDS
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

TIMEOUT_MS = 120_000  # no writer falls silent on its own while a slow machine runs the test


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


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


def _tick(resource):
    with build_sensor_context(resources={"rillet": resource}) as context:
        return watermark_sensor(context)


def _watermarked_streams(controller, scope: str, count: int) -> list[str]:
    controller.streams.create_scope(scope)
    names = []
    for i in range(count):
        controller.streams.create_stream(scope, f"s{i}", StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(1), timestamp_aggregation_timeout_ms=TIMEOUT_MS))
        controller.segments.append(segment_name(scope, f"s{i}", 0), "w", 0, 1, frame(b"e"))
        controller.watermarks.note_time(scope, f"s{i}", "w", 1_000, {0: 5})
        names.append(f"{scope}/s{i}")
    return names


def _idle_tick_requests(resource, requests: Counter) -> int:
    """Requests of a tick after a first one computed every stream's watermark."""
    first = _tick(resource)
    assert isinstance(first, SkipReason) and "appended" in first.skip_message
    requests.clear()
    idle = _tick(resource)
    assert isinstance(idle, SkipReason) and idle.skip_message.startswith("0 stream(s) due")
    return sum(requests.values())


def test_an_idle_tick_costs_the_same_with_4_and_40_watermarked_streams(isolated, unique, requests):
    _, resource = isolated
    controller = resource.controller()
    _watermarked_streams(controller, unique, 4)
    at_4 = _idle_tick_requests(resource, requests)
    _watermarked_streams(controller, unique + "x", 36)
    at_40 = _idle_tick_requests(resource, requests)
    assert at_40 <= 2 * at_4 + 3, (at_4, at_40)
    assert at_4 == at_40 == SHARDS  # one query per index shard, nothing per stream
    assert len(controller.watermarks.candidates()) == 40  # all still in the watermark set


def test_a_stream_whose_writers_are_gone_leaves_the_watermark_set(isolated, unique, requests):
    _, resource = isolated
    controller = resource.controller()
    _watermarked_streams(controller, unique, 2)  # s0 goes silent (explicit times below), s1 closes
    assert isinstance(_tick(resource), SkipReason)
    watermarks = controller.watermarks
    assert {(unique, "s0"), (unique, "s1")} <= set(watermarks.candidates())

    # s1's writer closes: the next tick forgets it and takes s1 out of the set
    watermarks.remove_writer(unique, "s1", "w")
    assert watermarks.due() == [(unique, "s1")]
    _tick(resource)
    assert (unique, "s1") not in watermarks.candidates()
    assert controller.store.get_stream(unique, "s1").watermarked is None

    # s0's writer goes silent: its mark is due the instant it turns silent, and then s0 leaves
    heard = int(next(iter(watermarks._marks(unique, "s0"))).updated_ms)
    assert watermarks.due(now=heard + TIMEOUT_MS) == []
    assert watermarks.due(now=heard + TIMEOUT_MS + 1) == [(unique, "s0")]
    watermarks.run(now=heard + TIMEOUT_MS + 1)
    assert watermarks.candidates() == [] and watermarks._marks(unique, "s0") == []
    assert watermarks.last(unique, "s0").lower_ms == 1_000  # its watermarks stay

    # nothing is left to look at: a tick costs its shard queries only
    requests.clear()
    assert _tick(resource).skip_message.startswith("0 stream(s) due")
    assert sum(requests.values()) == SHARDS

    # a writer that comes back puts the stream back in the set
    controller.segments.append(segment_name(unique, "s0", 0), "w", 1, 1, frame(b"e"))
    watermarks.note_time(unique, "s0", "w", 2_000, {0: 10})
    assert (unique, "s0") in watermarks.candidates()
    _tick(resource)
    assert watermarks.last(unique, "s0").lower_ms == 2_000


def test_a_tick_with_more_due_than_it_computes_launches_runs(isolated, unique, monkeypatch):
    _, resource = isolated
    controller = resource.controller()
    names = _watermarked_streams(controller, unique, 6)
    monkeypatch.setattr(sensor_module, "INLINE_STREAMS", 2)
    outcome = _tick(resource)
    assert isinstance(outcome, list) and outcome and all(isinstance(r, RunRequest) for r in outcome)
    shards = [n for r in outcome for n in r.run_config["ops"]["compute_watermarks"]["config"]["shards"]]
    assert len(shards) == len(set(shards))  # each shard in one run
    assert all(controller.watermarks.last(*n.split("/")) is None for n in names)  # the tick computed none
    for request in outcome:
        assert watermark_job.execute_in_process(run_config=request.run_config,
                                                resources={"rillet": resource}).success
    assert all(controller.watermarks.last(*n.split("/")).lower_ms == 1_000 for n in names)
    assert controller.watermarks.due() == []


def test_a_tick_out_of_time_leaves_the_streams_it_did_not_reach_due_for_the_next(isolated, unique, monkeypatch):
    """A slow store (a loaded laptop's moto) cannot push a tick past Dagster's 60 s: the streams not
    started within the tick's budget are computed by a later tick, none lost."""
    _, resource = isolated
    controller = resource.controller()
    names = _watermarked_streams(controller, unique, 3)
    monkeypatch.setattr(sensor_module, "TICK_BUDGET_S", 0.0)
    outcome = _tick(resource)
    assert isinstance(outcome, SkipReason) and "appended 0" in outcome.skip_message
    assert sorted(f"{s}/{n}" for s, n in controller.watermarks.due()) == sorted(names)
    monkeypatch.setattr(sensor_module, "TICK_BUDGET_S", 20.0)
    _tick(resource)
    assert all(controller.watermarks.last(*n.split("/")).lower_ms == 1_000 for n in names)
    assert controller.watermarks.due() == []
