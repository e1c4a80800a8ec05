"""The tails handler module for in-process calls, as lambda_events.handler_modules gives the other three."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def tails_module(deployment) -> ModuleType:
    """lambdas.tails.handler pointed at ``deployment``: call it after lambda_events.handler_modules, which
    sets the environment the module reads on import (imported again if an earlier import read another)."""
    env = deployment.to_env()
    imported = sys.modules.get("lambdas.tails.handler")
    module = importlib.import_module("lambdas.tails.handler")
    if imported is not None and getattr(module, "imported_with_env", None) != env:
        module = importlib.reload(module)
    module.imported_with_env = env
    return module
