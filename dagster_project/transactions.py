"""Transaction timeouts: abort open transactions whose lease or maximum execution time has passed."""

from dagster import (
    Config,
    DefaultSensorStatus,
    MetadataValue,
    OpExecutionContext,
    Output,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from dagster_project.resources import RilletDeployment, sensor_interval, work_key
from rillet.errors import TxnFailed, TxnNotFound


class ExpiredTransactions(Config):
    transactions: list[str]  # "scope/stream/txn id"


@op(description="Abort the given transactions if they are still open and expired (a commit or a ping that "
                "won the race stands).")
def abort_expired_transactions(context: OpExecutionContext, config: ExpiredTransactions,
                               rillet: RilletDeployment) -> Output[int]:
    transactions = rillet.controller().transactions
    outcomes = {}
    for item in config.transactions:
        scope, stream, txn_id = item.split("/")
        try:
            outcomes[item] = transactions.abort_if_expired(scope, stream, txn_id).state.value
        except (TxnFailed, TxnNotFound) as e:
            outcomes[item] = f"not aborted: {e.code} {e.details.get('status', '')}".strip()
    aborted = sum(1 for v in outcomes.values() if v == "ABORTED")
    table = "| transaction | outcome |\n|---|---|\n" + "\n".join(f"| `{k}` | {v} |" for k, v in outcomes.items())
    return Output(aborted, metadata={"aborted": aborted, "transactions": MetadataValue.md(table)})


@job(description="Abort transactions that outlived their lease or maximum execution time.")
def abort_expired_transactions_job() -> None:
    abort_expired_transactions()


@sensor(job=abort_expired_transactions_job, minimum_interval_seconds=sensor_interval("txn_timeout", 10),
        default_status=DefaultSensorStatus.RUNNING,
        description="Reads the sparse txn-deadlines index (one query per tick) for expired open transactions.")
def txn_timeout_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    expired = [f"{t.scope}/{t.stream}/{t.txn_id}" for t in rillet.controller().transactions.expired()]
    if not expired:
        return SkipReason("no expired transaction")
    return RunRequest(run_key=work_key("txn-timeout", expired),
                      run_config={"ops": {"abort_expired_transactions": {"config": {"transactions": expired}}}})
