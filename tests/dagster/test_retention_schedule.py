"""The retention schedule launches work in proportion to what is due (tables of its own, so "nothing is
due" is true): no run while no stream has a retention policy, and one run per occupied bucket each
cycle (issue 39: the buckets' runs queue side by side, so a cycle's time does not grow with the sum of
every stream's); each run retains every stream of its bucket. Every job runs
its ops in the run's own process (a process per op or per bucket bought nothing but load), and the
standalone instance queues runs, at most two at once."""

from __future__ import annotations

import datetime

import pytest
from dagster import (
    DagsterInstance,
    Definitions,
    QueuedRunCoordinator,
    RunRequest,
    SkipReason,
    build_schedule_context,
)

from controlplane.service import Controller
from controlplane.streams import _bucket
from dagster_project.definitions import defs
from dagster_project.resources import RilletDeployment
from dagster_project.retention import retention_schedule
from dataplane.deployment import Deployment
from rillet.framing import frame
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from rillet.names import segment_name
from standalone.resources import bind_all, create_resources
from standalone.stack import DAGSTER_INSTANCE

AT = datetime.datetime(2025, 3, 1, 12, 30, tzinfo=datetime.UTC)


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture
def empty(moto_server, deployment, unique):
    """Tables nobody else writes to: the schedule sees this test's streams only."""
    mine = Deployment(endpoint_url=moto_server.url, metadata_table=f"{unique}-meta",
                      segments_table=f"{unique}-seg", bucket=f"{unique}-seg")
    create_resources(mine)
    yield mine, RilletDeployment(endpoint_url=mine.endpoint_url, metadata_table=mine.metadata_table,
                                 segments_table=mine.segments_table, bucket=mine.bucket)
    bind_all(deployment)


def _tick(resource: RilletDeployment, at: datetime.datetime = AT):
    with build_schedule_context(scheduled_execution_time=at, resources={"rillet": resource}) as context:
        return retention_schedule(context)


def _streams_in_two_buckets(controller: Controller, scope: str) -> dict[str, int]:
    """Two streams with a size policy that land in different buckets, 200 bytes each."""
    controller.streams.create_scope(scope)
    buckets: dict[str, int] = {}
    for i in range(40):
        config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1), retention_policy=RetentionPolicy.by_size(0))
        bucket = _bucket(scope, f"s{i}", config)
        if bucket in buckets.values():
            continue
        controller.streams.create_stream(scope, f"s{i}", config)
        for n in range(2):
            controller.segments.append(segment_name(scope, f"s{i}", 0), "w", n, 1, frame(b"d" * 96))
        buckets[f"s{i}"] = bucket
        if len(buckets) == 2:
            return buckets
    raise AssertionError("40 names fell into one bucket")


def test_no_stream_with_a_retention_policy_launches_no_run(empty, unique):
    mine, resource = empty
    controller = Controller.for_deployment(mine)
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "plain", StreamConfiguration())  # no policy: not in the index
    assert isinstance(_tick(resource), SkipReason)


def test_one_run_per_occupied_bucket_retains_the_streams_of_its_bucket(empty, unique):
    mine, resource = empty
    controller = Controller.for_deployment(mine)
    buckets = _streams_in_two_buckets(controller, unique)

    requests = _tick(resource)
    assert isinstance(requests, list) and all(isinstance(r, RunRequest) for r in requests)
    assert [r.run_config["ops"]["stream_retention"]["config"]["buckets"] for r in requests] == [
        [b] for b in sorted(buckets.values())]
    # the same tick names the same runs (the daemon launches each once), the next cycle new ones
    assert [r.run_key for r in _tick(resource)] == [r.run_key for r in requests]
    assert not {r.run_key for r in _tick(resource, AT + datetime.timedelta(minutes=1))} & {r.run_key for r in requests}

    job = Definitions(assets=defs.assets, jobs=defs.jobs, resources={"rillet": resource}).resolve_job_def(
        "retention_job")
    by_bucket = {bucket: stream for stream, bucket in buckets.items()}
    for request in requests:
        result = job.execute_in_process(run_config=request.run_config)
        assert result.success
        (bucket,) = request.run_config["ops"]["stream_retention"]["config"]["buckets"]
        assert {p.segment.segment_id: p.offset for p in controller.streams.head(unique, by_bucket[bucket])} == {0: 200}
        (materialization,) = result.asset_materializations_for_node("stream_retention")  # one per run
        assert f"`{unique}/{by_bucket[bucket]}` | truncated" in materialization.metadata["decisions"].value


def test_every_job_executes_in_process():
    for job in defs.get_repository_def().get_all_jobs():
        assert job.executor_def.name == "in_process", job.name


def test_the_standalone_instance_queues_runs_two_at_a_time(tmp_path):
    (tmp_path / "dagster.yaml").write_text(DAGSTER_INSTANCE)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 2
