"""Key-value tables over HTTP: the lifecycle, every entry operation, versions and conditions, and
caller mistakes answered with typed 4xx (never a stack trace)."""

from __future__ import annotations

import base64
import json

import pytest
import urllib3

import rillet
from rillet import (
    BadKeyLength,
    BadKeyVersion,
    IllegalState,
    KeyValueTableConfiguration,
    KeyValueTableManager,
    KeyValueTableNotFound,
    NoSuchKey,
    Put,
    Remove,
    ScopeNotEmpty,
    TooManyUpdates,
    ValueTooLong,
    Version,
    table_key,
)
from rillet.kvt_models import MAX_UPDATES, MAX_VALUE_LENGTH

CONFIG = KeyValueTableConfiguration(partition_count=4, primary_key_length=4, secondary_key_length=2)
http = urllib3.PoolManager(retries=False, timeout=60)


@pytest.fixture
def kvt(url, manager, unique):
    """A scope with a fresh table; returns (manager, table, scope)."""
    manager.create_scope(unique)
    tables = KeyValueTableManager(url)
    assert tables.create_key_value_table(unique, "kv", CONFIG)
    return tables, rillet.KeyValueTableFactory(url, unique).for_key_value_table("kv"), unique


def key(primary: str, secondary: str = "00") -> rillet.TableKey:
    return table_key(primary, secondary)


def test_lifecycle_create_list_describe_seal_delete(url, manager, unique):
    manager.create_scope(unique)
    tables = KeyValueTableManager(url)
    assert tables.create_key_value_table(unique, "a", CONFIG)
    assert not tables.create_key_value_table(unique, "a", CONFIG)  # exists: false, as in Pravega
    assert tables.create_key_value_table(unique, "b", KeyValueTableConfiguration(partition_count=1,
                                                                                 primary_key_length=8))
    assert sorted(tables.list_key_value_tables(unique)) == ["a", "b"]
    info = tables.get_key_value_table_info(unique, "a")
    assert (info.state.value, info.configuration) == ("ACTIVE", CONFIG)
    assert tables.get_configuration(unique, "b").secondary_key_length == 0
    assert tables.seal_key_value_table(unique, "a").state.value == "SEALED"
    assert tables.seal_key_value_table(unique, "a").state.value == "SEALED"  # idempotent
    with pytest.raises(ScopeNotEmpty):
        manager.delete_scope(unique)
    assert tables.delete_key_value_table(unique, "a")
    assert not tables.delete_key_value_table(unique, "a")  # idempotent
    with pytest.raises(KeyValueTableNotFound):
        tables.get_key_value_table_info(unique, "a")
    assert list(tables.list_key_value_tables(unique)) == ["b"]
    assert tables.delete_key_value_table(unique, "b")
    assert manager.delete_scope(unique)


def test_tables_are_listed_a_page_at_a_time(url, manager, unique):
    manager.create_scope(unique)
    tables = KeyValueTableManager(url)
    for i in range(5):
        tables.create_key_value_table(unique, f"t{i}", CONFIG)
    first = http.request("GET", f"{url}/v1/scopes/{unique}/key-value-tables?limit=2")
    body = json.loads(first.data)
    assert len(body["tables"]) == 2 and body["next_token"]
    assert sorted(tables.list_key_value_tables(unique)) == [f"t{i}" for i in range(5)]


def test_put_get_replace_remove_with_versions(kvt):
    _, table, _ = kvt
    k = key("user")
    assert table.get(k) is None
    v1 = table.put(k, b"one")
    entry = table.get(k)
    assert (entry.value, entry.version) == (b"one", v1)
    v2 = table.replace(k, b"two", v1)
    assert v2 != v1
    with pytest.raises(BadKeyVersion):  # a stale version fails and changes nothing
        table.replace(k, b"three", v1)
    assert table.get(k).value == b"two"
    with pytest.raises(BadKeyVersion):
        table.put_if_absent(k, b"again")
    with pytest.raises(BadKeyVersion):
        table.remove(k, v1)
    table.remove(k, v2)
    assert table.get(k) is None
    with pytest.raises(NoSuchKey):  # a version named for a key that does not exist
        table.replace(k, b"x", v2)
    with pytest.raises(NoSuchKey):
        table.remove(k, v2)
    table.remove(k)  # unconditional remove of a missing key: nothing to do
    v3 = table.put_if_absent(k, b"back")
    with pytest.raises(BadKeyVersion):  # the version from before the remove never matches again
        table.replace(k, b"x", v2)
    assert table.get(k).version == v3
    assert table.put(k, b"over") != v3  # put ignores the version


class _NoController:
    """Fails the test if the SDK sends anything."""

    def update_entries(self, scope, table, request):
        raise AssertionError(f"sent {request}")


def test_a_remove_conditional_on_not_exists_is_refused_before_sending():
    """Version.NOT_EXISTS has no token: sent as a remove it would be unconditional."""
    table = rillet.KeyValueTable(_NoController(), "s", "t")
    with pytest.raises(rillet.InvalidArgument, match="NOT_EXISTS"):
        table.remove(key("user"), Version.NOT_EXISTS)
    with pytest.raises(rillet.InvalidArgument, match="NOT_EXISTS"):
        table.update([Put(key("user"), b"x"), Remove(key("user", "01"), Version.NOT_EXISTS)])
    with pytest.raises(rillet.InvalidArgument, match="NOT_EXISTS"):
        Remove(key("user"), Version(None))  # the same condition, however it is spelled
    assert Remove(key("user")).version == Version.NO_VERSION  # unconditional and conditional ones still are
    assert Remove(key("user"), Version("0" * 16)).version.token == "0" * 16


def test_updates_of_one_primary_key_are_atomic(kvt):
    _, table, _ = kvt
    a, b, c = key("acct", "aa"), key("acct", "bb"), key("acct", "cc")
    va, vb = table.update([Put(a, b"1", Version.NOT_EXISTS), Put(b, b"2")])
    with pytest.raises(BadKeyVersion) as failed:  # the last condition fails: none of the three applies
        table.update([Put(a, b"10", va), Put(c, b"30", Version.NOT_EXISTS), Remove(b, Version("0" * 16))])
    assert base64.b64decode(failed.value.details["key"]["secondary"]) == b"bb"
    assert [e.value for e in table.get_all([a, b, c]) if e] == [b"1", b"2"]
    na, nc, nb = table.update([Put(a, b"10", va), Put(c, b"30", Version.NOT_EXISTS), Remove(b, vb)])
    assert nb is None and na != va and nc is not None
    assert [None if e is None else e.value for e in table.get_all([a, b, c])] == [b"10", None, b"30"]
    with pytest.raises(rillet.InvalidArgument):  # different primary keys are not updated together
        table.update([Put(key("acct"), b"x"), Put(key("othr"), b"y")])


def test_get_all_and_iteration_by_primary_key_and_over_all_partitions(kvt):
    _, table, _ = kvt
    written = {}
    for p in range(9):
        for s in range(3):
            k = key(f"k{p:03d}", f"s{s}")
            written[(k.primary, k.secondary)] = table.put(k, f"{p}/{s}".encode())
    keys = [key("k004", "s1"), key("none"), key("k000", "s0")]
    got = table.get_all(keys)
    assert got[0].value == b"4/1" and got[1] is None and got[2].value == b"0/0"
    one = list(table.entries(b"k005", page_size=2))
    assert [(e.key.secondary, e.value) for e in one] == [(b"s0", b"5/0"), (b"s1", b"5/1"), (b"s2", b"5/2")]
    table.put(key("k005", "t0"), b"other")
    assert [e.key.secondary for e in table.keys(b"k005", secondary_prefix=b"s", page_size=1)] == [b"s0", b"s1", b"s2"]
    table.remove(key("k005", "t0"))
    everything = list(table.entries(page_size=4))  # pages cross partition boundaries
    assert {(e.key.primary, e.key.secondary): e.version for e in everything} == written
    assert len(everything) == 27
    keys_only = list(table.keys(page_size=100))
    assert len(keys_only) == 27 and all(e.value is None for e in keys_only)


def test_a_sealed_table_is_read_only_and_a_deleted_one_is_gone(kvt):
    tables, table, scope = kvt
    v = table.put(key("keep"), b"v")
    tables.seal_key_value_table(scope, "kv")
    assert table.get(key("keep")).value == b"v"
    assert len(list(table.entries())) == 1
    for write in (lambda: table.put(key("keep"), b"w"), lambda: table.put_if_absent(key("new!"), b"w"),
                  lambda: table.replace(key("keep"), b"w", v), lambda: table.remove(key("keep"))):
        with pytest.raises(IllegalState):
            write()
    assert table.get(key("keep")).version == v
    tables.delete_key_value_table(scope, "kv")
    with pytest.raises(KeyValueTableNotFound):
        table.get(key("keep"))
    with pytest.raises(KeyValueTableNotFound):
        table.put(key("keep"), b"v")
    assert tables.create_key_value_table(scope, "kv", CONFIG)  # a new table of the name starts empty
    assert table.get(key("keep")) is None


def test_limits_are_typed_errors(kvt):
    _, table, _ = kvt
    with pytest.raises(BadKeyLength):
        table.put(table_key("toolong", "00"), b"v")
    with pytest.raises(BadKeyLength):
        table.put(table_key("abcd", "0"), b"v")
    with pytest.raises(ValueTooLong):
        table.put(key("big!"), b"x" * (MAX_VALUE_LENGTH + 1))
    assert table.put(key("big!"), b"x" * MAX_VALUE_LENGTH)
    with pytest.raises(TooManyUpdates):
        table.update([Put(table_key("many", f"{i:02d}"), b"v") for i in range(MAX_UPDATES + 1)])
    assert len(table.update([Put(table_key("many", f"{i:02d}"), b"v") for i in range(MAX_UPDATES)])) == MAX_UPDATES


def assert_error(response, status, code):
    text = response.data.decode("utf-8", "replace")
    assert "Traceback" not in text and 'File "' not in text
    assert response.status == status, text
    body = json.loads(text)
    assert body["code"] == code, body
    return body


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("POST", "/key-value-tables", {"table": "x", "configuration": {"partition_count": 0, "primary_key_length": 4}},
     400, "InvalidArgument"),
    ("POST", "/key-value-tables", {"table": "x", "configuration": {"partition_count": 1, "primary_key_length": 0}},
     400, "InvalidArgument"),
    ("POST", "/key-value-tables", {"table": "x", "configuration": {"partition_count": 1, "primary_key_length": 400,
                                                                  "secondary_key_length": 200}}, 400, "InvalidArgument"),
    ("POST", "/key-value-tables", {"table": "bad/name", "configuration": {"partition_count": 1,
                                                                         "primary_key_length": 1}}, 400, "InvalidArgument"),
    ("GET", "/key-value-tables/missing", None, 404, "KeyValueTableNotFound"),
    ("POST", "/key-value-tables/kv/entries/get", {"keys": [{"primary": "not base64!"}]}, 400, "InvalidArgument"),
    ("POST", "/key-value-tables/kv/entries/get", {"keys": []}, 400, "InvalidArgument"),
    ("POST", "/key-value-tables/kv/entries/update",
     {"updates": [{"type": "replace", "key": {"primary": "YWJjZA==", "secondary": "MDA="}, "value": "eA=="}]},
     400, "InvalidArgument"),
    ("POST", "/key-value-tables/kv/entries/update",
     {"updates": [{"type": "upsert", "key": {"primary": "YWJjZA==", "secondary": "MDA="}, "value": "eA=="}]},
     400, "InvalidArgument"),
    ("POST", "/key-value-tables/kv/entries/iterate", {"token": "garbage"}, 400, "InvalidArgument"),
    ("POST", "/key-value-tables/kv/entries/iterate",
     {"token": base64.urlsafe_b64encode(b"[99, null]").decode()}, 400, "InvalidArgument"),
])
def test_bad_input_is_a_typed_4xx(url, kvt, method, path, body, status, code):
    _, _, scope = kvt
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"} if data else {}
    assert_error(http.request(method, f"{url}/v1/scopes/{scope}{path}", body=data, headers=headers), status, code)


def test_a_table_in_a_missing_scope_is_not_found(url, unique):
    with pytest.raises(rillet.ScopeNotFound):
        KeyValueTableManager(url).create_key_value_table(unique, "kv", CONFIG)


def _controller_document() -> dict:
    from lambdas.openapi import OUT_DIR

    return json.loads((OUT_DIR / "controller.json").read_text())


@pytest.mark.parametrize("name", ["a", "K.v-1", "x" * 250, "x" * 251, "", "_internal", "bad/name", "a b", "é"])
def test_the_openapi_table_name_rule_is_the_one_the_handlers_enforce(name):
    """Every table path parameter, and the create body's table, state the rule validate_table_name checks."""
    import re

    from rillet.kvt_models import validate_table_name

    try:
        valid = validate_table_name(name) == name
    except rillet.InvalidArgument:
        valid = False
    document = _controller_document()
    rules = [p["schema"] for path, operations in document["paths"].items() if "{table}" in path
             for operation in operations.values() for p in operation["parameters"] if p["name"] == "table"]
    rules.append(document["components"]["schemas"]["CreateKeyValueTableRequest"]["properties"]["table"])
    assert len(rules) == 7  # six table paths (get, delete, seal, entries get/update/iterate) and the body
    for rule in rules:
        stated = (rule["minLength"] <= len(name) <= rule["maxLength"]
                  and re.fullmatch(rule["pattern"].removeprefix("^").removesuffix("$"), name) is not None)
        assert stated == valid, (rule, name)


def test_the_openapi_links_follow_create_table_to_the_operations_on_it():
    paths = _controller_document()["paths"]
    tables = "/v1/scopes/{scope}/key-value-tables"
    links = paths[tables]["post"]["responses"]["200"]["links"]
    on_a_table = {operation["operationId"] for path, operations in paths.items() if path.startswith(tables + "/{table}")
                  for operation in operations.values()}
    assert set(links) == on_a_table and len(on_a_table) == 6
    for link in links.values():
        assert link["parameters"] == {"scope": "$request.path.scope", "table": "$request.body#/table"}
    # creating a scope links to what needs only the scope, never to an operation on a table it cannot name
    scope_links = paths["/v1/scopes"]["post"]["responses"]["200"]["links"]
    assert not on_a_table & set(scope_links)
    assert {paths[tables][m]["operationId"] for m in ("get", "post")} <= set(scope_links)
    # an update's answer is documented with its 412 (a custom response no longer drops the 200)
    update = paths[tables + "/{table}/entries/update"]["post"]["responses"]
    assert update["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/UpdateResult"}
    assert "412" in update
