"""Dagster's PostgreSQL storage with the password read from Secrets Manager when connecting.

RDS rotates the password it keeps in Secrets Manager every 7 days. A password handed to the
containers once at start (an ECS secret) would stop working at the first rotation, and dagster-postgres
opens a connection per query, so the daemon would fail every tick until restarted. This storage reads
the secret instead: every new connection gets the password last read (read again after
``PASSWORD_TTL_S``), and a connection the database refuses for its password re-reads the secret at once
and tries again, so a rotation costs one failed attempt, no restart.

Configured in infra/terraform/templates/dagster.yaml.tftpl as the instance's custom storage.
"""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
from dagster import Field, StringSource
from dagster._core.storage.config import pg_config
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.auth import PgTokenProvider
from dagster_postgres.utils import pg_url_from_config
from sqlalchemy import event
from sqlalchemy.engine import Engine

# How long a password read from the secret is used before it is read again (GetSecretValue costs
# $0.05 per 10,000: a read per process every few minutes is cents a month).
PASSWORD_TTL_S = 300
# PostgreSQL's SQLSTATE for a refused password (invalid_password).
INVALID_PASSWORD = "28P01"


class SecretPassword(PgTokenProvider):
    """The ``password`` field of a Secrets Manager secret (the JSON RDS keeps for a managed password)."""

    def __init__(self, secret_id: str, region: str | None = None) -> None:
        super().__init__()
        self._secret_id = secret_id
        self._client = boto3.client("secretsmanager", region_name=region)

    def _fetch_token(self) -> tuple[str, float]:
        secret = self._client.get_secret_value(SecretId=self._secret_id)
        # PgTokenProvider re-reads 300 s before the expiry it is given.
        return json.loads(secret["SecretString"])["password"], time.time() + PASSWORD_TTL_S + 300

    def forget(self) -> None:
        """Drop the password read, so the next connection reads the secret (after a rotation)."""
        with self._lock:
            self._cached_token = None


def connect_with_current_password(engine: Engine, password: SecretPassword) -> None:
    """Every new connection of ``engine`` uses the secret's password; a refused one re-reads it once."""

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, conn_rec: Any, cargs: list[Any], cparams: dict[str, Any]) -> Any:
        cparams["password"] = password.get_token()
        try:
            return dialect.connect(*cargs, **cparams)
        except dialect.loaded_dbapi.OperationalError as error:
            if getattr(error, "pgcode", None) != INVALID_PASSWORD and "password authentication failed" not in str(error):
                raise
        password.forget()
        cparams["password"] = password.get_token()
        return dialect.connect(*cargs, **cparams)


class SecretPasswordPostgresStorage(DagsterPostgresStorage):
    """``DagsterPostgresStorage`` whose ``postgres_db`` has no password: it is ``password_secret_id``'s."""

    def __init__(self, postgres_url: str, password: SecretPassword, should_autocreate_tables: bool = True,
                 inst_data=None) -> None:
        self._password = password
        # dagster-postgres puts the password into every engine it creates (also the webserver's pooled
        # engines, made later by optimize_for_webserver); the hook below adds the retry on refusal.
        super().__init__(postgres_url, should_autocreate_tables, inst_data=inst_data, token_provider=password)
        for storage in (self._run_storage, self._event_log_storage, self._schedule_storage):
            connect_with_current_password(storage._engine, password)

    @classmethod
    def config_type(cls):
        config = {k: v for k, v in pg_config().items() if k != "auth_provider"}
        config["password_secret_id"] = Field(StringSource, description="Secrets Manager secret of the password")
        config["region"] = Field(StringSource, is_required=False, description="the secret's region")
        return config

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> SecretPasswordPostgresStorage:
        password = SecretPassword(config_value["password_secret_id"], config_value.get("region"))
        return cls(pg_url_from_config(config_value), password,
                   config_value.get("should_autocreate_tables", True), inst_data=inst_data)
