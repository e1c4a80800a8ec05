"""Plugins of the ``rillet`` command load only when needed: ``rillet standalone`` imports the server
(moto, the handlers), which plain commands and ``--version`` must not pay for at every start."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from rillet.cli import build_parser
parser = build_parser(sys.argv[1:])
print("standalone.cli" in sys.modules)
"""


def _loads_the_plugin(*argv: str) -> bool:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120,
                          check=True)
    return done.stdout.strip() == "True"


@pytest.mark.parametrize("argv", [["--version"], ["scope", "list"], ["--endpoint", "standalone", "stream", "info", "a/b"]])
def test_plain_commands_do_not_import_the_plugin(argv):
    assert not _loads_the_plugin(*argv)


@pytest.mark.parametrize("argv", [["standalone", "--no-dagster"], ["--json", "standalone"], ["completion", "bash"],
                                  ["--help"]])
def test_the_plugin_is_imported_for_its_command_help_and_completion(argv):
    assert _loads_the_plugin(*argv)


def test_the_placeholder_never_runs_in_place_of_the_plugin():
    from rillet.cli import build_parser

    args = build_parser(["standalone", "--no-dagster"]).parse_args(["standalone", "--no-dagster"])
    assert args.no_dagster and args.func.__module__ == "standalone.cli"
