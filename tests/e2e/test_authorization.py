"""Authorization over HTTP: identities × operations × resources against a standalone stack that
simulates IAM identities (x-rillet-identity), with the grant cache off so every change applies at once.

A producer role may only write one stream, a consumer role may only read it (through its reader
group), an admin may do everything, a stranger and an unsigned caller nothing; without grants the
deployment is open.
"""

from __future__ import annotations

import json
import uuid

import pytest
import urllib3

from rillet import api
from rillet.errors import AccessDenied, IllegalState, InvalidArgument
from rillet.framing import frame
from rillet.grants import GrantsClient
from rillet.transport import Transport
from standalone.gateway import IDENTITY_HEADER, FunctionSpec, FunctionUrl, InvocationMeter
from standalone.stack import Stack, StackConfig

ACCOUNT = "111122223333"
ADMIN = f"arn:aws:iam::{ACCOUNT}:role/Admin"
PRODUCER = f"arn:aws:iam::{ACCOUNT}:role/Producer"
CONSUMER = f"arn:aws:iam::{ACCOUNT}:role/Consumer"
# Callers come as assumed-role sessions; grants name the roles.
PRODUCER_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/Producer/i-0123456789"
CONSUMER_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/Consumer/botocore-session-17"
ADMIN_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/Admin/alice"
STRANGER = f"arn:aws:iam::{ACCOUNT}:user/mallory"
ANONYMOUS = None
# Key-value table callers: a reader and a writer of one table, and a writer of its scope (not an admin).
KV_READER = f"arn:aws:iam::{ACCOUNT}:role/KvReader"
KV_WRITER = f"arn:aws:iam::{ACCOUNT}:role/KvWriter"
SCOPE_WRITER = f"arn:aws:iam::{ACCOUNT}:role/ScopeWriter"
KV_READER_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/KvReader/r"
KV_WRITER_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/KvWriter/w"
SCOPE_WRITER_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/ScopeWriter/s"

http = urllib3.PoolManager(retries=False, timeout=30)


@pytest.fixture(scope="module")
def auth_stack():
    config = StackConfig.ephemeral(RILLET_GRANTS_CACHE_S="0")
    config.simulate_identities = True
    config.workers = {"controller": 1, "append": 1, "read": 1, "tails": 1}
    with Stack(config) as running:
        yield running


def call(stack, function, method, path, identity, body=None, headers=None, raw=None):
    sent = dict(headers or {})
    if identity:
        sent[IDENTITY_HEADER] = identity
    data = raw
    if body is not None:
        data, sent["content-type"] = json.dumps(body).encode(), "application/json"
    response = http.request(method, stack.functions[function].url + path, body=data, headers=sent)
    return response


def status(stack, function, method, path, identity, **kwargs) -> int:
    return call(stack, function, method, path, identity, **kwargs).status


class AsIdentity(Transport):
    """The SDK's transport, speaking as a simulated identity."""

    def __init__(self, endpoint: str, identity: str) -> None:
        super().__init__(endpoint, sign=False)
        self.identity = identity

    def _send(self, method, url, body, headers, timeout_s):
        return super()._send(method, url, body, {**headers, IDENTITY_HEADER: self.identity}, timeout_s)


def grants_client(stack, identity: str) -> GrantsClient:
    return GrantsClient(AsIdentity(stack.controller_url, identity))


def append_block(stack, scope, stream, identity, writer=None):
    headers = {api.WRITER_ID: writer or uuid.uuid4().hex, api.EVENT_NUMBER: "0", api.EVENT_COUNT: "1",
               "content-type": "application/octet-stream"}
    return call(stack, "append", "POST", f"/v1/segments/{scope}/{stream}/0", identity, headers=headers,
                raw=frame(b"event"))


@pytest.fixture
def world(auth_stack):
    """A scope with streams ``orders`` and ``audit`` and a group ``billing`` made while the deployment
    is open, then grants: an admin, a producer of orders, a consumer of orders through billing. The
    grants are removed afterwards (the admin's last), so the deployment is open again."""
    scope = "s" + uuid.uuid4().hex[:10]
    for path, body in (("/v1/scopes", {"scope": scope}),
                       (f"/v1/scopes/{scope}/streams", {"stream": "orders", "configuration": {}}),
                       (f"/v1/scopes/{scope}/streams", {"stream": "audit", "configuration": {}}),
                       (f"/v1/scopes/{scope}/reader-groups",
                        {"group": "billing", "config": {"streams": [{"scope": scope, "stream": "orders"}]}})):
        assert status(auth_stack, "controller", "POST", path, ANONYMOUS, body=body) == 200
    assert append_block(auth_stack, scope, "orders", ANONYMOUS).status == 200
    yield from _granted(auth_stack, scope, [(PRODUCER, f"prn::/scope:{scope}/stream:orders", "READ_UPDATE"),
                                            (CONSUMER, f"prn::/scope:{scope}/stream:orders", "READ"),
                                            (CONSUMER, f"prn::/scope:{scope}/reader-group:billing", "READ")])


def _granted(auth_stack, scope: str, grants: list[tuple[str, str, str]]):
    """Add an admin and ``grants``, yield ``scope``, then remove them all (the admin's last), so the
    deployment is open again for the next test."""
    admin = grants_client(auth_stack, ADMIN_SESSION)
    granted = [(ADMIN, "prn::*", "READ_UPDATE"), *grants]
    for grant in granted:
        assert admin.add(*grant)
    yield scope
    for grant in reversed(granted):
        admin.remove(*grant)
    assert list(admin.principals()) == []


def test_without_grants_everything_is_open(auth_stack):
    scope = "s" + uuid.uuid4().hex[:10]
    assert status(auth_stack, "controller", "POST", "/v1/scopes", ANONYMOUS, body={"scope": scope}) == 200
    assert status(auth_stack, "controller", "POST", f"/v1/scopes/{scope}/streams", STRANGER,
                  body={"stream": "x", "configuration": {}}) == 200
    assert append_block(auth_stack, scope, "x", STRANGER).status == 200
    assert status(auth_stack, "read", "GET", f"/v1/segments/{scope}/x/0", ANONYMOUS) == 200


def _matrix(scope):
    """(function, method, path, body, headers, expected status per identity)."""
    stream, audit, group = (f"/v1/scopes/{scope}/streams/orders", f"/v1/scopes/{scope}/streams/audit",
                            f"/v1/scopes/{scope}/reader-groups/billing")
    ids = (ADMIN_SESSION, PRODUCER_SESSION, CONSUMER_SESSION, STRANGER, ANONYMOUS)
    rows = [
        # function, method, path, body: admin, producer, consumer, stranger, anonymous
        ("read", "GET", f"/v1/segments/{scope}/orders/0", None, (200, 200, 200, 403, 403)),
        ("read", "GET", f"/v1/segments/{scope}/audit/0", None, (200, 403, 403, 403, 403)),
        ("read", "GET", f"/v1/segments/{scope}/orders/0/info", None, (200, 200, 200, 403, 403)),
        ("controller", "GET", stream, None, (200, 200, 200, 403, 403)),
        ("controller", "GET", audit, None, (200, 403, 403, 403, 403)),
        ("controller", "GET", stream + "/head", None, (200, 200, 200, 403, 403)),
        ("controller", "POST", stream + "/transactions", {"lease_ms": 30000}, (200, 200, 403, 403, 403)),
        ("controller", "POST", stream + "/writers/w1/mark",
         {"timestamp_ms": 1, "position": [{"segment_id": 0, "offset": 0}]}, (200, 200, 403, 403, 403)),
        ("controller", "GET", f"/v1/scopes/{scope}/streams", None, (200, 403, 403, 403, 403)),
        ("controller", "GET", f"/v1/scopes/{scope}", None, (200, 403, 403, 403, 403)),
        ("controller", "POST", f"/v1/scopes/{scope}/streams", {"stream": "more", "configuration": {}},
         (200, 403, 403, 403, 403)),
        ("controller", "GET", "/v1/scopes", None, (200, 403, 403, 403, 403)),
        ("controller", "GET", "/v1/endpoints", None, (200, 200, 200, 200, 200)),
        ("controller", "POST", group + "/readers/r1", {}, (200, 403, 200, 403, 403)),
        ("controller", "GET", group, None, (200, 403, 200, 403, 403)),
        ("controller", "PUT", group + "/config", {"streams": [{"scope": scope, "stream": "orders"}]},
         (200, 403, 403, 403, 403)),
        ("controller", "POST", f"/v1/scopes/{scope}/reader-groups",
         {"group": "other", "config": {"streams": [{"scope": scope, "stream": "audit"}]}}, (200, 403, 403, 403, 403)),
        ("controller", "GET", f"/v1/grants?principal={PRODUCER}", None, (200, 403, 403, 403, 403)),
    ]
    return ids, rows


def test_allow_deny_matrix(auth_stack, world):
    ids, rows = _matrix(world)
    failures = []
    for function, method, path, body, expected in rows:
        for identity, want in zip(ids, expected, strict=True):
            got = status(auth_stack, function, method, path, identity, body=body)
            if got != want:
                failures.append(f"{identity} {method} {path}: {got}, expected {want}")
    assert failures == []


def test_appends_only_by_writers_of_the_stream(auth_stack, world):
    assert append_block(auth_stack, world, "orders", PRODUCER_SESSION).status == 200
    assert append_block(auth_stack, world, "orders", ADMIN_SESSION).status == 200
    for identity in (CONSUMER_SESSION, STRANGER, ANONYMOUS):
        assert append_block(auth_stack, world, "orders", identity).status == 403
    assert append_block(auth_stack, world, "audit", PRODUCER_SESSION).status == 403


def test_denial_is_typed_and_names_the_missing_permission(auth_stack, world):
    response = call(auth_stack, "append", "POST", f"/v1/segments/{world}/orders/0", CONSUMER_SESSION,
                    headers={api.WRITER_ID: "w", api.EVENT_NUMBER: "0", api.EVENT_COUNT: "1",
                             "content-type": "application/octet-stream"}, raw=frame(b"x"))
    body = json.loads(response.data)
    assert response.status == 403
    assert body["code"] == "AccessDenied"
    assert body["details"] == {"permission": "READ_UPDATE", "resource": f"prn::/scope:{world}/stream:orders"}
    assert CONSUMER in body["message"]  # the session is named as its role, the principal grants name


def test_existence_is_not_leaked(auth_stack, world):
    """A caller without READ gets the same answer for a stream that exists and one that does not."""
    for identity in (STRANGER, PRODUCER_SESSION):
        answers = []
        for stream in ("audit", "ghost"):
            for function, path in (("controller", f"/v1/scopes/{world}/streams/{stream}"),
                                   ("read", f"/v1/segments/{world}/{stream}/0")):
                response = call(auth_stack, function, "GET", path, identity)
                body = json.loads(response.data)
                answers.append((function, response.status, body["code"],
                                body["message"].replace(stream, "STREAM")))
        assert answers[:2] == answers[2:]
        assert {a[1] for a in answers} == {403}
    # the scope, likewise
    missing = "s" + uuid.uuid4().hex[:10]
    assert status(auth_stack, "controller", "GET", f"/v1/scopes/{missing}", STRANGER) == 403
    assert status(auth_stack, "controller", "GET", f"/v1/scopes/{world}", STRANGER) == 403
    # someone who may read gets the truth
    assert status(auth_stack, "controller", "GET", f"/v1/scopes/{world}/streams/ghost", ADMIN_SESSION) == 404


KV_CONFIG = {"partition_count": 2, "primary_key_length": 4}
KEY = {"primary": "YWJjZA=="}  # b"abcd"


@pytest.fixture
def kvt_world(auth_stack):
    """A scope with key-value tables ``kv`` (holding one entry) and ``hidden`` made while the deployment
    is open, then grants: an admin, READ and READ_UPDATE on ``kv``, READ_UPDATE on the scope. The grants
    are removed afterwards (the admin's last)."""
    scope = "s" + uuid.uuid4().hex[:10]
    tables = f"/v1/scopes/{scope}/key-value-tables"
    for path, body in (("/v1/scopes", {"scope": scope}),
                       (tables, {"table": "kv", "configuration": KV_CONFIG}),
                       (tables, {"table": "hidden", "configuration": KV_CONFIG}),
                       (f"{tables}/kv/entries/update", {"updates": [{"type": "put", "key": KEY, "value": "eA=="}]})):
        assert status(auth_stack, "controller", "POST", path, ANONYMOUS, body=body) == 200
    yield from _granted(auth_stack, scope, [(KV_READER, f"prn::/scope:{scope}/key-value-table:kv", "READ"),
                                            (KV_WRITER, f"prn::/scope:{scope}/key-value-table:kv", "READ_UPDATE"),
                                            (SCOPE_WRITER, f"prn::/scope:{scope}", "READ_UPDATE")])


def _table_operations(scope: str, table: str) -> list[tuple[str, str, dict | None]]:
    """(method, path, body) of every operation on one table, in an order that leaves each one possible."""
    path = f"/v1/scopes/{scope}/key-value-tables/{table}"
    return [("GET", path, None),
            ("POST", path + "/entries/get", {"keys": [KEY]}),
            ("POST", path + "/entries/iterate", {}),
            ("POST", path + "/entries/update", {"updates": [{"type": "put", "key": KEY, "value": "eQ=="}]}),
            ("POST", path + "/seal", None),
            ("DELETE", path, None)]


def test_key_value_table_allow_deny_matrix(auth_stack, kvt_world):
    ids = (ADMIN_SESSION, KV_READER_SESSION, KV_WRITER_SESSION, SCOPE_WRITER_SESSION, STRANGER, ANONYMOUS)
    tables = f"/v1/scopes/{kvt_world}/key-value-tables"
    get, entries, iterate, update, seal, delete = _table_operations(kvt_world, "kv")
    rows = [
        # method, path, body: admin, table reader, table writer, scope writer, stranger, anonymous
        ("GET", tables, None, (200, 403, 403, 200, 403, 403)),  # listing reads the scope
        ("POST", tables, {"table": "more", "configuration": KV_CONFIG}, (200, 403, 403, 200, 403, 403)),
        (*get, (200, 200, 200, 403, 403, 403)),  # a scope grant is no grant on the scope's tables
        (*entries, (200, 200, 200, 403, 403, 403)),
        (*iterate, (200, 200, 200, 403, 403, 403)),
        (*update, (200, 403, 200, 403, 403, 403)),
        (*seal, (200, 403, 200, 403, 403, 403)),
        (*delete, (200, 403, 200, 403, 403, 403)),
    ]
    failures = []
    for method, path, body, expected in rows:
        for identity, want in zip(ids, expected, strict=True):
            got = status(auth_stack, "controller", method, path, identity, body=body)
            if got != want:
                failures.append(f"{identity} {method} {path}: {got}, expected {want}")
    assert failures == []
    # the writers did what they were allowed to: the table was sealed, then deleted
    assert status(auth_stack, "controller", "GET", tables + "/kv", ADMIN_SESSION) == 404


def test_a_key_value_table_denial_does_not_leak_its_existence(auth_stack, kvt_world):
    """A caller without a grant on a table gets the same answer to every operation whether it exists
    (``hidden``) or not (``ghost``): the same status, code, message and details."""
    def answers(identity, table):
        seen = []
        for method, path, body in _table_operations(kvt_world, table):
            response = call(auth_stack, "controller", method, path, identity, body=body)
            seen.append((method, path.replace(table, "TABLE"), response.status,
                         response.data.decode().replace(table, "TABLE")))
        return seen

    for identity in (KV_READER_SESSION, KV_WRITER_SESSION, SCOPE_WRITER_SESSION, STRANGER, ANONYMOUS):
        hidden, ghost = answers(identity, "hidden"), answers(identity, "ghost")
        assert hidden == ghost, identity
        assert {a[2] for a in hidden} == {403}
        assert all(json.loads(a[3])["code"] == "AccessDenied" for a in hidden)
    # someone who may read gets the truth
    assert status(auth_stack, "controller", "GET", f"/v1/scopes/{kvt_world}/key-value-tables/ghost",
                  ADMIN_SESSION) == 404
    assert status(auth_stack, "controller", "GET", f"/v1/scopes/{kvt_world}/key-value-tables/hidden",
                  ADMIN_SESSION) == 200


def test_grant_and_revoke_through_the_api(auth_stack, world):
    admin = grants_client(auth_stack, ADMIN_SESSION)
    audit = f"/v1/scopes/{world}/streams/audit"
    assert status(auth_stack, "controller", "GET", audit, CONSUMER_SESSION) == 403
    assert admin.add(CONSUMER_SESSION, f"prn::/scope:{world}/stream:aud*", "READ")  # stored as the role
    assert admin.add(CONSUMER, f"prn::/scope:{world}/stream:aud*", "READ") is False  # idempotent
    assert status(auth_stack, "controller", "GET", audit, CONSUMER_SESSION) == 200
    assert status(auth_stack, "read", "GET", f"/v1/segments/{world}/audit/0", CONSUMER_SESSION) == 200
    assert append_block(auth_stack, world, "audit", CONSUMER_SESSION).status == 403  # READ only
    assert {(g.resource, g.permission) for g in admin.of(CONSUMER)} >= {(f"prn::/scope:{world}/stream:aud*", "READ")}
    assert {p.principal: p.grants for p in admin.principals()}[CONSUMER] == 3
    assert admin.remove(CONSUMER, f"prn::/scope:{world}/stream:aud*", "READ")
    assert admin.remove(CONSUMER, f"prn::/scope:{world}/stream:aud*", "READ") is False
    assert status(auth_stack, "controller", "GET", audit, CONSUMER_SESSION) == 403


def test_only_admins_manage_grants(auth_stack, world):
    with pytest.raises(AccessDenied) as denied:
        grants_client(auth_stack, PRODUCER_SESSION).add(PRODUCER, "prn::*", "READ_UPDATE")
    assert denied.value.details == {"permission": "READ_UPDATE", "resource": "prn::/"}
    with pytest.raises(AccessDenied):
        list(grants_client(auth_stack, STRANGER).principals())


def test_the_last_admin_grant_goes_only_with_the_last_grant(auth_stack, world):
    with pytest.raises(IllegalState, match="last admin"):
        grants_client(auth_stack, ADMIN_SESSION).remove(ADMIN, "prn::*", "READ_UPDATE")


def test_the_first_grant_must_make_an_admin(auth_stack):
    with pytest.raises(IllegalState, match="first grant"):
        grants_client(auth_stack, ADMIN_SESSION).add(PRODUCER, "prn::/scope:x/stream:y", "READ_UPDATE")
    assert status(auth_stack, "controller", "POST", "/v1/scopes", ANONYMOUS,
                  body={"scope": "s" + uuid.uuid4().hex[:10]}) == 200  # still open


def test_a_principal_has_at_most_100_grants(auth_stack, world):
    admin = grants_client(auth_stack, ADMIN_SESSION)
    extra = [f"prn::/scope:{world}/stream:s{i}" for i in range(98)]  # the consumer has 2 already
    for resource in extra:
        admin.add(CONSUMER, resource, "READ")
    try:
        with pytest.raises(IllegalState, match="100 grants"):
            admin.add(CONSUMER, f"prn::/scope:{world}/stream:one-too-many", "READ")
        assert len(admin.of(CONSUMER)) == 100
    finally:
        for resource in extra:
            admin.remove(CONSUMER, resource, "READ")


@pytest.mark.parametrize("body", [
    {"principal": "bob", "resource": "prn::*", "permission": "READ"},
    {"principal": ADMIN, "resource": "prn::/scope:a/topic:b", "permission": "READ"},
    {"principal": ADMIN, "resource": "scope:a", "permission": "READ"},
    {"principal": ADMIN, "resource": "prn::*", "permission": "WRITE"},
    {"principal": ADMIN, "resource": "prn::*"},
])
def test_bad_grants_are_invalid_argument(auth_stack, body):
    response = call(auth_stack, "controller", "POST", "/v1/grants", ANONYMOUS, body=body)
    assert response.status == 400, response.data
    assert json.loads(response.data)["code"] == "InvalidArgument"
    with pytest.raises(InvalidArgument):
        grants_client(auth_stack, ADMIN).add(body["principal"], body["resource"], body.get("permission", ""))


def echo_context(event, context):
    """A handler that answers with what it was given: the identity, and whether the header reached it."""
    return {"statusCode": 200, "headers": {"content-type": "application/json"},
            "body": json.dumps({"authorizer": event["requestContext"].get("authorizer"),
                                "header": event["headers"].get(IDENTITY_HEADER)})}


@pytest.mark.parametrize("simulate", [False, True])
def test_the_gateway_maps_the_identity_header_only_when_simulating(simulate):
    function = FunctionUrl(FunctionSpec("echo", f"{__name__}.echo_context", workers=1), {}, InvocationMeter(),
                           simulate_identities=simulate).start()
    try:
        seen = json.loads(http.request("GET", function.url + "/", headers={IDENTITY_HEADER: PRODUCER_SESSION}).data)
    finally:
        function.stop()
    assert seen["header"] is None  # a handler never sees the header
    if simulate:
        assert seen["authorizer"]["iam"]["userArn"] == PRODUCER_SESSION
        assert seen["authorizer"]["iam"]["accountId"] == ACCOUNT
    else:
        assert seen["authorizer"] is None


def test_cli_grant_add_list_remove(auth_stack, capsys):
    from rillet.cli import main

    endpoint = ["--endpoint", auth_stack.controller_url]
    assert main([*endpoint, "grant", "list"]) == 0
    assert "authorization is off" in capsys.readouterr().out
    assert main([*endpoint, "grant", "add", ADMIN, "prn::*", "READ_UPDATE"]) == 0
    assert capsys.readouterr().out.strip() == f"granted READ_UPDATE on prn::* to {ADMIN}"
    try:
        # the CLI signs nothing here, so from now on it is an unauthenticated caller
        assert main([*endpoint, "grant", "list"]) == 1
        assert capsys.readouterr().err.strip() == ("error: AccessDenied: an unauthenticated caller lacks "
                                                   "READ_UPDATE on prn::/")
        assert [p.principal for p in grants_client(auth_stack, ADMIN).principals()] == [ADMIN]
    finally:
        assert grants_client(auth_stack, ADMIN).remove(ADMIN, "prn::*", "READ_UPDATE")
    assert main([*endpoint, "--json", "grant", "list", PRODUCER_SESSION]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main([*endpoint, "grant", "add", "bob", "prn::*", "READ"]) == 2  # invalid input
    assert capsys.readouterr().err.startswith("error: InvalidArgument: invalid Grant: principal")
    assert main([*endpoint, "grant", "remove", ADMIN, "prn::*", "READ"]) == 0
    assert capsys.readouterr().out.strip() == "there was no such grant"


@pytest.mark.parametrize("query", [
    "principal=bob&resource=prn::*&permission=READ",
    f"principal={ADMIN}&resource=prn::/topic:x&permission=READ",
    f"principal={ADMIN}&resource=prn::*&permission=ALL",
    f"principal={ADMIN}&resource=prn::*",
])
def test_bad_revocations_are_invalid_argument(auth_stack, query):
    response = call(auth_stack, "controller", "DELETE", f"/v1/grants?{query}", ANONYMOUS)
    assert (response.status, json.loads(response.data)["code"]) == (400, "InvalidArgument")
