"""Iterating a key-value table's entries page by page, in-process on moto: pages that cross partitions,
pages cut short by the bound on partitions read per page, and tokens that do not fit the request."""

from __future__ import annotations

import pytest

from controlplane.kvtables import MAX_PARTITIONS_PER_PAGE, KeyValueTables
from rillet.errors import BadKeyLength, InvalidArgument
from rillet.kvt_models import KeyValueTableConfiguration, TableKey, TableUpdate, UpdateType


@pytest.fixture
def tables(controller, unique) -> KeyValueTables:
    controller.streams.create_scope(unique)
    return KeyValueTables(controller.store)


def _put(tables: KeyValueTables, scope: str, table: str, primary: bytes, secondaries: list[bytes]) -> None:
    tables.update(scope, table, [TableUpdate(type=UpdateType.PUT, key=TableKey(primary=primary, secondary=s),
                                             value=primary + s) for s in secondaries])


def _all_pages(tables: KeyValueTables, scope: str, table: str, limit: int, primary: bytes | None = None) -> list:
    pages, token = [], None
    while True:
        page = tables.iterate(scope, table, primary, True, limit, token)
        pages.append(page.entries)
        if not page.next_token:
            return pages
        token = page.next_token


def test_a_sparse_table_is_read_in_bounded_pages_and_nothing_is_missed(tables, unique):
    partitions = 3 * MAX_PARTITIONS_PER_PAGE + 5
    tables.create(unique, "sparse", KeyValueTableConfiguration(partition_count=partitions, primary_key_length=2))
    written = {i.to_bytes(2, "big") for i in range(0, 500, 61)}  # 9 keys over far more partitions
    for primary in written:
        _put(tables, unique, "sparse", primary, [b""])
    pages = _all_pages(tables, unique, "sparse", limit=1000)
    assert len(pages) == 4  # ceil(101 partitions / 32 per page), whatever the page size asked
    assert {e.key.primary for page in pages for e in page} == written
    assert all(e.value == e.key.primary for page in pages for e in page)


def test_small_pages_resume_inside_a_partition_and_across_partitions(tables, unique):
    tables.create(unique, "kv", KeyValueTableConfiguration(partition_count=3, primary_key_length=1,
                                                           secondary_key_length=1))
    for p in b"abcdef":
        _put(tables, unique, "kv", bytes([p]), [bytes([s]) for s in b"xyz"])
    pages = _all_pages(tables, unique, "kv", limit=2)
    entries = [e for page in pages for e in page]
    assert len(entries) == 18 and len({(e.key.primary, e.key.secondary) for e in entries}) == 18
    assert all(len(page) <= 2 for page in pages)
    one = [e for page in _all_pages(tables, unique, "kv", limit=2, primary=b"c") for e in page]
    assert [e.key.secondary for e in one] == [b"x", b"y", b"z"]


def test_a_token_that_does_not_fit_the_request_is_invalid(tables, unique):
    tables.create(unique, "kv", KeyValueTableConfiguration(partition_count=2, primary_key_length=1,
                                                           secondary_key_length=1))
    for p in b"ab":
        _put(tables, unique, "kv", bytes([p]), [bytes([s]) for s in b"xyz"])
    token = tables.iterate(unique, "kv", b"a", True, 1, None).next_token
    with pytest.raises(InvalidArgument, match="another primary key"):
        tables.iterate(unique, "kv", b"b", True, 1, token)
    with pytest.raises(BadKeyLength):
        tables.iterate(unique, "kv", b"ab", True, 1, None)
    prefixed = tables.iterate(unique, "kv", b"a", True, 1, None, secondary_prefix=b"x").next_token
    with pytest.raises(InvalidArgument, match="another primary key or prefix"):
        tables.iterate(unique, "kv", b"a", True, 1, prefixed, secondary_prefix=b"y")
    with pytest.raises(InvalidArgument, match="needs a primary key"):
        tables.iterate(unique, "kv", None, True, 1, None, secondary_prefix=b"x")
    with pytest.raises(InvalidArgument, match="at most the secondary key length"):
        tables.iterate(unique, "kv", b"a", True, 1, None, secondary_prefix=b"xy")
    with pytest.raises(InvalidArgument, match="malformed page token"):
        tables.iterate(unique, "kv", None, True, 1, "bm90IGpzb24=")  # base64 of "not json"

