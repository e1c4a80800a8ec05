"""A commit reads O(its own work) (issue 38): planning and applying a commit read the stream's
COMMITTING transactions through their markers, not every transaction the stream kept (finished ones
stay a day). Counted here as DynamoDB counts a query's reads: the items each Query scanned.
"""

from __future__ import annotations

import pytest
from scanned_items import ScannedItems

from controlplane.models import PENDING, CommittingRecord, TxnRecord, stream_pk
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, TxnState
from rillet.names import segment_name, txn_segment_token


@pytest.fixture
def stream(controller, unique):
    controller.streams.create_scope(unique)
    controller.streams.create_stream(unique, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    return unique, "s"


def _begin_and_commit(controller, scope: str, stream: str) -> None:
    txn = controller.transactions.begin(scope, stream)
    token = txn_segment_token(0, txn.txn_id)
    controller.segments.append(segment_name(scope, stream, token), "w", 0, 1, frame(b"e"))
    assert controller.transactions.commit(scope, stream, txn.txn_id).state == TxnState.COMMITTED


def test_the_items_a_commit_reads_do_not_grow_with_the_transactions_the_stream_kept(controller, stream):
    scope, name = stream
    scanned = []
    for _ in range(40):
        with ScannedItems() as counter:
            _begin_and_commit(controller, scope, name)
        scanned.append(counter.items)
    kept = [t for t in TxnRecord.query(stream_pk(scope, name), TxnRecord.sk.startswith("txn#"))]
    assert len(kept) == 40 and all(t.state == TxnState.COMMITTED.value for t in kept)
    print("items scanned by commit 1, 10, 40:", scanned[0], scanned[9], scanned[-1])
    assert scanned[-1] <= 2 * max(scanned[9], 1), f"commit 10 scanned {scanned[9]} items, commit 40 {scanned[-1]}"
    assert not list(CommittingRecord.query(stream_pk(scope, name), CommittingRecord.sk.startswith("cm#")))


def test_a_committing_transaction_without_a_marker_is_committed_by_the_sweeper(controller, stream):
    """One that moved to COMMITTING before markers existed (a deployment upgraded in place)."""
    scope, name = stream
    txn = controller.transactions.begin(scope, name)
    record = controller.transactions._get(scope, name, txn.txn_id)
    record.update(actions=[TxnRecord.state.set(TxnState.COMMITTING.value), TxnRecord.commit_ms.set(1),
                           TxnRecord.pending.set(PENDING), TxnRecord.pending_since.set(1)])
    controller.transactions.drive_commits(scope, name)  # no marker: nothing to commit yet
    assert controller.transactions.status(scope, name, txn.txn_id).state == TxnState.COMMITTING
    controller.sweeper._finish_txn(controller.transactions._get(scope, name, txn.txn_id))
    assert controller.transactions.status(scope, name, txn.txn_id).state == TxnState.COMMITTED
