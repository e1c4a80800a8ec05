"""The README's authorization example runs as written, on a stack that simulates IAM identities."""

from __future__ import annotations

import os
import re
import shlex
import uuid
from pathlib import Path

import pytest

from rillet import api
from rillet.cli import main as cli
from standalone.stack import Stack, StackConfig

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def identities_stack():
    config = StackConfig.ephemeral(RILLET_GRANTS_CACHE_S="0")  # a grant applies at once in every worker
    config.simulate_identities = True
    config.workers = {"controller": 1, "append": 1, "read": 1}
    with Stack(config) as running:
        yield running


def _example() -> list[str]:
    text = README.read_text()
    block = re.search(r"rillet --as ARN` instead:\n\n```sh\n(.*?)```", text, re.DOTALL).group(1)
    return [line for line in block.splitlines() if line.startswith("rillet ")]


def test_the_readme_authorization_example_works(identities_stack, capsys):
    url, scope = identities_stack.controller_url, "auth" + uuid.uuid4().hex[:8]
    assert cli(["--endpoint", url, "scope", "create", scope]) == 0
    assert cli(["--endpoint", url, "stream", "create", f"{scope}/orders"]) == 0
    commands = _example()
    assert len(commands) == 6
    try:
        for command in commands:
            args = shlex.split(command.split("  #")[0].replace("demo", scope))[1:]
            denied = "AccessDenied" in command
            capsys.readouterr()
            assert cli(["--endpoint", url, *args]) == (1 if denied else 0), command
            if denied:
                assert "AccessDenied" in capsys.readouterr().err
    finally:
        os.environ.pop(api.SIMULATED_IDENTITY_ENV, None)
    capsys.readouterr()
    # Without an identity nothing is granted any more: the deployment is closed now.
    assert cli(["--endpoint", url, "stream", "read", f"{scope}/orders", "--max-events", "1"]) == 1
    assert "AccessDenied" in capsys.readouterr().err
