"""The server's edges over real HTTP (standalone stack): a request whose body does not match its
Content-Length never reaches a handler; integers in headers, query strings, paths and JSON bodies are
bounded to 63 bits, so an out-of-range one is a typed 400, never a 500; a bad routing key is a typed
error in the SDK; and AWS throttling or a transient failure reaches the client as 429/503 with
Retry-After."""

from __future__ import annotations

import json
import socket
import uuid
from urllib.parse import urlsplit

import pytest
import urllib3

import rillet
from rillet import api
from rillet.errors import ERRORS_BY_CODE
from rillet.framing import frame
from rillet.transport import Transport
from standalone.faults import FaultConfig, FaultRates
from standalone.stack import Stack, StackConfig

http = urllib3.PoolManager(retries=False, timeout=60)

MAX_63 = 2**63 - 1
HUGE = "9" * 4300  # Python's int() refuses more than 4,300 digits


@pytest.fixture(scope="module")
def data(url):
    """A scope with a one-segment stream, and the URLs of its segment in the data APIs."""
    scope = "e" + uuid.uuid4().hex[:12]
    manager = rillet.StreamManager(url)
    manager.create_scope(scope)
    manager.create_stream(scope, "s", rillet.StreamConfiguration())
    connection = rillet.Connection(url)
    (segment,) = connection.controller.current_segments(scope, "s")
    endpoints = connection.controller.endpoints
    path = f"/v1/segments/{scope}/s/{segment.segment_id}"
    return {"scope": scope, "path": path, "append": endpoints.append_url + path, "read": endpoints.read_url + path,
            "append_base": endpoints.append_url, "controller": url}


def assert_error(status: int, headers, data: bytes, expected_status: int, code: str) -> dict:
    text = data.decode("utf-8", "replace")
    assert "Traceback" not in text and 'File "' not in text, text[:500]
    assert status == expected_status, (status, text[:500])
    assert headers.get("content-type", "").startswith("application/json"), headers
    body = json.loads(text)
    assert body["code"] == code and isinstance(body["message"], str) and body["message"], body
    return body


def segment_length(data) -> int:
    response = http.request("GET", data["read"] + "/info")
    assert response.status == 200, response.data
    return json.loads(response.data)["length"]


def raw_request(base_url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is, close the sending side (so a short body ends early), read the answer."""
    parts = urlsplit(base_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, body


def append_request(data, body: bytes, content_length: str, writer: str, count: int) -> bytes:
    head = (f"POST {data['path']} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/octet-stream\r\n"
            f"{api.WRITER_ID}: {writer}\r\n{api.EVENT_NUMBER}: 0\r\n{api.EVENT_COUNT}: {count}\r\n"
            f"content-length: {content_length}\r\n\r\n")
    return head.encode() + body


# -- Content-Length -----------------------------------------------------------------------------------


def test_a_body_shorter_than_its_content_length_is_refused_and_appends_nothing(data):
    before = segment_length(data)
    block = frame(b"first") + frame(b"second")  # whole frames: the short body would look like a good block
    request = append_request(data, block, str(len(block) + 100), "short-body", 2)
    status, headers, body = raw_request(data["append_base"], request)
    assert_error(status, headers, body, 400, "InvalidArgument")
    assert segment_length(data) == before


@pytest.mark.parametrize("content_length", ["abc", "-5", "1e3", "+10", ""])
def test_a_malformed_content_length_is_refused_and_appends_nothing(data, content_length):
    before = segment_length(data)
    block = frame(b"x")
    status, headers, body = raw_request(data["append_base"], append_request(data, block, content_length, "bad-cl", 1))
    assert_error(status, headers, body, 400, "InvalidArgument")
    assert segment_length(data) == before


def test_a_chunked_body_is_refused_rather_than_read_as_empty(data):
    before = segment_length(data)
    block = frame(b"x")
    head = (f"POST {data['path']} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/octet-stream\r\n"
            f"{api.WRITER_ID}: chunked\r\n{api.EVENT_NUMBER}: 0\r\n{api.EVENT_COUNT}: 1\r\n"
            "transfer-encoding: chunked\r\n\r\n")
    request = head.encode() + f"{len(block):x}\r\n".encode() + block + b"\r\n0\r\n\r\n"
    status, headers, body = raw_request(data["append_base"], request)
    assert_error(status, headers, body, 400, "InvalidArgument")
    assert segment_length(data) == before


def test_a_body_that_matches_its_content_length_is_appended(data):
    before = segment_length(data)
    block = frame(b"whole")
    status, _, body = raw_request(data["append_base"], append_request(data, block, str(len(block)), "exact", 1))
    assert status == 200, body
    assert segment_length(data) == before + len(block)


def test_a_json_body_that_is_not_utf8_gets_a_typed_answer_not_a_dropped_connection(data):
    body = b'{"scope": "\xff"}'
    request = (b"POST /v1/scopes HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\n\r\n" % len(body)) + body
    status, headers, answer = raw_request(data["controller"], request)
    assert_error(status, headers, answer, 400, "InvalidArgument")


# -- 63-bit bounds ------------------------------------------------------------------------------------


def _append(data, writer: str, event_number: str, event_count: str = "1", **extra: str):
    headers = {"content-type": "application/octet-stream", api.WRITER_ID: writer, api.EVENT_NUMBER: event_number,
               api.EVENT_COUNT: event_count, **extra}
    return http.request("POST", data["append"], body=b"".join(frame(b"e") for _ in range(int(event_count[:3]))),
                        headers=headers)


@pytest.mark.parametrize(("event_number", "event_count", "extra"), [
    (HUGE, "1", {}),
    ("9" * 5000, "1", {}),
    (str(MAX_63 + 1), "1", {}),
    (str(MAX_63), "2", {}),  # its last event would be 2**63
    ("0", HUGE, {}),
    ("0", "1", {api.EXPECTED_OFFSET: HUGE}),
    ("0", "1", {api.EXPECTED_OFFSET: str(MAX_63 + 1)}),
    ("1", "1", {api.AFTER_EVENT: HUGE}),
    ("1", "1", {api.AFTER_EVENT: str(MAX_63 + 1)}),
], ids=["huge-number", "5000-digit-number", "number-2**63", "last-event-2**63", "huge-count", "huge-expected-offset",
        "expected-offset-2**63", "huge-after", "after-2**63"])
def test_out_of_range_append_headers_are_typed_400s_and_append_nothing(data, event_number, event_count, extra):
    before = segment_length(data)
    response = _append(data, "bounds-" + uuid.uuid4().hex[:8], event_number, event_count, **extra)
    assert_error(response.status, response.headers, response.data, 400, "InvalidArgument")
    assert segment_length(data) == before


def test_the_largest_event_number_is_accepted(data):
    response = _append(data, "last-" + uuid.uuid4().hex[:8], str(MAX_63), "1")
    assert response.status == 200, response.data
    assert json.loads(response.data)["duplicate"] is False


@pytest.mark.parametrize("query", [f"offset={HUGE}", f"offset={MAX_63 + 1}"])
def test_out_of_range_read_offsets_are_typed_400s(data, query):
    response = http.request("GET", f"{data['read']}?{query}")
    assert_error(response.status, response.headers, response.data, 400, "InvalidArgument")


@pytest.mark.parametrize("query", [f"from=0&to={HUGE}", f"from={MAX_63 + 1}&to=0", f"from=0&to={MAX_63 + 1}"])
def test_out_of_range_read_plan_bounds_are_typed_400s(data, query):
    response = http.request("GET", f"{data['read']}/plan?{query}")
    assert_error(response.status, response.headers, response.data, 400, "InvalidArgument")


@pytest.mark.parametrize("path", [
    "/segments?at_ms={huge}",
    "/segments?at_ms=9223372036854775808",
    "/segments/{huge}/successors",
    "/segments/18446744073709551616/successors",  # 2**64: no segment id is that large
    "/segments/{huge}/predecessors",
    "/scale/{huge}",
    "/scale/4294967296",  # 2**32: an epoch is 32 bits
])
def test_out_of_range_controller_integers_are_typed_400s(data, path):
    url = f"{data['controller']}/v1/scopes/{data['scope']}/streams/s" + path.format(huge=HUGE)
    response = http.request("GET", url)
    assert_error(response.status, response.headers, response.data, 400, "InvalidArgument")


# -- routing keys -------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [7, b"bytes", ["unhashable"], "lone surrogate \ud800"], ids=repr)
def test_a_writer_refuses_a_bad_routing_key_with_a_typed_error_and_goes_on(url, unique, key):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration())
    factory = rillet.EventStreamClientFactory(unique, url)
    with factory.create_event_writer("s", rillet.UTF8StringSerializer()) as writer:
        with pytest.raises(rillet.InvalidArgument):
            writer.write_event("refused", routing_key=key)
        writer.write_event("kept", routing_key="good").result(timeout=60)
    reader = factory.create_stream_reader("s", rillet.UTF8StringSerializer())
    assert [e.event for e in reader] == ["kept"]


@pytest.mark.parametrize(("path", "body"), [
    ("/writers/w/mark", {"timestamp_ms": int("9" * 41), "position": [{"segment_id": 0, "offset": 0}]}),
    ("/writers/w/mark", {"timestamp_ms": MAX_63 + 1, "position": [{"segment_id": 0, "offset": 0}]}),
    ("/writers/w/mark", {"timestamp_ms": 0, "position": [{"segment_id": 0, "offset": int("9" * 41)}]}),
    ("/sinks/k/batches", {"batch_id": int("9" * 41), "txn_ids": []}),
    ("/sinks/k/batches", {"batch_id": MAX_63 + 1, "txn_ids": []}),
], ids=["mark-41-digit-time", "mark-time-2**63", "mark-41-digit-offset", "batch-41-digit-id", "batch-id-2**63"])
def test_out_of_range_integers_in_json_bodies_are_typed_400s(data, path, body):
    url = f"{data['controller']}/v1/scopes/{data['scope']}/streams/s{path}"
    response = http.request("POST", url, body=json.dumps(body), headers={"content-type": "application/json"})
    assert_error(response.status, response.headers, response.data, 400, "InvalidArgument")


# -- AWS trouble over the wire ------------------------------------------------------------------------


@pytest.mark.parametrize(("rates", "status", "code"), [
    (FaultRates(throttle=1.0), 429, "Throttled"),
    (FaultRates(server_error=1.0), 503, "ServiceUnavailable"),
], ids=["throttled", "server-error"])
def test_aws_trouble_reaches_the_client_as_a_typed_status_with_retry_after(rates, status, code):
    """A stack whose read function sees every AWS request fail (standalone/faults.py): the gateway
    carries the handler's typed answer and its Retry-After to the client, and the SDK raises the type."""
    config = StackConfig.ephemeral(faults=FaultConfig(rates=rates, functions=("read",)))
    config.workers = {"controller": 1, "append": 1, "read": 1, "tails": 1}
    with Stack(config) as stack:
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope("faulty")
        manager.create_stream("faulty", "s", rillet.StreamConfiguration())
        read_url = rillet.Connection(stack.controller_url).controller.endpoints.read_url
        response = http.request("GET", f"{read_url}/v1/segments/faulty/s/0/info")
        assert_error(response.status, response.headers, response.data, status, code)
        assert int(response.headers["retry-after"]) >= 1
        with pytest.raises(ERRORS_BY_CODE[code]):
            Transport(read_url, max_attempts=1).request("GET", "/v1/segments/faulty/s/0/info")
