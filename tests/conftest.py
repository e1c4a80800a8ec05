"""Shared fixtures: one moto server per test session, with the tables and bucket created from the models."""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import rillet
from dataplane.deployment import Deployment
from standalone.moto_server import MotoServer
from standalone.resources import bind_all, create_resources
from standalone.stack import Stack, StackConfig


@pytest.fixture(scope="session")
def moto_server():
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def deployment(moto_server) -> Deployment:
    deployment = Deployment(endpoint_url=moto_server.url)
    create_resources(deployment)
    bind_all(deployment)
    return deployment


@pytest.fixture(autouse=True)
def _models_bound_to_the_session(request):
    """In-process code under test talks to the session's moto, whatever an earlier test bound."""
    if "deployment" in request.fixturenames:
        bind_all(request.getfixturevalue("deployment"))


@pytest.fixture(scope="session")
def stack():
    """The standalone stack, once per session: moto plus the Lambda handlers behind loopback
    Function URLs (spawned worker processes), no Dagster."""
    with Stack(StackConfig.ephemeral()) as running:
        yield running


@pytest.fixture(scope="session")
def url(stack) -> str:
    return stack.controller_url


@pytest.fixture
def manager(url):
    with rillet.StreamManager(url) as m:
        yield m


@pytest.fixture
def unique() -> str:
    """A fresh name, so tests sharing the session's tables never see each other's data."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def controller(deployment):
    """The control plane wired to the session's deployment.

    Function-scoped on purpose: ``Controller.for_deployment`` (re)binds the PynamoDB models, which are
    process-global, so every test binds them to the deployment it actually uses (the e2e stack binds
    them to its own moto server when it starts).
    """
    from controlplane.service import Controller

    return Controller.for_deployment(deployment)


@pytest.fixture(scope="session")
def isolated_deployment(moto_server):
    """A factory of deployments with their own tables and bucket on the session's moto server.

    For tests that sweep *all* pending workflows and must not see other tests' leftovers.
    """
    made: dict[str, Deployment] = {}

    def make(name: str) -> Deployment:
        if name not in made:
            deployment = Deployment(endpoint_url=moto_server.url, metadata_table=f"rillet-{name}-metadata",
                                    segments_table=f"rillet-{name}-segments", bucket=f"rillet-{name}-segments")
            create_resources(deployment)
            made[name] = deployment
        return made[name]

    return make


_SHARED_BOTOCORE_LOADER = []


@pytest.fixture
def count_aws_clients(monkeypatch):
    """Call it once the code under test is warm: it returns the list of the botocore clients built from
    then on (their service names). Each costs a session and a service-model load (0.1-0.8 s of CPU)."""
    import botocore.session

    def start() -> list[str]:
        built: list[str] = []
        original = botocore.session.Session.create_client

        def counting(self, *args, **kwargs):
            built.append(args[0] if args else kwargs.get("service_name"))
            return original(self, *args, **kwargs)

        monkeypatch.setattr(botocore.session.Session, "create_client", counting)
        return built

    return start


@pytest.fixture
def fast_botocore_sessions(monkeypatch):
    """Test speed only: let every new botocore session reuse one data loader.

    PynamoDB gives each ``Connection`` (and each thread) a fresh botocore session, and the metadata
    store builds a new ``Connection`` for every transaction, so each stream create loads the
    DynamoDB service model from disk again (~0.1 s of CPU). Sharing the loader's cache changes no
    request and no behaviour; ``test_creating_streams_reuses_aws_clients`` still catches the cost.
    """
    import botocore.session
    import pynamodb.connection.base as pynamodb_base

    if not _SHARED_BOTOCORE_LOADER:
        _SHARED_BOTOCORE_LOADER.append(botocore.session.get_session().get_component("data_loader"))
    loader = _SHARED_BOTOCORE_LOADER[0]
    original = pynamodb_base.get_session

    def get_session():
        session = original()
        session.register_component("data_loader", loader)
        return session

    monkeypatch.setattr(pynamodb_base, "get_session", get_session)
