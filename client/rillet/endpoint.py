"""Which deployment a client talks to when the caller names none: ``RILLET_ENDPOINT``, as the CLI
reads it, else the standalone stack's controller. Kept free of imports so the CLI's parser can use it."""

from __future__ import annotations

import os

DEFAULT_ENDPOINT = "http://127.0.0.1:9090"


def controller_endpoint(endpoint: str | None = None) -> str:
    """``endpoint`` if given, else ``RILLET_ENDPOINT`` if set (and not empty), else the standalone one."""
    return endpoint or os.environ.get("RILLET_ENDPOINT") or DEFAULT_ENDPOINT
