"""The transaction timeout job is bounded: a run takes at most its limit of expired transactions, the
earliest deadlines first, and the next ticks take the rest (issue 39)."""

from dagster import RunRequest, SkipReason, build_sensor_context

import dagster_project.transactions as timeout_job
from controlplane.models import TxnRecord, stream_pk, txn_sk
from rillet.models import ScalingPolicy, StreamConfiguration, TxnState


def test_each_run_takes_at_most_its_limit_and_the_next_runs_take_the_rest(isolated, unique, monkeypatch):
    _, resource = isolated
    controller = resource.controller()
    txns = controller.transactions
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    begun = [txns.begin(unique, "s", lease_ms=5_000) for _ in range(5)]
    for deadline, txn in enumerate(begun, start=1):  # expired, in this order
        record = TxnRecord.get(stream_pk(unique, "s"), txn_sk(txn.txn_id), consistent_read=True)
        record.update(actions=[TxnRecord.lease_expiry_ms.set(deadline), TxnRecord.deadline_ms.set(deadline)])
    monkeypatch.setattr(timeout_job, "TIMEOUT_RUN_LIMIT", 2)

    runs = []
    while True:
        with build_sensor_context(resources={"rillet": resource}) as context:
            request = timeout_job.txn_timeout_sensor(context)
        if isinstance(request, SkipReason):
            break
        assert isinstance(request, RunRequest)
        listed = request.run_config["ops"]["abort_expired_transactions"]["config"]["transactions"]
        result = timeout_job.abort_expired_transactions_job.execute_in_process(
            run_config=request.run_config, resources={"rillet": resource})
        assert result.success and result.output_for_node("abort_expired_transactions") == len(listed)
        runs.append([item.rsplit("/", 1)[1] for item in listed])
        assert len(runs) <= 3

    ids = [t.txn_id for t in begun]
    assert runs == [ids[0:2], ids[2:4], ids[4:5]]  # earliest deadlines first, at most two a run
    assert all(txns.status(unique, "s", txn_id).state == TxnState.ABORTED for txn_id in ids)
