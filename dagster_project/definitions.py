"""The Dagster code location: every Rillet background job, sensor and schedule, with its resources.

Every job runs its ops in the run's own process: the ops are a few DynamoDB and S3 requests, so a
process per op (Dagster's default executor) would only add load.
"""


from dagster import Definitions, in_process_executor

from dagster_project.autoscale import autoscale_sensor, scale_stream_job
from dagster_project.exports import stream_export
from dagster_project.maintenance import (
    sweep_workflows_job,
    tier_segments_job,
    tiering_sensor,
    workflow_sweeper_sensor,
)
from dagster_project.observability import run_failure_reporter
from dagster_project.reader_groups import expire_reader_leases_job, reader_lease_sensor
from dagster_project.resources import RilletDeployment
from dagster_project.retention import retention_job, retention_schedule, stream_retention
from dagster_project.transactions import abort_expired_transactions_job, txn_timeout_sensor
from dagster_project.watermarks import watermark_job, watermark_sensor

defs = Definitions(
    assets=[stream_retention, stream_export],
    schedules=[retention_schedule],
    jobs=[sweep_workflows_job, tier_segments_job, abort_expired_transactions_job, retention_job, scale_stream_job,
          expire_reader_leases_job, watermark_job],
    sensors=[workflow_sweeper_sensor, tiering_sensor, txn_timeout_sensor, autoscale_sensor, watermark_sensor,
             reader_lease_sensor, run_failure_reporter],
    resources={"rillet": RilletDeployment.from_env()},
    executor=in_process_executor,
)
