"""The append and read APIs over HTTP (standalone stack): caller mistakes get a typed 4xx JSON
``{code, message}`` and never a stack trace; good requests get the documented binary answers."""

from __future__ import annotations

import json

import pytest
import urllib3

import rillet
from rillet import api
from rillet.framing import MAX_BLOCK_SIZE, frame

http = urllib3.PoolManager(retries=False, timeout=60)


@pytest.fixture(scope="module")
def data(url):
    """A scope with a one-segment stream holding two events, and the data-API endpoints."""
    import uuid

    scope = "d" + uuid.uuid4().hex[:12]
    manager = rillet.StreamManager(url)
    manager.create_scope(scope)
    manager.create_stream(scope, "s", rillet.StreamConfiguration())
    connection = rillet.Connection(url)
    (segment,) = connection.controller.current_segments(scope, "s")
    endpoints = connection.controller.endpoints
    path = f"/v1/segments/{scope}/s/{segment.segment_id}"
    return {"scope": scope, "connection": connection, "segment": segment.segment_id, "path": path,
            "append": endpoints.append_url + path, "read": endpoints.read_url + path,
            "append_base": endpoints.append_url, "read_base": endpoints.read_url}


def _headers(writer="w1", event_number="0", event_count="1", **extra):
    headers = {"content-type": "application/octet-stream"}
    for name, value in ((api.WRITER_ID, writer), (api.EVENT_NUMBER, event_number), (api.EVENT_COUNT, event_count)):
        if value is not None:
            headers[name] = value
    headers.update(extra)
    return headers


def assert_error(response, status: int, code: str) -> dict:
    text = response.data.decode("utf-8", "replace")
    assert "Traceback" not in text and 'File "' not in text, text[:500]
    assert response.status == status, (response.status, text[:500])
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    body = json.loads(text)
    assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str) and body["message"], body
    assert body["code"] == code, body
    return body


def _append(data, body: bytes, **headers):
    return http.request("POST", data["append"], body=body, headers=_headers(**headers))


def test_good_append_and_read(data):
    block = frame(b"one") + frame(b"two")
    r = _append(data, block, writer="good", event_number="0", event_count="2")
    assert r.status == 200, r.data
    ack = json.loads(r.data)
    assert ack["duplicate"] is False and ack["length"] == ack["offset"] + len(block)
    again = json.loads(_append(data, block, writer="good", event_number="0", event_count="2").data)
    assert again == {**ack, "duplicate": True}
    read = http.request("GET", data["read"] + f"?offset={ack['offset']}&max_bytes={len(block)}")
    assert read.status == 200
    assert read.headers["content-type"] == "application/octet-stream"
    assert read.data == block
    assert int(read.headers[api.OFFSET]) == ack["offset"]
    assert int(read.headers[api.NEXT_OFFSET]) == ack["length"]
    assert read.headers[api.SEALED] == "false" and read.headers[api.END_OF_SEGMENT] == "false"
    info = json.loads(http.request("GET", data["read"] + "/info").data)
    assert info["length"] >= ack["length"] and info["sealed"] is False


def test_oversize_request_body_is_413(data):
    body = b"\0" * (6 * 1024 * 1024 + 1)
    assert_error(_append(data, body), 413, "TooLarge")


def test_block_over_the_max_block_size_is_413(data):
    # Whole frames, the right count, under the 6 MB payload limit even base64-encoded: only the
    # block size is wrong.
    block = frame(b"a" * 3_000_000) + frame(b"b" * 1_200_000)
    assert MAX_BLOCK_SIZE < len(block) and len(block) * 4 // 3 < 6 * 1024 * 1024
    assert_error(_append(data, block, writer="big", event_count="2"), 413, "TooLarge")
    raw = b"r" * (MAX_BLOCK_SIZE + 1)
    assert_error(_append(data, raw, writer="big", **{api.RAW_BYTES: "true"}), 413, "TooLarge")


@pytest.mark.parametrize("event_number", [None, "abc", "1.5", "-1", ""])
def test_missing_or_bad_event_number_is_400(data, event_number):
    assert_error(_append(data, frame(b"x"), writer="hdr", event_number=event_number), 400, "InvalidArgument")


@pytest.mark.parametrize(("headers", "what"), [
    ({"writer": None}, "no writer id"),
    ({"writer": "has space"}, "bad writer id"),
    ({"event_count": None}, "no event count"),
    ({"event_count": "0"}, "zero events"),
    ({"event_count": "two"}, "non-integer count"),
    ({api.EXPECTED_OFFSET: "-3"}, "negative expected offset"),
])
def test_other_bad_headers_are_400(data, headers, what):
    assert_error(_append(data, frame(b"x"), **headers), 400, "InvalidArgument")


def test_event_count_not_matching_the_frames_is_400(data):
    assert_error(_append(data, frame(b"x") + frame(b"y"), writer="cnt", event_count="3"), 400, "InvalidArgument")
    assert_error(_append(data, frame(b"x") + frame(b"y"), writer="cnt", event_count="1"), 400, "InvalidArgument")


@pytest.mark.parametrize("body", [
    frame(b"whole") + b"\0\0",  # a partial frame header at the end
    frame(b"whole")[:-1],  # a frame shorter than its header says
    b"\xff\xff\xff\xff" + b"x" * 10,  # a length beyond the maximum event size
], ids=["partial-header", "short-frame", "huge-length"])
def test_a_body_that_is_not_whole_frames_is_400(data, body):
    assert_error(_append(data, body, writer="frames"), 400, "InvalidArgument")


def test_an_empty_block_is_400(data):
    assert_error(_append(data, b"", writer="empty", **{api.RAW_BYTES: "true"}), 400, "InvalidArgument")


def test_unknown_segment_is_404(data):
    scope = data["scope"]
    for base in ("append_base", "read_base"):
        for path in (f"/v1/segments/{scope}/s/987654", f"/v1/segments/{scope}/nope/0",
                     f"/v1/segments/nope{scope}/s/0"):
            if base == "append_base":
                response = http.request("POST", data[base] + path, body=frame(b"x"), headers=_headers())
            else:
                response = http.request("GET", data[base] + path + "?offset=0")
            assert_error(response, 404, "SegmentNotFound")
    assert_error(http.request("GET", data["read_base"] + f"/v1/segments/{scope}/s/987654/info"), 404,
                 "SegmentNotFound")


@pytest.mark.parametrize("token", ["abc", "-1", "1.5", "0x10", "1" * 21])
def test_bad_segment_token_is_400(data, token):
    path = f"/v1/segments/{data['scope']}/s/{token}"
    assert_error(http.request("POST", data["append_base"] + path, body=frame(b"x"), headers=_headers()), 400,
                 "InvalidArgument")
    assert_error(http.request("GET", data["read_base"] + path + "?offset=0"), 400, "InvalidArgument")


@pytest.mark.parametrize("query", ["max_bytes=0", "offset=-1", "offset=abc",
                                   f"max_bytes={MAX_BLOCK_SIZE + 1}", "offset=999999999"])
def test_bad_read_parameters_are_400(data, query):
    assert_error(http.request("GET", data["read"] + "?" + query), 400, "InvalidArgument")


def test_read_below_the_start_is_410(url, unique):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration())
    connection = rillet.Connection(url)
    (segment,) = connection.controller.current_segments(unique, "s")
    first = connection.segments.append(unique, "s", segment.segment_id, "w", 0, 1, frame(b"gone"))
    second = connection.segments.append(unique, "s", segment.segment_id, "w", 1, 1, frame(b"kept"))
    connection.controller.truncate_stream(unique, "s", {segment.segment_id: second.offset})
    base = connection.controller.endpoints.read_url + f"/v1/segments/{unique}/s/{segment.segment_id}"
    body = assert_error(http.request("GET", base + f"?offset={first.offset}"), 410, "Truncated")
    assert body.get("details", {}).get("start_offset") == second.offset
    ok = http.request("GET", base + f"?offset={second.offset}")
    assert ok.status == 200 and ok.data == frame(b"kept")
    assert int(ok.headers[api.START_OFFSET]) == second.offset
    with pytest.raises(rillet.Truncated):  # and the SDK raises the same type
        connection.segments.read(unique, "s", segment.segment_id, 0)


def test_append_to_a_sealed_segment_is_409(url, unique):
    manager = rillet.StreamManager(url)
    manager.create_scope(unique)
    manager.create_stream(unique, "s", rillet.StreamConfiguration())
    connection = rillet.Connection(url)
    (segment,) = connection.controller.current_segments(unique, "s")
    connection.segments.append(unique, "s", segment.segment_id, "w", 0, 1, frame(b"last"))
    manager.seal_stream(unique, "s")
    path = f"/v1/segments/{unique}/s/{segment.segment_id}"
    response = http.request("POST", connection.controller.endpoints.append_url + path, body=frame(b"late"),
                            headers=_headers(writer="w", event_number="1"))
    assert_error(response, 409, "SegmentSealed")
    end = http.request("GET", connection.controller.endpoints.read_url + path + "?offset=8")
    assert end.status == 200 and end.data == b"" and end.headers[api.END_OF_SEGMENT] == "true"


def test_a_refused_oversize_body_closes_its_connection_and_says_so(data):
    """The gateway drops the connection after refusing a body it did not fully read; it must answer
    ``Connection: close`` so that a pooling client never sends its next request on the dead socket."""
    response = _append(data, b"\0" * (6 * 1024 * 1024 + 1))
    assert response.status == 413
    assert response.headers.get("connection", "").lower() == "close"
