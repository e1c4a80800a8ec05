"""Fixtures for the Dagster tests."""

import uuid

import pytest

from dagster_project.resources import RilletDeployment
from dataplane.deployment import Deployment
from standalone.resources import bind_all, create_resources


@pytest.fixture
def isolated(moto_server, deployment):
    """Tables and a bucket of the test's own, so the sensors see only this test's work (names shared by
    the tests of one worker let a test's sensor find another's expired transaction); the session's
    binding is restored."""
    suffix = uuid.uuid4().hex[:12]
    mine = Deployment(endpoint_url=moto_server.url, metadata_table=f"dg-metadata-{suffix}",
                      segments_table=f"dg-segments-{suffix}", bucket=f"dg-segments-{suffix}")
    create_resources(mine)
    resource = RilletDeployment(endpoint_url=mine.endpoint_url, metadata_table=mine.metadata_table,
                                segments_table=mine.segments_table, bucket=mine.bucket, chunk_target_bytes=64,
                                tier_min_age_ms=0)
    yield mine, resource
    bind_all(deployment)


@pytest.fixture
def default_scale_settings(monkeypatch):
    """The auto-scaler's default cool-down and mute, whatever the environment sets."""
    monkeypatch.delenv("RILLET_SCALE_COOLDOWN_MS", raising=False)
    monkeypatch.delenv("RILLET_SCALE_MUTE_MS", raising=False)
