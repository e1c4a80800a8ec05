"""Transaction timeouts: abort open transactions whose lease or maximum execution time has passed.

A transaction whose abort raised (throttled, say) is that transaction's outcome, not the run's; the run
tags itself unfinished and the sensor asks for it again under a new run key (dagster_project/attempts.py).
"""

from dagster import (
    Config,
    DefaultSensorStatus,
    MetadataValue,
    OpExecutionContext,
    Output,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)

from controlplane.transactions import TIMEOUT_RUN_LIMIT
from dagster_project.attempts import ATTEMPTS, Attempts, mark_unfinished
from dagster_project.resources import RilletDeployment, sensor_interval, work_key
from dataplane.fanout import ERROR_PREFIX

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
    failed = {item: outcome for item, outcome in others if outcome.startswith(ERROR_PREFIX)}
    mark_unfinished(context, failed)
    return Output(aborted, metadata={
        "aborted": aborted, "transactions": len(run.outcomes), "failed": len(failed), "seconds": round(run.seconds, 3),
        "aborted_per_s": round(aborted / run.seconds, 1) if run.seconds else 0.0, "not_aborted": MetadataValue.md(table)})


@job(description="Abort transactions that outlived their lease or maximum execution time.")
def abort_expired_transactions_job() -> None:
    abort_expired_transactions()


@sensor(job=abort_expired_transactions_job, minimum_interval_seconds=sensor_interval("txn_timeout", 10),
        default_status=DefaultSensorStatus.RUNNING,
        description="Reads the sparse txn-deadlines index (one query per shard a tick) for expired open "
                    "transactions, up to 1,000 a run; the next tick takes the rest (and those a run did "
                    "not abort because of an error).")
def txn_timeout_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    expired = [f"{t.scope}/{t.stream}/{t.txn_id}" for t in rillet.controller().transactions.expired(TIMEOUT_RUN_LIMIT)]
    if not expired:
        return SkipReason("no expired transaction")
    attempts = Attempts.of(context, abort_expired_transactions_job.name)
    asked, failing = attempts.set_aside(expired)
    request = attempts.request(work_key("txn-timeout", asked), run_config={
        "ops": {"abort_expired_transactions": {"config": {"transactions": asked}}}}) if asked else None
    attempts.report(context, failing if request else expired)
    return request or SkipReason(f"{len(expired)} expired transaction(s), set aside after {ATTEMPTS} failed runs")
