"""Fixtures for the Dagster tests."""

import pytest

from dagster_project.resources import RilletDeployment
from dataplane.deployment import Deployment
from standalone.resources import bind_all, create_resources


@pytest.fixture
def isolated(moto_server, deployment):
    """Tables of its own, so the sensors see only this test's work; the session's binding is restored."""
    mine = Deployment(endpoint_url=moto_server.url, metadata_table="dg-metadata", segments_table="dg-segments",
                      bucket="dg-segments")
    create_resources(mine)
    resource = RilletDeployment(endpoint_url=mine.endpoint_url, metadata_table=mine.metadata_table,
                                segments_table=mine.segments_table, bucket=mine.bucket, chunk_target_bytes=64,
                                tier_min_age_ms=0)
    yield mine, resource
    bind_all(deployment)
