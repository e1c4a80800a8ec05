"""Control-plane requests whose answer was lost and whose resend was refused by their own first attempt.

botocore sends a request again when it never got the answer (a read timeout, a reset connection); a
conditional write whose first attempt was applied is then refused. Each call must recognise its own
write and answer what happened (issue 25, "Also close"): a sink's batch committed, a scope or stream
created, a transaction begun with its segments. ``lose_answer(k)`` (tests/dataplane_model.py) applies
the current thread's k-th mutating request and sends it again.
"""

from __future__ import annotations

import pytest
from dataplane_model import lose_answer, segment_events

from controlplane.models import SinkRecord, stream_pk
from controlplane.service import Controller
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState, TxnState
from rillet.names import segment_name, txn_segment_token

STREAM = "s"


@pytest.fixture(autouse=True)
def _fast_sessions(fast_botocore_sessions):
    """See tests/conftest.py."""


def config(segments: int = 1) -> StreamConfiguration:
    return StreamConfiguration(scaling_policy=ScalingPolicy.fixed(segments))


def mutating_requests(run) -> int:
    """How many mutating requests ``run()`` sends when nothing is lost."""
    with lose_answer(0) as seen:
        run()
    return len(seen)


def test_commit_batch_whose_last_update_lost_its_answer_answers_committed(controller: Controller, unique: str):
    """The sink's final update (the batch becomes the last committed) is the last request: its answer
    lost, the resend is refused by the version it moved on. The batch was committed by this call."""
    c = controller
    c.streams.create_scope(unique)

    def setup(stream: str) -> str:
        c.streams.create_stream(unique, stream, config())
        txn = c.transactions.begin(unique, stream, lease_ms=60_000)
        c.segments.append(segment_name(unique, stream, txn_segment_token(0, txn.txn_id)), "w", 0, 1, frame(b"e"))
        return txn.txn_id

    undisturbed = setup("undisturbed")
    total = mutating_requests(lambda: c.transactions.commit_batch(unique, "undisturbed", "q", 0, [undisturbed]))

    txn_id = setup(STREAM)
    with lose_answer(total) as seen:
        committed = c.transactions.commit_batch(unique, STREAM, "q", 0, [txn_id])
    assert seen[total - 1] == "UpdateItem"
    assert committed is True, "the call committed the batch but answered that an earlier call had"
    assert c.transactions.status(unique, STREAM, txn_id).state == TxnState.COMMITTED
    sink = SinkRecord.get(stream_pk(unique, STREAM), "sink#q", consistent_read=True)
    assert (sink.last_batch, sink.pending_batch) == (0, None)
    assert segment_events(c.segments, segment_name(unique, STREAM, 0)) == [b"e"]


def test_create_scope_whose_answer_was_lost_answers_created(controller: Controller, unique: str):
    with lose_answer(1) as seen:
        created = controller.streams.create_scope(unique)
    assert seen == ["PutItem"]
    assert created is True, "the call created the scope but answered that it existed before"
    assert controller.streams.create_scope(unique) is False  # a later call still finds it existing


def test_create_stream_whose_answer_was_lost_answers_created(controller: Controller, unique: str):
    controller.streams.create_scope(unique)
    with lose_answer(1) as seen:
        created = controller.streams.create_stream(unique, STREAM, config(2))
    assert seen[0] == "TransactWriteItems"
    assert created is True, "the call created the stream but answered that it existed before"
    record = controller.store.get_stream(unique, STREAM)
    assert record.state == StreamState.ACTIVE.value and record.workflow is None
    assert [s.segment_id for s in controller.streams.current_segments(unique, STREAM)] == [0, 1]
    assert controller.streams.create_stream(unique, STREAM, config(2)) is False


def test_begin_whose_record_save_lost_its_answer_begins_the_transaction(controller: Controller, unique: str):
    """The transaction record's save is begin's first request: its resend is refused because the record
    exists. The transaction must come back open, with a segment per segment of its epoch."""
    c = controller
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, STREAM, config(3))
    with lose_answer(1) as seen:
        txn = c.transactions.begin(unique, STREAM, lease_ms=60_000)
    assert seen[0] == "PutItem"
    assert txn.state == TxnState.OPEN and len(txn.segments) == 3
    for segment in txn.segments:  # every transaction segment exists, so the writer can append
        name = segment_name(unique, STREAM, txn_segment_token(segment.segment_id, txn.txn_id))
        assert c.segments.info(name).length == 0
    (listed,), _ = c.transactions.list_unfinished(unique, STREAM, 10, None)
    assert listed.txn_id == txn.txn_id
