"""The sweeper's ``workflows`` index and retention's ``retention`` index (issue 38): write-sharded where
every transaction's commit and abort writes it, and lean, so a record's other updates write nothing to
them; the jobs still find every record, whole."""

from __future__ import annotations

import uuid
from collections import Counter

import boto3
import pytest

from controlplane.models import INDEXED_NAMES, TxnRecord
from controlplane.service import Controller
from controlplane.streams import now_ms
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration

N = 40


@pytest.fixture
def controller(isolated_deployment) -> Controller:
    return Controller.for_deployment(isolated_deployment(f"wf-{uuid.uuid4().hex[:8]}"))


def _index(c: Controller, index: str) -> list[dict]:
    client = boto3.client("dynamodb", endpoint_url=c.deployment.endpoint_url, region_name=c.deployment.region)
    pages = client.get_paginator("scan").paginate(TableName=c.deployment.metadata_table, IndexName=index)
    return [item for page in pages for item in page["Items"]]


def test_workflows_in_flight_spread_over_shards_and_the_sweeper_reads_them_whole(controller, monkeypatch):
    c, scope = controller, "w" + uuid.uuid4().hex[:6]
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, "t", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    txns = [c.transactions.begin(scope, "t").txn_id for _ in range(N)]
    # Each abort stops after its first step, as if its process died there: N workflows in flight.
    monkeypatch.setattr(c.transactions, "finish_abort", lambda txn: None)
    for txn_id in txns:
        c.transactions.abort(scope, "t", txn_id)

    mine = [item for item in _index(c, "workflows") if scope in item["pk"]["S"]]
    assert len(mine) == N
    spread = Counter(item["pending"]["S"] for item in mine)
    assert len(spread) >= 8 and max(spread.values()) <= N // 4, spread
    extra = {name for item in mine for name in item} - {"pk", "sk", "pending", "pending_since", *INDEXED_NAMES}
    assert not extra, f"the workflows index copies {sorted(extra)}, which the sweeper reads by key"

    pending = [item for item in c.store.pending_workflows(now_ms()) if getattr(item, "scope", None) == scope]
    assert sorted(item.txn_id for item in pending) == sorted(txns)
    assert all(isinstance(item, TxnRecord) and item.segments and item.state == "ABORTING" for item in pending)

    monkeypatch.undo()
    c.sweeper.grace_ms = 0
    c.sweeper.sweep()
    assert not [item for item in _index(c, "workflows") if scope in item["pk"]["S"]]
    assert {c.transactions.status(scope, "t", txn_id).state.value for txn_id in txns} == {"ABORTED"}


def test_the_retention_index_holds_only_the_names_the_cycle_reads(controller):
    c, scope = controller, "r" + uuid.uuid4().hex[:6]
    c.streams.create_scope(scope)
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1), retention_policy=RetentionPolicy.by_size(1))
    for i in range(N):
        c.streams.create_stream(scope, f"s{i}", config)
    mine = [item for item in _index(c, "retention") if scope in item["pk"]["S"]]
    assert len(mine) == N
    extra = {name for item in mine for name in item} - {"pk", "sk", "retention_bucket", *INDEXED_NAMES}
    assert not extra, f"the retention index copies {sorted(extra)}, which the cycle reads from the record"
    found = {(record.scope, record.stream) for bucket in range(16) for record in c.retention.streams_in_bucket(bucket)}
    assert {(scope, f"s{i}") for i in range(N)} <= found
