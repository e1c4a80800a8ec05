"""Caller input that forms a DynamoDB key is bounded to what DynamoDB accepts: a typed 400, never a 500.

DynamoDB refuses a partition key over 2,048 bytes and a sort key over 1,024 (ValidationException, which
the handlers answer as a 500). The keys that carry caller input whole: a principal's listing entry
(``principal#<principal>``), and the metadata keys a scope, stream or reader-group name forms. moto
refuses oversized keys on writes but not on reads, so the handler test below makes every request
refuse them as DynamoDB does.
"""

from __future__ import annotations

import json
import re

import botocore.client
import pytest
from botocore.exceptions import ClientError
from lambda_events import handler_modules, invoke

from controlplane.grant_models import MAX_PRINCIPAL_BYTES
from controlplane.grants import GrantStore
from rillet.errors import InvalidArgument
from rillet.grants import Grant, Permission

LIMITS = {"pk": 2048, "sk": 1024}


def principal_of(size: int) -> str:
    """A principal the API's pattern accepts, of exactly ``size`` characters."""
    tail = ":iam::123456789012:user/u"
    return "arn:aws" + "a" * (size - len(tail) - len("arn:aws")) + tail


def _keys(operation: str, params: dict) -> list[dict]:
    """The key attributes a DynamoDB request names (items, keys, a query's key condition values)."""
    if operation in ("GetItem", "DeleteItem", "UpdateItem"):
        return [params["Key"]]
    if operation == "PutItem":
        return [params["Item"]]
    if operation == "TransactWriteItems":
        return [action.get("Key") or action.get("Item") for item in params["TransactItems"] for action in item.values()]
    if operation == "BatchGetItem":
        return [key for table in params["RequestItems"].values() for key in table["Keys"]]
    if operation == "Query":
        names, values = params.get("ExpressionAttributeNames", {}), params.get("ExpressionAttributeValues", {})
        bound = re.findall(r"(#\w+) (?:=|<=|>=|<|>) (:\w+)|begins_with \((#\w+), (:\w+)\)",
                           params["KeyConditionExpression"])
        return [{names[n or m]: values[v or w]} for n, v, m, w in bound]
    return []


def oversized(operation: str, params: dict) -> str | None:
    for key in _keys(operation, params):
        for name, limit in LIMITS.items():
            value = key.get(name, {}).get("S")
            if value is not None and len(value.encode()) > limit:
                return f"One or more parameter values were invalid: the {name} exceeds {limit} bytes"
    return None


@pytest.fixture
def strict_key_sizes(monkeypatch):
    """DynamoDB's key size limits on every request (moto checks only writes); yields what it refused."""
    real = botocore.client.BaseClient._make_api_call
    refused = []

    def call(client, operation_name, api_params):
        reason = oversized(operation_name, api_params)
        if reason:
            refused.append(f"{operation_name}: {reason}")
            raise ClientError({"Error": {"Code": "ValidationException", "Message": reason},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, operation_name)
        return real(client, operation_name, api_params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", call)
    return refused


def test_a_principal_too_long_for_its_keys_is_invalid_argument(isolated_deployment):
    """Schemathesis found it: a principal of about 1 KB (within the model's 1,024 characters) made the
    principal's listing key 1,034 bytes, and adding the grant answered 500."""
    store = GrantStore(isolated_deployment("grant-keys"))
    admin = Grant(principal=principal_of(MAX_PRINCIPAL_BYTES), resource="prn::/", permission=Permission.READ_UPDATE)
    assert store.add(admin) is True  # the longest accepted principal is stored
    for size in (MAX_PRINCIPAL_BYTES + 1, 1024):
        with pytest.raises(InvalidArgument, match="principal"):  # the request model says so first
            Grant(principal=principal_of(size), resource="prn::/", permission=Permission.READ_UPDATE)
        grant = Grant.model_construct(principal=principal_of(size), resource="prn::/",
                                      permission=Permission.READ_UPDATE)
        with pytest.raises(InvalidArgument, match="principal"):
            store.add(grant)
        with pytest.raises(InvalidArgument, match="principal"):
            store.remove(grant)
    assert store.grant_count() == 1
    assert store.remove(admin) is True


@pytest.fixture
def controller_handler(deployment, monkeypatch):
    return handler_modules(deployment, monkeypatch)["controller_api"]


LONG = "n" * 1100
# Each route shape of the control API that names a scope, stream or reader group, with one name too long.
TARGETS = [
    f"/v1/scopes/{LONG}",
    f"/v1/scopes/{'s' * 2100}/streams",
    f"/v1/scopes/s/streams/{LONG}",
    f"/v1/scopes/{LONG}/streams/t",
    f"/v1/scopes/s/streams/{LONG}/head",
    f"/v1/scopes/s/streams/{LONG}/segments",
    f"/v1/scopes/s/streams/{LONG}/transactions",
    f"/v1/scopes/s/streams/{LONG}/transactions/{'a' * 32}",
    f"/v1/scopes/s/streams/{LONG}/retention",
    f"/v1/scopes/s/streams/{LONG}/rates",
    f"/v1/scopes/{LONG}/reader-groups",
    f"/v1/scopes/s/reader-groups/{LONG}",
    f"/v1/scopes/s/reader-groups/{LONG}/readers",
    f"/v1/scopes/{LONG}/key-value-tables",
]


def test_names_too_long_for_a_key_are_typed_400s(controller_handler, strict_key_sizes):
    wrong = []
    for target in TARGETS:
        for method in ("GET", "DELETE"):
            status, _, body = invoke(controller_handler, method, target)
            if status == 404 and body.get("code") == "NotFound":
                continue  # no such route with this method
            if (status, body.get("code")) != (400, "InvalidArgument"):
                wrong.append(f"{method} {target[:60]}...: {status} {body}")
    assert wrong == []
    assert strict_key_sizes == []  # refused before any request


def test_a_grant_whose_principal_is_too_long_for_its_keys_is_a_400(controller_handler, strict_key_sizes):
    body = {"principal": principal_of(1020), "resource": "prn::/", "permission": "READ_UPDATE"}
    status, _, answer = invoke(controller_handler, "POST", "/v1/grants", json.dumps(body).encode(),
                               **{"content-type": "application/json"})
    assert (status, answer["code"]) == (400, "InvalidArgument"), answer
    query = {"principal": principal_of(1020), "resource": "prn::/", "permission": "READ_UPDATE"}
    for method in ("GET", "DELETE"):
        status, _, answer = invoke(controller_handler, method, "/v1/grants", query=query)
        assert (status, answer["code"]) == (400, "InvalidArgument"), (method, answer)
    assert strict_key_sizes == []
