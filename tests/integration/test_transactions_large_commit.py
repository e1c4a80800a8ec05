"""Scale rule for the commit workflow: no item grows with segments x transactions.

100 transactions begin on a stream of one segment, which then scales to 150 segments; all 100
commit in one workflow, which rolls them together: 150 segments x 100 transactions. Recording that as
one plan item listing, per rolled transaction, its segments and a duplicate of every active segment
took about 780 KB, over DynamoDB's 400 KB item limit (the commits and the seal were blocked). The largest item is
measured from the tables after the commit (moto refuses items over the limit too). Scaling the
stream to many segments, rather than opening transactions on many, keeps the test's data-plane work
(a segment per transaction and parent) small.
"""

from __future__ import annotations

import boto3
import pytest
from dataplane_model import segment_events

from controlplane.service import Controller
from controlplane.streams import now_ms
from rillet.framing import frame
from rillet.keyspace import split_evenly
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState, TxnState
from rillet.names import segment_name, txn_segment_token

SEGMENTS, TRANSACTIONS = 150, 100  # at the commit: 15,000 segments x transactions
STREAM = "s"
ITEM_LIMIT = 400 * 1024


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """See tests/conftest.py."""


def _value_size(value: dict) -> int:
    """DynamoDB's size of one attribute value (numbers rounded up: 1 byte per 2 digits, plus 1)."""
    (kind, inner), = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        return (len(inner.strip("-").replace(".", "")) + 1) // 2 + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in inner.items())
    if kind == "SS":
        return sum(len(v.encode()) for v in inner)
    return sum(len(str(v)) for v in inner)  # NS, BS


def largest_item(deployment, table: str) -> tuple[int, dict]:
    client = boto3.client("dynamodb", endpoint_url=deployment.endpoint_url, region_name=deployment.region,
                          aws_access_key_id="test", aws_secret_access_key="test")
    best: tuple[int, dict] = (0, {})
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            size = sum(len(name.encode()) + _value_size(value) for name, value in item.items())
            best = max(best, (size, item), key=lambda pair: pair[0])
    return best


def test_a_roll_of_10_000_segments_x_transactions_keeps_every_item_small(isolated_deployment, unique, monkeypatch):
    deployment = isolated_deployment("large-commit")
    c = Controller.for_deployment(deployment)
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, STREAM, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    txns = [c.transactions.begin(unique, STREAM, lease_ms=120_000) for _ in range(TRANSACTIONS)]
    (parent,) = txns[0].segments
    for n, txn in enumerate(txns):
        c.segments.append(segment_name(unique, STREAM, txn_segment_token(parent.segment_id, txn.txn_id)),
                          f"w{n}", 0, 1, frame(f"txn{n}".encode()))
    ranges = [(r.low, r.high) for r in split_evenly(0.0, 1.0, SEGMENTS)]
    assert c.streams.scale_stream(unique, STREAM, [parent.segment_id], ranges) == 1

    drive = c.transactions.drive_commits
    monkeypatch.setattr(c.transactions, "drive_commits", lambda scope, stream, until=None: None)
    for txn in txns:  # every request arrives while (say) another commit holds the stream
        assert c.transactions.commit(unique, STREAM, txn.txn_id).state == TxnState.COMMITTING
    monkeypatch.setattr(c.transactions, "drive_commits", drive)
    c.transactions.drive_commits(unique, STREAM)

    assert {c.transactions.status(unique, STREAM, t.txn_id).state for t in txns} == {TxnState.COMMITTED}
    record = c.store.get_stream(unique, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.workflow is None
    # one roll for all of them: the rolled epoch (1 segment) and the duplicates (150)
    assert (record.current_epoch, record.segment_count) == (3, 1 + SEGMENTS + 1 + SEGMENTS)
    rolled = c.store.get_epoch(unique, STREAM, 2).segments
    assert sorted(segment_events(c.segments, segment_name(unique, STREAM, int(rolled[0][0])))) == sorted(
        f"txn{n}".encode() for n in range(TRANSACTIONS))
    assert not [i for i in c.store.pending_workflows(now_ms()) if getattr(i, "scope", None) == unique]

    sizes = {table: largest_item(deployment, table)
             for table in (deployment.metadata_table, deployment.segments_table)}
    for table, (size, item) in sizes.items():
        print(f"largest item of {table}: {size} bytes ({item.get('sk', item.get('pk'))})")
    # Nothing near the limit: the largest items hold one epoch's 150 segments (a few KB).
    assert max(size for size, _ in sizes.values()) < 16 * 1024 < ITEM_LIMIT
