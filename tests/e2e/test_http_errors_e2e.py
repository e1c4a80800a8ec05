"""Raw HTTP against the control API: every caller mistake is a 4xx JSON ``{code, message}``, and no
answer ever carries a stack trace."""

from __future__ import annotations

import json

import pytest
import urllib3

from rillet import ScalingPolicy, StreamConfiguration

http = urllib3.PoolManager(retries=False, timeout=30)


def send(url, method, path, body=None, content_type="application/json"):
    headers = {"content-type": content_type} if body is not None else {}
    return http.request(method, url + path, body=body, headers=headers)


def assert_error(response, status, code):
    text = response.data.decode("utf-8", "replace")
    assert "Traceback" not in text and 'File "' not in text
    assert response.status == status, text
    assert response.headers.get("content-type", "").startswith("application/json")
    body = json.loads(text)
    assert isinstance(body, dict)
    assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str), body
    assert body["message"]
    assert body["code"] == code, body
    return body


@pytest.fixture(scope="module")
def names(url):
    """A scope with one active stream, made through the SDK."""
    import uuid

    import rillet

    scope = "h" + uuid.uuid4().hex[:12]
    m = rillet.StreamManager(url)
    m.create_scope(scope)
    m.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    return scope, "s"


BAD_REQUESTS = [
    # (method, path, body, expected status, expected code)
    ("POST", "/v1/scopes", b"{not json", 400, "InvalidArgument"),
    ("POST", "/v1/scopes", b'{"scope": 5}', 400, "InvalidArgument"),
    ("POST", "/v1/scopes", b'{"scope": ["a"]}', 400, "InvalidArgument"),
    ("POST", "/v1/scopes", b"[]", 400, "InvalidArgument"),
    ("POST", "/v1/scopes", b"{}", 400, "InvalidArgument"),
    ("POST", "/v1/scopes", b'{"scope": "ok", "extra": 1}', 400, "InvalidArgument"),
    ("POST", "/v1/scopes", b'{"scope": "_reserved"}', 400, "InvalidArgument"),
    ("POST", "/v1/scopes", b'{"scope": "has space"}', 400, "InvalidArgument"),
    ("GET", "/v1/no-such-route", None, 404, "NotFound"),
    ("GET", "/v2/scopes", None, 404, "NotFound"),
    ("GET", "/v1/scopes?limit=0", None, 400, "InvalidArgument"),
    ("GET", "/v1/scopes?limit=many", None, 400, "InvalidArgument"),
    ("GET", "/v1/scopes/{scope}/streams/{stream}/segments?at_ms=-1", None, 400, "InvalidArgument"),
    ("GET", "/v1/scopes/{scope}/streams/{stream}/segments/abc/successors", None, 400, "InvalidArgument"),
    ("GET", "/v1/scopes/{scope}/streams/{stream}/segment-for-key", None, 400, "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams",
     b'{"stream": "x", "configuration": {"scaling_policy": {"min_num_segments": 0}}}', 400, "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams",
     b'{"stream": "x", "configuration": {"scaling_policy": {"min_num_segments": "three"}}}', 400,
     "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams",
     b'{"stream": "x", "configuration": {"scaling_policy": {"scale_type": "BY_RATE_IN_EVENTS_PER_SEC"}}}', 400,
     "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams",
     (b'{"stream": "x", "configuration": {"retention_policy": {"retention_type": "SIZE", "retention_param": 10, '
      b'"retention_max": 5}}}'), 400, "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams", b'{"stream": "x", "configuration": {"tags": 7}}', 400,
     "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams", b'{"stream": "x", "configuration": {"colour": "red"}}', 400,
     "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams", b'{"stream": "bad name"}', 400, "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams", b'{"configuration": {}}', 400, "InvalidArgument"),
    ("PUT", "/v1/scopes/{scope}/streams/{stream}/configuration",
     b'{"scaling_policy": {"min_num_segments": -1}}', 400, "InvalidArgument"),
    ("DELETE", "/v1/scopes/{scope}/streams/{stream}", None, 409, "IllegalState"),  # not sealed
    ("DELETE", "/v1/scopes/{scope}", None, 409, "ScopeNotEmpty"),
    ("GET", "/v1/scopes/{scope}/streams/missing", None, 404, "StreamNotFound"),
    ("POST", "/v1/scopes/{scope}/streams/missing/seal", None, 404, "StreamNotFound"),
    ("GET", "/v1/scopes/{scope}-missing", None, 404, "ScopeNotFound"),
    ("POST", "/v1/scopes/{scope}-missing/streams", b'{"stream": "x"}', 404, "ScopeNotFound"),
    ("GET", "/v1/scopes/{scope}/streams/{stream}/segments/99/predecessors", None, 404, "StreamNotFound"),
    # A micro-batch whose transaction ids would not fit the sink record (docs/limits.md).
    ("POST", "/v1/scopes/{scope}/streams/{stream}/sinks/k/batches",
     b'{"batch_id": 0, "txn_ids": [' + b",".join([b'"t"'] * 4097) + b"]}", 400, "InvalidArgument"),
    ("POST", "/v1/scopes/{scope}/streams/{stream}/sinks/k/batches", b'{"batch_id": 0, "txn_ids": [""]}', 400,
     "InvalidArgument"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), BAD_REQUESTS,
                         ids=[f"{m} {p} {b[:40] if b else ''}" for m, p, b, _, _ in BAD_REQUESTS])
def test_caller_mistakes_get_typed_4xx_json(url, names, method, path, body, status, code):
    scope, stream = names
    assert_error(send(url, method, path.format(scope=scope, stream=stream), body), status, code)


def test_failed_requests_change_nothing(url, names):
    scope, stream = names
    info = json.loads(send(url, "GET", f"/v1/scopes/{scope}/streams/{stream}").data)
    assert info["state"] == "ACTIVE" and len(info["current_segments"]) == 2
    listed = json.loads(send(url, "GET", f"/v1/scopes/{scope}/streams").data)
    assert listed["streams"] == [stream]  # no "x" from the rejected creates


def test_a_malformed_page_token_is_a_caller_mistake(url, names):
    scope, _ = names
    assert_error(send(url, "GET", "/v1/scopes?token=not-a-token"), 400, "InvalidArgument")
    assert_error(send(url, "GET", f"/v1/scopes/{scope}/streams?token=bm90IGpzb24"), 400, "InvalidArgument")


@pytest.mark.parametrize("content_type", ["text/plain", "application/octet-stream"])
def test_a_json_route_with_another_content_type_is_a_caller_mistake(url, names, content_type):
    scope, _ = names
    response = send(url, "POST", f"/v1/scopes/{scope}/streams", b'{"stream": "y"}', content_type=content_type)
    text = response.data.decode("utf-8", "replace")
    assert "Traceback" not in text
    assert 400 <= response.status < 500, (response.status, text)
    body = json.loads(text)
    assert {"code", "message"} <= set(body)


def test_successful_answers_are_json_too(url, names):
    scope, stream = names
    response = send(url, "GET", f"/v1/scopes/{scope}/streams/{stream}/segments")
    assert response.status == 200
    assert response.headers["content-type"].startswith("application/json")
    assert [s["segment_id"] for s in json.loads(response.data)["segments"]] == [0, 1]
