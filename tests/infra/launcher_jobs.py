"""Two jobs for tests/infra/test_run_launcher.py: one the launcher runs beside the daemon, one it does not."""

from dagster import Definitions, in_process_executor, job, op


@op
def touch() -> None:
    """Nothing to do: the run's outcome is what the test watches."""


@job(executor_def=in_process_executor)
def small_job() -> None:
    touch()


@job(executor_def=in_process_executor)
def export_like_job() -> None:
    touch()


defs = Definitions(jobs=[small_job, export_like_job])
