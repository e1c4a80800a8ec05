"""``make up``'s recipe, run with a stub in place of ``rillet`` (the real stack takes a minute to start;
tests/e2e/test_standalone_stop.py stops the real one): it passes ``ARGS`` on, and a Ctrl-C stop, as
a terminal sends it (SIGINT to make and everything it started), ends without make's error line."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Stands for `rillet standalone`: records its arguments, then runs until SIGINT and exits 130 as
# the real one does once stopped.
STUB = """#!/bin/sh
echo "$@" > "$(dirname "$0")/args"
trap 'exit 130' INT
touch "$(dirname "$0")/ready"
while :; do sleep 0.05; done
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")  # the tool make up is for


def _start_make_up(tmp_path: Path, *extra: str) -> subprocess.Popen:
    """``make up`` in a process group of its own (as a terminal's foreground job), with the stub as
    ``rillet``."""
    _stub(tmp_path, STUB)
    return subprocess.Popen(["make", "-s", "-C", str(ROOT), "up", f"BIN={tmp_path}", f"STAMP={tmp_path / 'stamp'}",
                             *extra], start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _stub(tmp_path: Path, script: str) -> None:
    """The stub as ``BIN``'s ``rillet``, with a ``uv`` and an installed virtualenv's stamp newer than
    it, so that make installs nothing."""
    for name, text in (("uv", ""), ("rillet", script)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    (tmp_path / "stamp").touch()


def _wait_ready(tmp_path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)


def test_make_up_passes_args_and_a_ctrl_c_stop_ends_without_an_error_line(tmp_path):
    process = _start_make_up(tmp_path, "ARGS=--controller-port 9190 --no-dagster")
    _wait_ready(tmp_path, process)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: make, its shell and the stub all get it
    _, err = process.communicate(timeout=30)
    assert (tmp_path / "args").read_text() == "standalone --controller-port 9190 --no-dagster\n"
    assert "Error" not in err and "Interrupt" not in err, err
    assert err == ""


def test_make_up_counts_exit_130_as_success_and_other_failures_as_failures(tmp_path):
    """Without a signal to make itself, the stack's 130 is success and any other exit still fails."""
    for code, make_code in ((130, 0), (2, 2)):
        _stub(tmp_path, f"#!/bin/sh\nexit {code}\n")
        done = subprocess.run(["make", "-s", "-C", str(ROOT), "up", f"BIN={tmp_path}", f"STAMP={tmp_path / 'stamp'}"],
                              check=False, capture_output=True, text=True, timeout=30)
        assert done.returncode == make_code, done.stderr
        assert ("Error" in done.stderr) == (code != 130), done.stderr
