"""Dagster keeps working when RDS rotates its database password (issue 28).

A real PostgreSQL server (initdb/postgres from the machine, skipped where there is none) and the secret
in the session's moto Secrets Manager. The password changes in the database and then in the secret, as
RDS's rotation does it; the instance made before the rotation must go on reading and writing, as the
daemon does for days. The same instance with the password fixed at start (what ECS's secret injection
gave the containers) fails after the rotation: that is the defect.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import boto3
import psycopg2
import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.storage.dagster_run import DagsterRunStatus, RunsFilter
from dagster._core.test_utils import create_run_for_test
from test_dagster_emr import TEMPLATE
from this_thread import patch_in_this_thread

from dagster_project import postgres_storage

INITDB = shutil.which("initdb")
pytestmark = pytest.mark.skipif(INITDB is None, reason="no PostgreSQL server binaries (initdb) on this machine")


def _as_server_user(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root; as root, run it as nobody."""
    return ["runuser", "-u", "nobody", "--", *command] if os.geteuid() == 0 else command


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ADMIN_PASSWORD = "admin"
# The driver the deployed instance names (SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3, which
# is not installed: dagster-postgres brings psycopg2).
DEPLOYED_SCHEME = yaml.safe_load(TEMPLATE.read_text().replace("${", "x{"))["storage"]["custom"]["config"][
    "postgres_db"]["scheme"]


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server on a free port; its superuser "admin" changes the test users' passwords."""
    base = Path(tempfile.mkdtemp(prefix="rillet-pg-"))  # not under pytest's root-only temp folder
    data, password_file = base / "data", base / "pw"
    password_file.write_text(ADMIN_PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(base, "nobody")
        shutil.chown(password_file, "nobody")
    subprocess.run(_as_server_user([INITDB, "-D", str(data), "-U", "admin", "-A", "scram-sha-256",
                                    f"--pwfile={password_file}"]), check=True, capture_output=True, timeout=120)
    port = _free_port()
    server = subprocess.Popen(_as_server_user([str(Path(INITDB).with_name("postgres")), "-D", str(data), "-p",
                                               str(port), "-h", "127.0.0.1", "-k", str(base)]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            _admin(port, "SELECT 1")
            break
        except psycopg2.OperationalError:
            assert time.monotonic() < deadline and server.poll() is None, "PostgreSQL did not start"
            time.sleep(0.2)
    yield port
    server.terminate()
    server.wait(timeout=30)
    shutil.rmtree(base, ignore_errors=True)


def _admin(port: int, *statements: str) -> None:
    with psycopg2.connect(host="127.0.0.1", port=port, user="admin", password=ADMIN_PASSWORD,
                          dbname="postgres", connect_timeout=2) as conn:
        conn.autocommit = True
        for statement in statements:
            conn.cursor().execute(statement)


@pytest.fixture
def user(postgres, moto_server, monkeypatch, request):
    """A login role with a database of its own, and its password in a (moto) Secrets Manager secret."""
    name = f"dagster_{request.node.name[5:20].lower()}_{time.monotonic_ns() % 100000}"
    _admin(postgres, f"CREATE ROLE {name} LOGIN PASSWORD 'first'")
    conn = psycopg2.connect(host="127.0.0.1", port=postgres, user="admin", password=ADMIN_PASSWORD, dbname="postgres")
    conn.autocommit = True
    conn.cursor().execute(f"CREATE DATABASE {name} OWNER {name}")
    conn.close()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", moto_server.url)
    client = boto3.client("secretsmanager", region_name="us-east-1", endpoint_url=moto_server.url)
    arn = client.create_secret(Name=f"rds-{name}", SecretString=json.dumps({"username": name, "password": "first"}))["ARN"]

    def rotate(new: str) -> None:
        """RDS's order: the database's password changes first, then the secret's current version."""
        _admin(postgres, f"ALTER ROLE {name} PASSWORD '{new}'")
        client.put_secret_value(SecretId=arn, SecretString=json.dumps({"username": name, "password": new}))

    return {"name": name, "port": postgres, "secret_arn": arn, "rotate": rotate}


def _instance(tmp_path: Path, user: dict, storage: dict) -> DagsterInstance:
    db = {"username": user["name"], "hostname": "127.0.0.1", "db_name": user["name"], "port": user["port"],
          "scheme": DEPLOYED_SCHEME}
    kind = next(iter(storage))
    target = storage[kind]["config"] if kind == "custom" else storage[kind]
    target["postgres_db"] = db | target.get("postgres_db", {})
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump({"storage": storage, "telemetry": {"enabled": False}}))
    return DagsterInstance.from_config(str(tmp_path))


def _tick(instance: DagsterInstance) -> None:
    """What a daemon tick does with the database: read runs, write one."""
    instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.QUEUED]))
    create_run_for_test(instance, job_name="rotation_check")


def test_the_instance_survives_rotations(user, tmp_path, monkeypatch):
    instance = _instance(tmp_path, user, {"custom": {
        "module": "dagster_project.postgres_storage", "class": "SecretPasswordPostgresStorage",
        "config": {"password_secret_id": user["secret_arn"], "region": "us-east-1"}}})
    _tick(instance)
    user["rotate"]("second")
    _tick(instance)  # the password read is still fresh: refused once, the secret re-read, connected
    user["rotate"]("third")
    monkeypatch.setattr(postgres_storage, "PASSWORD_TTL_S", 0)  # and when it has expired: read anew
    _tick(instance)
    assert len(instance.get_runs()) == 3


def test_a_password_fixed_at_start_fails_after_a_rotation(user, tmp_path, monkeypatch):
    """The defect: the password ECS injected once at start (DAGSTER_PG_PASSWORD) goes stale."""
    instance = _instance(tmp_path, user, {"postgres": {"postgres_db": {"password": "first"}}})
    _tick(instance)
    user["rotate"]("second")
    patch_in_this_thread(monkeypatch, time, "sleep", lambda _s: None)  # dagster-postgres's connection retries
    with pytest.raises(Exception, match="too many retries|password authentication failed"):
        _tick(instance)
