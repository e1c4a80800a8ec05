"""The image of infra/terraform/dagster.tf (Dockerfile, `make image`) and its entry points.

No container engine runs on the development machines, so the image is never built here. What can be
checked is checked: the Dockerfile installs exactly requirements.lock and copies every package the code
location imports; the commands the task definitions run are console scripts of the locked
distributions; the entry point writes the instance Terraform renders; and the Dagster definitions load
with production resources built from the environment the task definitions set.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
from test_terraform import (
    ROOT,
    TF_DIR,
    Terraform,
    _distribution_closure,
    first_party_closure,
    parse_terraform,
)

DOCKERFILE = ROOT / "Dockerfile"
RUNTIME_PINS = ROOT / "docker" / "requirements-runtime.txt"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
# Top-level package -> its source directory, as pyproject.toml's package finder lays them out.
SOURCES = {"controlplane": "controlplane", "dataplane": "dataplane", "lambdas": "lambdas",
           "dagster_project": "dagster_project", "standalone": "standalone", "rillet": "client/rillet",
           "rillet_spark": "spark/rillet_spark"}


@pytest.fixture(scope="module")
def tf() -> Terraform:
    return parse_terraform(TF_DIR)


def _image_stage() -> str:
    text = DOCKERFILE.read_text()
    return text.split(" AS image", 1)[1].split("\nFROM ", 1)[0]


def _locked() -> set[str]:
    return {re.sub(r"[-_.]+", "-", m.group(1)).lower()
            for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", (ROOT / "requirements.lock").read_text(), re.MULTILINE)}


def _runtime_requirements():
    spec = importlib.util.spec_from_file_location("runtime_requirements", ROOT / "infra" / "runtime_requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_image_installs_the_runtime_part_of_the_lock():
    stage = _image_stage()
    assert "pip install --no-cache-dir --no-deps -r requirements-runtime.txt" in stage
    assert "COPY docker/requirements-runtime.txt ./" in stage
    assert re.search(r"pip install [^\n]*--no-deps \./client \./spark \.", stage), "the project itself without resolving"
    runtime = _runtime_requirements()
    assert RUNTIME_PINS.read_text() == runtime.render(), (
        "docker/requirements-runtime.txt is stale: run .venv/bin/python infra/runtime_requirements.py")
    pinned = {runtime.normalize(line.split("==")[0]) for line in RUNTIME_PINS.read_text().splitlines()
              if "==" in line}
    # --no-deps is only right if the pins hold the whole closure of what the image runs.
    needed = _distribution_closure(("dagster-aws", "dagster-postgres", "dagster-webserver", "rillet"))
    missing = needed - pinned - {"rillet"}
    assert not missing, f"docker/requirements-runtime.txt lacks {sorted(missing)}, which the image needs"
    heavy = {"pyspark", "moto", "pandas", "pytest", "schemathesis", "hypothesis", "ruff", "python-hcl2"}
    assert not heavy & pinned, f"the image installs {sorted(heavy & pinned)}"
    assert pinned <= _locked(), "every pin comes from requirements.lock"


_BLOCKING_IMPORTER = """
import importlib.abc, importlib.metadata, json, sys
allowed = set(json.loads(sys.argv[1]))
providers = importlib.metadata.packages_distributions()
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        dists = {d.lower().replace("_", "-") for d in providers.get(top, [])}
        if dists and not dists & allowed:
            raise ImportError(f"{top} ({sorted(dists)}) is not in the image")
sys.meta_path.insert(0, Block())
import dagster_project.definitions, dagster_project.postgres_storage, dagster_aws.ecs, dagster_webserver, dagster_postgres
print("loaded")
"""


def test_the_code_location_and_instance_load_with_only_the_image_packages():
    """The definitions and the instance's classes import with every distribution outside the image
    blocked (pyspark, moto, pandas, ...): the slim image is enough."""
    pinned = [line.split("==")[0].lower() for line in RUNTIME_PINS.read_text().splitlines() if "==" in line]
    allowed = json.dumps(pinned + ["rillet", "rillet-spark", "rillet-server"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RILLET_", "DAGSTER_"))}
    env |= {"RILLET_EMR_APPLICATION_ID": "00app", "RILLET_EMR_JOB_ROLE_ARN": "arn:aws:iam::1:role/emr",
            "RILLET_EMR_ARTIFACTS_URI": "s3://out/rillet/emr"}
    result = subprocess.run([sys.executable, "-c", _BLOCKING_IMPORTER, allowed], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0 and "loaded" in result.stdout, result.stderr[-3000:]


def test_the_import_blocker_blocks():
    allowed = json.dumps(["dagster"])
    result = subprocess.run([sys.executable, "-c", _BLOCKING_IMPORTER, allowed], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode != 0 and "is not in the image" in result.stderr


def test_the_image_holds_every_package_the_code_location_imports():
    copied = set(re.findall(r"^COPY (\S+) \./\S*$", _image_stage(), re.MULTILINE))
    modules, _ = first_party_closure("dagster_project.definitions", SOURCES)
    for top in {name.split(".")[0] for name in modules}:
        source = SOURCES[top].split("/")[0]
        assert source in copied, f"the code location imports {top}, but the Dockerfile does not copy {source}"


def test_the_task_commands_are_installed_entry_points(tf):
    scripts = {e.name for e in importlib.metadata.entry_points(group="console_scripts")}
    stage = _image_stage()
    commanded = set()
    for name, task in tf.of_type("aws_ecs_task_definition").items():
        for command in re.findall(r"command\s*=\s*\[([^\]]*)\]", json.dumps(task.get("container_definitions"))):
            words = re.findall(r'\\?"([^"\\]+)\\?"', command)
            assert words[0] in scripts, f"{name} runs {words[0]}, no locked distribution installs it"
            workspace = words[words.index("--workspace") + 1]
            assert f"COPY docker/workspace.yaml {workspace}" in stage, f"{name}: {workspace} is not in the image"
            commanded.add(name)
    assert commanded == {"webserver", "daemon"}, "the run task's command is the launcher's"
    assert "dagster" in scripts, "the ECS run launcher starts runs with `dagster api execute_run`"
    assert 'ENTRYPOINT ["/usr/local/bin/rillet-entrypoint"]' in stage
    assert "COPY docker/entrypoint.sh /usr/local/bin/rillet-entrypoint" in stage
    assert os.access(ENTRYPOINT, os.X_OK), "docker/entrypoint.sh must be executable"


def test_the_entry_point_writes_the_instance_and_runs_the_command(tmp_path):
    home = tmp_path / "home"
    env = dict(os.environ, DAGSTER_HOME=str(home), DAGSTER_INSTANCE_YAML="run_launcher:\n  class: X")
    result = subprocess.run(["sh", str(ENTRYPOINT), "cat", str(home / "dagster.yaml")], env=env,
                            capture_output=True, text=True, check=True, timeout=30)
    assert result.stdout == "run_launcher:\n  class: X\n"


def test_the_definitions_load_with_the_task_definitions_environment(tf):
    """Everything the task definitions set, with plausible values: the code location loads, and its
    resource is the production one (AWS endpoints, the Terraform's names, EMR for exports)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RILLET_", "DAGSTER_"))}
    values = {
        "RILLET_REGION": "eu-west-1", "RILLET_METADATA_TABLE": "prod-metadata",
        "RILLET_SEGMENTS_TABLE": "prod-segments", "RILLET_BUCKET": "prod-segments-1-eu-west-1",
        "RILLET_CONTROLLER_URL": "https://ctl.lambda-url.eu-west-1.on.aws/",
        "RILLET_EMR_APPLICATION_ID": "00app", "RILLET_EMR_JOB_ROLE_ARN": "arn:aws:iam::1:role/emr",
        "RILLET_EMR_ARTIFACTS_URI": "s3://out/rillet/emr",
    }
    set_by_terraform = set(tf.locals["dagster_environment"])
    assert set(values) <= set_by_terraform, f"the task definitions do not set {sorted(set(values) - set_by_terraform)}"
    env |= values
    script = ("import json; from dagster_project.definitions import defs; "
              "defs.get_repository_def().get_all_jobs(); "
              "print(json.dumps(defs.resources['rillet'].model_dump()))")
    result = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    resource = json.loads(result.stdout.strip().splitlines()[-1])
    assert resource["endpoint_url"] is None, "on AWS the clients use AWS's own endpoints"
    assert (resource["region"], resource["metadata_table"], resource["segments_table"], resource["bucket"]) == (
        "eu-west-1", "prod-metadata", "prod-segments", "prod-segments-1-eu-west-1")
    assert resource["controller_url"] == values["RILLET_CONTROLLER_URL"]
    assert (resource["emr_application_id"], resource["emr_job_role_arn"], resource["emr_artifacts_uri"]) == (
        "00app", "arn:aws:iam::1:role/emr", "s3://out/rillet/emr")
