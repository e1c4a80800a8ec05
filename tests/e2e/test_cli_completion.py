"""``rillet --version`` and ``rillet completion``: the console script as a shell sees it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from rillet.cli.completion import bash_script
from rillet.cli.parser import build_parser

RILLET = str(Path(sys.executable).with_name("rillet"))
ALICE = "arn:aws:iam::123456789012:user/alice"


def test_version():
    done = subprocess.run([RILLET, "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, f"rillet {version('rillet')}\n")


def complete(script: str, *words: str) -> list[str]:
    """What bash offers after typing ``words`` (the last one being completed)."""
    line = " ".join(f"'{w}'" for w in words)
    program = f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _rillet; echo "${{COMPREPLY[@]}}"'
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_offers_commands_actions_and_options():
    done = subprocess.run([RILLET, "completion", "bash"], capture_output=True, text=True, timeout=60, check=True)
    script = done.stdout
    assert complete(script, "rillet", "")[:6] == ["scope", "stream", "rg", "txn", "retention", "kvt"]
    assert {"grant", "standalone", "completion"} <= set(complete(script, "rillet", ""))
    assert complete(script, "rillet", "--endpoint", "http://x", "stream", "s") == ["seal", "segments", "scale"]
    assert complete(script, "rillet", "--json", "stream", "scale", "a/b", "--m") == ["--merge"]
    assert complete(script, "rillet", "rg", "") == ["list", "lag", "create", "describe", "delete", "reset"]
    assert complete(script, "rillet", "stream", "tail", "a/b", "--f") == ["--follow", "--from"]
    assert complete(script, "rillet", "stream", "read", "a/b", "--from") == ["--from", "--from-time"]


def test_an_unknown_shell_is_refused():
    done = subprocess.run([RILLET, "completion", "fish"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "invalid choice: 'fish'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_skips_the_value_of_as():
    script = bash_script(build_parser())
    assert complete(script, "rillet", "--as", ALICE, "stream", "s") == ["seal", "segments", "scale"]
    assert complete(script, "rillet", "--endpoint", "http://x", "--as", ALICE, "rg", "") == [
        "list", "lag", "create", "describe", "delete", "reset"]
    assert complete(script, "rillet", "--a", ALICE, "--e", "http://x", "stream", "scale", "a/b", "--m") == ["--merge"]
    assert complete(script, "rillet", "--as", ALICE, "standalone", "--no") == ["--no-dagster"]
