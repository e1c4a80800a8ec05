"""A code location for the daemon tests (tests/dagster/test_retried_runs.py): the deployed sensors and
jobs, with the resource read from the test's environment when a sensor is evaluated or a run starts,
so every test points the same definitions at its own isolated tables."""

from dagster import Definitions, EnvVar, in_process_executor

from dagster_project.autoscale import autoscale_sensor, scale_stream_job
from dagster_project.reader_groups import expire_reader_leases_job, reader_lease_sensor
from dagster_project.resources import RilletDeployment
from dagster_project.transactions import abort_expired_transactions_job, txn_timeout_sensor

resources = {"rillet": RilletDeployment(
    endpoint_url=EnvVar("RILLET_TEST_ENDPOINT_URL"), metadata_table=EnvVar("RILLET_TEST_METADATA_TABLE"),
    segments_table=EnvVar("RILLET_TEST_SEGMENTS_TABLE"), bucket=EnvVar("RILLET_TEST_BUCKET"))}

autoscale = Definitions(jobs=[scale_stream_job], sensors=[autoscale_sensor], resources=resources,
                        executor=in_process_executor)
txn_timeout = Definitions(jobs=[abort_expired_transactions_job], sensors=[txn_timeout_sensor], resources=resources,
                          executor=in_process_executor)
reader_lease = Definitions(jobs=[expire_reader_leases_job], sensors=[reader_lease_sensor], resources=resources,
                           executor=in_process_executor)
