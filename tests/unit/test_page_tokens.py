"""Page tokens: a crafted token is InvalidArgument 400, never a DynamoDB ValidationException (a 500).

A listing's next_token is the base64 JSON of the query's LastEvaluatedKey, and the next request hands
it back as ExclusiveStartKey. DynamoDB refuses a start key that is not exactly the table's key, has
another type, names another partition than the query's or lies outside its sort key condition; moto
accepts most of them, so the handler tests below make every query refuse them as DynamoDB does.
"""

from __future__ import annotations

import base64
import json
import re
import uuid

import botocore.client
import pytest
from botocore.exceptions import ClientError
from lambda_events import handler_modules, invoke

from controlplane.grant_models import GRANTS_PK
from controlplane.grants import PRINCIPALS_PREFIX
from controlplane.models import SCOPES_PK, reader_groups_pk, scope_pk, stream_pk
from controlplane.store import _decode_token, _encode_token
from rillet.errors import InvalidArgument


def token_of(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


def key(pk: str, sk: str) -> dict:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def crafted(partition: str) -> dict[str, object]:
    """Tokens no listing of ``partition`` hands out."""
    return {
        "another partition": key("scope#elsewhere", "principal#x"),
        "an extra attribute": {**key(partition, "principal#x"), "state": {"S": "ACTIVE"}},
        "no sort key": {"pk": {"S": partition}},
        "a number key": {"pk": {"S": partition}, "sk": {"N": "1"}},
        "a bare string": {"pk": partition, "sk": "principal#x"},
        "two types": {"pk": {"S": partition}, "sk": {"S": "principal#x", "N": "1"}},
        "a null": {"pk": {"S": partition}, "sk": {"S": None}},
        "an empty sort key": key(partition, ""),
        "a sort key too long": key(partition, "principal#" + "x" * 1015),
        "a lone surrogate": key(partition, "principal#\ud800"),
        "a list": [partition, "principal#x"],
        "a string": "principal#x",
    }


@pytest.mark.parametrize("name", sorted(crafted(SCOPES_PK)))
def test_a_crafted_token_is_invalid_argument(name):
    with pytest.raises(InvalidArgument, match="malformed page token"):
        _decode_token(token_of(crafted(SCOPES_PK)[name]), SCOPES_PK)


@pytest.mark.parametrize("token", ["%%%", "bm90IGpzb24=", base64.urlsafe_b64encode(b"\xff\xfe").decode()])
def test_a_token_that_is_not_base64_json_is_invalid_argument(token):
    with pytest.raises(InvalidArgument, match="malformed page token"):
        _decode_token(token, SCOPES_PK)


def test_a_sort_key_outside_the_query_prefix_is_invalid_argument():
    with pytest.raises(InvalidArgument):
        _decode_token(token_of(key(GRANTS_PK, "summary")), GRANTS_PK, PRINCIPALS_PREFIX)
    assert _decode_token(token_of(key(GRANTS_PK, "principal#a")), GRANTS_PK, PRINCIPALS_PREFIX) == key(
        GRANTS_PK, "principal#a")


def test_the_tokens_a_listing_hands_out_decode_to_its_key():
    for start in (key(SCOPES_PK, "a.b-c"), key(scope_pk("s"), "x" * 1024), key(GRANTS_PK, "principal#arn:aws:iam::1")):
        assert _decode_token(_encode_token(start), start["pk"]["S"]) == start
    assert _decode_token(None, SCOPES_PK) is None and _decode_token("", SCOPES_PK) is None
    # without a partition (callers not yet naming theirs) the shape is still checked
    assert _decode_token(token_of(key("rgs#s", "g")))["sk"] == {"S": "g"}
    with pytest.raises(InvalidArgument):
        _decode_token(token_of({**key("rgs#s", "g"), "x": {"S": "y"}}))


# -- through the handlers, against a metadata table that checks start keys as DynamoDB does --------


def _strict_start_key(api_params: dict) -> str | None:
    """Why DynamoDB would refuse this query's ExclusiveStartKey (None if it would not)."""
    start = api_params.get("ExclusiveStartKey")
    if start is None:
        return None
    names, values = api_params.get("ExpressionAttributeNames", {}), api_params.get("ExpressionAttributeValues", {})
    condition = api_params["KeyConditionExpression"]
    if set(start) != {"pk", "sk"} or any(set(v) != {"S"} or not v["S"] for v in start.values()):
        return "The provided starting key is invalid: The provided key element does not match the schema"
    for name, value in re.findall(r"(#\w+) = (:\w+)", condition):
        if names[name] == "pk" and values[value] != start["pk"]:
            return "The provided starting key is invalid: Exclusive Start Key must have same hash key"
    for name, value in re.findall(r"begins_with \((#\w+), (:\w+)\)", condition):
        if names[name] == "sk" and not start["sk"]["S"].startswith(values[value]["S"]):
            return "The provided starting key is outside query boundaries based on provided conditions"
    return None


@pytest.fixture
def strict_dynamodb(monkeypatch):
    real = botocore.client.BaseClient._make_api_call
    refused = []

    def call(client, operation_name, api_params):
        reason = _strict_start_key(api_params) if operation_name == "Query" else None
        if reason:
            refused.append(reason)
            raise ClientError({"Error": {"Code": "ValidationException", "Message": reason},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, operation_name)
        return real(client, operation_name, api_params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", call)
    return refused


@pytest.fixture
def controller_handler(deployment, monkeypatch):
    return handler_modules(deployment, monkeypatch)["controller_api"]


@pytest.fixture
def scope_with_streams(controller_handler):
    scope = "p" + uuid.uuid4().hex[:10]
    assert invoke(controller_handler, "POST", "/v1/scopes", json.dumps({"scope": scope}).encode(),
                  **{"content-type": "application/json"})[0] == 200
    for stream in ("a", "b", "c"):
        assert invoke(controller_handler, "POST", f"/v1/scopes/{scope}/streams",
                      json.dumps({"stream": stream, "configuration": {}}).encode(),
                      **{"content-type": "application/json"})[0] == 200
    return scope


def _listings(scope: str) -> list[tuple[str, str]]:
    """(path, the partition it queries) of the listings whose tokens the store decodes."""
    return [("/v1/scopes", SCOPES_PK), (f"/v1/scopes/{scope}/streams", scope_pk(scope)),
            ("/v1/grants/principals", GRANTS_PK), (f"/v1/scopes/{scope}/reader-groups", reader_groups_pk(scope)),
            (f"/v1/scopes/{scope}/streams/a/transactions", stream_pk(scope, "a"))]


def test_the_strict_table_refuses_what_dynamodb_refuses():
    """The check the handler tests rely on: it refuses each kind of crafted key, and no genuine one."""
    query = {"KeyConditionExpression": "#0 = :0 AND begins_with (#1, :1)",
             "ExpressionAttributeNames": {"#0": "pk", "#1": "sk"},
             "ExpressionAttributeValues": {":0": {"S": GRANTS_PK}, ":1": {"S": PRINCIPALS_PREFIX}}}
    assert _strict_start_key({**query, "ExclusiveStartKey": key(GRANTS_PK, "principal#a")}) is None
    for start in (key("scopes", "principal#a"), key(GRANTS_PK, "summary"), key(GRANTS_PK, ""),
                  {**key(GRANTS_PK, "principal#a"), "x": {"S": "y"}}, {"pk": {"S": GRANTS_PK}, "sk": {"N": "1"}}):
        assert _strict_start_key({**query, "ExclusiveStartKey": start}) is not None


def test_a_crafted_token_is_a_400_on_every_listing(controller_handler, scope_with_streams, strict_dynamodb):
    wrong = []
    for path, partition in _listings(scope_with_streams):
        for name, value in crafted(partition).items():
            status, _, body = invoke(controller_handler, "GET", path, query={"token": token_of(value)})
            if (status, body["code"]) != (400, "InvalidArgument"):
                wrong.append(f"{path} with {name}: {status} {body}")
    assert wrong == []
    assert strict_dynamodb == []  # refused before any query


def test_a_token_from_another_listing_is_a_400(controller_handler, scope_with_streams, strict_dynamodb):
    """The genuine next_token of one listing, handed to another (or to another scope's)."""
    _, _, page = invoke(controller_handler, "GET", f"/v1/scopes/{scope_with_streams}/streams",
                        query={"limit": "1"})
    assert page["next_token"]
    other = "p" + uuid.uuid4().hex[:10]
    assert invoke(controller_handler, "POST", "/v1/scopes", json.dumps({"scope": other}).encode(),
                  **{"content-type": "application/json"})[0] == 200
    other_scope = f"/v1/scopes/{other}/streams"
    for path in ("/v1/scopes", "/v1/grants/principals", other_scope):
        status, _, body = invoke(controller_handler, "GET", path, query={"token": page["next_token"]})
        assert (status, body["code"]) == (400, "InvalidArgument"), (path, body)
    assert strict_dynamodb == []


def test_genuine_tokens_page_through_a_listing(controller_handler, scope_with_streams, strict_dynamodb):
    streams, token = [], None
    while True:
        query = {"limit": "1", **({"token": token} if token else {})}
        status, _, page = invoke(controller_handler, "GET", f"/v1/scopes/{scope_with_streams}/streams", query=query)
        assert status == 200, page
        streams += [s["stream"] if isinstance(s, dict) else s for s in page["streams"]]
        token = page.get("next_token")
        if not token:
            break
    assert sorted(streams) == ["a", "b", "c"]
    status, _, page = invoke(controller_handler, "GET", "/v1/grants/principals",
                             query={"token": token_of(key(GRANTS_PK, PRINCIPALS_PREFIX + "arn:aws:iam::1"))})
    assert status == 200, page
    assert strict_dynamodb == []


def test_a_principals_token_is_at_most_2048_characters(controller_handler):
    """Long enough for the token of any principal's key, short enough to bound what is decoded."""
    longest = _encode_token(key(GRANTS_PK, PRINCIPALS_PREFIX + "a" * (1024 - len(PRINCIPALS_PREFIX))))
    assert len(longest) <= 2048
    padded = json.dumps(key(GRANTS_PK, PRINCIPALS_PREFIX + "a")) + " " * 1600  # a well-formed key, padded
    assert _decode_token(base64.urlsafe_b64encode(padded.encode()).decode(), GRANTS_PK, PRINCIPALS_PREFIX)
    status, _, body = invoke(controller_handler, "GET", "/v1/grants/principals",
                             query={"token": base64.urlsafe_b64encode(padded.encode()).decode()})
    assert (status, body["code"]) == (400, "InvalidArgument")
