"""Ctrl-C of a ``rillet`` command exits 130 with one line, ``interrupted``, and no traceback: while it
imports the parser and the SDK, while it waits for a server, and at once after it was started. Typed as
a shell's Ctrl-C is: the terminal's intr character, on a pty whose foreground process group is the
command's.

What comes before ``rillet.cli.main`` runs is Python's, not the command's: the interpreter's start (a
Ctrl-C then kills it, status -2, silently; a shell shows 130), its import of ``site`` with the
environment's ``.pth`` files (20-70 ms in this repository's venv, whose editable installs import
pathlib there; a Ctrl-C then is a "Fatal Python error", exit 1), and the console script's import of
``rillet`` and ``rillet.cli`` (about 2 ms: they import nothing else; a Ctrl-C then is a KeyboardInterrupt
traceback). So the moments of the command's imports are named by the import that just finished
(``PYTHONPROFILEIMPORTTIME`` prints each), not by a delay."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rillet import cli

RILLET = Path(sys.executable).with_name("rillet")  # the console script, as a user runs it
pytestmark = pytest.mark.skipif(not RILLET.exists(), reason="the rillet console script is not installed")


def _interrupt(args: list[str], *, after_import: str | None = None, connected_to: socket.socket | None = None,
               after_s: float = 0.0) -> tuple[int, str]:
    """Run ``rillet *args`` on a pty and type Ctrl-C as soon as the import of ``after_import`` finished,
    or ``after_s`` after it connected to ``connected_to``, or at once; its exit code and what the
    terminal shows (but the import trace and the terminal's echo of Ctrl-C, ``^C``)."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"} if after_import else os.environ
    pid, terminal = pty.fork()  # the pty is the child's controlling terminal, its process group the foreground one
    if pid == 0:
        try:
            os.execve(RILLET, [str(RILLET), *args], env)
        finally:
            os._exit(127)
    while str(RILLET).encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
        time.sleep(0.0001)  # until it runs the command (the kernel starts the script's interpreter)
    output = ""
    if after_import:
        output = _read(terminal, until=re.compile(rf"\| +{re.escape(after_import)}\r\n").search)  # its trace line
    with connected_to.accept()[0] if connected_to else contextlib.nullcontext():  # held open, never answered
        time.sleep(after_s)
        os.write(terminal, b"\x03")  # the intr character: SIGINT to the terminal's foreground process group
        output += _read(terminal, until=lambda text: False)
    _, status = os.waitpid(pid, 0)
    os.close(terminal)
    shown = [line for line in output.replace("^C", "").splitlines() if not line.startswith("import time:")]
    return os.waitstatus_to_exitcode(status), "\n".join(shown)


def _read(terminal: int, until: Callable[[str], object]) -> str:
    """What the terminal shows, until ``until`` holds for it or the command closed the pty."""
    output = b""
    while not until(output.decode(errors="replace")) and select.select([terminal], [], [], 30)[0]:
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # the command closed the pty
            break
        if not chunk:
            break
        output += chunk
    return output.decode(errors="replace")


@pytest.fixture
def silent_server():
    """A server that takes connections and never answers: a command waits there until Ctrl-C."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(60)
        yield server


def _tail(server: socket.socket) -> list[str]:
    return ["--endpoint", f"http://127.0.0.1:{server.getsockname()[1]}", "stream", "tail", "-f", "s/t"]


def _interrupted(code: int, output: str) -> bool:
    return code == cli.INTERRUPTED and output.split() == [cli.INTERRUPTED_LINE]


@pytest.mark.parametrize("module", ["argparse", "rillet.cli.format", "importlib.metadata", "rillet.cli.streams",
                                    "rillet.cli.run", "pydantic", "rillet.models", "urllib3", "rillet.cli.data"])
def test_ctrl_c_while_the_command_imports_exits_130_with_one_line(silent_server, module):
    code, output = _interrupt(_tail(silent_server), after_import=module)
    assert _interrupted(code, output), (code, output)


@pytest.mark.parametrize("after_s", [0.0, 0.5, 2.0])
def test_ctrl_c_while_the_command_waits_for_a_server_exits_130_with_one_line(silent_server, after_s):
    code, output = _interrupt(_tail(silent_server), connected_to=silent_server, after_s=after_s)
    assert _interrupted(code, output), (code, output)


def test_ctrl_c_at_once_after_the_start_stops_it_without_a_traceback_of_the_command(silent_server):
    """Before ``main`` runs the interpreter is still starting, and the outcome is CPython's: killed by
    SIGINT, silently (a shell shows 130); inside ``site``, its fatal error naming that import (this
    venv's editable installs run code there; a wheel's install has none); or, in the 2 ms of the
    console script's own import, a KeyboardInterrupt traceback. Whichever moment it lands in, the
    traceback never runs through ``main``: once main runs, Ctrl-C is its to handle (the tests above)."""
    code, output = _interrupt(_tail(silent_server))
    killed_by_python = (code, output.strip()) == (-signal.SIGINT, "")
    # CPython's fatal error in site exits 1; an uncaught KeyboardInterrupt ends the process by SIGINT
    before_main = code in (1, -signal.SIGINT) and output.rstrip().endswith("KeyboardInterrupt") \
        and ", in main" not in output
    assert _interrupted(code, output) or killed_by_python or before_main, (code, output)


def test_main_called_in_process_returns_130_and_leaves_the_sigint_handler_alone(monkeypatch, capsys):
    """A script or test calling main(argv) gets 130 back; its process's Ctrl-C handling stays its own."""
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr("rillet.cli.run.run", interrupted)
    before = signal.getsignal(signal.SIGINT)
    assert cli.main(["scope", "list"]) == cli.INTERRUPTED
    assert capsys.readouterr().err == f"{cli.INTERRUPTED_LINE}\n"
    assert signal.getsignal(signal.SIGINT) is before


def test_a_ctrl_c_wrapped_by_python_in_an_import_is_still_130(monkeypatch, capsys):
    """Python 3.11 raises a Ctrl-C that lands in a class body's ``__set_name__`` (a cached_property of a
    module being imported) as a RuntimeError caused by it; any other RuntimeError is the command's."""
    def wrapped(argv):
        raise RuntimeError("Error calling __set_name__") from KeyboardInterrupt()

    monkeypatch.setattr("rillet.cli.run.run", wrapped)
    assert cli.main(["scope", "list"]) == cli.INTERRUPTED
    assert capsys.readouterr().err == f"{cli.INTERRUPTED_LINE}\n"

    def failing(argv):
        raise RuntimeError("a bug")

    monkeypatch.setattr("rillet.cli.run.run", failing)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["scope", "list"])
