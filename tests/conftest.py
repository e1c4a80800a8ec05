"""Shared fixtures: one moto server per test session, with the tables and bucket created from the models."""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from dataplane.deployment import Deployment  # noqa: E402
from standalone.moto_server import MotoServer  # noqa: E402
from standalone.resources import create_resources  # noqa: E402


@pytest.fixture(scope="session")
def moto_server():
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def deployment(moto_server) -> Deployment:
    deployment = Deployment(endpoint_url=moto_server.url)
    create_resources(deployment)
    return deployment


@pytest.fixture
def unique() -> str:
    """A fresh name, so tests sharing the session's tables never see each other's data."""
    return "t" + uuid.uuid4().hex[:12]
