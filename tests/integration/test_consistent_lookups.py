"""Reads whose stale answer would be taken for a fact are strongly consistent.

moto never answers stale, so these tests look at what is asked of DynamoDB (every request passes
through ``botocore.client.BaseClient._make_api_call``): an eventually consistent read of a segment
record may miss the successors a scale wrote just before sealing, and a writer would then take the
sealed segment for the end of a sealed stream; a stale "no streams" would let a scope be deleted
while a stream was just created in it.
"""

from __future__ import annotations

import botocore.client
import pytest

from rillet.models import StreamConfiguration

pytestmark = pytest.mark.usefixtures("fast_botocore_sessions")  # speed only; see tests/conftest.py

READS = {"GetItem", "BatchGetItem", "Query"}


@pytest.fixture
def reads(monkeypatch):
    """The DynamoDB reads sent, as (operation, whether every table in it is read consistently)."""
    sent: list[tuple[str, bool]] = []
    original = botocore.client.BaseClient._make_api_call

    def recording(client, operation_name, api_params):
        if operation_name in READS:
            if operation_name == "BatchGetItem":
                consistent = all(t.get("ConsistentRead") is True for t in api_params["RequestItems"].values())
            else:
                consistent = api_params.get("ConsistentRead") is True
            sent.append((operation_name, consistent))
        return original(client, operation_name, api_params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    return sent


def test_the_successors_lookup_reads_consistently(controller, unique, reads):
    tasks = controller.streams
    tasks.create_scope(unique)
    tasks.create_stream(unique, "s", StreamConfiguration())
    (segment,) = tasks.current_segments(unique, "s")
    tasks.scale_stream(unique, "s", [segment.segment_id], [(0.0, 0.5), (0.5, 1.0)])
    reads.clear()
    successors = tasks.successors(unique, "s", segment.segment_id)
    assert [(s.segment.low, s.segment.high) for s in successors] == [(0.0, 0.5), (0.5, 1.0)]
    assert reads and all(consistent for _, consistent in reads), reads


def test_deleting_a_scope_asks_consistently_whether_it_has_streams(controller, unique, reads):
    tasks = controller.streams
    tasks.create_scope(unique)
    reads.clear()
    assert tasks.delete_scope(unique) is True
    assert ("Query", True) in reads and ("Query", False) not in reads, reads
