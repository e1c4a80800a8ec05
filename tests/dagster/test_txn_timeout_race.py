"""A ping racing the transaction-timeout job, interleaved deterministically: the job reads the expired
lease, the writer's ping renews it, then the job writes its abort. The abort is conditioned on the
lease it read, so the ping wins and the transaction stays open (its writer was told it may go on)."""

from dagster import RunRequest, build_sensor_context

from controlplane.models import TxnRecord, stream_pk, txn_sk
from controlplane.transactions import TransactionTasks
from dagster_project.transactions import abort_expired_transactions_job, txn_timeout_sensor
from rillet.models import ScalingPolicy, StreamConfiguration, TxnState


def _expire(scope: str, stream: str, txn_id: str) -> None:
    record = TxnRecord.get(stream_pk(scope, stream), txn_sk(txn_id), consistent_read=True)
    record.update(actions=[TxnRecord.lease_expiry_ms.set(1), TxnRecord.deadline_ms.set(1)])


def test_a_ping_between_the_jobs_read_and_its_abort_keeps_the_transaction_open(isolated, unique, monkeypatch):
    _, resource = isolated
    controller = resource.controller()
    txns = controller.transactions
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    pinged, expired = txns.begin(unique, "s", lease_ms=5_000), txns.begin(unique, "s", lease_ms=5_000)
    _expire(unique, "s", pinged.txn_id)
    _expire(unique, "s", expired.txn_id)
    with build_sensor_context(resources={"rillet": resource}) as context:
        request = txn_timeout_sensor(context)
    assert isinstance(request, RunRequest)

    read = TransactionTasks._get
    renewals = []

    def read_then_ping(self, scope, stream, txn_id):
        """The job's read of the transaction; right after it (before the job writes) the writer pings."""
        record = read(self, scope, stream, txn_id)
        if txn_id == pinged.txn_id and not renewals:
            assert record.state == TxnState.OPEN.value and record.lease_expiry_ms == 1  # the job sees it expired
            renewals.append(txn_id)  # first, as the ping reads the transaction too
            txns.ping(unique, "s", txn_id, 60_000)
        return record

    monkeypatch.setattr(TransactionTasks, "_get", read_then_ping)
    result = abort_expired_transactions_job.execute_in_process(run_config=request.run_config,
                                                               resources={"rillet": resource})
    monkeypatch.setattr(TransactionTasks, "_get", read)
    assert result.success and renewals
    assert txns.status(unique, "s", pinged.txn_id).state == TxnState.OPEN
    assert txns.status(unique, "s", expired.txn_id).state == TxnState.ABORTED
    assert result.output_for_node("abort_expired_transactions") == 1
    # the writer goes on: its lease holds, and it commits
    assert txns.ping(unique, "s", pinged.txn_id, 60_000).state == TxnState.OPEN
    assert txns.commit(unique, "s", pinged.txn_id).state == TxnState.COMMITTED


def test_the_controllers_timeout_sweep_also_loses_to_a_ping(isolated, unique, monkeypatch):
    _, resource = isolated
    txns = resource.controller().transactions
    resource.controller().streams.create_scope(unique)
    resource.controller().streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    txn = txns.begin(unique, "s", lease_ms=5_000)
    _expire(unique, "s", txn.txn_id)
    read = TransactionTasks._get
    renewals = []

    def read_then_ping(self, scope, stream, txn_id):
        record = read(self, scope, stream, txn_id)
        if not renewals:
            renewals.append(txn_id)
            txns.ping(unique, "s", txn_id, 60_000)
        return record

    monkeypatch.setattr(TransactionTasks, "_get", read_then_ping)
    assert txns.abort_expired(limit=1000) == []
    monkeypatch.setattr(TransactionTasks, "_get", read)
    assert renewals and txns.status(unique, "s", txn.txn_id).state == TxnState.OPEN
