"""The ``rillet`` command: ``main`` is its console script (``rillet = "rillet.cli:main"``).

This module imports nothing of the command or the SDK: ``main`` imports them inside its handling of
Ctrl-C, so that Ctrl-C while they import ends the command as it does later.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # as typing.TYPE_CHECKING: importing typing would delay main's handling of Ctrl-C
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command stopped by Ctrl-C
INTERRUPTED_LINE = "interrupted"


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command, the process's own (``sys.argv``) if ``argv`` is None; its exit code. Ctrl-C at any
    point exits 130 with one line on stderr and no traceback."""
    own_process = argv is None
    try:
        from rillet.cli.run import run  # the parser and the SDK: a Ctrl-C while they import is caught below

        return run(sys.argv[1:] if own_process else list(argv))
    except (KeyboardInterrupt, RuntimeError) as e:  # Ctrl-C (of a `tail -f`, or while importing): the way to stop
        # Python 3.11 wraps an exception raised in a class body's ``__set_name__`` (a cached_property of a
        # module being imported) in a RuntimeError: a Ctrl-C there is still a Ctrl-C.
        if not isinstance(e, KeyboardInterrupt) and not isinstance(e.__cause__, KeyboardInterrupt):
            raise
        if own_process:
            _exit_at_next_interrupt()  # a second Ctrl-C while this one is handled
        print(INTERRUPTED_LINE, file=sys.stderr)
        return INTERRUPTED
    finally:
        if own_process:
            _exit_at_next_interrupt()


def _exit_at_next_interrupt() -> None:
    """From now on Ctrl-C exits at once, with 130 and the one line: in the interpreter's shutdown after
    main (joining a writer's threads, atexit) no ``except`` is left to catch it. A command that handles
    Ctrl-C itself (``rillet standalone``) keeps its own handler."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_interrupted)


def _exit_interrupted(signum: int, frame: FrameType | None) -> None:
    os.write(sys.stderr.fileno(), f"{INTERRUPTED_LINE}\n".encode())
    os._exit(INTERRUPTED)
