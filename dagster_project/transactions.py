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

from controlplane.transactions import TIMEOUT_RUN_LIMIT
from dagster_project.resources import RilletDeployment, sensor_interval, work_key

LISTED = 20  # a run's metadata lists the transactions it did not abort (up to this many) and counts the rest


class ExpiredTransactions(Config):
    transactions: list[str]  # "scope/stream/txn id"


@op(description="Abort the given transactions if they are still open and expired (a commit or a ping that "
                "won the race stands).")
def abort_expired_transactions(context: OpExecutionContext, config: ExpiredTransactions,
                               rillet: RilletDeployment) -> Output[int]:
    run = rillet.controller().transactions.abort_all_if_expired(config.transactions)
    context.log.info(run.summary())
    aborted = len(run.aborted)
    others = [(item, outcome) for item, outcome in run.outcomes.items() if outcome != "ABORTED"]
    table = "| transaction not aborted | outcome |\n|---|---|\n" + "\n".join(
        f"| `{item}` | {outcome} |" for item, outcome in others[:LISTED])
    if len(others) > LISTED:
        table += f"\n\nand {len(others) - LISTED} more"
    return Output(aborted, metadata={
        "aborted": aborted, "transactions": len(run.outcomes), "seconds": round(run.seconds, 3),
        "aborted_per_s": round(aborted / run.seconds, 1) if run.seconds else 0.0, "not_aborted": MetadataValue.md(table)})


@job(description="Abort transactions that outlived their lease or maximum execution time.")
def abort_expired_transactions_job() -> None:
    abort_expired_transactions()


@sensor(job=abort_expired_transactions_job, minimum_interval_seconds=sensor_interval("txn_timeout", 10),
        default_status=DefaultSensorStatus.RUNNING,
        description="Reads the sparse txn-deadlines index (one query per shard a tick) for expired open "
                    "transactions, up to 1,000 a run; the next tick takes the rest.")
def txn_timeout_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    expired = [f"{t.scope}/{t.stream}/{t.txn_id}" for t in rillet.controller().transactions.expired(TIMEOUT_RUN_LIMIT)]
    if not expired:
        return SkipReason("no expired transaction")
    return RunRequest(run_key=work_key("txn-timeout", expired),
                      run_config={"ops": {"abort_expired_transactions": {"config": {"transactions": expired}}}})
