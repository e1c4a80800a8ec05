"""Sensors that never hold each other up (issue 39): the Dagster instance on AWS and in standalone
evaluates sensors in threads (``sensors: use_threads``), read back through Dagster's own instance
loading, so a long tick of one sensor delays no other's."""

from __future__ import annotations

import json

from dagster import DagsterInstance
from dagster._core.instance.config import dagster_instance_config
from test_dagster_emr import render_instance

from dagster_project.definitions import defs
from standalone.stack import DAGSTER_INSTANCE


def _sensors_of_every_kind() -> int:
    return len(list(defs.sensors or []))


def test_the_aws_instance_evaluates_sensors_and_schedules_in_threads(tmp_path, monkeypatch):
    rendered = render_instance({
        "max_concurrent_runs": "4", "run_task_definition": "rillet-dagster-run", "cluster": "rillet-dagster",
        "subnets": json.dumps(["subnet-a"]), "security_groups": json.dumps(["sg-1"])})
    (tmp_path / "dagster.yaml").write_text(rendered)
    for name in ("DAGSTER_PG_USERNAME", "DAGSTER_PG_SECRET_ARN", "DAGSTER_PG_HOST", "DAGSTER_PG_DB", "AWS_REGION"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("DAGSTER_PG_PORT", "5432")
    config, _ = dagster_instance_config(str(tmp_path), "dagster.yaml")  # Dagster's own validation
    assert config["sensors"]["use_threads"] is True
    assert config["sensors"]["num_workers"] >= _sensors_of_every_kind()
    assert config["schedules"]["use_threads"] is True


def test_the_standalone_instance_evaluates_sensors_in_threads(tmp_path):
    (tmp_path / "dagster.yaml").write_text(DAGSTER_INSTANCE)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        settings = instance.get_settings("sensors")
        assert settings["use_threads"] is True and settings["num_workers"] >= 2
