"""Ctrl-C, SIGTERM and a closed terminal ask the standalone stack to stop; none cuts a start-up step in half.

A terminal's Ctrl-C is SIGINT to every process of its foreground group. Left to Python, it raised
KeyboardInterrupt wherever the stack happened to be (a worker pool half spawned, a server half bound)
and in the function workers too: each printed a traceback, and what had started was left running.
Here the signal only sets ``requested``; start-up looks at it between its steps and in its waits
(``StartCancelled``), and ``rillet standalone`` then stops what has started and exits with
``exit_status()``. The function workers never see the terminal's signals (standalone/gateway.py).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

requested = threading.Event()
_received: list[int] = []


class StartCancelled(Exception):
    """A stop was requested while the stack was starting."""


def catch_stop_signals() -> None:
    """From now on, the stop signals set ``requested`` instead of interrupting the main thread."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _request_stop)


def _request_stop(signum: int, frame: FrameType | None) -> None:
    if signum == signal.SIGHUP:  # the terminal is gone: printing there would fail, and stop nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            os.dup2(devnull, stream.fileno())
    _received.append(signum)
    requested.set()


def exit_status() -> int:
    """128 + the number of the first stop signal, as a shell reports a command a signal ended: 130
    after Ctrl-C, as every ``rillet`` command."""
    return 128 + (_received[0] if _received else signal.SIGINT)


def raise_if_cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise StartCancelled


def pause(seconds: float, cancel: threading.Event | None) -> None:
    """Sleep, or raise StartCancelled as soon as ``cancel`` is set."""
    if cancel is None:
        time.sleep(seconds)
    elif cancel.wait(seconds):
        raise StartCancelled
