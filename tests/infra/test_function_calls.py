"""Every AWS call the Lambda functions make is granted to the function's own role (issue 28).

The read function's tails route once made a BatchGetItem its role lacked, and nothing caught it before
AWS did. Here the real handlers of the four functions run in-process on Function URL events (as in
tests/lambda_events.py) against tables of their own on the moto server, signed by an admin so the grant
reads happen too, while every botocore call is recorded (test_job_calls.recorded). Each call becomes the
IAM action and resource kind AWS authorizes it on (test_job_calls._needed) and must be granted by the
policy documents of that function's role in infra/terraform/iam.tf; where a statement limits the
partition keys (``dynamodb:LeadingKeys``), the call's keys must match them. Presigned URLs make no call
and so are not checked. It runs in each mode of call_modes.py (sub-logs by the deployment's default or by
a stream's own choice: issue 53).

The append function's refusal and duplicate paths for a block above the inline size (issue 37) run with
that check enforced as each call is made (``_as_role``): a call the role lacks raises AccessDenied as AWS
would, so the test sees the answer a client would get on AWS (it was 500 instead of 409 SegmentSealed).
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from contextlib import contextmanager
from fnmatch import fnmatchcase
from functools import cache, partial
from types import SimpleNamespace

import botocore.client
import botocore.exceptions
import lambda_events
import pytest
from call_modes import MODES, STREAM_SUBLOGS, Mode, code_environments, environment
from lambda_events import handler_modules, invoke
from tails_handler import tails_module
from test_job_calls import (
    _needed,
    recorded,  # noqa: F401 - the fixture, requested by name below
)
from test_terraform import (
    APPEND,
    CONTROLLER,
    FUNCTIONS,
    READ,
    TAILS,
    TF_DIR,
    _classify,
    as_list,
    function,
    parse_terraform,
    role_of,
    role_policy_documents,
    statements,
)

import lambdas.authorization
from rillet import api
from rillet.framing import frame
from standalone.gateway import build_event
from standalone.resources import bind_all

ADMIN = "arn:aws:iam::123456789012:user/rillet-admin"
JSON = {"content-type": "application/json"}
PARTITION_KEY = "pk"  # of both tables (controlplane/models.py MetadataItem, dataplane/models.py SegmentMeta)


@cache  # parsed once per function: the enforcing recorder below checks every call as it is made
def _grants_of(handler: str) -> dict[tuple[str, str], list[list[str] | None]]:
    """(resource kind, action) -> for each statement granting it, the partition keys it is limited to
    (None: any). test_job_calls._granted reads one named document; this reads a function's role."""
    tf = parse_terraform(TF_DIR)
    name, fn = function(tf, handler)
    granted: dict[tuple[str, str], list[list[str] | None]] = {}
    for _document_name, document in role_policy_documents(tf, role_of(tf, name, fn)):
        for statement in statements(document):
            if statement.get("effect", "Allow") != "Allow":
                continue
            leading_keys = None
            for condition in as_list(statement.get("condition")):
                if condition.get("variable") == "dynamodb:LeadingKeys":
                    assert condition.get("test") == "ForAllValues:StringLike", condition
                    leading_keys = as_list(condition.get("values"))
            for resource in as_list(statement.get("resources")):
                for action in as_list(statement.get("actions")):
                    granted.setdefault((_classify(resource), action), []).append(leading_keys)
    return granted


def _partition_keys(call: tuple[str, str, dict]) -> set[str] | None:
    """The base-table partition keys a DynamoDB call touches; None when it names none (DescribeTable, a
    Scan, a query of an index), which no statement limited by dynamodb:LeadingKeys allows."""
    service, operation, params = call
    if service != "dynamodb":
        return None

    def of(body: dict) -> set[str]:
        item = body.get("Key") or body.get("Item")
        if item is not None:
            return {item[PARTITION_KEY]["S"]}
        if "KeyConditionExpression" in body and "IndexName" not in body:
            names = {v: k for k, v in body.get("ExpressionAttributeNames", {}).items()}
            placeholder = re.escape(names.get(PARTITION_KEY, PARTITION_KEY))
            value = re.search(rf"{placeholder} = (:\w+)", body["KeyConditionExpression"])
            assert value, f"no equality on the partition key in {body['KeyConditionExpression']!r}"
            return {body["ExpressionAttributeValues"][value.group(1)]["S"]}
        return set()

    if operation in ("TransactWriteItems", "TransactGetItems"):
        keys = {k for item in params["TransactItems"] for body in item.values() for k in of(body)}
    elif operation == "BatchGetItem":
        keys = {k[PARTITION_KEY]["S"] for t in params["RequestItems"].values() for k in t["Keys"]}
    elif operation == "BatchWriteItem":
        keys = {k for t in params["RequestItems"].values() for r in t for body in r.values() for k in of(body)}
    else:
        keys = of(params)
    return keys or None


def _missing(handler: str, calls: list[tuple[str, str, dict]], tables: dict[str, str]) -> list[str]:
    granted = _grants_of(handler)
    missing = set()
    for call in calls:
        keys = _partition_keys(call)
        for need in _needed(call, tables):
            allowed = any(limit is None or (keys is not None and all(
                any(fnmatchcase(k, pattern) for pattern in limit) for k in keys))
                for limit in granted.get(need, []))
            if not allowed:
                missing.add(f"{need[1]} on {need[0]}" + (f" (keys {sorted(keys)})" if need in granted else ""))
    return sorted(missing)


def _invoke(module, method: str, target: str, body: bytes = b"", **headers: str) -> tuple[int, dict]:
    """lambda_events.invoke, with a 503 retried after its Retry-After as a client does: an AWS call of
    the handler that got no answer from the moto server (seen once in a loaded full run) is no finding
    about grants. Should a retried create have been applied after all, its conflict fails the test."""
    for _ in range(3):
        status, headers_answered, answer = invoke(module, method, target, body, **headers)
        if status != 503:
            break
        time.sleep(float(headers_answered.get("retry-after", 1)))
    return status, answer


def _read_bytes(module, target: str) -> bytes:
    """A GET of the read route, whose answer is binary (lambda_events.invoke decodes JSON answers)."""
    event = build_event("GET", target, {}, b"", "localhost", "127.0.0.1", identity=ADMIN)
    context = SimpleNamespace(function_name="read", memory_limit_in_mb=512, aws_request_id=str(uuid.uuid4()),
                              invoked_function_arn="arn:aws:lambda:local:000000000000:function:read")
    result = module.handler(event, context)
    assert result["statusCode"] == 200, result
    return base64.b64decode(result["body"]) if result.get("isBase64Encoded") else result["body"].encode()


@pytest.fixture
def mode() -> Mode:
    """The deployment's mode (call_modes.py): the default unless a test is parametrized over MODES."""
    return MODES[0]


@pytest.fixture
def functions(isolated_deployment, deployment, monkeypatch, mode):
    """The four handler modules on tables of their own (the admin grant made here must not turn on
    authorization for other tests), with the environment Terraform gives them in ``mode``, every request
    signed by ADMIN; the session's binding is restored."""
    mine = isolated_deployment("function-calls")
    tf = parse_terraform(TF_DIR)
    settings = {}
    for handler, env in code_environments(tf, FUNCTIONS).items():
        if handler != "dagster":  # one process: the functions' settings must agree, and they do
            settings |= environment(tf, env, mode)
    modules = handler_modules(mine, monkeypatch, settings)
    modules["tails"] = tails_module(mine)
    bind_all(mine)
    monkeypatch.setattr(lambda_events, "build_event", partial(build_event, identity=ADMIN))
    yield mine, modules
    bind_all(deployment)


def _fresh_authorizer(monkeypatch) -> None:
    """Each function instance has its own grant cache; in one process they share one, so drop it."""
    monkeypatch.setattr(lambdas.authorization, "_authorizer", None)


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_each_functions_calls_are_granted_to_its_role(functions, mode, unique, request, monkeypatch):
    """In each mode (call_modes.py): the streams "s" and "gone" leave the choice of sub-logs to the
    deployment; on the default deployment "many" and "many-gone" choose them. The appends, reads, scaling
    and deletion of sub-log segments make calls the chain's never make."""
    mine, modules = functions
    controller, append, read = modules["controller_api"], modules["append"], modules["read"]
    calls = request.getfixturevalue("recorded")
    recorded_by: dict[str, list] = {}

    def post(module, target: str, body: object) -> dict:
        status, answer = _invoke(module, "POST", target, json.dumps(body).encode(), **JSON)
        assert status == 200, (target, status, answer)
        return answer

    def get(module, target: str) -> dict:
        status, answer = _invoke(module, "GET", target)
        assert status == 200, (target, status, answer)
        return answer

    # The controller: a grant (authorization is on from here), a scope and streams, a transaction, a
    # reader group, a scale, a truncation, a seal and a delete.
    _fresh_authorizer(monkeypatch)
    post(controller, "/v1/grants", {"principal": ADMIN, "resource": "prn::*", "permission": "READ_UPDATE"})
    post(controller, "/v1/scopes", {"scope": unique})
    # One segment each: of the deployment's mode, or of sub-logs (dataplane/sublog_path.py) by choice.
    sublogs = mode.value(parse_terraform(TF_DIR), "sublog_shards")
    streams = {"s": {}, "gone": {}}
    if not sublogs:
        streams |= {name: {"configuration": {"sublog_shards": STREAM_SUBLOGS}} for name in ("many", "many-gone")}
    for name, body in streams.items():
        post(controller, f"/v1/scopes/{unique}/streams", {"stream": name, **body})
    stream = f"/v1/scopes/{unique}/streams/s"
    txn = post(controller, f"{stream}/transactions", {})
    post(controller, f"{stream}/transactions/{txn['txn_id']}/commit", {})
    group = {"group": "g", "config": {"streams": [{"scope": unique, "stream": "s"}]}}
    post(controller, f"/v1/scopes/{unique}/reader-groups", group)
    post(controller, f"/v1/scopes/{unique}/reader-groups/g/readers/r", {})
    post(controller, f"/v1/scopes/{unique}/reader-groups/g/readers/r/sync", {})
    get(controller, f"{stream}")
    recorded_by[CONTROLLER] = list(calls)
    calls.clear()

    # The append function: a small block kept inline, and one above the inline size put to S3.
    _fresh_authorizer(monkeypatch)
    segment = f"/v1/segments/{unique}/s/0"
    small, large = frame(b"x" * 10), frame(b"y" * 4096)
    for name in streams:
        for number, block in enumerate((small, large)):
            status, answer = _invoke(append, "POST", f"/v1/segments/{unique}/{name}/0", block, **{
                api.WRITER_ID: "w", api.EVENT_NUMBER: str(number), api.EVENT_COUNT: "1"})
            assert status == 200, answer
            batched = any(op == "TransactWriteItems" for _, op, _ in calls)  # a sub-log batch's commit
            assert batched == (bool(sublogs) or name.startswith("many")), (name, mode.name, "sub-logs", batched)
    assert any(op == "PutObject" for _, op, _ in calls), "the large block was not put to S3"
    recorded_by[APPEND] = list(calls)
    calls.clear()

    # The read function: every route, over both blocks.
    _fresh_authorizer(monkeypatch)
    length = len(small) + len(large)
    for name in streams:
        assert _read_bytes(read, f"/v1/segments/{unique}/{name}/0?offset=0") == small + large
    get(read, f"{segment}/locations?offset=0")
    get(read, f"{segment}/plan?from=0&to={length}")
    assert get(read, f"/v1/segments/{unique}/s/tails?segments=0,1")["tails"][0]["length"] == length
    assert get(read, f"{segment}/info")["length"] == length
    assert any(op == "GetObject" for _, op, _ in calls), "the read of the large block did not reach S3"
    recorded_by[READ] = list(calls)
    calls.clear()

    # The tails function: its one route.
    _fresh_authorizer(monkeypatch)
    assert get(modules["tails"], f"/v1/segments/{unique}/s/tails?segments=0,1")["tails"][0]["length"] == length
    assert any(op == "BatchGetItem" for _, op, _ in calls), "the tail check made no BatchGetItem"
    recorded_by[TAILS] = list(calls)
    calls.clear()

    # The controller again: what changes segments and their objects.
    _fresh_authorizer(monkeypatch)
    post(controller, f"{stream}/truncate", {"positions": [{"segment_id": 0, "offset": length}]})
    post(controller, f"{stream}/scale", {"seal": [0], "new_ranges": [[0.0, 0.5], [0.5, 1.0]]})
    status, answer = _invoke(controller, "DELETE", f"/v1/scopes/{unique}/reader-groups/g")
    assert status == 200, answer
    for gone in (name for name in streams if name.endswith("gone")):
        post(controller, f"/v1/scopes/{unique}/streams/{gone}/seal", {})
        status, answer = _invoke(controller, "DELETE", f"/v1/scopes/{unique}/streams/{gone}")
        assert status == 200, answer
    recorded_by[CONTROLLER] += list(calls)

    tables = {mine.metadata_table: "metadata", mine.segments_table: "segments"}
    missing = {handler: _missing(handler, made, tables) for handler, made in recorded_by.items()}
    assert missing == {CONTROLLER: [], APPEND: [], READ: [], TAILS: []}, f"roles lack what their functions call: {missing}"


@contextmanager
def _as_role(monkeypatch, handler: str, tables: dict[str, str]):
    """Every AWS call made inside is first checked against the role of ``handler``'s function, as AWS
    would: a call the role does not grant raises AccessDenied instead of reaching moto (which enforces
    no IAM here). Yields the calls the role was asked for."""
    made: list[tuple[str, str, dict]] = []
    forward = botocore.client.BaseClient._make_api_call

    def enforce(client, operation_name, api_params):
        call = (client.meta.service_model.service_name, operation_name, dict(api_params))
        made.append(call)
        denied = _missing(handler, [call], tables)
        if denied:
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "AccessDenied", "Message": f"not granted to the role: {denied}"}}, operation_name)
        return forward(client, operation_name, api_params)

    with monkeypatch.context() as patched:
        patched.setattr(botocore.client.BaseClient, "_make_api_call", enforce)
        yield made


def _block_objects(mine, segment: str) -> list[str]:
    listing = mine.s3.list_objects_v2(Bucket=mine.bucket, Prefix=f"segments/{segment}/b/")
    return [o["Key"] for o in listing.get("Contents", [])]


def test_a_refused_or_duplicate_large_block_deletes_its_object_under_the_append_role(functions, unique,
                                                                                     monkeypatch):
    """The append path puts a block above the inline size to S3 before placing it, and deletes that
    object when the block is refused or another request placed it first (dataplane/append_path.py). Run
    under the append role's policy, both answer as they do without IAM: 409 SegmentSealed, and 200."""
    mine, modules = functions
    controller, append = modules["controller_api"], modules["append"]
    tables = {mine.metadata_table: "metadata", mine.segments_table: "segments"}
    _fresh_authorizer(monkeypatch)
    for target, body in (("/v1/grants", {"principal": ADMIN, "resource": "prn::*", "permission": "READ_UPDATE"}),
                         ("/v1/scopes", {"scope": unique}),
                         (f"/v1/scopes/{unique}/streams", {"stream": "open"}),
                         (f"/v1/scopes/{unique}/streams", {"stream": "sealed"})):
        status, answer = _invoke(controller, "POST", target, json.dumps(body).encode(), **JSON)
        assert status == 200, (target, answer)
    status, answer = _invoke(controller, "POST", f"/v1/scopes/{unique}/streams/sealed/seal", b"{}", **JSON)
    assert status == 200, answer
    large = frame(b"z" * 4096)

    def append_large(segment: str, writer: str) -> tuple[int, dict]:
        return _invoke(append, "POST", f"/v1/segments/{unique}/{segment}", large, **{
            api.WRITER_ID: writer, api.EVENT_NUMBER: "0", api.EVENT_COUNT: "1"})

    # Refused: the segment is sealed. The block's object was put, then deleted again.
    _fresh_authorizer(monkeypatch)
    with _as_role(monkeypatch, APPEND, tables) as made:
        status, answer = append_large("sealed/0", "w")
    assert status == 409 and "SegmentSealed" in json.dumps(answer), (status, answer)
    assert [op for _, op, _ in made if op.endswith("Object")] == ["PutObject", "DeleteObject"]
    assert _block_objects(mine, f"{unique}/sealed/0") == []

    # Duplicate: while this request uploads its block, a resend of the same block (writer, event number)
    # is placed by another request; this one then finds it placed and deletes its own object.
    _fresh_authorizer(monkeypatch)
    resent: list = []
    with _as_role(monkeypatch, APPEND, tables) as made:
        enforcing = botocore.client.BaseClient._make_api_call

        def upload_racing_a_resend(client, operation_name, api_params):
            if operation_name == "PutObject" and not resent:
                resent.append(None)  # the resend's own upload goes straight through
                resent[0] = append_large("open/0", "racer")
            return enforcing(client, operation_name, api_params)

        with monkeypatch.context() as racing:
            racing.setattr(botocore.client.BaseClient, "_make_api_call", upload_racing_a_resend)
            status, answer = append_large("open/0", "racer")
    assert resent[0][0] == 200 and not resent[0][1].get("duplicate"), resent
    assert status == 200 and answer.get("duplicate") is True, answer
    assert [op for _, op, _ in made if op.endswith("Object")] == ["PutObject", "PutObject", "DeleteObject"]
    objects = _block_objects(mine, f"{unique}/open/0")
    assert len(objects) == 1, objects  # the placed block's, and only it
