"""The Dagster (ECS Fargate, RDS PostgreSQL) and Spark (EMR Serverless) parts of infra/terraform.

Parsed with python-hcl2, as in test_terraform.py (the provider cannot be downloaded here, so
``terraform validate`` cannot run). What matters: every piece the jobs need exists; the containers get
the environment the code reads; the Dagster instance the containers write is one Dagster accepts, with
the ECS run launcher and PostgreSQL storage; each role holds only the reviewed permissions; the EMR job
role reads nothing of the segments bucket but segment objects; the UI is private.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config
from dagster_aws.ecs import EcsRunLauncher
from test_terraform import (  # the sibling module: the parser and the IAM helpers
    ROOT,
    TF_DIR,
    UNSCOPED_ACTIONS,
    Terraform,
    _text,
    as_list,
    blocks,
    data_refs,
    one_block,
    parse_terraform,
    refs,
    role_policy_documents,
    statements,
)

from dagster_project.postgres_storage import SecretPasswordPostgresStorage
from dagster_project.run_launcher import MaintenanceInDaemonRunLauncher

TEMPLATE = TF_DIR / "templates" / "dagster.yaml.tftpl"
TASK_ROLES = {"webserver": "dagster_webserver", "daemon": "dagster_daemon", "run": "dagster_run"}
# The permissions of each Dagster role by policy document, as reviewed against the calls: the jobs'
# table and object calls are the controller's (see EXPECTED_GRANTS in test_terraform.py).
EXPECTED_DOCUMENTS = {
    "dagster_webserver": {"dagster_webserver", "dagster_db_password"},
    "dagster_daemon": {"dagster_jobs", "dagster_launch_runs", "dagster_db_password"},
    "dagster_run": {"dagster_jobs", "dagster_submit_emr", "dagster_db_password"},
    "dagster_execution": {"dagster_execution"},
    "emr_job": {"emr_job"},
}


@pytest.fixture(scope="module")
def tf() -> Terraform:
    return parse_terraform(TF_DIR)


def _env_names_read(path: Path) -> set[str]:
    """The RILLET_* names a module reads from the environment (string constants in env.get/os.environ)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"RILLET_[A-Z_]+", node.value):
            names.add(node.value)
    return names


def render_instance(values: dict[str, str]) -> str:
    """templatefile() for the template's plain ${name} placeholders ($${ is a literal ${)."""
    text = TEMPLATE.read_text()
    assert "%{" not in text, "the test renders plain ${name} placeholders only"
    return re.sub(r"(?<!\$)\$\{(\w+)\}", lambda m: values[m.group(1)], text)


def test_every_piece_is_declared(tf):
    assert set(tf.of_type("aws_ecs_service")) == {"webserver", "daemon"}
    assert set(tf.of_type("aws_ecs_task_definition")) == {"webserver", "daemon", "run"}
    for name, task in tf.of_type("aws_ecs_task_definition").items():
        assert as_list(task.get("requires_compatibilities")) == ["FARGATE"], name
        assert ("aws_iam_role", TASK_ROLES[name]) in refs(task.get("task_role_arn")), name
        assert ("aws_iam_role", "dagster_execution") in refs(task.get("execution_role_arn")), name
    for name, service in tf.of_type("aws_ecs_service").items():
        assert service.get("launch_type") == "FARGATE"
        assert ("aws_ecs_task_definition", name) in refs(service.get("task_definition"))
        network = one_block(service, "network_configuration", name)
        assert network.get("assign_public_ip") is False, f"{name}: no public address"
        assert "var.dagster_subnet_ids" in _text(network.get("subnets")), "the VPC is an input"
    assert tf.of_type("aws_ecs_service")["daemon"].get("desired_count") == 1, "never two daemons"
    assert tf.of_type("aws_ecs_service")["daemon"].get("deployment_maximum_percent") == 100, (
        "a deployment must stop the old daemon before starting the new one")

    db = tf.of_type("aws_db_instance")["dagster"]
    assert db.get("engine") == "postgres" and db.get("publicly_accessible") is False
    assert db.get("storage_encrypted") is True
    assert db.get("manage_master_user_password") is True, "the password lives in Secrets Manager"
    assert "password" not in db, "no password in the Terraform state"

    emr = tf.of_type("aws_emrserverless_application")["spark"]
    assert emr.get("release_label") == "emr-spark-8.0.0" and emr.get("type") == "SPARK"
    assert one_block(emr, "auto_stop_configuration", "emr").get("enabled") is True, "idle costs nothing"

    group = tf.of_type("aws_cloudwatch_log_group")["dagster"]
    assert group.get("retention_in_days"), "the Dagster log group needs a retention period"


def test_task_definitions_pass_the_environment_the_code_reads(tf):
    environment = tf.locals["dagster_environment"]
    read = (_env_names_read(ROOT / "dataplane" / "deployment.py")
            | _env_names_read(ROOT / "dagster_project" / "resources.py"))
    read.discard("RILLET_AWS_ENDPOINT")  # standalone only: on AWS it would point at a missing moto
    assert "RILLET_AWS_ENDPOINT" not in environment
    assert "AWS_REGION" in environment, "dagster-aws builds its boto3 clients with the default region"
    missing = read - set(environment)
    assert not missing, f"the Dagster containers do not get {sorted(missing)}, which the code reads"
    assert ("aws_dynamodb_table", "metadata") in refs(environment["RILLET_METADATA_TABLE"])
    assert ("aws_dynamodb_table", "segments") in refs(environment["RILLET_SEGMENTS_TABLE"])
    assert ("aws_s3_bucket", "segments") in refs(environment["RILLET_BUCKET"])
    assert ("aws_emrserverless_application", "spark") in refs(environment["RILLET_EMR_APPLICATION_ID"])
    assert ("aws_iam_role", "emr_job") in refs(environment["RILLET_EMR_JOB_ROLE_ARN"])

    instance_env = set(re.findall(r"env: (\w+)", TEMPLATE.read_text()))
    assert instance_env <= set(environment), "the instance reads variables no container gets"
    assert "dagster_secrets" not in tf.locals and "DAGSTER_PG_PASSWORD" not in environment, (
        "no container holds the password: it rotates, the storage reads it from the secret")
    assert ("aws_db_instance", "dagster") in refs(environment["DAGSTER_PG_SECRET_ARN"])
    for name, task in tf.of_type("aws_ecs_task_definition").items():
        containers = _text(task.get("container_definitions"))
        assert "secrets" not in containers, f"{name}: a secret injected at start goes stale at the first rotation"
        for local in ("local.dagster_environment", "local.dagster_log_configuration"):
            assert local in containers, f"aws_ecs_task_definition.{name} does not pass {local}"


def test_instance_config_is_the_ecs_launcher_with_postgres(monkeypatch, tmp_path):
    rendered = render_instance({
        "max_concurrent_runs": "4", "run_task_definition": "rillet-dagster-run", "cluster": "rillet-dagster",
        "subnets": json.dumps(["subnet-a", "subnet-b"]), "security_groups": json.dumps(["sg-1"]),
    })
    (tmp_path / "dagster.yaml").write_text(rendered)
    for name in ("DAGSTER_PG_USERNAME", "DAGSTER_PG_SECRET_ARN", "DAGSTER_PG_HOST", "DAGSTER_PG_DB", "AWS_REGION"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("DAGSTER_PG_PORT", "5432")
    config, _ = dagster_instance_config(str(tmp_path), "dagster.yaml")  # Dagster's own validation
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_project.run_launcher", "MaintenanceInDaemonRunLauncher")
    assert process_config(MaintenanceInDaemonRunLauncher.config_type(), launcher["config"]).success
    ecs = launcher["config"]["ecs"]  # the export runs' launcher
    assert process_config(EcsRunLauncher.config_type(), ecs).success
    network = ecs["run_task_kwargs"]["networkConfiguration"]["awsvpcConfiguration"]
    assert network == {"subnets": ["subnet-a", "subnet-b"], "securityGroups": ["sg-1"], "assignPublicIp": "DISABLED"}
    assert ecs["secrets_tag"] is None, "the launcher must not list every secret of the account"
    storage = config["storage"]["custom"]
    assert (storage["module"], storage["class"]) == ("dagster_project.postgres_storage", "SecretPasswordPostgresStorage")
    assert process_config(SecretPasswordPostgresStorage.config_type(), storage["config"]).success
    assert storage["config"]["postgres_db"]["scheme"] == "postgresql+psycopg2", (
        "SQLAlchemy 2.1 maps postgresql:// to psycopg 3, which is not installed")
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["run_monitoring"]["max_resume_run_attempts"] == 0, (
        "resuming runs makes every process build the launcher, which only the daemon's role may use")
    assert "password" not in yaml.safe_load(rendered)["storage"]["custom"]["config"]["postgres_db"], (
        "the rendered instance holds no password")


def test_instance_template_variables_are_the_ones_terraform_passes(tf):
    placeholders = set(re.findall(r"(?<!\$)\$\{(\w+)\}", TEMPLATE.read_text()))
    call = _text(tf.locals["dagster_instance_yaml"])
    passed = set(re.findall(r"(\w+)\s*=", call)) | set(re.findall(r"'(\w+)':", call)) | set(
        re.findall(r'"(\w+)":', call))
    assert placeholders <= passed, f"templatefile() does not pass {sorted(placeholders - passed)}"


def _documents(tf, role: str) -> dict[str, dict]:
    return dict(role_policy_documents(tf, role))


@pytest.mark.parametrize("role", sorted(EXPECTED_DOCUMENTS))
def test_roles_hold_only_the_reviewed_documents(tf, role):
    assert set(_documents(tf, role)) == EXPECTED_DOCUMENTS[role]
    body = tf.of_type("aws_iam_role")[role]
    assert "managed_policy_arns" not in body and "inline_policy" not in body
    for name, attachment in tf.of_type("aws_iam_role_policy_attachment").items():
        assert ("aws_iam_role", role) not in refs(attachment.get("role")), name


def test_emr_role_reads_only_segment_objects(tf):
    on_segments = []
    for statement in statements(tf.data["aws_iam_policy_document"]["emr_job"]):
        for resource in as_list(statement.get("resources")):
            if ("aws_s3_bucket", "segments") in refs(resource):
                on_segments.append((resource, sorted(as_list(statement.get("actions")))))
    assert on_segments == [("${aws_s3_bucket.segments.arn}/segments/*", ["s3:GetObject"]),
                           ("${aws_s3_bucket.segments.arn}", ["s3:ListBucket"])], on_segments
    invoked = set()
    for statement in statements(tf.data["aws_iam_policy_document"]["emr_job"]):
        if any(a.startswith("lambda:") for a in as_list(statement.get("actions"))):
            invoked |= {n for t, n in refs(statement.get("resources")) if t == "aws_lambda_function"}
            assert blocks(statement, "condition"), "Lambda calls only through the IAM-authenticated URLs"
    assert invoked == {"controller_api", "read"}


def test_run_role_submits_only_to_the_application(tf):
    document = tf.data["aws_iam_policy_document"]["dagster_submit_emr"]
    for statement in statements(document):
        for action in as_list(statement.get("actions")):
            if action.startswith("emr-serverless:"):
                assert refs(statement.get("resources")) == {("aws_emrserverless_application", "spark")}
            elif action == "iam:PassRole":
                assert refs(statement.get("resources")) == {("aws_iam_role", "emr_job")}
                assert blocks(statement, "condition"), "PassRole only to EMR Serverless"


def test_daemon_launches_only_the_run_task_definition(tf):
    document = tf.data["aws_iam_policy_document"]["dagster_launch_runs"]
    for statement in statements(document):
        actions = as_list(statement.get("actions"))
        if "ecs:RunTask" in actions:
            assert refs(statement.get("resources")) == {("aws_ecs_task_definition", "run")}
        if "iam:PassRole" in actions:
            assert refs(statement.get("resources")) == {("aws_iam_role", "dagster_run"),
                                                        ("aws_iam_role", "dagster_execution")}
        if "*" in as_list(statement.get("resources")):
            assert set(actions) <= UNSCOPED_ACTIONS


def test_the_ui_is_private(tf):
    assert not tf.of_type("aws_lb") and not tf.of_type("aws_alb"), (
        "a load balancer in front of the UI needs authentication (ALB + OIDC/Cognito) and a test for it")
    for rtype in ("aws_vpc_security_group_ingress_rule", "aws_security_group_rule"):
        for name, rule in tf.of_type(rtype).items():
            assert rule.get("cidr_ipv4") != "0.0.0.0/0" and "0.0.0.0/0" not in as_list(rule.get("cidr_blocks")), name
    assert tf.of_type("aws_ecs_service")["webserver"].get("enable_execute_command") is True, (
        "the documented way into the UI is an SSM port forward through ECS Exec")


@pytest.mark.parametrize("function", ["controller_api", "append", "read", "tails"])
def test_functions_can_reserve_concurrency(tf, function):
    """Each function's reservation is an input (unreserved by default: test_first_apply.py)."""
    fn = tf.of_type("aws_lambda_function")[function]
    assert _text(fn.get("reserved_concurrent_executions")) == f"${{var.reserved_concurrency.{function}}}"
    assert function in _text(tf.variables["reserved_concurrency"].get("type"))


def test_outputs_for_the_user(tf):
    wanted = {
        "emr_application_id": ("aws_emrserverless_application", "spark"),
        "emr_job_role_arn": ("aws_iam_role", "emr_job"),
        "dagster_ui_access": ("aws_ecs_cluster", "dagster"),
        "ecr_repository_url": ("aws_ecr_repository", "rillet"),
        "dagster_db_secret_arn": ("aws_db_instance", "dagster"),
    }
    for output, source in wanted.items():
        assert output in tf.outputs, f"output {output} is missing"
        assert source in refs(tf.outputs[output].get("value")), f"output {output} should use {source}"


def test_no_data_source_stands_for_what_terraform_should_create(tf):
    """Only the user's inputs are looked up (the VPC's subnet, the output bucket), never Rillet's own."""
    looked_up = {(t, n) for t, named in tf.data.items() for n in named if t != "aws_iam_policy_document"}
    assert looked_up == {("aws_caller_identity", "current"), ("aws_region", "current"),
                         ("aws_subnet", "dagster"), ("aws_s3_bucket", "emr_output")}
    assert data_refs(tf.data["aws_iam_policy_document"]["emr_job"]) >= {("aws_s3_bucket", "emr_output")}


def _checkov() -> str | None:
    return os.environ.get("RILLET_CHECKOV") or shutil.which("checkov")


@pytest.mark.skipif(_checkov() is None, reason="checkov is not installed (set RILLET_CHECKOV to its path)")
def test_checkov_reports_no_failed_check(tmp_path):
    """Every check that does not fit is skipped in the .tf with its reason."""
    result = subprocess.run([_checkov(), "-d", str(TF_DIR), "--framework", "terraform", "--compact",
                             "-o", "json"], capture_output=True, text=True, timeout=600, check=False)
    report = json.loads(result.stdout)
    report = report[0] if isinstance(report, list) else report
    failed = [f"{c['check_id']} {c['resource']}: {c['check_name']}" for c in report["results"]["failed_checks"]]
    assert not failed, "checkov failed checks:\n" + "\n".join(failed)
    assert report["summary"]["parsing_errors"] == 0
    skipped = report["results"]["skipped_checks"]
    assert all(c["check_result"].get("suppress_comment") for c in skipped), "every skip needs its reason"
