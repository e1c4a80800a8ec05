"""The transaction timeout sensor and job, with Dagster's test APIs."""


import pytest
from dagster import RunRequest, SkipReason, build_sensor_context

from controlplane.models import TxnRecord, stream_pk, txn_sk
from dagster_project.transactions import abort_expired_transactions_job, txn_timeout_sensor
from rillet.errors import SegmentNotFound
from rillet.models import ScalingPolicy, StreamConfiguration, TxnState
from rillet.names import segment_name, txn_segment_token


def _expire(controller, scope, stream, txn_id):
    record = TxnRecord.get(stream_pk(scope, stream), txn_sk(txn_id), consistent_read=True)
    record.update(actions=[TxnRecord.lease_expiry_ms.set(1), TxnRecord.deadline_ms.set(1)])


def test_expired_transactions_are_aborted_and_a_committed_one_is_left_alone(isolated, unique):
    _, resource = isolated
    controller = resource.controller()
    streams, txns = controller.streams, controller.transactions
    streams.create_scope(unique)
    streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(txn_timeout_sensor(context), SkipReason)

    expired = txns.begin(unique, "s", lease_ms=5_000)
    alive = txns.begin(unique, "s", lease_ms=60_000)
    racing = txns.begin(unique, "s", lease_ms=5_000)
    _expire(controller, unique, "s", expired.txn_id)
    _expire(controller, unique, "s", racing.txn_id)

    with build_sensor_context(resources={"rillet": resource}) as context:
        request = txn_timeout_sensor(context)
    assert isinstance(request, RunRequest)
    listed = request.run_config["ops"]["abort_expired_transactions"]["config"]["transactions"]
    assert sorted(listed) == sorted(f"{unique}/s/{t.txn_id}" for t in (expired, racing))

    # The writer of "racing" commits after the sensor saw it expire: the commit wins, the job must not undo it.
    assert txns.commit(unique, "s", racing.txn_id).state == TxnState.COMMITTED
    result = abort_expired_transactions_job.execute_in_process(run_config=request.run_config,
                                                               resources={"rillet": resource})
    assert result.success
    assert result.output_for_node("abort_expired_transactions") == 1
    assert txns.status(unique, "s", expired.txn_id).state == TxnState.ABORTED
    assert txns.status(unique, "s", racing.txn_id).state == TxnState.COMMITTED
    assert txns.status(unique, "s", alive.txn_id).state == TxnState.OPEN
    for sid in (s.segment_id for s in expired.segments):
        with pytest.raises(SegmentNotFound):
            controller.segments.info(segment_name(unique, "s", txn_segment_token(sid, expired.txn_id)))
    with build_sensor_context(resources={"rillet": resource}) as context:
        assert isinstance(txn_timeout_sensor(context), SkipReason)
