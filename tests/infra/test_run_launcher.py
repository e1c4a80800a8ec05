"""Maintenance runs start beside the daemon, other runs as ECS tasks (dagster_project/run_launcher.py).

Real Dagster: an instance with the launcher, a workspace served by a code server process as in the
daemon, runs launched and polled to the end; the ECS side against the session's moto ECS. The list of
in-daemon jobs in the deployed instance is checked against the code location's jobs.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import yaml
from dagster import DagsterRunStatus
from dagster._core.instance_for_test import instance_for_test
from dagster._core.launcher import WorkerStatus
from dagster._core.test_utils import (
    create_run_for_test,
    create_test_daemon_workspace_context,
    poll_for_finished_run,
)
from dagster._core.workspace.load_target import PythonFileTarget
from test_dagster_emr import TEMPLATE, render_instance

from dagster_project.run_launcher import DAEMON_HOST_TAG

HERE = Path(__file__).parent


def _deployed_launcher_config() -> dict:
    rendered = render_instance({"max_concurrent_runs": "4", "run_task_definition": "rillet-dagster-run",
                                "cluster": "rillet-dagster", "subnets": json.dumps(["subnet-a"]),
                                "security_groups": json.dumps(["sg-1"])})
    return yaml.safe_load(rendered)["run_launcher"]


def test_the_maintenance_jobs_and_only_they_run_in_the_daemon():
    from dagster_project.definitions import defs

    launcher = _deployed_launcher_config()
    assert (launcher["module"], launcher["class"]) == ("dagster_project.run_launcher", "MaintenanceInDaemonRunLauncher")
    repository = defs.get_repository_def()
    named_jobs = {j.name for j in repository.get_all_jobs() if not j.name.startswith("__")}
    exporting = {j.name for j in repository.get_all_jobs()
                 if any("stream_export" in k.to_user_string() for k in j.asset_layer.executable_asset_keys)}
    assert set(launcher["config"]["in_daemon_jobs"]) == named_jobs - exporting, (
        "every job of the code location but the export runs in the daemon; list new jobs in the template")
    assert not exporting & set(launcher["config"]["in_daemon_jobs"])
    assert "${" not in TEMPLATE.read_text().split("in_daemon_jobs", 1)[1].split("ecs:", 1)[0]


def test_runs_go_to_the_daemon_or_to_ecs(tmp_path):
    overrides = {"run_launcher": {
        "module": "dagster_project.run_launcher", "class": "MaintenanceInDaemonRunLauncher",
        "config": {"in_daemon_jobs": ["small_job"], "ecs": {"task_definition": "rillet-dagster-run"}}}}
    target = PythonFileTarget(python_file=str(HERE / "launcher_jobs.py"), attribute="defs",
                              working_directory=str(HERE), location_name="launcher_jobs")
    with instance_for_test(overrides=overrides, temp_dir=str(tmp_path)) as instance, \
            create_test_daemon_workspace_context(target, instance) as process_context:
        workspace = process_context.create_request_context()
        repository = workspace.get_code_location("launcher_jobs").get_repository("__repository__")
        runs = {}
        for name in ("small_job", "export_like_job"):
            remote = repository.get_full_job(name)
            runs[name] = create_run_for_test(instance, job_name=name, remote_job_origin=remote.get_remote_origin(),
                                             job_code_origin=remote.get_python_origin())
        launcher = instance.run_launcher
        instance.launch_run(runs["small_job"].run_id, workspace)
        small = poll_for_finished_run(instance, runs["small_job"].run_id, timeout=120)
        assert small.status == DagsterRunStatus.SUCCESS, "the in-daemon run ran to its end beside the daemon"
        assert small.tags[DAEMON_HOST_TAG] == socket.gethostname()
        assert launcher._ecs is None, "a maintenance run built no ECS launcher: no task, no image pull"
        # moto's ECS cannot run a Fargate task in a VPC (it fails attaching the network interface), so
        # the ECS side is checked by where the run would go, not by launching it here.
        assert launcher.runs_in_daemon(small) and not launcher.runs_in_daemon(runs["export_like_job"])

        assert launcher.check_run_worker_health(small).status == WorkerStatus.RUNNING
        instance.add_run_tags(small.run_id, {DAEMON_HOST_TAG: "ip-10-0-0-1.replaced-daemon"})
        moved = instance.get_run_by_id(small.run_id)
        assert launcher.check_run_worker_health(moved).status == WorkerStatus.FAILED, (
            "a run whose daemon task is gone is failed by run monitoring, not left STARTED")
