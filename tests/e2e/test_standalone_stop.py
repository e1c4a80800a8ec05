"""``python -m standalone`` stops cleanly at any moment: Ctrl-C while it starts (once it runs:
test_standalone_terminal.py), and a taken port before anything starts.

Each stack runs on a pseudo-terminal of its own, in its own process group, and is interrupted as a
terminal's Ctrl-C does: SIGINT to the whole group (the function workers included). The earliest
moment is the first import of ``rillet.cli.main``: before it the interpreter starts (``site`` and the
environment's ``.pth`` files) and imports the entry point, moments whose Ctrl-C is Python's to handle
(tests/unit/test_cli_interrupt.py). It is found by the import trace rather than by a delay, which a
loaded machine moves into the interpreter's start. Every process of
the stack inherits a mark in its environment, so the processes that outlive it are found in /proc
whatever their parent became (Dagster's code servers used to be left behind).
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

MARK = "RILLET_STANDALONE_TEST_MARK"
FREE_PORTS = ["--moto-port", "0", "--controller-port", "0", "--append-port", "0", "--read-port", "0",
              "--tails-port", "0", "--dagster-port", "0"]


class Terminal:
    """The stack started as a person starts it, on a terminal; what it printed there is ``output``."""

    def __init__(self, *args: str, trace_imports: bool = False) -> None:
        """``trace_imports``: the interpreter prints its import trace there too (``wait_for_import``);
        ``output`` leaves it out."""
        self.mark = uuid.uuid4().hex
        self.master, slave = os.openpty()
        env = {**os.environ, MARK: self.mark, **({"PYTHONPROFILEIMPORTTIME": "1"} if trace_imports else {})}
        self.process = subprocess.Popen([sys.executable, "-m", "standalone", *FREE_PORTS, *args],
                                        stdin=slave, stdout=slave, stderr=slave, start_new_session=True, env=env)
        os.close(slave)
        self.shown = ""  # all the terminal showed, the import trace included
        self.closed = False

    @property
    def output(self) -> str:
        return "".join(line for line in self.shown.splitlines(keepends=True) if not line.startswith("import time:"))

    def wait_for_import(self, module: str, timeout_s: float) -> None:
        """Until the import trace shows ``module`` imported after ``rillet.cli`` (the entry point's
        import: whatever the interpreter's own start imports comes before it)."""
        deadline = time.monotonic() + timeout_s
        pattern = re.compile(rf"\| +rillet\.cli\r?\n(?:.*\n)*?.*\| +{re.escape(module)}\r?\n")
        while not pattern.search(self.shown):
            assert not self.closed and time.monotonic() < deadline, f"no import of {module!r} in:\n{self.shown}"
            self._read(deadline - time.monotonic())

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.output:
            assert not self.closed and time.monotonic() < deadline, f"no {text!r} in:\n{self.output}"
            self._read(deadline - time.monotonic())

    def wait_for_process(self, pattern: str, timeout_s: float) -> None:
        """Until a process of the stack has ``pattern`` in its command line."""
        deadline = time.monotonic() + timeout_s
        while not any(re.search(pattern, line) for line in self.processes()):
            assert not self.closed and time.monotonic() < deadline, f"no process like {pattern!r}:\n{self.output}"
            self._read(0.05)

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the terminal's foreground process group."""
        os.killpg(self.process.pid, signal.SIGINT)

    def hang_up(self) -> None:
        """The terminal window closes: its processes get SIGHUP, and it takes no more output."""
        os.close(self.master)
        self.closed = True
        os.killpg(self.process.pid, signal.SIGHUP)

    def finish(self, timeout_s: float) -> tuple[int, float]:
        """Read until every process holding the terminal closed it; the exit code, and the seconds from
        the last line the stack printed to its exit."""
        deadline = time.monotonic() + timeout_s
        last_line_at, shown = time.monotonic(), len(self.output)
        while not self.closed:
            assert time.monotonic() < deadline, f"still running:\n{self.output}"
            self._read(deadline - time.monotonic())
            if len(self.output) > shown:  # the stack's own lines, not an import trace
                last_line_at, shown = time.monotonic(), len(self.output)
        code = self.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        os.close(self.master)
        return code, time.monotonic() - last_line_at

    def _read(self, timeout_s: float) -> bool:
        """Whatever the terminal has within ``timeout_s``; whether there was any."""
        if not select.select([self.master], [], [], max(0.0, timeout_s))[0]:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the terminal closed it
            data = b""
        self.closed = not data
        self.shown += data.decode(errors="replace").replace("\r\n", "\n")
        return bool(data)

    def processes(self) -> list[str]:
        """The command lines of the live processes of this stack (zombies are dead)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if f"{MARK}={self.mark}".encode() in environ.split(b"\0") and state != "Z":
                found.append(f"{entry.name}: {cmdline}")
        return found

    def survivors(self, timeout_s: float = 5) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def kill(self) -> None:
        """After a failed test: nothing of the stack may stay behind for the next one."""
        for line in self.processes():
            try:
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def terminals():
    started: list[Terminal] = []

    def start(*args: str, trace_imports: bool = False) -> Terminal:
        started.append(Terminal(*args, trace_imports=trace_imports))
        return started[-1]

    yield start
    for terminal in started:
        terminal.kill()


def assert_interrupted_while_starting(terminal: Terminal, timeout_s: float = 60) -> None:
    code, exit_after_s = terminal.finish(timeout_s)
    lines = terminal.output.splitlines()
    assert code == 130, terminal.output
    assert "Traceback" not in terminal.output, terminal.output
    assert len([line for line in lines if "interrupted" in line]) == 1, terminal.output
    assert lines[-1] in ("interrupted", "rillet standalone: interrupted while starting; stopped what had started")
    assert exit_after_s < 3, f"exited {exit_after_s:.1f} s after its last line"
    assert terminal.survivors() == []


@pytest.mark.timeout(300)
def test_ctrl_c_right_after_the_start(terminals, tmp_path):
    """As soon as the command's code runs: ``rillet.cli.main`` imports argparse first."""
    terminal = terminals("--no-dagster", "--log-dir", str(tmp_path), trace_imports=True)
    terminal.wait_for_import("argparse", 120)
    terminal.interrupt()
    assert_interrupted_while_starting(terminal)


@pytest.mark.timeout(300)
def test_ctrl_c_while_moto_starts(terminals, tmp_path):
    terminal = terminals("--no-dagster", "--log-dir", str(tmp_path))
    terminal.wait_for("starting Rillet standalone", 120)
    terminal.interrupt()
    assert_interrupted_while_starting(terminal)
    assert terminal.output.splitlines()[-1] == ("rillet standalone: interrupted while starting; "
                                                "stopped what had started")


@pytest.mark.timeout(300)
def test_ctrl_c_while_the_function_workers_start(terminals, tmp_path):
    terminal = terminals("--no-dagster", "--log-dir", str(tmp_path))
    terminal.wait_for_process("multiprocessing", 120)
    terminal.interrupt()
    assert_interrupted_while_starting(terminal)
    assert "Rillet standalone is up" not in terminal.output


@pytest.mark.timeout(300)
def test_a_closed_terminal_stops_it_too(terminals, tmp_path):
    terminal = terminals("--no-dagster", "--log-dir", str(tmp_path))
    terminal.wait_for_process("multiprocessing", 120)
    terminal.hang_up()
    assert terminal.process.wait(timeout=60) == 129
    assert terminal.survivors() == []


def test_ctrl_c_while_dagster_starts_stops_all_of_dagster(terminals, tmp_path):
    terminal = terminals("--log-dir", str(tmp_path))
    terminal.wait_for("waiting for Dagster", 240)
    terminal.wait_for_process("dagster_webserver", 300)  # code servers, daemon and webserver are up, loading
    terminal.interrupt()
    assert_interrupted_while_starting(terminal, timeout_s=90)
    assert "Rillet standalone is up" not in terminal.output


@pytest.mark.timeout(300)
def test_every_taken_port_is_one_line_before_anything_starts(tmp_path):
    with socket.socket() as moto, socket.socket() as dagster:
        for taken in (moto, dagster):
            taken.bind(("127.0.0.1", 0))
            taken.listen()
        moto_port, dagster_port = moto.getsockname()[1], dagster.getsockname()[1]
        twice = str(_free_port())
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "standalone", *FREE_PORTS, "--moto-port", str(moto_port), "--read-port", twice,
             "--tails-port", twice, "--dagster-port", str(dagster_port), "--log-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 2, done.stderr
    change = "choose another with {} (0 picks a free one)"
    assert done.stderr.splitlines() == [
        f"error: PortInUse: port {moto_port} (moto: DynamoDB and S3) is already in use; {change.format('--moto-port')}",
        f"error: PortInUse: port {twice} (tails API) is also given to the read API; {change.format('--tails-port')}",
        f"error: PortInUse: port {dagster_port} (Dagster UI) is already in use; {change.format('--dagster-port')}"]
    assert "Rillet standalone is up" not in done.stdout and not list(tmp_path.iterdir())  # no log file opened
    assert time.monotonic() - started < 30
