"""Patching a function of the standard library (``time.sleep``, ``time.monotonic``) for the test's own
thread only.

``monkeypatch.setattr(module.time, "sleep", ...)`` replaces the process's one ``time.sleep``, for every
thread of the pytest worker, those an earlier test left running included. One such thread polling
with ``time.sleep`` while a test had it recording into a list spun, appending, until the kernel killed
the worker (17 GB, a list of some 700 million entries); the run then hung in pytest-xdist's
replacement of the crashed worker. Other threads keep the real function.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def patch_in_this_thread(monkeypatch, owner: object, name: str, replacement: Callable[..., Any]) -> None:
    """``owner.name`` calls ``replacement`` when the calling thread is this one, and the original in
    any other thread, until the test ends."""
    original, test_thread = getattr(owner, name), threading.get_ident()

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        chosen = replacement if threading.get_ident() == test_thread else original
        return chosen(*args, **kwargs)

    monkeypatch.setattr(owner, name, dispatch)
