"""Maintenance runs in the daemon's task, export runs in Fargate tasks of their own.

The sensors and the retention schedule start small, frequent runs (tiering, the sweeper, transaction
timeouts, reader leases, scaling, retention decisions: a few table and object requests each), up to tens
of thousands a month. As ECS tasks each would pull the image and pay a Fargate start-up (a minute) for
seconds of work. So runs of the jobs named in ``in_daemon_jobs`` start as processes beside the daemon
(Dagster's DefaultRunLauncher, through the daemon's code server) with the daemon's role; every other run
(the Spark export, which waits on EMR for minutes) is an ECS task (dagster-aws's EcsRunLauncher).

Configured in infra/terraform/templates/dagster.yaml.tftpl; tests/infra/test_run_launcher.py checks the
list against the code location's jobs.
"""

from __future__ import annotations

import socket
from typing import Any

import yaml
from dagster import Array, Field, Permissive
from dagster._core.launcher import (
    CheckRunHealthResult,
    DefaultRunLauncher,
    LaunchRunContext,
    RunLauncher,
    WorkerStatus,
)
from dagster._core.storage.dagster_run import DagsterRun
from dagster._serdes import ConfigurableClass, ConfigurableClassData
from dagster_aws.ecs import EcsRunLauncher

# The host (on Fargate: the task) of the daemon that started an in-daemon run.
DAEMON_HOST_TAG = "rillet/daemon_host"


class MaintenanceInDaemonRunLauncher(RunLauncher, ConfigurableClass):
    """Runs of ``in_daemon_jobs`` beside the daemon, others as ECS tasks (``ecs``: EcsRunLauncher's config)."""

    def __init__(self, in_daemon_jobs: list[str], ecs: dict[str, Any], inst_data: ConfigurableClassData | None = None):
        self._inst_data = inst_data
        self._in_daemon_jobs = frozenset(in_daemon_jobs)
        self._ecs_config = ecs
        self._in_daemon = DefaultRunLauncher()
        # Built on first use: its constructor looks the task definition up, which only the daemon's and
        # the webserver's roles may (a run's process loads the instance too, and never launches).
        self._ecs: EcsRunLauncher | None = None
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls):
        return {"in_daemon_jobs": Field(Array(str)), "ecs": Field(Permissive())}

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> MaintenanceInDaemonRunLauncher:
        return cls(config_value["in_daemon_jobs"], config_value["ecs"], inst_data=inst_data)

    def register_instance(self, instance) -> None:
        super().register_instance(instance)
        self._in_daemon.register_instance(instance)

    def ecs(self) -> EcsRunLauncher:
        if self._ecs is None:
            data = ConfigurableClassData("dagster_aws.ecs", "EcsRunLauncher", yaml.safe_dump(self._ecs_config))
            self._ecs = data.rehydrate(as_type=EcsRunLauncher)  # validated and defaulted like any instance class
            self._ecs.register_instance(self._instance)
        return self._ecs

    def runs_in_daemon(self, run: DagsterRun) -> bool:
        return run.job_name in self._in_daemon_jobs

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if not self.runs_in_daemon(run):
            self.ecs().launch_run(context)
            return
        self._instance.add_run_tags(run.run_id, {DAEMON_HOST_TAG: socket.gethostname()})
        self._in_daemon.launch_run(context)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or not self.runs_in_daemon(run):
            return self.ecs().terminate(run_id)
        if run.tags.get(DAEMON_HOST_TAG) != socket.gethostname():
            # The daemon's code server is reachable only from its own task (the UI's webserver is not).
            self._instance.report_engine_event(
                "This run runs in the daemon's task and ends on its own within seconds; it cannot be "
                "terminated from another task.", dagster_run=run, cls=self.__class__)
            return False
        return self._in_daemon.terminate(run_id)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        """Run monitoring runs in the daemon: an in-daemon run started by another daemon task (one that
        was replaced) has lost its process."""
        if not self.runs_in_daemon(run):
            return self.ecs().check_run_worker_health(run)
        if run.tags.get(DAEMON_HOST_TAG) == socket.gethostname():
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.FAILED, "the daemon task that ran it has stopped")

    def dispose(self) -> None:
        self._in_daemon.dispose()
        if self._ecs is not None:
            self._ecs.dispose()

    def join(self, timeout: int = 30) -> None:
        self._in_daemon.join(timeout)
