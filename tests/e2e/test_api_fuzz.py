"""A bounded schemathesis run over the four published OpenAPI documents against the standalone stack:
no request, valid or not, is answered with a 5xx or a dropped connection.

Every phase runs (the documents' examples, the coverage cases at the schema's boundaries, random
fuzzing and stateful sequences that follow the documents' links from a created scope to its streams,
segments, transactions and reader groups), with a fixed seed, a few examples per operation and no
shrinking, so a run takes well under two minutes on two cores and repeats itself. Streams are scaled to
at most 16 segments (api_fuzz_hooks.py says why). The check is
``not_a_server_error``: a 5xx answer fails it, and so does a connection dropped without an answer
(schemathesis reports it as a network error).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "openapi"
SEED = 20261124


def _fuzz(document: str, base_url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", str(DOCS / document), "--url", base_url,
         "--checks", "not_a_server_error", "--phases", "examples,coverage,fuzzing,stateful",
         "--seed", str(SEED), "--max-examples", "3", "--no-shrink", "--workers", "1",
         "--generation-database", "none", "--request-timeout", "60", "--no-color"],
        check=False, capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "api_fuzz_hooks", "PYTHONPATH": str(Path(__file__).parent)})


def _shortened(text: str) -> str:
    """Schemathesis reprints each failing request as curl; a generated body can be 100 KB of one value."""
    return re.sub(r"(.{60})(?:\1){20,}", lambda m: f"{m.group(1)}... [repeated {len(m.group(0)) // 60} times]", text)


@pytest.mark.parametrize(("document", "function"), [("controller.json", "controller"), ("append.json", "append"),
                                                    ("read.json", "read"), ("tails.json", "tails")])
def test_no_request_is_answered_with_a_server_error_or_a_dropped_connection(stack, tmp_path, document, function):
    run = _fuzz(document, stack.functions[function].url, tmp_path)
    summary = run.stdout[run.stdout.find("SUMMARY"):] if "SUMMARY" in run.stdout else run.stdout[-3000:]
    failures = run.stdout[run.stdout.find("FAILURES"):run.stdout.find("WARNINGS")] if "FAILURES" in run.stdout else ""
    assert run.returncode == 0, _shortened(failures or run.stdout[-20000:]) + run.stderr[-3000:]
    assert "Network Error" not in run.stdout and " generated" in summary, summary


# -- what the first fuzz runs found, each as a plain regression test ------------------------------


def _call(method: str, url: str, body: bytes | None = None, content_type: str = "application/json"):
    connection = http.client.HTTPConnection(urlsplit(url).netloc, timeout=60)
    try:
        connection.request(method, urlsplit(url).path, body=body, headers={"content-type": content_type})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("function", ["controller", "append", "read", "tails"])
def test_a_method_the_api_does_not_declare_is_405_with_the_error_shape(stack, function):
    status, headers, body = _call("TRACE", f"{stack.functions[function].url}/v1/scopes")
    assert status == 405
    assert json.loads(body)["code"] == "MethodNotAllowed"
    assert "GET" in headers["allow"] and "TRACE" not in headers["allow"]


@pytest.mark.parametrize("content_type", ["multipart/form-data", "text/plain"])
def test_a_json_route_sent_another_content_type_is_415(url, content_type):
    status, _, body = _call("POST", f"{url}/v1/scopes", b'{"scope": "x"}', content_type)
    assert (status, json.loads(body)["code"]) == (415, "UnsupportedMediaType")


@pytest.mark.parametrize("stream", [{"scope": "", "stream": ""}, {"scope": "a", "stream": "b/c"}])
def test_a_reader_group_configuration_naming_no_possible_stream_is_400(url, unique, stream):
    assert _call("POST", f"{url}/v1/scopes", json.dumps({"scope": unique}).encode())[0] == 200
    status, _, body = _call("PUT", f"{url}/v1/scopes/{unique}/reader-groups/g/config",
                            json.dumps({"streams": [stream]}).encode())
    assert (status, json.loads(body)["code"]) == (400, "InvalidArgument")
    status, _, body = _call("POST", f"{url}/v1/scopes/{unique}/reader-groups",
                            json.dumps({"group": "g", "config": {"streams": [stream]}}).encode())
    assert (status, json.loads(body)["code"]) == (400, "InvalidArgument")


def test_the_control_document_states_name_rules_and_links_creations_to_their_uses():
    document = json.loads((DOCS / "controller.json").read_text())
    stream_ops = document["paths"]["/v1/scopes/{scope}/streams/{stream}"]
    scope = next(p for p in stream_ops["get"]["parameters"] if p["name"] == "scope")["schema"]
    assert (scope["minLength"], scope["maxLength"], scope["pattern"]) == (1, 255, r"^[A-Za-z0-9.\-]{1,255}$")
    created = document["components"]["schemas"]["CreateStreamRequest"]["properties"]["stream"]
    assert created["maxLength"] == 250 and created["pattern"] == r"^[A-Za-z0-9.\-]{1,250}$"

    def links(method: str, path: str) -> dict:
        return document["paths"][path][method]["responses"]["200"]["links"]

    def targets(method: str, path: str) -> set[str]:
        return {link["operationId"].split("_v1_")[0] for link in links(method, path).values()}

    assert {"create_stream", "create_reader_group", "get_scope"} <= targets("post", "/v1/scopes")
    assert {"get_segments", "begin_txn", "scale_stream", "get_stream"} <= targets("post", "/v1/scopes/{scope}/streams")
    assert {"commit_txn", "abort_txn"} <= targets("post", "/v1/scopes/{scope}/streams/{stream}/transactions")
    assert {"add_reader", "reset_reader_group"} <= targets("post", "/v1/scopes/{scope}/reader-groups")
    begin = links("post", "/v1/scopes/{scope}/streams")["begin_txn_v1_scopes__scope__streams__stream__transactions_post"]
    assert begin["parameters"] == {"scope": "$request.path.scope", "stream": "$request.body#/stream"}
