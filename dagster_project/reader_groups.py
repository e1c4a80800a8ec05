"""Reader leases: take offline the readers of a group that stopped syncing (killed without goodbye).

The sensor reads the sparse deadlines index (one query per tick) for groups whose earliest reader
lease may have ended; a group whose readers all sync is not in it until then, and a group with no
reader is not in it at all, so an idle deployment costs one query per tick and launches no run. A group
whose look raised (throttled, say) is that group's outcome, not the run's; the run tags itself unfinished
and the sensor asks for the group again under a new run key (dagster_project/attempts.py).
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

from dagster_project.attempts import ATTEMPTS, Attempts, mark_unfinished
from dagster_project.resources import RilletDeployment, sensor_interval, work_key

LISTED = 20  # a run's metadata lists the groups that lost readers (up to this many) and counts the rest


class DueGroups(Config):
    groups: list[str]  # "scope/group"


@op(description="Take offline, at their last reported positions, the readers whose lease ended; their "
                "segments go to the other readers and checkpoints they held up complete.")
def expire_reader_leases(context: OpExecutionContext, config: DueGroups, rillet: RilletDeployment) -> Output[int]:
    groups = [tuple(item.split("/", 1)) for item in config.groups]
    run = rillet.controller().reader_groups.expire_readers_of(groups)
    context.log.info(run.summary())
    count = sum(len(readers) for readers in run.expired.values())
    changed = [(group, readers) for group, readers in run.expired.items() if readers]
    table = "| reader group | readers taken offline |\n|---|---|\n" + "\n".join(
        f"| `{scope}/{group}` | {', '.join(readers)} |" for (scope, group), readers in changed[:LISTED])
    if len(changed) > LISTED:
        table += f"\n\nand {len(changed) - LISTED} more group(s)"
    failed = {f"{scope}/{group}": error for (scope, group), error in run.errors.items()}
    mark_unfinished(context, failed)
    return Output(count, metadata={"readers_taken_offline": count, "groups_looked_at": len(groups),
                                   "groups_failed": len(failed),
                                   "seconds": round(run.seconds, 3), "groups": MetadataValue.md(table)})


@job(description="Take offline the readers of the given groups whose lease ended.")
def expire_reader_leases_job() -> None:
    expire_reader_leases()


@sensor(job=expire_reader_leases_job, minimum_interval_seconds=sensor_interval("reader_lease", 10),
        default_status=DefaultSensorStatus.RUNNING,
        description="Reads the sparse deadlines index (one query per shard a tick) for reader groups whose "
                    "earliest reader lease may have ended, up to 1,000 a run; the next tick takes the rest.")
def reader_lease_sensor(context: SensorEvaluationContext, rillet: RilletDeployment):
    due = rillet.controller().reader_groups.groups_due_for_lease_check()
    if not due:
        return SkipReason("no reader group has a reader past its lease")
    attempts = Attempts.of(context, expire_reader_leases_job.name)
    groups, failing = attempts.set_aside([f"{scope}/{group}" for scope, group in due])
    request = attempts.request(
        work_key("reader-lease", [f"{s}/{g}@{deadline}" for (s, g), deadline in due.items() if f"{s}/{g}" in groups]),
        run_config={"ops": {"expire_reader_leases": {"config": {"groups": groups}}}}) if groups else None
    attempts.report(context, failing if request else [f"{s}/{g}" for s, g in due])
    return request or SkipReason(f"{len(due)} due reader group(s), set aside after {ATTEMPTS} failed runs")
