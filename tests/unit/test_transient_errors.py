"""Throttled and transiently failing AWS calls reach the client as typed, retryable answers.

The real handlers are called in-process with Function URL events, with every AWS call made to fail
the way botocore reports it (boto3 and PynamoDB both send through ``BaseClient._make_api_call``). A
throttle must answer 429 ``Throttled`` and a transient failure 503 ``ServiceUnavailable``, each with
``Retry-After``: the outcome is unknown and repeating is safe. Only a genuine bug answers 500.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import botocore.client
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from lambda_events import handler_modules, invoke
from pynamodb.exceptions import PutError, TransactWriteError, VerboseClientError

from dataplane.segment_store import SegmentStore
from lambdas.http import transient_error
from rillet import api
from rillet.errors import ServiceUnavailable, Throttled
from rillet.framing import frame


def client_error(code: str, status: int, operation: str = "PutItem", **extra) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"injected {code}"},
                        "ResponseMetadata": {"HTTPStatusCode": status}, **extra}, operation)


THROTTLES = [
    client_error("ProvisionedThroughputExceededException", 400),
    client_error("ThrottlingException", 400),
    client_error("RequestLimitExceeded", 400),
    client_error("SlowDown", 503, "PutObject"),
    client_error("TooManyRequests", 429, "GetObject"),  # an unknown code, known by its status
]
TRANSIENTS = [
    client_error("InternalServerError", 500),
    client_error("ServiceUnavailable", 503, "GetObject"),
    client_error("InternalError", 500, "PutObject"),
    client_error("RequestTimeout", 400, "PutObject"),
    EndpointConnectionError(endpoint_url="http://dynamodb"),
    ReadTimeoutError(endpoint_url="http://dynamodb"),
    ConnectionResetError("reset by peer"),
]


@pytest.mark.parametrize("error", THROTTLES, ids=lambda e: type(e).__name__ + ":" + str(e)[:40])
def test_throttling_is_classified_throttled(error):
    assert isinstance(transient_error(error), Throttled)
    assert isinstance(transient_error(PutError("Failed to put item", error)), Throttled)  # as PynamoDB wraps it


@pytest.mark.parametrize("error", TRANSIENTS, ids=lambda e: type(e).__name__ + ":" + str(e)[:40])
def test_transient_failures_are_classified_unavailable(error):
    assert isinstance(transient_error(error), ServiceUnavailable)
    assert isinstance(transient_error(PutError("Failed to put item", error)), ServiceUnavailable)


def test_a_transaction_cancelled_by_throttling_is_throttled():
    cancelled = VerboseClientError(
        {"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
         "ResponseMetadata": {"HTTPStatusCode": 400},
         "CancellationReasons": [{"Code": "None"}, {"Code": "ThrottlingError"}]}, "TransactWriteItems",
        cancellation_reasons=[None, SimpleNamespace(code="ThrottlingError", message="")])
    assert isinstance(transient_error(TransactWriteError("Failed to write transaction items", cancelled)), Throttled)


@pytest.mark.parametrize("error", [
    client_error("ValidationException", 400),
    client_error("ConditionalCheckFailedException", 400),
    client_error("AccessDeniedException", 400),
    KeyError("bug"),
    ValueError("bug"),
], ids=lambda e: str(e)[:40])
def test_anything_else_is_not_transient(error):
    assert transient_error(error) is None
    assert transient_error(PutError("Failed to put item", error)) is None


# -- the real handlers ------------------------------------------------------------------------------


@pytest.fixture
def handlers(deployment, monkeypatch):
    return handler_modules(deployment, monkeypatch)


@pytest.fixture
def fail_every_aws_call(monkeypatch):
    """Make every AWS request fail with the error the test chooses, before anything is sent."""
    def install(error: Exception) -> None:
        def failing(client, operation_name, api_params):
            raise error

        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", failing)
    return install


def _requests():
    block = frame(b"event")
    return {
        "append": ("append", "POST", "/v1/segments/sc/st/0", block,
                   {api.WRITER_ID: "w", api.EVENT_NUMBER: "0", api.EVENT_COUNT: "1"}),
        "read": ("read", "GET", "/v1/segments/sc/st/0?offset=0", b"", {}),
        "read-info": ("read", "GET", "/v1/segments/sc/st/0/info", b"", {}),
        "controller-stream": ("controller_api", "GET", "/v1/scopes/sc/streams/st", b"", {}),
        "controller-create-scope": ("controller_api", "POST", "/v1/scopes", b'{"scope": "sc"}',
                                    {"content-type": "application/json"}),
    }


REQUESTS = _requests()


@pytest.mark.parametrize("request_name", sorted(REQUESTS))
@pytest.mark.parametrize(("error", "status", "code"), [
    (client_error("ProvisionedThroughputExceededException", 400), 429, "Throttled"),
    (client_error("SlowDown", 503), 429, "Throttled"),
    (client_error("InternalServerError", 500), 503, "ServiceUnavailable"),
    (ReadTimeoutError(endpoint_url="http://aws"), 503, "ServiceUnavailable"),
], ids=["dynamodb-throttle", "s3-slowdown", "internal-server-error", "read-timeout"])
def test_handlers_answer_aws_trouble_with_a_typed_retryable_status(handlers, fail_every_aws_call, request_name,
                                                                   error, status, code):
    module, method, target, body, headers = REQUESTS[request_name]
    fail_every_aws_call(error)
    got_status, got_headers, got_body = invoke(handlers[module], method, target, body, **headers)
    assert (got_status, got_body["code"]) == (status, code), got_body
    assert int(got_headers["retry-after"]) >= 1
    assert got_body["message"]


def test_a_genuine_bug_is_still_a_bare_500(handlers, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("a bug")

    monkeypatch.setattr(handlers["read"].store, "info", broken)
    status, headers, body = invoke(handlers["read"], "GET", "/v1/segments/sc/st/0/info")
    assert (status, body) == (500, {"code": "InternalError", "message": "internal error"})
    assert "retry-after" not in headers


@pytest.mark.parametrize("payload_size", [10, 10_000], ids=["inline-block", "s3-block"])
@pytest.mark.parametrize(("lost", "status", "code"), [(False, 429, "Throttled"), (True, 503, "ServiceUnavailable")],
                         ids=["throttled-before-applied", "applied-then-answer-lost"])
def test_an_append_failing_at_any_aws_step_then_repeated_is_stored_exactly_once(deployment, handlers, monkeypatch,
                                                                                lost, status, code, payload_size):
    """Whichever AWS call of an append fails (throttled before it is applied, or applied and then its
    answer lost to a read timeout), the answer is a typed retryable status, and repeating the same request
    (same writer id and event numbers, as the writer does on an unknown outcome) stores the block once."""
    store = SegmentStore(deployment)
    monkeypatch.setattr(handlers["append"], "store", store)
    original = botocore.client.BaseClient._make_api_call
    block = frame(b"1" * payload_size) + frame(b"2" * payload_size)
    headers = {api.WRITER_ID: "w", api.EVENT_NUMBER: "0", api.EVENT_COUNT: "2"}
    for failing_call in range(1, 30):
        segment = f"sc{uuid.uuid4().hex[:8]}/st/0"
        store.create(segment)
        calls = 0

        def fail_one(client, operation_name, api_params, failing_call=failing_call):
            nonlocal calls
            calls += 1
            if calls != failing_call:
                return original(client, operation_name, api_params)
            if lost:
                original(client, operation_name, api_params)
                raise ReadTimeoutError(endpoint_url="http://aws")
            raise client_error("ProvisionedThroughputExceededException", 400, operation_name)

        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", fail_one)
        got_status, got_headers, body = invoke(handlers["append"], "POST", f"/v1/segments/{segment}", block, **headers)
        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", original)
        if calls < failing_call:  # the append made fewer calls: every step has failed once
            assert got_status == 200, body
            break
        assert (got_status, body["code"], got_headers["retry-after"]) == (status, code, "1"), body
        got_status, _, body = invoke(handlers["append"], "POST", f"/v1/segments/{segment}", block, **headers)
        assert got_status == 200, body
        assert store.read(segment, 0).data == block, f"AWS call {failing_call} failed"
    else:
        pytest.fail("an append made more than 29 AWS calls")
    assert failing_call > 3  # the loop really failed every step: read, claim, commit (and the S3 put)
