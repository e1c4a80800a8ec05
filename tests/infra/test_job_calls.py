"""Every AWS call the Dagster jobs make is granted to the roles that run them (issues 28 and 37).

The maintenance jobs run in the daemon's task and the export's run in a task of its own; both roles hold
data.aws_iam_policy_document.dagster_jobs. Here every sensor, schedule and job of the code location runs
against moto (as in tests/dagster) while every botocore call is recorded; each call is turned into the
IAM action and the resource AWS authorizes it on, and must be granted by that document. A call the code
starts making without a grant fails here instead of on AWS. (The export asset's EMR Serverless calls are
the run role's dagster_submit_emr document, reviewed in test_dagster_emr.py; the run-failure sensor
makes no AWS call.) Both run in each mode of call_modes.py: with sub-logs, the deployment's default or a
stream's own choice, the watermark sensor's append, tiering, scaling, retention and deletion work on
sub-log segments.
"""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import replace

import botocore.client
import pytest
from call_modes import (
    CALLS_UNCHANGED,
    MODES,
    STREAM_SUBLOGS,
    Mode,
    code_environments,
    environment,
    variables_reaching,
)
from dagster import Definitions, RunRequest, SkipReason, build_schedule_context, build_sensor_context
from test_terraform import FUNCTIONS, TF_DIR, _classify, as_list, parse_terraform, statements

from controlplane.models import StreamRecord, TxnRecord, stream_pk, txn_sk
from dagster_project.autoscale import autoscale_sensor, scale_stream_job
from dagster_project.definitions import defs
from dagster_project.maintenance import (
    sweep_workflows_job,
    tier_segments_job,
    tiering_sensor,
    workflow_sweeper_sensor,
)
from dagster_project.reader_groups import expire_reader_leases_job, reader_lease_sensor
from dagster_project.resources import RilletDeployment
from dagster_project.retention import retention_schedule
from dagster_project.transactions import abort_expired_transactions_job, txn_timeout_sensor
from dagster_project.watermarks import watermark_sensor
from dataplane.deployment import Deployment
from dataplane.models import META_KEY, SegmentMeta
from dataplane.segment_store import SegmentStore, StoreSettings
from rillet.framing import frame
from rillet.models import (
    ReaderGroupConfig,
    RetentionPolicy,
    ScalingPolicy,
    StreamConfiguration,
    StreamRange,
    StreamState,
)
from rillet.names import segment_name
from standalone.resources import bind_all, create_resources

# Calls with no IAM action of their own: authorized per item or per key.
TRANSACT_ITEMS = {"ConditionCheck": "ConditionCheckItem", "Put": "PutItem", "Update": "UpdateItem",
                  "Delete": "DeleteItem", "Get": "GetItem"}
S3_ACTIONS = {"HeadObject": ["GetObject"], "ListObjectsV2": ["ListBucket"], "ListObjects": ["ListBucket"],
              "DeleteObjects": ["DeleteObject"], "CopyObject": ["GetObject", "PutObject"],
              "CreateMultipartUpload": ["PutObject"], "UploadPart": ["PutObject"],
              "CompleteMultipartUpload": ["PutObject"], "AbortMultipartUpload": ["AbortMultipartUpload"]}


@pytest.fixture(params=MODES, ids=lambda mode: mode.name)
def mode(request, monkeypatch) -> Mode:
    """The deployment's mode, in the environment Terraform gives the Dagster tasks in it."""
    tf = parse_terraform(TF_DIR)
    for name, value in environment(tf, tf.locals["dagster_environment"], request.param).items():
        monkeypatch.setenv(name, value)
    return request.param


@pytest.fixture
def isolated(moto_server, deployment, mode):
    """Tables of its own, so the sensors see only this test's work; the session's binding is restored."""
    suffix = uuid.uuid4().hex[:12]
    mine = Deployment(endpoint_url=moto_server.url, metadata_table=f"ij-metadata-{suffix}",
                      segments_table=f"ij-segments-{suffix}", bucket=f"ij-segments-{suffix}")
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


def _choices(tf_mode: Mode) -> dict[str, int | None]:
    """The tests' streams by name -> the sublog_shards they choose: one leaving it to the deployment,
    and on the default deployment (the chain) one choosing sub-logs too."""
    if tf_mode.value(parse_terraform(TF_DIR), "sublog_shards"):
        return {"s": None}
    return {"s": None, "sublogs": STREAM_SUBLOGS}


def _store(mine: Deployment) -> SegmentStore:
    """A segment store as the jobs' (StoreSettings.from_env: the deployment's sub-log mode), tiering at once."""
    return SegmentStore(mine, replace(StoreSettings.from_env(), chunk_target=64, tier_min_age_ms=0))


def _batched(calls: list[tuple[str, str, dict]], mine: Deployment) -> bool:
    """Whether the calls commit a transaction on the segments table: the appends of a sub-log segment do."""
    return any(body.get("TableName") == mine.segments_table for _, op, params in calls if op == "TransactWriteItems"
               for item in params["TransactItems"] for body in item.values())


def test_every_variable_the_code_reads_is_reviewed():
    """A Terraform variable the functions' or the Dagster tasks' environment is set from either has a mode
    of call_modes.MODES here (it may change the calls) or is in CALLS_UNCHANGED (it changes none)."""
    tf = parse_terraform(TF_DIR)
    reaching = {v for env in code_environments(tf, FUNCTIONS).values() for v in variables_reaching(tf, env)}
    moded = {v for mode in MODES for v in mode.variables}
    assert reaching - moded - set(CALLS_UNCHANGED) == set(), "variables the code reads, in no mode of MODES"
    assert moded <= reaching and not moded & set(CALLS_UNCHANGED), (moded, sorted(reaching))


def test_the_jobs_calls_are_granted(isolated, mode, unique, recorded):
    mine, resource = isolated
    controller = resource.controller()
    choices = _choices(mode)
    # The sweeper finishing a stuck seal, and a delete: scope, streams, segments, their objects.
    controller.streams.create_scope(unique)
    for name, shards in choices.items():
        controller.streams.create_stream(unique, name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2),
                                                                           sublog_shards=shards))
        record = controller.store.get_stream(unique, name)
        controller.streams._begin(record, StreamState.SEALING, {"name": "seal"})
        record.update(actions=[StreamRecord.pending_since.set(1)])
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(workflow_sweeper_sensor(context), RunRequest)
    assert sweep_workflows_job.execute_in_process(resources={"rillet": resource}).success
    sweeper_calls = list(recorded)

    # Tiering: inline bytes into a chunk object, of segments in the modes of the streams above (appended
    # as the append function does: not the jobs' calls).
    store = _store(mine)
    segments = [f"{unique}/t-{name}/0" for name in choices]
    for segment, shards in zip(segments, choices.values(), strict=True):
        store.create(segment, sublogs=True, sublog_shards=shards)
        before = len(recorded)
        for i in range(5):
            store.append(segment, "w", i, 1, frame(bytes([i]) * 20))
        sublogs = store.settings.sublog_shards if shards is None else shards
        assert _batched(recorded[before:], mine) == bool(sublogs), f"{segment} is not in the mode chosen"
    recorded.clear()  # from here only the sensor's and the job's own calls
    with build_sensor_context(resources={"rillet": resource}) as context:
        request = tiering_sensor(context)
    assert isinstance(request, RunRequest)
    assert tier_segments_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource}).success
    tiering_calls = list(recorded)

    # Truncation and deletion of what tiering wrote (retention and a stream's deletion do these).
    for segment in segments:
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


def _sensor(sensor, resource: RilletDeployment):
    with build_sensor_context(resources={"rillet": resource}) as context:
        return sensor(context)


def _transact_kinds(calls: list[tuple[str, str, dict]]) -> set[str]:
    return {what for _, op, params in calls if op == "TransactWriteItems"
            for item in params["TransactItems"] for what in item}


def test_every_sensor_schedule_and_job_is_granted(isolated, mode, unique, recorded):
    """The branches the first test does not take: tiering a run below the head's chunk_end (a
    ConditionCheck instead of an Update in the chunk's transaction), auto-scaling, retention, reader
    leases, transaction timeouts and watermarks, each sensor or schedule with the job it launches. Reader
    leases and transaction timeouts touch no stream segment, so they run in the default mode only."""
    mine, resource = isolated
    controller = resource.controller()
    streams = controller.streams
    streams.create_scope(unique)
    choices = _choices(mode)

    # Tiering, the ConditionCheck branch: a head record whose chunk_end lies past the inline entries to
    # tier (chunk_end is the end of the highest chunk ever saved), so saving the chunk does not move it.
    store = _store(mine)
    for name, shards in choices.items():
        segment = f"{unique}/below-{name}/0"
        store.create(segment, sublogs=True, sublog_shards=shards)
        for i in range(3):
            store.append(segment, "w", i, 1, frame(bytes([i]) * 20))
        SegmentMeta.get(segment, META_KEY, consistent_read=True).update(actions=[SegmentMeta.chunk_end.set(1 << 40)])
    recorded.clear()
    request = _sensor(tiering_sensor, resource)
    assert isinstance(request, RunRequest)
    assert tier_segments_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource}).success
    assert "ConditionCheck" in _transact_kinds(recorded), "the tiering pass did not take the ConditionCheck branch"
    calls = list(recorded)

    # Auto-scaling: a hot segment of a stream scaled by event rate; the sensor's decision, the job's scale.
    for name, shards in choices.items():
        recorded.clear()
        hot = f"hot-{name}"
        streams.create_stream(unique, hot, StreamConfiguration(scaling_policy=ScalingPolicy.by_event_rate(10, 2, 1),
                                                               sublog_shards=shards))
        now = int(time.time() * 1000)
        SegmentMeta.get(segment_name(unique, hot, 0), META_KEY, consistent_read=True).update(actions=[
            SegmentMeta.rates.set({"t": now, "e": [100.0, 0.0, 0.0, 0.0], "b": [0.0] * 4}),
            SegmentMeta.created_ms.set(now - 3_600_000), SegmentMeta.scale_at.set(now)])  # as the append path marks it
        setup = len(recorded)
        (request,) = [r for r in _sensor(autoscale_sensor, resource) if r.tags.get("rillet/stream") == f"{unique}/{hot}"]
        assert scale_stream_job.execute_in_process(run_config=request.run_config, resources={"rillet": resource}).success
        assert [s.segment_id for s in streams.current_segments(unique, hot)] != [0]
        calls += recorded[setup:]

    # Retention: streams with a size policy of 0 bytes; the schedule's runs truncate them.
    recorded.clear()
    for name, shards in choices.items():
        streams.create_stream(unique, f"kept-{name}", StreamConfiguration(
            scaling_policy=ScalingPolicy.fixed(1), retention_policy=RetentionPolicy.by_size(0), sublog_shards=shards))
        for n in range(2):
            controller.segments.append(segment_name(unique, f"kept-{name}", 0), "w", n, 1, frame(b"d" * 96))
    setup = len(recorded)
    at = datetime.datetime.now(datetime.UTC)
    with build_schedule_context(scheduled_execution_time=at, resources={"rillet": resource}) as context:
        requests = retention_schedule(context)  # a run per occupied bucket: those of these streams
    job = Definitions(assets=defs.assets, jobs=defs.jobs, resources={"rillet": resource}).resolve_job_def(
        "retention_job")
    for request in requests:
        assert isinstance(request, RunRequest)
        assert job.execute_in_process(run_config=request.run_config).success
    for name in choices:
        assert {p.offset for p in streams.head(unique, f"kept-{name}")} == {200}
    calls += recorded[setup:]

    streams.create_stream(unique, "read", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    if mode == MODES[0]:
        calls += _leases_and_timeouts(controller, resource, unique, recorded)

    # Watermarks: two writers' marks; the sensor computes and appends the watermark on its tick, to the
    # marks stream, which takes the deployment's sub-log mode.
    recorded.clear()
    controller.segments.append(segment_name(unique, "read", 0), "w", 0, 1, frame(b"e"))
    controller.watermarks.note_time(unique, "read", "a", 2_000, {0: 5})
    controller.watermarks.note_time(unique, "read", "b", 1_000, {0: 0})
    setup = len(recorded)
    outcome = _sensor(watermark_sensor, resource)
    assert isinstance(outcome, SkipReason) and f"{unique}/read" in outcome.skip_message
    assert _batched(recorded[setup:], mine) == bool(store.settings.sublog_shards), "not the deployment's mode"
    calls += recorded[setup:]

    tables = {mine.metadata_table: "metadata", mine.segments_table: "segments"}
    needed = {need for call in calls for need in _needed(call, tables)}
    missing = sorted(needed - _granted())
    assert not missing, f"dagster_jobs does not grant what the jobs call: {missing}"


def _leases_and_timeouts(controller, resource: RilletDeployment, unique: str, recorded: list) -> list:
    """The calls of the reader lease and transaction timeout sensors and jobs, on the stream "read"."""
    # Reader leases: a group whose reader stopped syncing; the job takes it offline.
    recorded.clear()
    groups = controller.reader_groups
    groups.create(unique, "g", ReaderGroupConfig(streams=[StreamRange(scope=unique, stream="read")],
                                                 automatic_checkpoint_interval_ms=0, group_refresh_time_ms=100,
                                                 reader_lease_ms=1_000))
    groups.add_reader(unique, "g", "r")
    time.sleep(1.05)
    setup = len(recorded)
    request = _sensor(reader_lease_sensor, resource)
    assert isinstance(request, RunRequest)
    assert expire_reader_leases_job.execute_in_process(run_config=request.run_config,
                                                       resources={"rillet": resource}).success
    assert groups.info(unique, "g").online_readers == []
    calls = recorded[setup:]

    # Transaction timeouts: an open transaction past its lease; the job aborts it.
    recorded.clear()
    txn = controller.transactions.begin(unique, "read", lease_ms=5_000)
    TxnRecord.get(stream_pk(unique, "read"), txn_sk(txn.txn_id), consistent_read=True).update(
        actions=[TxnRecord.lease_expiry_ms.set(1), TxnRecord.deadline_ms.set(1)])
    setup = len(recorded)
    request = _sensor(txn_timeout_sensor, resource)
    assert isinstance(request, RunRequest)
    assert abort_expired_transactions_job.execute_in_process(run_config=request.run_config,
                                                             resources={"rillet": resource}).success
    return calls + recorded[setup:]
