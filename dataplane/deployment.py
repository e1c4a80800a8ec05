"""Where a deployment's tables and bucket are, read once from the environment.

The same code runs on AWS and in standalone; only these values differ. On AWS the endpoint is unset
and credentials come from the Lambda role; in standalone they point at the in-process moto server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

import boto3
from botocore.config import Config


@dataclass(frozen=True)
class Deployment:
    region: str = "us-east-1"
    endpoint_url: str | None = None
    metadata_table: str = "rillet-metadata"
    segments_table: str = "rillet-segments"
    bucket: str = "rillet-segments"

    @classmethod
    def from_env(cls) -> Deployment:
        env = os.environ
        return cls(
            region=env.get("RILLET_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or cls.region,
            endpoint_url=env.get("RILLET_AWS_ENDPOINT") or None,
            metadata_table=env.get("RILLET_METADATA_TABLE", cls.metadata_table),
            segments_table=env.get("RILLET_SEGMENTS_TABLE", cls.segments_table),
            bucket=env.get("RILLET_BUCKET", cls.bucket),
        )

    def to_env(self) -> dict[str, str]:
        """The environment that makes ``from_env`` return this deployment (for child processes)."""
        env = {
            "RILLET_REGION": self.region,
            "RILLET_METADATA_TABLE": self.metadata_table,
            "RILLET_SEGMENTS_TABLE": self.segments_table,
            "RILLET_BUCKET": self.bucket,
        }
        if self.endpoint_url:
            env["RILLET_AWS_ENDPOINT"] = self.endpoint_url
        return env

    @cached_property
    def s3(self):
        return boto3.session.Session().client(
            "s3", region_name=self.region, endpoint_url=self.endpoint_url,
            config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 5},
                          max_pool_connections=32))


def point_models(models, table: str, deployment: Deployment) -> None:
    """Point PynamoDB models at a table of a deployment. A model whose connection already goes there
    keeps it: a new one costs a botocore session and a service-model load (about 0.1–0.8 s of CPU),
    which a process that binds on every unit of work (a Dagster sensor tick) would pay each time.

    The connection is what is compared, not ``Meta``: models of one table share their base's ``Meta``
    (so another module's bind may already have moved it) and may use their base's connection."""
    target = (table, deployment.region, deployment.endpoint_url)
    for model in models:
        meta = model.Meta
        meta.table_name, meta.region, meta.host = target
        connection = model._connection
        if connection is not None and (connection.table_name, connection.connection.region,
                                       connection.connection.host) != target:
            model._connection = None
