"""Where a deployment's tables and bucket are, read once from the environment, and what every
PynamoDB model of them shares (``point_models``, ``batch_get``).

The same code runs on AWS and in standalone; only these values differ. On AWS the endpoint is unset
and credentials come from the Lambda role; in standalone they point at the in-process moto server.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import boto3
from botocore.config import Config
from pynamodb.exceptions import GetError
from pynamodb.models import Model

M = TypeVar("M", bound=Model)
BATCH_GET_KEYS = 100  # DynamoDB's limit on the keys of one BatchGetItem
BATCH_GET_ATTEMPTS = 6  # requests for one page's keys before the keys still unprocessed raise
_BATCH_GET_BACKOFF_S = 0.025  # the first pause's ceiling; it doubles with each attempt (about 0.8 s at the last)


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


def batch_get(model: type[M], keys: Iterable[tuple[str, str]], consistent_read: bool = False,
              attributes_to_get: Sequence | None = None) -> list[M]:
    """The items of ``keys`` ((hash key, range key) pairs; missing ones are left out), as
    ``model.batch_get`` gives them (subclasses by their discriminator), in BatchGetItem requests of up
    to 100 keys. The keys a request leaves unprocessed (a throttled partition's share of the batch)
    are asked for again after a random pause whose ceiling doubles, as DynamoDB's guidance says, and
    after BATCH_GET_ATTEMPTS requests raise GetError, as a throttled read does: PynamoDB's own
    batch_get asks for them again at once, and for as long as the partition is throttled."""
    hash_name, range_name = model._hash_key_attribute().attr_name, model._range_key_attribute().attr_name
    serialized = []
    for hash_key, range_key in dict.fromkeys(keys):
        hash_value, range_value = model._serialize_keys(hash_key, range_key)
        serialized.append({hash_name: hash_value, range_name: range_value})
    found: list[M] = []
    for start in range(0, len(serialized), BATCH_GET_KEYS):
        wanted = serialized[start:start + BATCH_GET_KEYS]
        for attempt in range(BATCH_GET_ATTEMPTS):
            if attempt:
                time.sleep(random.uniform(0, _BATCH_GET_BACKOFF_S * 2 ** (attempt - 1)))
            page, wanted = model._batch_get_page(wanted, consistent_read=consistent_read,
                                                 attributes_to_get=attributes_to_get)
            found += [model.from_raw_data(item) for item in page or []]
            if not wanted:
                break
        else:
            raise GetError(f"{len(wanted)} keys of {model.Meta.table_name} still unprocessed after "
                           f"{BATCH_GET_ATTEMPTS} BatchGetItem requests (the partition is throttled)")
    return found
