"""The standalone stack, started once per session: moto plus the Lambda handlers behind loopback
Function URLs (spawned worker processes), no Dagster."""

from __future__ import annotations

import pytest

from standalone.stack import Stack, StackConfig


@pytest.fixture(scope="session")
def stack():
    # The default worker pools: readers long-poll the read function, so it needs more than one worker.
    with Stack(StackConfig.ephemeral()) as running:
        yield running


@pytest.fixture(scope="session")
def url(stack) -> str:
    return stack.controller_url


@pytest.fixture
def manager(url):
    import rillet

    with rillet.StreamManager(url) as m:
        yield m
