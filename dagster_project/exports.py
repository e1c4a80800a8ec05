"""An asset that exports a stream range to Parquet through PySpark: on EMR Serverless where the deployment
names an application (AWS), in the run's own process otherwise (standalone)."""

import os
import sys

import boto3
from dagster import AssetExecutionContext, Config, MaterializeResult, asset
from dagster_aws.pipes import PipesEMRServerlessClient

from dagster_project.resources import RilletDeployment

# What `make emr-package` builds and the operator uploads under the deployment's EMR artifacts URI.
EMR_ARCHIVE = "rillet-emr.tar.gz"
EMR_ENTRY_POINT = "export_to_parquet.py"


class ExportConfig(Config):
    stream: str  # "scope/stream"
    output: str  # a path or URL Spark can write Parquet to
    start_cut: str | None = None
    end_cut: str | None = None
    encoding: str = "binary"
    spark_master: str = "local[2]"


def emr_spark_submit_parameters(artifacts_uri: str) -> str:
    """Run the job with the archive's Python (rillet, rillet_spark and their dependencies): AWS's recipe
    for a venv-pack archive on EMR Serverless, unpacked as ./environment on the driver and executors."""
    python = "./environment/bin/python"
    return " ".join([
        f"--conf spark.archives={artifacts_uri}/{EMR_ARCHIVE}#environment",
        f"--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON={python}",
        f"--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON={python}",
        f"--conf spark.executorEnv.PYSPARK_PYTHON={python}",
    ])


def emr_job_run(rillet: RilletDeployment, config: ExportConfig) -> dict:
    """StartJobRun parameters of spark/jobs/export_to_parquet.py for this export."""
    arguments = ["--endpoint", rillet.controller_url, "--stream", config.stream, "--output", config.output,
                 "--encoding", config.encoding]
    for flag, value in (("--start-cut", config.start_cut), ("--end-cut", config.end_cut)):
        if value is not None:
            arguments += [flag, value]
    return {
        "applicationId": rillet.emr_application_id,
        "executionRoleArn": rillet.emr_job_role_arn,
        "name": f"rillet-export-{config.stream}",
        "jobDriver": {"sparkSubmit": {
            "entryPoint": f"{rillet.emr_artifacts_uri}/{EMR_ENTRY_POINT}",
            "entryPointArguments": arguments,
            "sparkSubmitParameters": emr_spark_submit_parameters(rillet.emr_artifacts_uri),
        }},
    }


@asset(description="A stream range copied to Parquet by the rillet PySpark data source.")
def stream_export(context: AssetExecutionContext, config: ExportConfig, rillet: RilletDeployment) -> MaterializeResult:
    if rillet.emr_application_id:
        # Waits for the job run and cancels it when the Dagster run is terminated. The job reports
        # nothing back over Pipes, so the event count is in the job's own log, not in this metadata.
        client = PipesEMRServerlessClient(client=boto3.client("emr-serverless", region_name=rillet.region),
                                          dashboard_refresh_interval=None)
        invocation = client.run(context=context, start_job_run_params=emr_job_run(rillet, config))
        return MaterializeResult(metadata={**invocation.metadata, "output": config.output, "stream": config.stream})

    from pyspark.sql import SparkSession

    from rillet_spark.export import export

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(config.spark_master).appName(f"rillet-export-{config.stream}")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        count = export(spark, rillet.controller_url, config.stream, config.output, start_cut=config.start_cut,
                       end_cut=config.end_cut, encoding=config.encoding, s3_endpoint=rillet.endpoint_url)
    finally:
        spark.stop()
    context.log.info("exported %d events of %s to %s", count, config.stream, config.output)
    return MaterializeResult(metadata={"events": count, "output": config.output, "stream": config.stream})
