"""The export path on AWS: the Dagster run submits a Spark job to EMR Serverless and watches it.

No AWS account is reachable here, so what only AWS could show is checked against the source of what
makes the calls: every EMR Serverless call of dagster-aws's Pipes client (read from its installed
source, so an upgrade that adds a call fails here) must be granted to the run role on the resource
AWS authorizes it on; the application must be in the VPC (Function URLs are reachable only through a
NAT route); the job role must be able to tell a missing chunk from a forbidden one.
"""

from __future__ import annotations

import ast
import inspect

import boto3
import pytest
from dagster_aws.pipes import PipesEMRServerlessClient
from dagster_aws.pipes.clients import emr_serverless
from test_terraform import TF_DIR, Terraform, as_list, blocks, one_block, parse_terraform, refs, statements

# The resource each EMR Serverless action is authorized on (AWS Service Authorization Reference,
# "Actions defined by Amazon EMR Serverless"): the application, or its job runs.
APPLICATION = "${aws_emrserverless_application.spark.arn}"
JOB_RUNS = "${aws_emrserverless_application.spark.arn}/jobruns/*"
EMR_ACTION_RESOURCE = {
    "StartJobRun": APPLICATION,
    "GetApplication": APPLICATION,
    "GetJobRun": JOB_RUNS,
    "GetDashboardForJobRun": JOB_RUNS,
    "CancelJobRun": JOB_RUNS,
    "TagResource": JOB_RUNS,  # tags given to StartJobRun are authorized on the new job run
}


@pytest.fixture(scope="module")
def tf() -> Terraform:
    return parse_terraform(TF_DIR)


def pipes_client_actions() -> set[str]:
    """The IAM actions of every boto3 call the Pipes EMR Serverless client makes (its own source)."""
    tree = ast.parse(inspect.getsource(emr_serverless))
    methods = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr in ("client", "_client")
                and isinstance(node.func.value.value, ast.Name) and node.func.value.value.id == "self"):
            methods.add(node.func.attr)
    api = boto3.client("emr-serverless", region_name="us-east-1").meta.method_to_api_mapping
    unknown = methods - set(api)
    assert not unknown, f"not EMR Serverless operations: {sorted(unknown)}"
    actions = {f"emr-serverless:{api[m]}" for m in methods}
    if 'params["tags"]' in inspect.getsource(PipesEMRServerlessClient._enrich_start_params):
        actions.add("emr-serverless:TagResource")  # StartJobRun with tags needs TagResource too
    return actions


def _granted(tf: Terraform, document: str) -> dict[str, set[str]]:
    """action -> the resources a policy document allows it on."""
    granted: dict[str, set[str]] = {}
    for statement in statements(tf.data["aws_iam_policy_document"][document]):
        if statement.get("effect", "Allow") == "Allow":
            for action in as_list(statement.get("actions")):
                granted.setdefault(action, set()).update(as_list(statement.get("resources")))
    return granted


def test_the_pipes_client_calls_are_read_from_its_source():
    actions = pipes_client_actions()
    assert {"emr-serverless:StartJobRun", "emr-serverless:GetJobRun",
            "emr-serverless:GetDashboardForJobRun", "emr-serverless:GetApplication"} <= actions


def test_the_run_role_may_make_every_call_of_the_pipes_client(tf):
    granted = _granted(tf, "dagster_submit_emr")
    problems = []
    for action in sorted(pipes_client_actions()):
        resource = EMR_ACTION_RESOURCE.get(action.split(":", 1)[1])
        if resource is None:
            problems.append(f"{action}: a call this test has not reviewed; add its resource type")
        elif resource not in granted.get(action, set()):
            problems.append(f"{action} is not granted on {resource} (granted on {sorted(granted.get(action, []))})")
    assert not problems, "dagster_submit_emr lacks what PipesEMRServerlessClient calls:\n" + "\n".join(problems)


def test_the_message_reader_needs_no_logs_permission(tf):
    """The default CloudWatch message reader reads logs only when the application logs to CloudWatch;
    it does not, so the run role needs no logs:GetLogEvents (enable both together)."""
    app = tf.of_type("aws_emrserverless_application")["spark"]
    monitoring = blocks(app, "monitoring_configuration")
    cloudwatch = [c for m in monitoring for c in blocks(m, "cloudwatch_logging_configuration")]
    if any(c.get("enabled") is True for c in cloudwatch):
        assert "logs:GetLogEvents" in _granted(tf, "dagster_submit_emr")


def test_the_application_runs_in_the_vpc(tf):
    app = tf.of_type("aws_emrserverless_application")["spark"]
    network = one_block(app, "network_configuration", "aws_emrserverless_application.spark")
    assert "local.emr_subnet_ids" in str(network.get("subnet_ids"))
    assert "local.emr_security_group_ids" in str(network.get("security_group_ids"))
    assert "var.emr_subnet_ids" in str(tf.locals["emr_subnet_ids"])
    description = tf.variables["emr_subnet_ids"]["description"]
    assert "NAT" in description and "Function URL" in description, "say which route the job needs"


def test_the_job_role_can_tell_a_truncated_chunk_from_a_forbidden_one(tf):
    """A GET of a missing key answers 404 (NoSuchKey -> Truncated) only with s3:ListBucket."""
    listing = [s for s in statements(tf.data["aws_iam_policy_document"]["emr_job"])
               if "s3:ListBucket" in as_list(s.get("actions"))
               and ("aws_s3_bucket", "segments") in refs(s.get("resources"))]
    assert len(listing) == 1, "the job role needs s3:ListBucket on the segments bucket"
    conditions = [(c.get("test"), c.get("variable"), as_list(c.get("values"))) for c in blocks(listing[0], "condition")]
    assert conditions == [("StringLike", "s3:prefix", ["segments/*"])]
