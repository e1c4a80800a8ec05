"""Where standalone's processes write: the terminal for what a person reads, log files for the rest.

The handlers print what Lambda would send to CloudWatch Logs to stdout: powertools' JSON log records
and an EMF metric blob per invocation. In standalone each function's workers write that to
``<log dir>/<function>.log`` and Dagster writes to ``<log dir>/dagster.log``; only records at WARNING
or above also reach the terminal, as one line that says which file has the details.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
from typing import IO

LOG_FILE_ENV = "RILLET_LOG_FILE"  # set by the stack for a function's workers
_LEVELS = ("WARNING", "ERROR", "CRITICAL")
_DAGSTER_RECORD = re.compile(r" - (WARNING|ERROR|CRITICAL) - (.*)")
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # Dagster colours its log levels
# Dagster warns about its own API (beta parameters it passes itself): nothing a Rillet user can act on.
_LIBRARY_WARNINGS = re.compile(r"(Beta|Preview|Supersession|Deprecation)Warning")


def terminal_line(source: str, line: str, path: str) -> str | None:
    """The line to show on the terminal for one line of output, or None when it belongs in the file
    only (metrics, records below WARNING, anything else)."""
    if line.startswith("{"):
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if isinstance(record, dict) and record.get("level") in _LEVELS:
            return f"[{source}] {record['level']}: {record.get('message', '')} (details in {path})"
        return None
    match = _DAGSTER_RECORD.search(_COLOURS.sub("", line))
    if not match or _LIBRARY_WARNINGS.search(match[2]):
        return None
    return f"[{source}] {match[1]}: {match[2]} (details in {path})"


class _Output(io.TextIOBase):
    """A worker's sys.stdout: every line to the log file, the important ones to the terminal too."""

    def __init__(self, source: str, path: str, terminal: IO[str]) -> None:
        self.source, self.path, self.terminal = source, path, terminal
        self.file = open(path, "a", buffering=1)  # noqa: SIM115 - the worker's stdout for its lifetime
        self.pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.file.write(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            shown = terminal_line(self.source, line, self.path)
            if shown:
                print(shown, file=self.terminal, flush=True)
        return len(text)

    def flush(self) -> None:
        self.file.flush()


def route_worker_output() -> None:
    """In a function's worker, before the handler is imported (its Logger keeps the stream it finds):
    send stdout to the log file the stack named (``<function>.log``), if it named one."""
    path = os.environ.get(LOG_FILE_ENV)
    if path:
        sys.stdout = _Output(os.path.splitext(os.path.basename(path))[0], path, sys.__stderr__)


def tee_process_output(source: str, stream: IO[str], path: str,
                       stopping: threading.Event | None = None) -> threading.Thread:
    """Copy a child process's output to the log file, and its important lines to the terminal, until
    the child closes it. Once ``stopping`` is set, only the file: what a child reports while it is
    being stopped (Dagster: the runs the stop interrupted, as failures) is the stop, not news."""
    def copy() -> None:
        with open(path, "a", buffering=1) as file:
            for line in stream:
                file.write(line)
                shown = terminal_line(source, line.rstrip("\n"), path)
                if shown and not (stopping and stopping.is_set()):
                    print(shown, file=sys.stderr, flush=True)

    thread = threading.Thread(target=copy, name=f"log-{source}", daemon=True)
    thread.start()
    return thread
