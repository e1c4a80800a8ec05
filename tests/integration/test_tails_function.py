"""The tails function (issue 27): its one route answers exactly as the read function's tail check, under
the same authorization, and the controller names it at GET /v1/endpoints only when it is deployed.

The real handlers run in-process on Function URL events signed by principals (as the gateway builds
them), on tables of their own: the grants made here must not turn on authorization for other tests.
"""

from __future__ import annotations

import base64
import json
import uuid
from types import SimpleNamespace

import pytest
from lambda_events import handler_modules
from tails_handler import tails_module

import lambdas.authorization
from controlplane.grants import GrantStore
from dataplane.deployment import Deployment
from rillet import api
from rillet.framing import frame
from rillet.grants import Grant
from standalone.gateway import build_event
from standalone.resources import bind_all

ADMIN = "arn:aws:iam::123456789012:user/rillet-admin"
READER = "arn:aws:iam::123456789012:user/reader"


def _call(module, method: str, target: str, identity: str | None, body: bytes = b"",
          **headers: str) -> tuple[int, dict]:
    event = build_event(method, target, {"content-type": "application/json", **headers}, body, "localhost",
                        "127.0.0.1", identity=identity)
    context = SimpleNamespace(function_name="test", memory_limit_in_mb=128, aws_request_id=str(uuid.uuid4()),
                              invoked_function_arn="arn:aws:lambda:local:000000000000:function:test")
    result = module.handler(event, context)
    raw = result.get("body") or ""
    text = base64.b64decode(raw).decode() if result.get("isBase64Encoded") else raw
    return result["statusCode"], json.loads(text)


@pytest.fixture
def functions(isolated_deployment, deployment, monkeypatch, unique):
    """The handlers on tables of their own, a stream of 3 segments with 14 bytes in segment 1, and a
    fresh grant cache per call (each function instance has its own; in one process they would share).
    Grants are written to the store directly: the controller's grant router keeps the deployment of
    its first import."""
    mine = isolated_deployment("tails-function")
    modules = handler_modules(mine, monkeypatch)
    modules["tails"] = tails_module(mine)
    bind_all(mine)
    monkeypatch.setattr(lambdas.authorization, "_authorizer", None)
    controller = modules["controller_api"]
    assert _call(controller, "POST", "/v1/scopes", ADMIN, json.dumps({"scope": unique}).encode())[0] == 200
    body = {"stream": "s", "configuration": {"scaling_policy": {"min_num_segments": 3}}}
    status, answer = _call(controller, "POST", f"/v1/scopes/{unique}/streams", ADMIN, json.dumps(body).encode())
    assert status == 200, answer
    status, answer = _call(modules["append"], "POST", f"/v1/segments/{unique}/s/1", ADMIN, frame(b"x" * 10), **{
        "content-type": "application/octet-stream", api.WRITER_ID: "w", api.EVENT_NUMBER: "0",
        api.EVENT_COUNT: "1"})
    assert status == 200, answer
    yield modules
    bind_all(deployment)


def _both(modules, target: str, identity: str | None, monkeypatch) -> tuple[tuple[int, dict], tuple[int, dict]]:
    """The tails function's answer and the read function's, each from an instance with an empty grant cache."""
    answers = []
    for name in ("tails", "read"):
        monkeypatch.setattr(lambdas.authorization, "_authorizer", None)
        answers.append(_call(modules[name], "GET", target, identity))
    return answers[0], answers[1]


def test_the_tails_function_answers_as_the_read_functions_tail_check(functions, unique, monkeypatch):
    tails, read = _both(functions, f"/v1/segments/{unique}/s/tails?segments=0,1,2,999", None, monkeypatch)
    assert tails == read
    assert tails == (200, {"tails": [
        {"segment_id": 0, "found": True, "start_offset": 0, "length": 0, "sealed": False},
        {"segment_id": 1, "found": True, "start_offset": 0, "length": 14, "sealed": False},
        {"segment_id": 2, "found": True, "start_offset": 0, "length": 0, "sealed": False},
        {"segment_id": 999, "found": False, "start_offset": 0, "length": 0, "sealed": False}]})
    too_many = ",".join(str(i) for i in range(api.MAX_TAIL_SEGMENTS + 1))
    for query in ("segments=1,x", f"segments={too_many}", ""):
        tails, read = _both(functions, f"/v1/segments/{unique}/s/tails?{query}", None, monkeypatch)
        assert tails == read and tails[0] == 400 and tails[1]["code"] == "InvalidArgument", (query, tails)


def test_the_tails_function_needs_read_on_the_stream_as_the_read_function_does(functions, unique, monkeypatch):
    store = GrantStore(Deployment.from_env())  # the deployment the handlers were imported for

    def grant(principal: str, resource: str, permission: str) -> None:
        assert store.add(Grant(principal=principal, resource=resource, permission=permission))

    grant(ADMIN, "prn::*", "READ_UPDATE")  # authorization is on from here
    grant(READER, f"prn::/scope:{unique}/stream:other", "READ")
    target = f"/v1/segments/{unique}/s/tails?segments=0,1"
    for caller in (READER, None):  # a READ grant on another stream, and an unsigned caller
        tails, read = _both(functions, target, caller, monkeypatch)
        assert tails == read
        assert tails[0] == 403 and tails[1]["code"] == "AccessDenied", tails
        assert tails[1]["details"] == {"permission": "READ", "resource": f"prn::/scope:{unique}/stream:s"}

    grant(READER, f"prn::/scope:{unique}/stream:s", "READ")
    tails, read = _both(functions, target, READER, monkeypatch)
    assert tails == read and tails[0] == 200 and [t["length"] for t in tails[1]["tails"]] == [0, 14]


def test_the_controller_names_the_tails_url_only_where_it_is_deployed(functions, monkeypatch):
    controller = functions["controller_api"]
    monkeypatch.delenv("RILLET_TAILS_URL", raising=False)
    status, answer = _call(controller, "GET", "/v1/endpoints", None)
    assert (status, answer) == (200, {"append_url": "http://append", "read_url": "http://read", "tails_url": None})
    assert api.Endpoints.model_validate(answer).tail_check_url == "http://read"
    monkeypatch.setenv("RILLET_TAILS_URL", "http://tails")
    status, answer = _call(controller, "GET", "/v1/endpoints", None)
    assert status == 200 and answer["tails_url"] == "http://tails"
    assert api.Endpoints.model_validate(answer).tail_check_url == "http://tails"
