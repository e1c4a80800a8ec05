"""Calling the real Lambda handlers in-process with Function URL events, as the gateway builds them."""

from __future__ import annotations

import base64
import importlib
import json
import sys
import uuid
from types import ModuleType, SimpleNamespace

from standalone.gateway import build_event


def handler_modules(deployment, monkeypatch, environment: dict[str, str] | None = None) -> dict[str, ModuleType]:
    """The three handler modules, pointed at ``deployment`` (they read the environment on import, so a
    module imported earlier with another environment, by the OpenAPI generator say, is imported again),
    with ``environment`` besides (a deployment's settings, as Terraform sets them)."""
    env = {**deployment.to_env(), "RILLET_APPEND_URL": "http://append", "RILLET_READ_URL": "http://read",
           "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_DISABLED": "true", **(environment or {})}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    modules = {}
    for name in ("append", "read", "controller_api"):
        imported = sys.modules.get(f"lambdas.{name}.handler")
        module = importlib.import_module(f"lambdas.{name}.handler")
        if imported is not None and getattr(module, "imported_with_env", None) != env:
            # its route modules first: they also bind a deployment on import (grant_routes' GrantStore)
            for routes in [m for m in sys.modules if m.startswith(f"lambdas.{name}.") and not m.endswith(".handler")]:
                importlib.reload(sys.modules[routes])
            module = importlib.reload(module)
        module.imported_with_env = env
        modules[name] = module
    return modules


def invoke(module: ModuleType, method: str, target: str, body: bytes = b"", query: dict[str, str] | None = None,
           **headers: str) -> tuple[int, dict[str, str], dict]:
    """(status, lower-cased headers, JSON body) of one invocation; ``query`` replaces the parsed query
    string, for values no URL can carry."""
    headers = {"content-type": "application/octet-stream" if body else "application/json", **headers}
    event = build_event(method, target, headers, body, "localhost", "127.0.0.1")
    if query is not None:
        event["queryStringParameters"] = query
    context = SimpleNamespace(function_name="test", memory_limit_in_mb=512, aws_request_id=str(uuid.uuid4()),
                              invoked_function_arn="arn:aws:lambda:local:000000000000:function:test")
    result = module.handler(event, context)
    raw = result.get("body") or ""
    text = base64.b64decode(raw).decode() if result.get("isBase64Encoded") else raw
    assert "Traceback" not in text
    return result["statusCode"], {k.lower(): v for k, v in (result.get("headers") or {}).items()}, json.loads(text)
