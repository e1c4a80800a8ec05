"""The ``rillet`` command tree: its global options, and each command's parser, built only for the
command the arguments name.

Every command prints a readable summary, or JSON with ``--json``. The endpoint comes from
``--endpoint`` or ``RILLET_ENDPOINT`` (default: the standalone controller on 127.0.0.1:9090).
Server-side commands (``rillet standalone``) are plugins registered under the ``rillet.cli`` entry
point group, so the SDK itself depends on nothing server-side.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points, version
from typing import Any

# Only what building the parser needs: the SDK's models and clients are imported by the commands
# that use them (bench.cli_startup measures what a command costs to start).
from rillet.cli import completion, streams
from rillet.cli.commands import HELP, MODULES
from rillet.endpoint import DEFAULT_ENDPOINT, controller_endpoint


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command tree. Given the arguments it is about to parse, a command's module (and the SDK it
    imports) is imported only if they name the command or need every command (completion); otherwise
    the command is a placeholder. So ``rillet --version`` and ``--help`` import no SDK, a plain command
    only what it uses, and none imports the server (``rillet standalone``, a plugin)."""
    parser = argparse.ArgumentParser(prog="rillet", description="Rillet streams from the command line.")
    parser.add_argument("--endpoint", default=controller_endpoint(),
                        help=f"controller URL (env RILLET_ENDPOINT, default {DEFAULT_ENDPOINT})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--as", dest="identity", metavar="IAM_ARN",
                        help="act as this IAM identity: only a standalone stack started with --simulate-identities "
                             "honours it (env RILLET_SIMULATED_IDENTITY); on AWS the signed identity counts")
    parser.add_argument("--version", action="version", version=f"rillet {version('rillet')}")
    word = None if argv is None else _command_word(parser, argv)
    every = argv is None or word == "completion"

    def wanted(name: str) -> bool:
        return every or word == name

    commands = parser.add_subparsers(dest="command", required=True)
    streams.add_scope_commands(commands)
    stream = commands.add_parser("stream", help="create, update, seal, delete, list and describe streams; "
                                                "write, read and tail events; segments, scaling, cuts")
    if wanted("stream"):
        _add_stream_actions(stream.add_subparsers(dest="action", required=True))
    _add_module_commands(commands, wanted)
    completion.register(commands, parser)
    return parser


def _add_stream_actions(actions: argparse._SubParsersAction) -> None:
    from rillet.cli import data, segments

    streams.register(actions)
    data.register(actions)
    segments.register(actions)


def _add_module_commands(commands: argparse._SubParsersAction, wanted: Callable[[str], bool]) -> None:
    """The commands of admin, kvt and grants, and the plugins' (``rillet standalone``,
    which imports the server): each module imported only if a command it adds is wanted, otherwise
    its commands are placeholders that show in ``--help``."""
    for module, names in MODULES.items():
        if any(wanted(name) for name in names):
            importlib.import_module(module).register(commands)
        else:
            for name in names:
                commands.add_parser(name, help=HELP[name])
    for plugin in entry_points(group="rillet.cli"):
        if wanted(plugin.name):
            register: Callable[[Any], None] = plugin.load()
            register(commands)
        else:
            commands.add_parser(plugin.name, help=f"a plugin: rillet {plugin.name} --help")


def _command_word(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """The command the arguments name (``scope``, ``standalone``, ...), past the global options and the
    values of those that take one (``--endpoint URL``, ``--as ARN``)."""
    takes_value = set(completion.value_option_spellings(parser))
    words = iter(argv)
    for word in words:
        if word in takes_value:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None
