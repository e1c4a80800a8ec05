"""The retention asset, its check and job (the schedule: test_retention_schedule.py), with Dagster's test APIs against moto (isolated tables).

The ``isolated`` tables are shared by the Dagster tests of a session, so a bucket may hold other
tests' streams: the assertions look at this test's streams only, and streams that would make a
later check fail are deleted at the end.
"""

from __future__ import annotations

import time
import uuid

import pytest
from dagster import AssetCheckSeverity, Definitions, materialize

from controlplane.models import SubscriberRecord
from controlplane.retention import RetentionSettings
from controlplane.service import Controller
from controlplane.streams import RETENTION_BUCKETS, _bucket
from dagster_project.retention import retention_job, stream_retention
from rillet.framing import frame
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from rillet.names import segment_name

EVENT = frame(b"d" * 96)  # 100 bytes


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """Test speed only: share botocore's loader (see tests/conftest.py)."""


@pytest.fixture(autouse=True)
def _default_retention_frequency(monkeypatch):
    # the asset runs with the deployment's settings: the default (30 minutes) between retention-set records
    monkeypatch.delenv("RILLET_RETENTION_FREQUENCY_MS", raising=False)


def _stream(controller: Controller, scope: str, stream: str, policy: RetentionPolicy) -> int:
    controller.streams.create_scope(scope)
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1), retention_policy=policy)
    controller.streams.create_stream(scope, stream, config)
    return _bucket(scope, stream, config)


def _append(controller: Controller, scope: str, stream: str, first: int, n: int) -> None:
    for i in range(first, first + n):
        controller.segments.append(segment_name(scope, stream, 0), "w", i, 1, EVENT)


def _drop(controller: Controller, scope: str, stream: str) -> None:
    controller.streams.seal_stream(scope, stream)
    controller.streams.delete_stream(scope, stream)


def _buckets(*buckets: int) -> dict:
    return {"ops": {"stream_retention": {"config": {"buckets": list(buckets)}}}}


def _materialization(result):
    (materialization,) = result.asset_materializations_for_node("stream_retention")
    return materialization.metadata


def _check(result):
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.check_name == "consumption_streams_have_active_subscribers"
    return evaluation


def _row(report: str, stream: str) -> list[str]:
    (line,) = [line for line in report.splitlines() if f"`{stream}`" in line]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_materializing_a_bucket_truncates_its_streams_and_reports_each_decision(isolated, unique):
    mine, resource = isolated
    controller = Controller.for_deployment(mine, retention_settings=RetentionSettings(frequency_ms=1))
    bucket = _stream(controller, unique, "s", RetentionPolicy.by_size(250))
    _append(controller, unique, "s", 0, 3)
    # a retention-set record 10 s ago, at 300 bytes (too little to truncate then)
    assert controller.retention.cycle(unique, "s", now=int(time.time() * 1000) - 10_000).outcome == "kept"
    _append(controller, unique, "s", 3, 3)

    result = materialize([stream_retention], run_config=_buckets(bucket), resources={"rillet": resource})
    assert result.success
    # 600 bytes now; the record at 300 keeps 300 >= 250: truncated there (no new record: younger than 30 min)
    head = {p.segment.segment_id: p.offset for p in controller.streams.head(unique, "s")}
    assert head == {0: 300}
    metadata = _materialization(result)
    assert metadata["truncated"].value >= 1 and metadata["streams"].value >= 1
    assert metadata["bytes_released"].value >= 300
    assert metadata["buckets"].value == str(bucket)
    row = _row(metadata["decisions"].value, f"{unique}/s")
    assert row[1] == "truncated"
    assert row[2].startswith("truncate at the most recent cut keeping the minimum")
    assert row[3:6] == ["600 B", "300 B", "0@300"]
    assert _check(result).passed or f"{unique}/s" not in str(_check(result).metadata)

    # the next run of the same bucket keeps it: nothing new to truncate, so it is counted, not listed
    job = Definitions(assets=[stream_retention], jobs=[retention_job],
                      resources={"rillet": resource}).resolve_job_def("retention_job")
    result = job.execute_in_process(run_config=_buckets(bucket))
    assert result.success
    metadata = _materialization(result)
    assert f"`{unique}/s`" not in metadata["decisions"].value and metadata["kept"].value >= 1
    assert controller.retention.status(unique, "s").last_decision.outcome == "kept"
    assert {p.segment.segment_id: p.offset for p in controller.streams.head(unique, "s")} == {0: 300}
    _drop(controller, unique, "s")


def test_other_buckets_leave_the_stream_alone(isolated, unique):
    mine, resource = isolated
    controller = Controller.for_deployment(mine)
    bucket = _stream(controller, unique, "s", RetentionPolicy.by_size(0))
    _append(controller, unique, "s", 0, 2)
    other = (bucket + 1) % RETENTION_BUCKETS
    result = materialize([stream_retention], run_config=_buckets(other), resources={"rillet": resource})
    assert result.success
    assert f"`{unique}/s`" not in _materialization(result)["decisions"].value
    assert {p.segment.segment_id: p.offset for p in controller.streams.head(unique, "s")} == {0: 0}
    result = materialize([stream_retention], run_config=_buckets(bucket), resources={"rillet": resource})
    assert {p.segment.segment_id: p.offset for p in controller.streams.head(unique, "s")} == {0: 200}
    _drop(controller, unique, "s")


def test_check_warns_about_a_consumption_stream_whose_subscriber_went_silent(isolated, unique):
    mine, resource = isolated
    controller = Controller.for_deployment(mine)
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=60_000)
    bucket = _stream(controller, unique, "s", policy)
    _append(controller, unique, "s", 0, 2)
    controller.retention.add_subscriber(unique, "s", f"{unique}/g", 0, controller.streams.head(unique, "s"))
    (sub,) = controller.retention.subscribers(unique, "s")
    sub.update(actions=[SubscriberRecord.updated_ms.set(1)])  # last heard of long ago
    try:
        result = materialize([stream_retention], run_config=_buckets(bucket), resources={"rillet": resource})
        assert result.success  # a WARN check does not fail the run
        evaluation = _check(result)
        assert evaluation.passed is False
        assert evaluation.severity == AssetCheckSeverity.WARN
        assert f"{unique}/s" in evaluation.metadata["streams_without_active_subscriber"].value
        row = _row(_materialization(result)["decisions"].value, f"{unique}/s")
        assert row[1] == "kept" and "no active subscriber" in row[2]
        assert f"{unique}/g (inactive): 200 B, " in row[6] and row[6].endswith("d")  # silent since 1970: days
        assert {p.segment.segment_id: p.offset for p in controller.streams.head(unique, "s")} == {0: 0}

        # the subscriber publishes again: active, the check passes for this stream and truncation resumes
        controller.retention.update_truncation_cut(unique, "s", f"{unique}/g", 0, {0: 100})
        result = materialize([stream_retention], run_config=_buckets(bucket), resources={"rillet": resource})
        assert f"{unique}/s" not in _check(result).metadata["streams_without_active_subscriber"].value
        assert {p.segment.segment_id: p.offset for p in controller.streams.head(unique, "s")} == {0: 100}
    finally:
        _drop(controller, unique, "s")


def test_check_warns_about_a_consumption_stream_without_any_subscriber(isolated, unique):
    """A consumption-based stream nobody subscribes to is truncated by its plain size policy, as in
    Pravega, and the decision table says why; the check still points the stream out, whether its
    subscribers went silent or there are none."""
    mine, resource = isolated
    controller = Controller.for_deployment(mine)
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=60_000)
    bucket = _stream(controller, unique, "s", policy)
    _append(controller, unique, "s", 0, 2)
    try:
        result = materialize([stream_retention], run_config=_buckets(bucket), resources={"rillet": resource})
        row = _row(_materialization(result)["decisions"].value, f"{unique}/s")
        assert row[1] == "truncated" and "no subscriber: the time/size policy applies" in row[2]
        evaluation = _check(result)
        assert f"{unique}/s" in evaluation.metadata["streams_without_active_subscriber"].value
        assert evaluation.passed is False
    finally:
        _drop(controller, unique, "s")


def test_every_bucket_is_reachable():
    """Streams spread over the buckets (so a run per bucket is a share of the work, not all of it)."""
    config = StreamConfiguration(retention_policy=RetentionPolicy.by_size(0))
    seen = {_bucket("sc", f"s{uuid.UUID(int=i).hex[:8]}{i}", config) for i in range(400)}
    assert seen == set(range(RETENTION_BUCKETS))
    assert _bucket("sc", "s", StreamConfiguration()) is None  # no policy: not in the retention index


def test_one_run_over_several_buckets_is_one_materialization_in_human_units(isolated, unique):
    """Not one materialization per bucket, each with the whole table (issue 30): the asset has no
    partitions that could read as missing, and sizes read as the CLI prints them."""
    mine, resource = isolated
    assert stream_retention.partitions_def is None
    controller = Controller.for_deployment(mine)
    buckets = {}
    for i in range(40):
        bucket = _bucket(unique, f"s{i}", StreamConfiguration(retention_policy=RetentionPolicy.by_size(0)))
        if bucket not in buckets.values():
            _stream(controller, unique, f"s{i}", RetentionPolicy.by_size(0))
            controller.segments.append(segment_name(unique, f"s{i}", 0), "w", 0, 1, frame(b"d" * 1496))
            buckets[f"s{i}"] = bucket
        if len(buckets) == 2:
            break
    try:
        result = materialize([stream_retention], run_config=_buckets(*buckets.values()), resources={"rillet": resource})
        assert result.success
        (materialization,) = result.asset_materializations_for_node("stream_retention")
        report = materialization.metadata["decisions"].value
        for stream in buckets:
            assert _row(report, f"{unique}/{stream}")[1:2] + _row(report, f"{unique}/{stream}")[3:5] == [
                "truncated", "1.5 KB", "0 B"]
        assert materialization.metadata["released"].value.endswith(" KB")
    finally:
        for stream in buckets:
            _drop(controller, unique, stream)


def test_the_run_reports_consumption_metrics_per_stream_and_subscriber(isolated, unique, capsys):
    """Each run writes, per consumption-based stream, its unconsumed bytes and whether its subscribers'
    fallback is near, and per subscriber its lag and silence, as EMF lines (dagster_project/observability.py)."""
    import json

    mine, resource = isolated
    controller = Controller.for_deployment(mine)
    minute = 60_000
    bucket = _stream(controller, unique, "s", RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=10 * minute))
    _append(controller, unique, "s", 0, 2)
    group = f"{unique}/g"
    controller.retention.add_subscriber(unique, "s", group, 0, controller.streams.head(unique, "s"))
    (sub,) = controller.retention.subscribers(unique, "s")
    sub.update(actions=[SubscriberRecord.updated_ms.set(int(time.time() * 1000) - 8 * minute)])

    def lines() -> dict[str, dict]:
        capsys.readouterr()
        assert materialize([stream_retention], run_config=_buckets(bucket), resources={"rillet": resource}).success
        mine = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
        return {line["event"]: line for line in mine if line.get("stream") == f"{unique}/s"}

    try:
        # silent 8 of 10 minutes: still honoured (nothing truncated), the fallback within a quarter of the timeout
        seen = lines()
        stream, subscriber = seen["retention_stream"], seen["retention_subscriber"]
        assert (stream["UnconsumedBytes"], stream["NoSubscriber"], stream["NoActiveSubscriber"]) == (200, 0, 0)
        assert stream["FallbackImminent"] == 1 and 0 < stream["fallback_due_in_s"] <= 150
        assert (subscriber["group"], subscriber["SubscriberLagBytes"], subscriber["active"]) == (group, 200, True)
        assert 8 * 60 <= subscriber["SubscriberSilentSeconds"] < 10 * 60
        assert {p.segment.segment_id: p.offset for p in controller.streams.head(unique, "s")} == {0: 0}

        # it acknowledges the first event: the stream is truncated behind it, nothing is near the fallback
        controller.retention.update_truncation_cut(unique, "s", group, 0, {0: 100})
        seen = lines()
        assert (seen["retention_stream"]["UnconsumedBytes"], seen["retention_stream"]["FallbackImminent"]) == (100, 0)
        assert seen["retention_subscriber"]["SubscriberLagBytes"] == 100
    finally:
        _drop(controller, unique, "s")


def test_the_metadata_lists_what_needs_an_eye_and_counts_the_rest(isolated, unique, monkeypatch):
    """At 10,000 streams a table of every stream would add megabytes to Dagster's event log each cycle
    (issue 39): a run lists truncations, fallbacks and skipped streams, at most LISTED_PER_KIND of each,
    and counts the others."""
    from dagster_project import retention as retention_module

    mine, resource = isolated
    controller = Controller.for_deployment(mine)
    monkeypatch.setattr(retention_module, "LISTED_PER_KIND", 2)
    with_policy = StreamConfiguration(retention_policy=RetentionPolicy.by_size(0))
    bucket = _bucket(unique, "s0", with_policy)
    same_bucket = [f"s{i}" for i in range(400) if _bucket(unique, f"s{i}", with_policy) == bucket][:5]
    kept, truncated = same_bucket[:2], same_bucket[2:]  # a minimum of 1 MB keeps a 100-byte stream
    for name in same_bucket:
        _stream(controller, unique, name, RetentionPolicy.by_size(1_000_000 if name in kept else 0))
        _append(controller, unique, name, 0, 1)
    try:
        result = materialize([stream_retention], run_config=_buckets(bucket), resources={"rillet": resource})
        assert result.success
        metadata = _materialization(result)
        report = metadata["decisions"].value
        listed = [s for s in truncated + kept if f"`{unique}/{s}`" in report]
        assert len([s for s in listed if s in truncated]) == 2 and not set(listed) & set(kept)
        assert metadata["truncated"].value >= 3 and metadata["kept"].value >= 2
        assert "more truncated" in report and "kept as they were" in report
        assert len(report.splitlines()) <= 2 + 3 * 2 + 2  # header, two rows of each kind, the counts
    finally:
        for name in kept + truncated:
            _drop(controller, unique, name)
