"""A read plan of an empty range is empty, wherever the range is: an empty segment's [0, 0) (a batch
reader of a stream nobody wrote to asks for it) was a 500 (found by tests/e2e/test_api_fuzz.py)."""

from __future__ import annotations

import pytest

from dataplane import models
from dataplane.segment_store import SegmentStore
from rillet.framing import frame


@pytest.fixture
def store(deployment) -> SegmentStore:
    models.bind(deployment)
    return SegmentStore(deployment)


def test_an_empty_range_has_no_parts(store, unique):
    empty, written = f"{unique}/s/0", f"{unique}/s/1"
    store.create(empty)
    store.create(written)
    store.append(written, "w", 0, 1, frame(b"x" * 96))
    assert store.plan(empty, 0, 0) == []
    assert store.plan(written, 100, 100) == []
    assert [(p.offset, p.length) for p in store.plan(written, 0, 100)] == [(0, 100)]
