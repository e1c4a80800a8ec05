"""The README's authorization example runs as written, on a stack that simulates IAM identities."""

from __future__ import annotations

import re
import shlex
import uuid
from pathlib import Path

import pytest

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
    commands = [shlex.split(c.split("  #")[0].replace("demo", scope))[1:] for c in _example()]
    assert len(commands) == 6
    added = [args[args.index("add") + 1:] for args in commands if "add" in args]
    try:
        for args in commands:
            denied = args == commands[-1]  # the README marks it: AccessDenied
            capsys.readouterr()
            assert cli(["--endpoint", url, *args]) == (1 if denied else 0), args
            if denied:
                assert "AccessDenied" in capsys.readouterr().err
        capsys.readouterr()
        # Without an identity nothing is granted any more: the deployment is closed now.
        assert cli(["--endpoint", url, "stream", "read", f"{scope}/orders", "--max-events", "1"]) == 1
        assert "AccessDenied" in capsys.readouterr().err
    finally:
        # Every stack of this process shares moto's in-memory tables (moto keeps them per process): the
        # grants go again, the admin's last, so that the session's stack stays open.
        admin = added[0][0]
        for grant in reversed(added):
            cli(["--endpoint", url, "--as", admin, "grant", "remove", *grant])
    assert cli(["--endpoint", url, "grant", "list"]) == 0
    assert "no grants" in capsys.readouterr().out
