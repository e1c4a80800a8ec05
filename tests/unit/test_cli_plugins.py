"""Plugins of the ``rillet`` command load only when needed: ``rillet standalone`` imports the server
(moto, the handlers), which plain commands, ``--version`` and ``--help`` must not pay for at every
start; and the CLI's own command modules likewise load only for their commands (issue 30)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from rillet.cli.parser import build_parser
parser = build_parser(sys.argv[1:])
print(" ".join(sorted(m for m in sys.modules if m == "standalone.cli" or m.startswith("rillet.cli."))))
"""
COMMAND_MODULES = {"rillet.cli.admin", "rillet.cli.data", "rillet.cli.grants", "rillet.cli.kvt", "rillet.cli.segments"}


def _imported(*argv: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120,
                          check=True)
    return set(done.stdout.split())


def _loads_the_plugin(*argv: str) -> bool:
    return "standalone.cli" in _imported(*argv)


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["scope", "list"],
                                  ["--endpoint", "standalone", "stream", "info", "a/b"]])
def test_plain_commands_do_not_import_the_plugin(argv):
    assert not _loads_the_plugin(*argv)


@pytest.mark.parametrize("argv", [["standalone", "--no-dagster"], ["--json", "standalone"], ["completion", "bash"],
                                  ["standalone", "--help"]])
def test_the_plugin_is_imported_for_its_command_and_completion(argv):
    assert _loads_the_plugin(*argv)


@pytest.mark.parametrize(("argv", "modules"), [
    (["--version"], set()), (["--help"], set()), (["scope", "list"], set()),
    (["kvt", "get", "a/b", "k"], {"rillet.cli.kvt"}), (["--json", "rg", "list", "a"], {"rillet.cli.admin", "rillet.cli.data"}),  # resolve_cut
    (["stream", "info", "a/b"], {"rillet.cli.data", "rillet.cli.segments"}),
    (["completion", "bash"], COMMAND_MODULES)])
def test_a_command_imports_only_its_own_module(argv, modules):
    assert _imported(*argv) & COMMAND_MODULES == modules


def test_the_placeholder_never_runs_in_place_of_the_plugin():
    from rillet.cli.parser import build_parser

    args = build_parser(["standalone", "--no-dagster"]).parse_args(["standalone", "--no-dagster"])
    assert args.no_dagster and args.func.__module__ == "standalone.cli"
