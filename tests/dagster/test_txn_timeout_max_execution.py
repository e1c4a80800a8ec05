"""The timeout sensor and job after a ping refused for the maximum execution time: the transaction is
left alone while its last lease holds and aborted once that lease ends (Pravega's timeout service).
The control plane's clock is moved by the test, so nothing waits for time to pass."""

import pytest
from dagster import RunRequest, build_sensor_context

from controlplane import transactions
from dagster_project.transactions import abort_expired_transactions_job, txn_timeout_sensor
from rillet.errors import TxnFailed
from rillet.models import ScalingPolicy, StreamConfiguration, TxnState


def _listed(resource) -> list[str]:
    """The transactions the sensor would have the job abort now."""
    with build_sensor_context(resources={"rillet": resource}) as context:
        request = txn_timeout_sensor(context)
    if not isinstance(request, RunRequest):
        return []
    return request.run_config["ops"]["abort_expired_transactions"]["config"]["transactions"]


def test_the_job_waits_for_the_last_lease_then_aborts(isolated, unique, monkeypatch):
    _, resource = isolated
    controller = resource.controller()
    txns = controller.transactions
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    clock = [transactions.now_ms()]
    monkeypatch.setattr(transactions, "now_ms", lambda: clock[0])

    txn = txns.begin(unique, "s", lease_ms=1_000)  # may run 1,000 s (below the default bound of a day)
    assert txn.max_expiry_ms == clock[0] + 1_000_000
    clock[0] = txn.max_expiry_ms - 1_000
    assert txns.ping(unique, "s", txn.txn_id, 1_000).lease_expiry_ms == txn.max_expiry_ms
    clock[0] += 1
    with pytest.raises(TxnFailed) as e:
        txns.ping(unique, "s", txn.txn_id, 1_000)
    assert e.value.details["status"] == "MAX_EXECUTION_TIME_EXCEEDED"
    key = f"{unique}/s/{txn.txn_id}"

    clock[0] = txn.max_expiry_ms - 1  # its last lease still holds
    assert key not in _listed(resource)
    clock[0] = txn.max_expiry_ms
    listed = _listed(resource)
    assert key in listed
    result = abort_expired_transactions_job.execute_in_process(
        run_config={"ops": {"abort_expired_transactions": {"config": {"transactions": listed}}}},
        resources={"rillet": resource})
    assert result.success
    assert txns.status(unique, "s", txn.txn_id).state == TxnState.ABORTED
    assert key not in _listed(resource)
