"""Authorization as pure logic: principals, pattern matching, each route's needs, the grant cache."""

from __future__ import annotations

import pytest
from this_thread import patch_in_this_thread

from controlplane import grants as grants_module
from controlplane.grants import Authorizer, Need, allows, is_admin_grant, matches
from lambdas.authorization import required
from rillet.errors import AccessDenied, InvalidArgument
from rillet.grants import Grant, Permission, normalize_principal

READ, READ_UPDATE = Permission.READ, Permission.READ_UPDATE


@pytest.mark.parametrize("arn, principal", [
    ("arn:aws:sts::123456789012:assumed-role/Producer/i-0abc", "arn:aws:iam::123456789012:role/Producer"),
    ("arn:aws-cn:sts::123456789012:assumed-role/R/s@x.com", "arn:aws-cn:iam::123456789012:role/R"),
    ("arn:aws:iam::123456789012:user/alice", "arn:aws:iam::123456789012:user/alice"),
    ("arn:aws:iam::123456789012:root", "arn:aws:iam::123456789012:root"),
    ("arn:aws:sts::123456789012:federated-user/bob", "arn:aws:sts::123456789012:federated-user/bob"),
])
def test_sessions_are_their_roles(arn, principal):
    assert normalize_principal(arn) == principal


@pytest.mark.parametrize("pattern, resource, expected", [
    ("prn::*", "prn::/", True),
    ("prn::*", "prn::/scope:a/stream:b", True),
    ("prn::/scope:a", "prn::/scope:a", True),
    ("prn::/scope:a", "prn::/scope:a/stream:b", False),  # a scope grant is not a grant on its streams
    ("prn::/scope:a/*", "prn::/scope:a/stream:b", True),
    ("prn::/scope:a/*", "prn::/scope:ab/stream:b", False),
    ("prn::/scope:a/stream:orders-*", "prn::/scope:a/stream:orders-eu", True),
    ("prn::/scope:a/stream:orders-*", "prn::/scope:a/reader-group:orders-eu", False),
    ("prn::/scope:a.b/stream:c", "prn::/scope:aXb/stream:c", False),  # . is a character, not "any"
])
def test_patterns(pattern, resource, expected):
    assert matches(pattern, resource) is expected


def test_read_update_includes_read():
    grant = Grant(principal="arn:aws:iam::123456789012:user/a", resource="prn::/scope:s/stream:t", permission="READ_UPDATE")
    reader = grant.model_copy(update={"permission": READ})
    assert allows([grant], Need("prn::/scope:s/stream:t", READ))
    assert not allows([reader], Need("prn::/scope:s/stream:t", READ_UPDATE))
    assert is_admin_grant(grant.model_copy(update={"resource": "prn::*"}))
    assert not is_admin_grant(reader.model_copy(update={"resource": "prn::*"}))


@pytest.mark.parametrize("principal", ["bob", "arn:aws:iam::12345:user/a", "arn:aws:s3:::bucket"])
def test_principals_are_iam_arns(principal):
    with pytest.raises(InvalidArgument):
        Grant(principal=principal, resource="prn::*", permission="READ")


def _body(value):
    return lambda: value


@pytest.mark.parametrize("method, path, args, body, needs", [
    ("POST", "/v1/segments/<scope>/<stream>/<segment>", {"scope": "s", "stream": "t", "segment": "0"}, None,
     [("prn::/scope:s/stream:t", READ_UPDATE)]),
    ("GET", "/v1/segments/<scope>/<stream>/<segment>", {"scope": "s", "stream": "t", "segment": "0"}, None,
     [("prn::/scope:s/stream:t", READ)]),
    ("POST", "/v1/scopes/<scope>/streams/<stream>/truncate", {"scope": "s", "stream": "t"}, None,
     [("prn::/scope:s/stream:t", READ_UPDATE)]),
    ("POST", "/v1/scopes/<scope>/streams", {"scope": "s"}, None, [("prn::/scope:s", READ_UPDATE)]),
    ("GET", "/v1/scopes/<scope>/streams", {"scope": "s"}, None, [("prn::/scope:s", READ)]),
    ("GET", "/v1/scopes", {}, None, [("prn::/", READ)]),
    ("POST", "/v1/scopes", {}, None, [("prn::/", READ_UPDATE)]),
    ("DELETE", "/v1/scopes/<scope>", {"scope": "s"}, None, [("prn::/", READ_UPDATE)]),
    ("GET", "/v1/endpoints", {}, None, []),
    ("GET", "/v1/grants", {}, None, [("prn::/", READ_UPDATE)]),
    ("POST", "/v1/scopes/<scope>/reader-groups", {"scope": "s"},
     {"group": "g", "config": {"streams": [{"scope": "s", "stream": "t"}, {"scope": "o", "stream": "u"}]}},
     [("prn::/scope:s/reader-group:g", READ_UPDATE), ("prn::/scope:s/stream:t", READ), ("prn::/scope:o/stream:u", READ)]),
    ("PUT", "/v1/scopes/<scope>/reader-groups/<group>/config", {"scope": "s", "group": "g"},
     {"streams": [{"scope": "s", "stream": "t"}]},
     [("prn::/scope:s/reader-group:g", READ_UPDATE), ("prn::/scope:s/stream:t", READ)]),
    ("POST", "/v1/scopes/<scope>/reader-groups/<group>/readers/<reader>/sync",
     {"scope": "s", "group": "g", "reader": "r"}, None, [("prn::/scope:s/reader-group:g", READ)]),
    ("DELETE", "/v1/scopes/<scope>/reader-groups/<group>", {"scope": "s", "group": "g"}, None,
     [("prn::/scope:s/reader-group:g", READ_UPDATE)]),
    ("POST", "/v1/scopes/<scope>/key-value-tables/<table>/entries/get", {"scope": "s", "table": "k"}, None,
     [("prn::/scope:s/key-value-table:k", READ)]),
    ("POST", "/v1/scopes/<scope>/key-value-tables/<table>/entries/update", {"scope": "s", "table": "k"}, None,
     [("prn::/scope:s/key-value-table:k", READ_UPDATE)]),
])
def test_route_needs(method, path, args, body, needs):
    assert [(n.resource, n.permission) for n in required(method, path, args, _body(body))] == needs


def test_every_route_of_the_three_functions_has_a_rule():
    """A rule can be computed for every route (no route falls through to an error)."""
    from lambdas.append.handler import app as append_app
    from lambdas.controller_api.handler import app as controller_app
    from lambdas.read.handler import app as read_app

    for app in (append_app, controller_app, read_app):
        for route in app._static_routes + app._dynamic_routes:
            args = {name: "x" for name in route.rule.groupindex}
            body = {"group": "g", "config": {"streams": []}, "streams": []}
            assert isinstance(required(route.method, route.path, args, _body(body)), tuple)


def test_the_openapi_documents_declare_403_exactly_where_authorization_can_deny():
    """Every route with a need declares AccessDenied 403 in its function's document; an open one does not."""
    import json
    import re

    from lambdas.append.handler import app as append_app
    from lambdas.controller_api.handler import app as controller_app
    from lambdas.openapi import OUT_DIR
    from lambdas.read.handler import app as read_app

    wrong, seen = [], 0
    for name, app in (("append", append_app), ("controller", controller_app), ("read", read_app)):
        paths = json.loads((OUT_DIR / f"{name}.json").read_text())["paths"]
        for route in app._static_routes + app._dynamic_routes:
            args = {arg: "x" for arg in route.rule.groupindex}
            body = {"group": "g", "config": {"streams": []}, "streams": []}
            guarded = bool(required(route.method, route.path, args, _body(body)))
            operation = paths[re.sub(r"<(\w+)>", r"{\1}", route.path)][route.method.lower()]
            seen += 1
            if ("403" in operation["responses"]) != guarded:
                wrong.append(f"{name} {route.method} {route.path}: guarded={guarded}")
            elif guarded:
                assert "AccessDenied" in operation["responses"]["403"]["description"]
    assert wrong == []
    assert seen > 60  # every route of the three functions was looked at


class CountingStore:
    def __init__(self, grants):
        self.grants, self.queries = grants, 0

    def grant_count(self):
        self.queries += 1
        return len(self.grants)

    def grants_of(self, principal):
        self.queries += 1
        return [g for g in self.grants if g.principal == principal]


ALICE = "arn:aws:iam::123456789012:user/alice"


def test_no_grants_allows_everyone():
    Authorizer(CountingStore([])).check(None, [Need("prn::/", READ_UPDATE)])


def test_cache_holds_for_its_period_and_forget_drops_it(monkeypatch):
    now = [1000.0]
    patch_in_this_thread(monkeypatch, grants_module.time, "monotonic", lambda: now[0])
    store = CountingStore([Grant(principal=ALICE, resource="prn::*", permission="READ")])
    authorizer = Authorizer(store, ttl_s=30)
    authorizer.check(ALICE, [Need("prn::/scope:s", READ)])
    authorizer.check(ALICE, [Need("prn::/scope:s", READ)])
    assert store.queries == 2  # the count and alice's grants, once
    with pytest.raises(AccessDenied):
        authorizer.check(ALICE, [Need("prn::/scope:s", READ_UPDATE)])
    store.grants = [Grant(principal=ALICE, resource="prn::*", permission="READ_UPDATE")]
    with pytest.raises(AccessDenied):  # the cache is not past its period yet
        authorizer.check(ALICE, [Need("prn::/scope:s", READ_UPDATE)])
    now[0] += 30
    authorizer.check(ALICE, [Need("prn::/scope:s", READ_UPDATE)])
    assert store.queries == 4
    authorizer.forget()
    authorizer.check(ALICE, [Need("prn::/scope:s", READ_UPDATE)])
    assert store.queries == 6


def test_cache_remembers_a_bounded_number_of_principals(monkeypatch):
    monkeypatch.setattr(grants_module, "MAX_CACHED_PRINCIPALS", 3)
    store = CountingStore([Grant(principal=ALICE, resource="prn::*", permission="READ")])
    authorizer = Authorizer(store, ttl_s=30)
    for i in range(10):
        with pytest.raises(AccessDenied):
            authorizer.check(f"arn:aws:iam::123456789012:user/u{i}", [Need("prn::/", READ)])
    assert len(authorizer._grants) == 3
