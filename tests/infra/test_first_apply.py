"""A first `terraform apply` on a new account with the default inputs.

No AWS account is reachable here, so an apply cannot run. What can run does: ``terraform validate`` on
the whole configuration where a terraform binary and a local provider mirror are installed
(RILLET_TF_PLUGIN_DIR, default /opt/tf-plugins), and the variables' validation rules through the real
binary (a module of the variables alone needs no provider). The rest is static over the parsed HCL:
every reference resolves, every variable has a type and a description, names stay within AWS's limits
at the longest prefix the variable allows, the defaults fit a new account's quotas, a bad image rolls
back, and the EMR archive is built on the image of the application's release.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
from test_terraform import (
    ROOT,
    TF_DIR,
    Terraform,
    _text,
    blocks,
    data_refs,
    one_block,
    parse_terraform,
    refs,
)

PLUGIN_DIR = Path(os.environ.get("RILLET_TF_PLUGIN_DIR", "/opt/tf-plugins"))
HAS_TERRAFORM = shutil.which("terraform") is not None

# The longest values the inputs allow: name_prefix's validation, a 12-digit account, the longest region
# names (ap-southeast-4, ap-northeast-3: 14 characters), and the id of the database's security group,
# which suffixes the final snapshot's name ("sg-" and 17 hex digits).
LONGEST = {"var.name_prefix": "p" * 26, "local.account_id": "1" * 12, "local.region": "ap-southeast-4",
           "aws_security_group.dagster_db.id": "sg-" + "0" * 17}
# AWS's name limits: (resource type, attribute) -> most characters.
NAME_LIMITS = {
    ("aws_s3_bucket", "bucket"): 63,
    ("aws_iam_role", "name"): 64,
    ("aws_iam_policy", "name"): 128,
    ("aws_lambda_function", "function_name"): 64,
    ("aws_db_instance", "identifier"): 63,
    ("aws_db_instance", "final_snapshot_identifier"): 255,
    ("aws_emrserverless_application", "name"): 64,
    ("aws_ecs_service", "name"): 255,
    ("aws_ecs_task_definition", "family"): 255,
    ("aws_ecr_repository", "name"): 256,
    ("aws_security_group", "name"): 255,
    ("aws_sns_topic", "name"): 256,
    ("aws_cloudwatch_metric_alarm", "alarm_name"): 255,
    ("aws_cloudwatch_dashboard", "dashboard_name"): 255,
    ("aws_budgets_budget", "name"): 100,
}


@pytest.fixture(scope="module")
def tf() -> Terraform:
    return parse_terraform(TF_DIR)


def _terraform(args: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, CHECKPOINT_DISABLE="1", TF_IN_AUTOMATION="1",
               TF_CLI_CONFIG_FILE=str(tmp_path / "none.tfrc"))
    return subprocess.run(["terraform", *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.skipif(not HAS_TERRAFORM or not PLUGIN_DIR.is_dir(),
                    reason="needs a terraform binary and a local provider mirror (RILLET_TF_PLUGIN_DIR)")
def test_terraform_validate(tmp_path):
    work = tmp_path / "terraform"
    shutil.copytree(TF_DIR, work, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*", "terraform.tfvars"))
    init = _terraform(["init", "-backend=false", "-input=false", f"-plugin-dir={PLUGIN_DIR}"], work, tmp_path)
    assert init.returncode == 0, init.stdout + init.stderr
    result = _terraform(["validate"], work, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


REQUIRED = {"image_tag": '"v1"', "dagster_subnet_ids": '["subnet-a", "subnet-b"]',
            "dagster_security_group_ids": '["sg-a"]', "emr_output_bucket": '"out"'}


@pytest.mark.skipif(not HAS_TERRAFORM, reason="no terraform binary")
@pytest.mark.parametrize(("name", "value", "accepted"), [
    ("image_tag", '"v1"', True),
    ("image_tag", '"sha256:' + "a" * 64 + '"', True),
    ("image_tag", '"latest"', False),  # the second push to an immutable repository fails
    ("image_tag", '"v1 beta"', False),
    ("name_prefix", '"' + "p" * 26 + '"', True),
    ("name_prefix", '"' + "p" * 27 + '"', False),  # the bucket name would pass 63 characters
    ("name_prefix", '"rillet-test-2"', True),
    ("name_prefix", '"2rillet"', False),  # RDS identifiers start with a letter
    ("name_prefix", '"rillet--test"', False),  # nor hold "--"
    ("name_prefix", '"Rillet"', False),  # bucket and ECR repository names are lower case
    ("name_prefix", '"sthree-rillet"', False),  # a prefix S3 reserves for its own bucket names
    ("ecr_images_kept", "1", False),
    ("bucket_name", '"' + "b" * 64 + '"', False),
    ("reserved_concurrency", "{ append = 0 }", False),
    ("reserved_concurrency", "{ append = 5 }", True),
    ("log_retention_days", "14", True),
    ("log_retention_days", "10", False),  # CloudWatch Logs accepts only its listed periods
    ("dagster_cpu", "500", False),
    ("dagster_db_instance_class", '"db.t4g.micro"', True),
    ("dagster_db_instance_class", '"t4g.micro"', False),
])
def test_variable_validation_through_terraform(tmp_path, name, value, accepted):
    """The validation rules as terraform evaluates them (plan of a module of the variables alone)."""
    module = tmp_path / "variables"
    module.mkdir()
    shutil.copy(TF_DIR / "variables.tf", module)
    values = REQUIRED | {name: value}
    (module / "terraform.tfvars").write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
    assert _terraform(["init", "-backend=false", "-input=false"], module, tmp_path).returncode == 0
    result = _terraform(["plan", "-input=false", "-refresh=false"], module, tmp_path)
    assert (result.returncode == 0) == accepted, result.stdout + result.stderr
    if not accepted:
        assert "Invalid value for variable" in result.stderr, result.stderr


# Inputs AWS constrains (a size, a set of values, a length): each needs a validation rule, so that a
# bad value fails the plan, not the apply half-way.
CONSTRAINED = {"name_prefix", "bucket_name", "lambda_architecture", "log_retention_days", "log_level",
               "writer_expiry_hours", "sublog_shards", "reserved_concurrency", "image_tag", "dagster_subnet_ids",
               "dagster_security_group_ids", "dagster_cpu", "dagster_memory", "dagster_daemon_memory",
               "dagster_architecture", "dagster_db_instance_class", "dagster_max_concurrent_runs",
               "dagster_db_max_storage_gb", "emr_architecture", "emr_max_vcpu", "emr_subnet_ids",
               "alarm_emails", "monthly_budget_usd", "ecr_images_kept"}


def test_every_variable_has_a_type_and_a_description(tf):
    problems = [f"variable {name}: no {key}" for name, body in tf.variables.items()
                for key in ("type", "description") if not body.get(key)]
    problems += [f"variable {name}: AWS constrains it, but it has no validation" for name in sorted(CONSTRAINED)
                 if not blocks(tf.variables[name], "validation")]
    assert not problems, "\n".join(problems)


def test_every_reference_resolves(tf):
    """var.X, local.X, resources and data sources referred to anywhere are declared (what terraform
    validate checks first)."""
    text = "\n".join(p.read_text() for p in TF_DIR.glob("*.tf")) + (TF_DIR / "templates").joinpath(
        "dagster.yaml.tftpl").read_text()
    text = re.sub(r"#[^\n]*", "", text)
    problems = []
    for name in set(re.findall(r"(?<![\w.])var\.([A-Za-z_][\w-]*)", text)) - set(tf.variables):
        problems.append(f"var.{name} is not declared")
    for name in set(re.findall(r"(?<![\w.])local\.([A-Za-z_]\w*)", text)) - set(tf.locals):
        problems.append(f"local.{name} is not declared")
    declared = {(t, n) for t, named in tf.resources.items() for n in named}
    for ref in refs(text) - declared:
        if ref[0] not in tf.data or ref[1] not in tf.data[ref[0]]:  # data.x.y is matched as x.y too
            problems.append(f"{ref[0]}.{ref[1]} is not declared")
    for rtype, name in data_refs(text):
        if name not in tf.data.get(rtype, {}):
            problems.append(f"data.{rtype}.{name} is not declared")
    assert not problems, "\n".join(sorted(problems))


def _longest(expression: str, tf: Terraform, depth: int = 0) -> str | None:
    """The longest value a name expression takes (None when it is not a plain interpolated string)."""
    assert depth < 10
    if match := re.fullmatch(r"\$\{coalesce\(var\.\w+, \"(.*)\"\)\}", expression):
        expression = match.group(1)  # the default the code builds; the override has its own validation
    if match := re.fullmatch(r"\$\{(aws_\w+)\.(\w+)\.name\}", expression):  # another resource's name
        return _longest(_text(tf.of_type(match.group(1))[match.group(2)]["name"]), tf, depth + 1)
    if match := re.fullmatch(r"\$\{(local\.\w+)\}", expression):
        return _longest(_text(tf.locals[match.group(1).split(".", 1)[1]]), tf, depth + 1)

    def substitute(m: re.Match) -> str:
        name = m.group(1)
        if name in LONGEST:
            return LONGEST[name]
        if name.startswith("local.function_names."):
            return _longest(tf.locals["function_names"][name.rsplit(".", 1)[1]], tf, depth + 1)
        if name.startswith("local."):
            return _longest(_text(tf.locals[name.split(".", 1)[1]]), tf, depth + 1)
        raise KeyError(name)

    try:
        return re.sub(r"\$\{([\w.]+)\}", substitute, expression)
    except (KeyError, TypeError):
        return None


def test_names_fit_aws_limits_at_the_longest_prefix(tf):
    problems, checked = [], 0
    for (rtype, attribute), limit in NAME_LIMITS.items():
        for name, body in tf.of_type(rtype).items():
            if attribute not in body:
                continue
            expression = _text(body[attribute])
            if "each.value" in expression:  # the longest of the values for_each iterates over
                (local,) = re.findall(r"local\.(\w+)", _text(body["for_each"]))
                longest = max((_longest(_text(v), tf) for v in tf.locals[local].values()), key=len)
                expression = expression.replace("${each.value}", longest)
            value = _longest(expression, tf)
            assert value is not None, f"{rtype}.{name}.{attribute}: cannot evaluate {body[attribute]!r}"
            checked += 1
            if len(value) > limit:
                problems.append(f"{rtype}.{name}.{attribute} reaches {len(value)} characters ({value}), AWS allows {limit}")
    assert checked >= 15
    assert not problems, "\n".join(problems)


def test_name_check_catches_the_old_bucket_limit(tf):
    assert len(_longest("${var.name_prefix}-segments-${local.account_id}-${local.region}", tf)) == 63
    old = {**LONGEST, "var.name_prefix": "p" * 31}
    assert len(f"{old['var.name_prefix']}-segments-{old['local.account_id']}-{old['local.region']}") > 63


def test_default_concurrency_reserves_nothing(tf):
    """AWS keeps 100 of the account's concurrency unreserved; a new account's limit is often 10, so any
    default reservation would fail the first apply."""
    variable = tf.variables["reserved_concurrency"]
    assert variable.get("default") == {}, "unreserved by default; reserving is the operator's choice"
    assert "optional(number)" in _text(variable.get("type"))
    for name, fn in tf.of_type("aws_lambda_function").items():
        assert _text(fn.get("reserved_concurrent_executions")) == f"${{var.reserved_concurrency.{name}}}"


def test_image_tag_is_required(tf):
    assert "default" not in tf.variables["image_tag"], "no default tag: the repository's tags are immutable"
    assert blocks(tf.variables["image_tag"], "validation")
    assert tf.of_type("aws_ecr_repository")["rillet"].get("image_tag_mutability") == "IMMUTABLE"


@pytest.mark.parametrize("service", ["webserver", "daemon"])
def test_a_bad_image_rolls_back(tf, service):
    body = tf.of_type("aws_ecs_service")[service]
    breaker = one_block(body, "deployment_circuit_breaker", f"aws_ecs_service.{service}")
    assert breaker.get("enable") is True and breaker.get("rollback") is True
    assert body.get("wait_for_steady_state") is True, "apply must not report success while tasks crash"


def test_the_lambda_zip_is_resolved_against_the_module(tf):
    assert "path.module" in _text(tf.locals["lambda_zip"])
    for name, fn in tf.of_type("aws_lambda_function").items():
        assert _text(fn.get("filename")) == "${local.lambda_zip}", name


def test_the_emr_archive_is_built_on_the_release_image(tf):
    dockerfile = (ROOT / "Dockerfile").read_text()
    release = tf.of_type("aws_emrserverless_application")["spark"]["release_label"]
    assert re.search(rf"^ARG EMR_RELEASE={re.escape(release)}$", dockerfile, re.MULTILINE), (
        f"the Dockerfile's EMR_RELEASE must be the application's release_label {release}")
    first_from = dockerfile.index("\nFROM ")
    assert dockerfile.index("ARG EMR_RELEASE") < first_from, "an ARG used in FROM precedes the first FROM"
    assert "FROM public.ecr.aws/emr-serverless/spark/${EMR_RELEASE}:latest AS emr-build" in dockerfile


def test_the_examples_cover_the_inputs(tf):
    example = {k: v for k, v in hcl2.loads((TF_DIR / "terraform.tfvars.example").read_text()).items()
               if not k.startswith("__")}
    required = {name for name, body in tf.variables.items() if "default" not in body}
    assert required <= set(example), f"terraform.tfvars.example lacks {sorted(required - set(example))}"
    assert set(example) <= set(tf.variables), f"undeclared: {sorted(set(example) - set(tf.variables))}"
    backend = (TF_DIR / "backend.tf.example").read_text()
    assert 'backend "s3"' in backend and "encrypt" in backend and ("use_lockfile" in backend or "dynamodb_table" in backend)
