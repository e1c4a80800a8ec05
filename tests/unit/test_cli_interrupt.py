"""Ctrl-C of a ``rillet`` command, while it imports the SDK to build its parser or while it runs, exits
130 without a traceback, as a shell's Ctrl-C does it: through a terminal (a pty), to the command's
process group. Not covered: the interpreter's start and the import of the ``rillet`` package itself
(its first ~0.2 s), before ``main`` runs."""

from __future__ import annotations

import os
import pty
import select
import socket
import sys
import time
from pathlib import Path

import pytest

RILLET = Path(sys.executable).with_name("rillet")  # the console script, as a user runs it


def _interrupt_after(delay_s: float, *args: str) -> tuple[int, str]:
    """Run ``rillet *args`` on a pty, type Ctrl-C after ``delay_s``; its exit code and what it printed."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(RILLET), [str(RILLET), *args])
    output = b""
    deadline = time.monotonic() + delay_s
    while (left := deadline - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0]:
            output += os.read(fd, 4096)
    os.write(fd, b"\x03")  # the terminal's intr character: SIGINT to the foreground process group
    while True:
        try:
            chunk = os.read(fd, 4096) if select.select([fd], [], [], 30)[0] else b""
        except OSError:  # the child closed the pty
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")  # -2: died of SIGINT


@pytest.mark.skipif(not RILLET.exists(), reason="the rillet console script is not installed")
@pytest.mark.parametrize("delay_s", [0.5, 0.8, 1.2, 3.0])
def test_ctrl_c_at_any_point_exits_130_without_a_traceback(delay_s):
    # A socket that takes connections and never answers: the command waits for its answer, so it is still
    # running when Ctrl-C comes (a refused connection ends its retries within a few seconds).
    with socket.create_server(("127.0.0.1", 0)) as silent:
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        code, output = _interrupt_after(delay_s, "--endpoint", endpoint, "stream", "tail", "-f", "s/t")
    assert code == 130, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
