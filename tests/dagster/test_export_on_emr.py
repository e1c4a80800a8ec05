"""The export asset on AWS: with an EMR Serverless application configured, the asset submits the Spark job
there (through dagster-aws's Pipes client) instead of starting Spark in the run's own process."""

from typing import ClassVar

import pytest
from dagster import materialize

from dagster_project import exports
from dagster_project.exports import stream_export
from dagster_project.resources import RilletDeployment

AWS = RilletDeployment(region="eu-west-1", controller_url="https://ctl.lambda-url.eu-west-1.on.aws/",
                       bucket="rillet-segments-1-eu-west-1", emr_application_id="00abc",
                       emr_job_role_arn="arn:aws:iam::1:role/rillet-emr-job-eu-west-1",
                       emr_artifacts_uri="s3://out/rillet/emr")
CONFIG = {"ops": {"stream_export": {"config": {"stream": "demo/orders", "output": "s3://out/orders",
                                                 "start_cut": "cut-text", "encoding": "utf-8"}}}}


class RecordingClient:
    """Stands in for PipesEMRServerlessClient: records the job run it was asked to start."""

    submitted: ClassVar[list[dict]] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def run(self, *, context, start_job_run_params):
        RecordingClient.submitted.append(start_job_run_params)
        return type("Invocation", (), {"metadata": {"AWS EMR Serverless Job Run ID": "jr-1"}})()


@pytest.fixture
def recording(monkeypatch):
    RecordingClient.submitted = []
    monkeypatch.setattr(exports, "PipesEMRServerlessClient", RecordingClient)

    def no_local_spark(*args, **kwargs):
        raise AssertionError("the export ran Spark locally although EMR Serverless is configured")

    monkeypatch.setattr("rillet_spark.export.export", no_local_spark)
    return RecordingClient.submitted


def test_export_submits_to_emr_serverless_when_configured(recording):
    result = materialize([stream_export], resources={"rillet": AWS}, run_config=CONFIG)
    assert result.success
    [params] = recording
    assert params["applicationId"] == "00abc"
    assert params["executionRoleArn"] == AWS.emr_job_role_arn
    submit = params["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == "s3://out/rillet/emr/export_to_parquet.py"
    args = submit["entryPointArguments"]
    assert args[args.index("--endpoint") + 1] == AWS.controller_url
    assert args[args.index("--stream") + 1] == "demo/orders"
    assert args[args.index("--output") + 1] == "s3://out/orders"
    assert args[args.index("--start-cut") + 1] == "cut-text" and "--end-cut" not in args
    assert args[args.index("--encoding") + 1] == "utf-8"
    assert "--s3-endpoint" not in args, "on AWS the executors read S3 at its own endpoint"
    parameters = submit["sparkSubmitParameters"]
    assert "spark.archives=s3://out/rillet/emr/rillet-emr.tar.gz#environment" in parameters
    assert "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python" in parameters
    assert "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python" in parameters
    materialization = result.asset_materializations_for_node("stream_export")[0]
    assert materialization.metadata["output"].value == "s3://out/orders"


def test_emr_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("RILLET_EMR_APPLICATION_ID", "00abc")
    monkeypatch.setenv("RILLET_EMR_JOB_ROLE_ARN", "arn:aws:iam::1:role/r")
    monkeypatch.setenv("RILLET_EMR_ARTIFACTS_URI", "s3://out/rillet/emr")
    resource = RilletDeployment.from_env()
    assert (resource.emr_application_id, resource.emr_job_role_arn, resource.emr_artifacts_uri) == (
        "00abc", "arn:aws:iam::1:role/r", "s3://out/rillet/emr")
    for name in ("RILLET_EMR_APPLICATION_ID", "RILLET_EMR_JOB_ROLE_ARN", "RILLET_EMR_ARTIFACTS_URI"):
        monkeypatch.delenv(name)
    assert RilletDeployment.from_env().emr_application_id is None, "standalone runs Spark locally"
