"""The README's authorization example runs as written, on a stack configured as `rillet standalone
--simulate-identities` starts it (its default workers: several per function, each with its own
authorizer), starting empty as a restarted stack does."""

from __future__ import annotations

import re
import shlex
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rillet import api
from rillet.cli import main as cli
from standalone.stack import Stack, StackConfig

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def identities_stack():
    config = StackConfig.ephemeral()
    config.simulate_identities = True  # what --simulate-identities changes, nothing else
    assert min(config.workers.values()) >= 2  # a grant change must reach the workers that did not make it
    with Stack(config) as running:
        yield running


def _example() -> list[str]:
    text = README.read_text()
    block = re.search(r"--simulate-identities`:.*?\n```sh\n(.*?)```", text, re.DOTALL).group(1)
    return [line for line in block.splitlines() if line.startswith("rillet ")]


def test_the_readme_authorization_example_works(identities_stack, capsys, monkeypatch):
    url, scope = identities_stack.controller_url, "auth" + uuid.uuid4().hex[:8]
    lines = _example()
    commands = [shlex.split(c.split("  #")[0].replace("demo", scope))[1:] for c in lines]
    assert any("stream" in args and "create" in args for args in commands)  # on an empty stack
    added = [args[args.index("add") + 1:] for args in commands if "add" in args]
    admin = added[0][0]
    try:
        for line, args in zip(lines, commands, strict=True):
            denied = line.rstrip().endswith("# AccessDenied") or "# AccessDenied:" in line
            capsys.readouterr()
            code = cli(["--endpoint", url, *args])
            err = capsys.readouterr().err
            assert code == (1 if denied else 0), (line, err)
            assert ("AccessDenied" in err) == denied, (line, err)
        # A revocation applies to the next command, whichever worker serves it: reads at once, so that
        # every worker has served (and would cache) the consumer, then again after the revocation.
        consumer = added[-1][0]
        monkeypatch.setenv(api.SIMULATED_IDENTITY_ENV, consumer)
        read = ["--endpoint", url, "stream", "info", f"{scope}/orders"]  # one request to the controller
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(lambda _: cli(read), range(16))) == [0] * 16
            monkeypatch.delenv(api.SIMULATED_IDENTITY_ENV)
            assert cli(["--endpoint", url, "--as", admin, "grant", "remove", *added.pop()]) == 0
            monkeypatch.setenv(api.SIMULATED_IDENTITY_ENV, consumer)
            assert list(pool.map(lambda _: cli(read), range(16))) == [1] * 16
        monkeypatch.delenv(api.SIMULATED_IDENTITY_ENV)
        assert "AccessDenied" in capsys.readouterr().err
    finally:
        # Every stack of this process shares moto's in-memory tables (moto keeps them per process): the
        # grants go again, the admin's last, so that the session's stack stays open.
        for grant in reversed(added):
            cli(["--endpoint", url, "--as", admin, "grant", "remove", *grant])
    assert cli(["--endpoint", url, "grant", "list"]) == 0
    assert "no grants" in capsys.readouterr().out
