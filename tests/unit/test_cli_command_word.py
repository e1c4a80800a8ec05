"""Finding the command word past the global options in ``rillet`` itself: the values of ``--endpoint
URL`` and ``--as ARN`` are skipped, whatever the option (the bash script's side is in
tests/e2e/test_cli_completion.py). No server involved."""

from __future__ import annotations

import pytest

from rillet.cli import main
from rillet.cli.completion import value_option_spellings
from rillet.cli.parser import _command_word, build_parser

ARN = "arn:aws:iam::123456789012:user/alice"


def test_the_global_options_taking_a_value_are_found_with_their_abbreviations():
    spellings = value_option_spellings(build_parser(["scope", "list"]))
    assert {"--endpoint", "--end", "--e", "--as", "--a"} <= set(spellings)
    assert not {"--json", "--j", "--version", "--help", "-h"} & set(spellings)


@pytest.mark.parametrize(("argv", "word"), [
    (["--as", ARN, "standalone"], "standalone"),
    (["--endpoint", "http://x", "--as", ARN, "--json", "scope", "list"], "scope"),
    (["--a", ARN, "completion", "bash"], "completion"),
    (["--as=" + ARN, "stream", "info", "a/b"], "stream"),
    (["--json", "--as", ARN], None),
])
def test_the_command_word_is_past_every_option_value(argv, word):
    assert _command_word(build_parser(["scope", "list"]), argv) == word


def test_the_plugin_runs_after_as():
    argv = ["--as", ARN, "standalone", "--no-dagster"]
    args = build_parser(argv).parse_args(argv)
    assert args.identity == ARN and args.no_dagster and args.func.__module__ == "standalone.cli"


def test_completion_after_as_still_knows_the_plugin(capsys):
    assert main(["--as", ARN, "completion", "bash"]) == 0
    standalone = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("standalone)")]
    assert len(standalone) == 1 and "--no-dagster" in standalone[0]

