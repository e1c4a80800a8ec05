"""Fixtures of the crash-injection tests: a private deployment and an installed crash injector."""

from __future__ import annotations

import pytest
from crash import CrashInjector

from controlplane.service import Controller


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """See tests/conftest.py: the crash loops create many streams."""


@pytest.fixture
def controller(isolated_deployment):
    """The control plane on tables of its own: the sweeps here take every pending workflow they find,
    and other tests' leftovers must not be among them."""
    return Controller.for_deployment(isolated_deployment("faults"))


@pytest.fixture
def crash():
    injector = CrashInjector().install()
    try:
        yield injector
    finally:
        injector.disarm()
        injector.uninstall()
