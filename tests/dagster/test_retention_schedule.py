"""The retention schedule launches work in proportion to what is due (tables of its own, so "nothing is
due" is true): no run while no stream has a retention policy, and one run per cycle, whatever the number
of buckets, over the buckets that hold streams; that run retains every stream in them. Every job runs
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


def test_one_run_per_cycle_retains_the_streams_of_every_occupied_bucket(empty, unique):
    mine, resource = empty
    controller = Controller.for_deployment(mine)
    buckets = _streams_in_two_buckets(controller, unique)

    request = _tick(resource)
    assert isinstance(request, RunRequest)
    assert request.run_config["ops"]["stream_retention"]["config"]["buckets"] == sorted(buckets.values())
    # the same tick names the same run (the daemon launches it once), the next cycle a new one
    assert _tick(resource).run_key == request.run_key
    assert _tick(resource, AT + datetime.timedelta(minutes=1)).run_key != request.run_key

    job = Definitions(assets=defs.assets, jobs=defs.jobs, resources={"rillet": resource}).resolve_job_def(
        "retention_job")
    result = job.execute_in_process(run_config=request.run_config)
    assert result.success
    for stream in buckets:
        assert {p.segment.segment_id: p.offset for p in controller.streams.head(unique, stream)} == {0: 200}
    (materialization,) = result.asset_materializations_for_node("stream_retention")  # one per run, not per bucket
    table = materialization.metadata["decisions"].value
    assert all(f"`{unique}/{stream}` | truncated" in table for stream in buckets)


def test_every_job_executes_in_process():
    for job in defs.get_repository_def().get_all_jobs():
        assert job.executor_def.name == "in_process", job.name


def test_the_standalone_instance_queues_runs_two_at_a_time(tmp_path):
    (tmp_path / "dagster.yaml").write_text(DAGSTER_INSTANCE)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 2
