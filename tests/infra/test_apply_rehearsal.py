"""A `terraform apply` of the whole configuration, rehearsed against moto (issue 37).

The static checks (test_terraform.py, test_first_apply.py) read the HCL; this runs it. The configuration
is copied to a temporary directory (so no .terraform or state lands in the repository), initialized from
the local provider mirror (RILLET_TF_PLUGIN_DIR, default /opt/tf-plugins) and applied against a moto
server started for the module, with provider endpoints pointed at it and dummy keys. What it created is
then read back with boto3 and compared with what the code declares: the Function URLs' auth type, every
alarm's action, the tables' keys and indexes against the PynamoDB models, and each function role's
policy against the reviewed grants. A second plan must show no change, and destroy must remove it all.

Only where moto falls short of AWS does the rehearsal differ from a real apply: REHEARSAL_OVERRIDE (each
override says which moto limitation it answers) and _MOTO_LAUNCHER. What only AWS can show is listed in
docs/operations.md (Rehearsing an apply).

Run it alone: .venv/bin/pytest tests/infra/test_apply_rehearsal.py
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import boto3
import pytest
from test_first_apply import PLUGIN_DIR
from test_terraform import EXPECTED_GRANTS, FUNCTIONS, TABLES, TF_DIR, model_schema

PROVIDER_DIR = PLUGIN_DIR / "registry.terraform.io" / "hashicorp" / "aws"
pytestmark = pytest.mark.skipif(
    shutil.which("terraform") is None or not PROVIDER_DIR.is_dir(),
    reason="needs a terraform binary and the hashicorp/aws provider in a local mirror (RILLET_TF_PLUGIN_DIR)")

REGION = "eu-west-2"
PREFIX = "rehearsal"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": REGION}
# Every service the configuration calls (the provider's endpoint names).
SERVICES = ["budgets", "cloudwatch", "dynamodb", "ec2", "ecr", "ecs", "emrserverless", "events", "iam", "lambda",
            "logs", "rds", "s3", "secretsmanager", "sns", "sts"]

# moto's server, with the one behaviour no override can reach: moto reports every new EMR Serverless
# application as STARTED, and the provider waits for CREATED (what AWS reports until a job or a start
# request starts it); moto also refuses to delete a STARTED application.
_MOTO_LAUNCHER = """
import sys
import moto.emrserverless.models
moto.emrserverless.models.APPLICATION_STATUS = "CREATED"
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"""

REHEARSAL_OVERRIDE = """
# The rehearsal's provider: moto at {endpoint}, dummy keys, nothing asked of a real account.
provider "aws" {{
  region                      = "{region}"
  access_key                  = "testing"
  secret_key                  = "testing"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  s3_use_path_style           = true

  endpoints {{
{endpoints}
  }}
}}

# moto's EMR Serverless accepts only release labels of the form emr-N.N.0 (AWS also has emr-spark-8.0.0).
resource "aws_emrserverless_application" "spark" {{
  release_label = "emr-7.0.0"
}}

# moto's ECS services never report their tasks running, so a wait for a steady state never ends.
resource "aws_ecs_service" "webserver" {{
  wait_for_steady_state = false
}}

resource "aws_ecs_service" "daemon" {{
  wait_for_steady_state = false
}}
"""


def _terraform(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["terraform", *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto(log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-c", _MOTO_LAUNCHER, str(port)], stdout=out,
                                   stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/data.json", timeout=2).close()
            return process, endpoint
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise AssertionError(f"moto did not start: {log.read_text()}") from None
            time.sleep(0.2)


class Rehearsal:
    def __init__(self, work: Path, endpoint: str, env: dict[str, str]) -> None:
        self.work, self.endpoint, self.env = work, endpoint, env
        self.applied: dict = {}  # the state after apply (terraform show -json takes seconds)

    def client(self, service: str):
        return boto3.client(service, endpoint_url=self.endpoint, **CREDENTIALS)

    def terraform(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return _terraform(list(args), self.work, self.env, timeout)

    def state(self) -> dict:
        shown = self.terraform("show", "-json")
        assert shown.returncode == 0, shown.stderr
        return json.loads(shown.stdout)

    def resources(self, rtype: str) -> dict[str, dict]:
        """address -> values of the resources of a type in the state after apply."""
        root = self.applied["values"]["root_module"]
        return {r["address"]: r["values"] for r in root.get("resources", []) if r["type"] == rtype}


def _inputs(rehearsal: Rehearsal, tmp: Path) -> str:
    """What the configuration takes as given: a VPC with two subnets and a security group, the EMR output
    bucket, a code artifact; and the optional parts switched on (reserved concurrency, an alarm e-mail,
    per-stream metrics), but the budget: moto's Budgets implements neither
    DescribeSubscribersForNotification nor ListTagsForResource, both of which the provider reads a
    budget with."""
    ec2 = rehearsal.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"{REGION}{zone}")
               ["Subnet"]["SubnetId"] for i, zone in enumerate("ab")]
    group = ec2.create_security_group(GroupName="dagster-tasks", Description="Dagster tasks", VpcId=vpc)["GroupId"]
    route_table = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["RouteTables"][0]
    rehearsal.client("s3").create_bucket(Bucket=f"{PREFIX}-output",
                                         CreateBucketConfiguration={"LocationConstraint": REGION})
    artifact = tmp / "lambda.zip"
    with zipfile.ZipFile(artifact, "w") as zf:
        zf.writestr("lambdas/__init__.py", "")
    values = {
        "name_prefix": PREFIX,
        "image_tag": "rehearsal-1",
        "dagster_subnet_ids": subnets,
        "dagster_security_group_ids": [group],
        "gateway_endpoint_route_table_ids": [route_table["RouteTableId"]],
        "emr_output_bucket": f"{PREFIX}-output",
        "lambda_zip": str(artifact),
        "alarm_emails": ["oncall@example.com"],
        "reserved_concurrency": {"append": 10},
        "stream_metrics": ["orders.eu/clicks"],
        # So that destroy can remove what apply made (both default to keeping data).
        "table_deletion_protection": False,
        "bucket_force_destroy": True,
    }
    return "".join(f"{name} = {json.dumps(value)}\n" for name, value in values.items())


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rehearsal")
    moto, endpoint = _start_moto(tmp / "moto.log")
    try:
        work = tmp / "terraform"
        shutil.copytree(TF_DIR, work, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "terraform.tfvars"))
        (tmp / "mirror.tfrc").write_text(
            f'provider_installation {{\n  filesystem_mirror {{\n    path = "{PLUGIN_DIR}"\n  }}\n}}\n')
        env = dict(os.environ, CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1", TF_INPUT="0",
                   TF_CLI_CONFIG_FILE=str(tmp / "mirror.tfrc"), AWS_EC2_METADATA_DISABLED="true")
        for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_SESSION_TOKEN"):
            env.pop(name, None)
        endpoints = "\n".join(f'    {service:<14} = "{endpoint}"' for service in SERVICES)
        (work / "rehearsal_override.tf").write_text(
            REHEARSAL_OVERRIDE.format(endpoint=endpoint, region=REGION, endpoints=endpoints))
        rehearsal = Rehearsal(work, endpoint, env)
        (work / "terraform.tfvars").write_text(_inputs(rehearsal, tmp))
        init = rehearsal.terraform("init", "-input=false", "-backend=false")
        assert init.returncode == 0, init.stdout + init.stderr
        applied = rehearsal.terraform("apply", "-auto-approve", "-input=false", "-parallelism=30")
        assert applied.returncode == 0, applied.stdout[-4000:] + applied.stderr
        rehearsal.applied = rehearsal.state()
        yield rehearsal
    finally:
        moto.terminate()
        moto.wait(timeout=30)


def test_function_urls_are_signed_with_iam(rehearsal):
    functions = rehearsal.resources("aws_lambda_function")
    assert len(functions) == len(FUNCTIONS)
    lam = rehearsal.client("lambda")
    for values in functions.values():
        config = lam.get_function_url_config(FunctionName=values["function_name"])
        assert config["AuthType"] == "AWS_IAM", values["function_name"]
        handler = lam.get_function(FunctionName=values["function_name"])["Configuration"]["Handler"]
        assert handler in FUNCTIONS


def test_every_alarm_and_rule_publishes_to_the_topic(rehearsal):
    topic = rehearsal.client("sns").list_topics()["Topics"]
    assert len(topic) == 1
    topic = topic[0]["TopicArn"]
    declared = {v["alarm_name"] for v in rehearsal.resources("aws_cloudwatch_metric_alarm").values()}
    alarms = rehearsal.client("cloudwatch").describe_alarms()["MetricAlarms"]
    assert {a["AlarmName"] for a in alarms} == declared
    assert [a["AlarmName"] for a in alarms if a["AlarmActions"] != [topic]] == []
    events = rehearsal.client("events")
    rules = events.list_rules(NamePrefix=PREFIX)["Rules"]
    assert len(rules) == len(rehearsal.resources("aws_cloudwatch_event_rule"))
    for rule in rules:
        assert [t["Arn"] for t in events.list_targets_by_rule(Rule=rule["Name"])["Targets"]] == [topic]
    subscriptions = rehearsal.client("sns").list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [(s["Protocol"], s["Endpoint"]) for s in subscriptions] == [("email", "oncall@example.com")]


def test_per_stream_metrics_and_the_image_lifecycle(rehearsal):
    """The switches that add resources: per-stream metric filters for the listed stream (and the
    deployment-wide ones), and the repository's lifecycle policy."""
    logs = rehearsal.client("logs")
    filters = logs.describe_metric_filters(logGroupName=f"/ecs/{PREFIX}-dagster")["metricFilters"]
    per_stream = [f for f in filters if f["filterName"].endswith("-per-stream")]
    assert len(per_stream) == 5 and all('$.stream = "orders.eu/clicks"' in f["filterPattern"] for f in per_stream)
    assert {f["metricTransformations"][0]["metricName"] for f in filters} >= {"RunsFailed", "UnconsumedBytes"}
    policy = rehearsal.client("ecr").get_lifecycle_policy(repositoryName=PREFIX)["lifecyclePolicyText"]
    rules = json.loads(policy)["rules"]
    assert [r["selection"]["countType"] for r in rules] == ["sinceImagePushed", "imageCountMoreThan"]


def _described_schema(table: dict) -> dict:
    """A described table in model_schema's form."""
    def key(schema: list[dict], kind: str) -> str | None:
        return next((k["AttributeName"] for k in schema if k["KeyType"] == kind), None)

    def index(i: dict) -> dict:
        return {"hash_key": key(i["KeySchema"], "HASH"), "range_key": key(i["KeySchema"], "RANGE"),
                "projection_type": i["Projection"]["ProjectionType"],
                "non_key_attributes": sorted(i["Projection"].get("NonKeyAttributes", []))}

    return {
        "billing_mode": table["BillingModeSummary"]["BillingMode"],
        "hash_key": key(table["KeySchema"], "HASH"),
        "range_key": key(table["KeySchema"], "RANGE"),
        "attributes": {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]},
        "global_secondary_indexes": {i["IndexName"]: index(i) for i in table.get("GlobalSecondaryIndexes", [])},
        "local_secondary_indexes": {i["IndexName"]: index(i) for i in table.get("LocalSecondaryIndexes", [])},
    }


@pytest.mark.parametrize("table_name", sorted(TABLES))
def test_tables_are_the_models_tables(rehearsal, table_name):
    model, _ = TABLES[table_name]
    name = rehearsal.resources("aws_dynamodb_table")[f"aws_dynamodb_table.{table_name}"]["name"]
    dynamodb = rehearsal.client("dynamodb")
    assert _described_schema(dynamodb.describe_table(TableName=name)["Table"]) == model_schema(model)
    ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "ENABLED"
    backups = dynamodb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
    assert backups["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"


def _kind(resource: str, arns: dict[str, str]) -> str:
    """The kind test_terraform.EXPECTED_GRANTS names a deployed resource ARN by."""
    for kind, arn in arns.items():
        if resource == arn:
            return kind
    if resource == "*":
        return "any"
    for table in ("metadata", "segments"):
        if resource == f"{arns[table]}/index/*":
            return f"{table}-index"
    if resource == f"{arns['bucket']}/segments/*":
        return "objects"
    raise AssertionError(f"a grant on {resource}, which no reviewed grant names")


@pytest.mark.parametrize("handler", FUNCTIONS)
def test_function_roles_hold_the_reviewed_grants(rehearsal, handler):
    """The policies IAM holds for each function's role grant exactly the reviewed actions on the
    deployed tables, bucket and log group (the same sets test_terraform pins in the HCL)."""
    lam, iam = rehearsal.client("lambda"), rehearsal.client("iam")
    tables = {k.split(".")[1]: v["arn"] for k, v in rehearsal.resources("aws_dynamodb_table").items()}
    bucket = rehearsal.resources("aws_s3_bucket")["aws_s3_bucket.segments"]["arn"]
    name = next(v["function_name"] for v in rehearsal.resources("aws_lambda_function").values()
                if v["handler"] == handler)
    log_group = rehearsal.client("logs").describe_log_groups(logGroupNamePrefix=f"/aws/lambda/{name}")["logGroups"]
    arns = {**tables, "bucket": bucket, "logs": f"{log_group[0]['arn'].removesuffix(':*')}:*"}
    role = lam.get_function(FunctionName=name)["Configuration"]["Role"].rsplit("/", 1)[1]
    granted: dict[str, set[str]] = {}
    for policy in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        document = iam.get_role_policy(RoleName=role, PolicyName=policy)["PolicyDocument"]
        document = json.loads(document) if isinstance(document, str) else document
        for statement in document["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            for resource in resources:
                granted.setdefault(_kind(resource, arns), set()).update(actions)
    assert granted == EXPECTED_GRANTS[handler]
    assert iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"] == []


# What a second plan against moto shows although nothing changed: attributes moto does not store or
# answers differently from AWS. (resource type, attribute) -> the moto limitation.
MOTO_DRIFT = {
    ("aws_ecs_service", "availability_zone_rebalancing"): "DescribeServices leaves out availabilityZoneRebalancing",
    ("aws_ecs_service", "enable_execute_command"): "CreateService does not keep enableExecuteCommand",
    ("aws_emrserverless_application", "architecture"): "GetApplication leaves out the architecture",
    ("aws_lambda_function", "logging_config"): "GetFunction leaves out LoggingConfig",
    ("aws_vpc_security_group_ingress_rule", "referenced_security_group_id"):
        "a same-account group reference comes back as <account>/<group id>",
    ("aws_vpc_security_group_ingress_rule", "description"):
        "DescribeSecurityGroupRules reads a rule's description from its CIDR range, which a rule that "
        "references a group has not",
}
# Policies whose document is only "known after apply" in that plan: their data sources read ARNs of a
# function or the EMR application, and a data source that depends on a resource with a pending change
# (the drift above) is read at apply. Excluded only when the value is unknown, never when it differs.
DEFERRED = {("aws_iam_policy", "policy"), ("aws_iam_role_policy", "policy")}


def _changed_attributes(change: dict) -> set[str]:
    before, after = change["before"] or {}, change["after"] or {}
    unknown = change.get("after_unknown") or {}
    return {key for key in set(before) | set(after) | set(unknown)
            if unknown.get(key) is True or (key not in unknown and before.get(key) != after.get(key))}


def _project_changes(plan: dict) -> list[str]:
    """The planned changes not explained by MOTO_DRIFT or DEFERRED."""
    found = []
    for resource in plan.get("resource_changes", []):
        change = resource["change"]
        if change["actions"] == ["no-op"] or resource["mode"] == "data":
            continue
        if change["actions"] != ["update"]:
            found.append(f"{resource['address']}: {change['actions']}")
            continue
        unknown = change.get("after_unknown") or {}
        for attribute in sorted(_changed_attributes(change)):
            kind = (resource["type"], attribute)
            if kind in MOTO_DRIFT or (kind in DEFERRED and unknown.get(attribute) is True):
                continue
            found.append(f"{resource['address']}.{attribute}: {change['before'].get(attribute)!r} -> "
                         f"{'(known after apply)' if unknown.get(attribute) else change['after'].get(attribute)!r}")
    return found


def test_a_second_plan_changes_nothing_the_project_causes(rehearsal):
    plan = rehearsal.terraform("plan", "-detailed-exitcode", "-input=false", "-parallelism=30", "-out=second.tfplan")
    assert plan.returncode in (0, 2), plan.stdout[-6000:] + plan.stderr
    shown = rehearsal.terraform("show", "-json", "second.tfplan")
    assert shown.returncode == 0, shown.stderr
    assert _project_changes(json.loads(shown.stdout)) == []


def test_the_drift_filter_still_sees_a_real_change():
    """_project_changes excludes only the listed moto drift: any other attribute, any replacement counts."""
    drift = {"address": "aws_lambda_function.tails", "type": "aws_lambda_function", "mode": "managed",
             "change": {"actions": ["update"], "before": {"memory_size": 128, "logging_config": []},
                        "after": {"memory_size": 128, "logging_config": [{"log_format": "JSON"}]},
                        "after_unknown": {}}}
    assert _project_changes({"resource_changes": [drift]}) == []
    real = json.loads(json.dumps(drift))
    real["change"]["after"]["memory_size"] = 256
    assert _project_changes({"resource_changes": [real]}) == ["aws_lambda_function.tails.memory_size: 128 -> 256"]
    concrete = {"address": "aws_iam_policy.client", "type": "aws_iam_policy", "mode": "managed",
                "change": {"actions": ["update"], "before": {"policy": "{}"}, "after": {"policy": "{\"a\": 1}"},
                           "after_unknown": {}}}
    assert _project_changes({"resource_changes": [concrete]}) != []
    replaced = {"address": "aws_sns_topic.alarms", "type": "aws_sns_topic", "mode": "managed",
                "change": {"actions": ["delete", "create"], "before": {}, "after": {}, "after_unknown": {}}}
    assert _project_changes({"resource_changes": [replaced]}) == ["aws_sns_topic.alarms: ['delete', 'create']"]


def test_destroy_removes_everything(rehearsal):
    destroyed = rehearsal.terraform("destroy", "-auto-approve", "-input=false", "-parallelism=30")
    assert destroyed.returncode == 0, destroyed.stdout[-4000:] + destroyed.stderr
    assert rehearsal.state().get("values") is None
    assert rehearsal.client("dynamodb").list_tables()["TableNames"] == []
    assert rehearsal.client("lambda").list_functions()["Functions"] == []
    assert rehearsal.client("cloudwatch").describe_alarms()["MetricAlarms"] == []
    assert [b["Name"] for b in rehearsal.client("s3").list_buckets()["Buckets"]] == [f"{PREFIX}-output"]
