"""Every AWS call the Dagster jobs make is granted to the roles that run them (issue 28).

The maintenance jobs run in the daemon's task and the export's run in a task of its own; both roles hold
data.aws_iam_policy_document.dagster_jobs. Here the sensors and jobs run against moto (as in
tests/dagster) while every botocore call is recorded; each call is turned into the IAM action and the
resource AWS authorizes it on, and must be granted by that document. A call the code starts making
without a grant fails here instead of on AWS.
"""

from __future__ import annotations

import botocore.client
import pytest
from dagster import RunRequest, build_sensor_context
from test_terraform import TF_DIR, _classify, as_list, parse_terraform, statements

from controlplane.models import StreamRecord
from dagster_project.maintenance import (
    sweep_workflows_job,
    tier_segments_job,
    tiering_sensor,
    workflow_sweeper_sensor,
)
from dagster_project.resources import RilletDeployment
from dataplane.deployment import Deployment
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState
from standalone.resources import bind_all, create_resources

# Calls with no IAM action of their own: authorized per item or per key.
TRANSACT_ITEMS = {"ConditionCheck": "ConditionCheckItem", "Put": "PutItem", "Update": "UpdateItem",
                  "Delete": "DeleteItem", "Get": "GetItem"}
S3_ACTIONS = {"HeadObject": ["GetObject"], "ListObjectsV2": ["ListBucket"], "ListObjects": ["ListBucket"],
              "DeleteObjects": ["DeleteObject"], "CopyObject": ["GetObject", "PutObject"],
              "CreateMultipartUpload": ["PutObject"], "UploadPart": ["PutObject"],
              "CompleteMultipartUpload": ["PutObject"], "AbortMultipartUpload": ["AbortMultipartUpload"]}


@pytest.fixture
def isolated(moto_server, deployment):
    """Tables of its own, so the sensors see only this test's work; the session's binding is restored."""
    mine = Deployment(endpoint_url=moto_server.url, metadata_table="ij-metadata", segments_table="ij-segments",
                      bucket="ij-segments")
    create_resources(mine)
    resource = RilletDeployment(endpoint_url=mine.endpoint_url, metadata_table=mine.metadata_table,
                                segments_table=mine.segments_table, bucket=mine.bucket, chunk_target_bytes=64,
                                tier_min_age_ms=0)
    yield mine, resource
    bind_all(deployment)


@pytest.fixture
def recorded(monkeypatch):
    calls: list[tuple[str, str, dict]] = []
    original = botocore.client.BaseClient._make_api_call

    def record(self, operation_name, api_params):
        calls.append((self.meta.service_model.service_name, operation_name, dict(api_params)))
        return original(self, operation_name, api_params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", record)
    return calls


def _needed(call: tuple[str, str, dict], tables: dict[str, str]) -> list[tuple[str, str]]:
    """(resource kind as test_terraform._classify names it, IAM action) a call needs."""
    service, operation, params = call
    if service == "dynamodb":
        def kind(table: str, index: str | None = None) -> str:
            return tables[table] + ("-index" if index else "")
        if operation in ("TransactWriteItems", "TransactGetItems"):
            return [(kind(body["TableName"]), f"dynamodb:{TRANSACT_ITEMS[what]}")
                    for item in params["TransactItems"] for what, body in item.items()]
        if operation in ("BatchWriteItem", "BatchGetItem"):
            return [(kind(table), f"dynamodb:{operation}") for table in params["RequestItems"]]
        return [(kind(params["TableName"], params.get("IndexName")), f"dynamodb:{operation}")]
    if service == "s3":
        actions = S3_ACTIONS.get(operation, [operation])
        if operation.startswith("List"):
            assert params.get("Prefix", "").startswith("segments/"), f"a listing outside segments/: {params}"
            return [("bucket", f"s3:{a}") for a in actions]
        keys = [o["Key"] for o in params["Delete"]["Objects"]] if operation == "DeleteObjects" else [params["Key"]]
        assert all(k.startswith("segments/") for k in keys), f"an object outside segments/: {keys}"
        return [("objects", f"s3:{a}") for a in actions]
    raise AssertionError(f"a call to {service}:{operation}, which no statement reviews")


def _granted() -> set[tuple[str, str]]:
    tf = parse_terraform(TF_DIR)
    granted = set()
    for statement in statements(tf.data["aws_iam_policy_document"]["dagster_jobs"]):
        for resource in as_list(statement.get("resources")):
            granted |= {(_classify(resource), action) for action in as_list(statement.get("actions"))}
    return granted


def test_the_jobs_calls_are_granted(isolated, unique, recorded):
    mine, resource = isolated
    controller = resource.controller()
    # The sweeper finishing a stuck seal, and a delete: scope, streams, segments, their objects.
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    record = controller.store.get_stream(unique, "s")
    controller.streams._begin(record, StreamState.SEALING, {"name": "seal"})
    record.update(actions=[StreamRecord.pending_since.set(1)])
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(workflow_sweeper_sensor(context), RunRequest)
    assert sweep_workflows_job.execute_in_process(resources={"rillet": resource}).success

    # Tiering: inline bytes into a chunk object.
    store = SegmentStore(mine, StoreSettings(chunk_target=64, tier_min_age_ms=0))
    segment = f"{unique}/t/0"
    store.create(segment)
    for i in range(5):
        store.append(segment, "w", i, 1, frame(bytes([i]) * 20))
    sweeper_calls = list(recorded)
    recorded.clear()  # from here only the sensor's and the job's own calls
    with build_sensor_context(resources={"rillet": resource}) as context:
        request = tiering_sensor(context)
    assert isinstance(request, RunRequest)
    assert tier_segments_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource}).success
    tiering_calls = list(recorded)

    # Truncation and deletion of what tiering wrote (retention and a stream's deletion do these).
    store.seal(segment)
    store.truncate(segment, store.info(segment).length)
    store.delete(segment)
    tables = {mine.metadata_table: "metadata", mine.segments_table: "segments"}
    granted = _granted()
    calls = sweeper_calls + tiering_calls + list(recorded)
    needed = {need for call in calls for need in _needed(call, tables)}
    missing = sorted(needed - granted)
    assert {op for _, op, _ in tiering_calls} >= {"Query", "PutObject"}, "the recording saw the tiering job"
    assert not missing, f"dagster_jobs does not grant what the jobs call: {missing}"
