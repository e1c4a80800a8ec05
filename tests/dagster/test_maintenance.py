"""The Dagster sensors and jobs, evaluated with Dagster's own test APIs against moto."""

from dagster import RunRequest, SkipReason, build_sensor_context

from controlplane.models import StreamRecord
from dagster_project.definitions import defs
from dagster_project.maintenance import (
    sweep_workflows_job,
    tier_segments_job,
    tiering_sensor,
    workflow_sweeper_sensor,
)
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState


def test_definitions_load_with_every_job_and_sensor():
    repository = defs.get_repository_def()
    assert {j.name for j in repository.get_all_jobs()} >= {"sweep_workflows_job", "tier_segments_job"}
    assert {s.name for s in repository.sensor_defs} == {"workflow_sweeper_sensor", "tiering_sensor",
                                                         "txn_timeout_sensor", "autoscale_sensor", "watermark_sensor",
                                                         "reader_lease_sensor", "run_failure_reporter"}
    assert {s.name for s in repository.schedule_defs} == {"retention_schedule"}


def test_sweeper_sensor_requests_a_run_only_for_a_stuck_workflow_and_the_job_finishes_it(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(workflow_sweeper_sensor(context), SkipReason)

    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    record = controller.store.get_stream(unique, "s")
    # A seal that crashed right after its first step, long enough ago to be past the grace period.
    controller.streams._begin(record, StreamState.SEALING, {"name": "seal"})
    record.update(actions=[StreamRecord.pending_since.set(1)])

    with build_sensor_context(resources={"rillet": resource}) as context:
        request = workflow_sweeper_sensor(context)
    assert isinstance(request, RunRequest)
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert workflow_sweeper_sensor(context).run_key == request.run_key  # the same work, the same key

    result = sweep_workflows_job.execute_in_process(resources={"rillet": resource})
    assert result.success
    assert result.output_for_node("sweep_workflows") == 1
    assert controller.store.get_stream(unique, "s").state == StreamState.SEALED.value
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(workflow_sweeper_sensor(context), SkipReason)


def test_tiering_sensor_finds_due_segments_and_the_job_moves_their_bytes(isolated, unique):
    mine, resource = isolated
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(tiering_sensor(context), SkipReason)

    store = SegmentStore(mine, StoreSettings(chunk_target=64, tier_min_age_ms=0))
    segment = f"{unique}/s/0"
    store.create(segment)
    blocks = [frame(bytes([i]) * 20) for i in range(5)]
    for i, block in enumerate(blocks):
        store.append(segment, "w", i, 1, block)  # 5 x 24 bytes inline: past the 64-byte chunk target

    with build_sensor_context(resources={"rillet": resource}) as context:
        request = tiering_sensor(context)
    assert isinstance(request, RunRequest)
    assert request.run_config["ops"]["tier_segments"]["config"]["segments"] == [segment]

    result = tier_segments_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource})
    assert result.success
    assert result.output_for_node("tier_segments") == sum(len(b) for b in blocks)
    assert store.read(segment, 0).data == b"".join(blocks)
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(tiering_sensor(context), SkipReason)
