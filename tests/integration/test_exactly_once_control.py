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

from controlplane.models import SinkRecord, StreamRecord, stream_pk
from controlplane.service import Controller
from rillet.errors import WriteConflict
from rillet.framing import frame
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState, TxnState
from rillet.names import mark_stream_name, segment_name, txn_segment_token

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


# -- a stale delete finisher and the stream created again under the name -----------------------------


def test_a_stale_delete_finisher_leaves_the_new_streams_watermark_stream_alone(controller: Controller, unique: str,
                                                                              monkeypatch):
    """Finisher A of a stream's delete has deleted the segments and the partition and is about to delete
    the watermark stream; meanwhile finisher B completes the delete, the name is created again and its
    writer notes a time (a new watermark stream). A must not seal and delete the new stream's."""
    c = controller
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, STREAM, config())
    c.watermarks.note_time(unique, STREAM, "w", 1_000, {0: 0})
    c.streams.seal_stream(unique, STREAM)
    record = c.store.get_stream(unique, STREAM)
    c.store.update(record, [record.__class__.workflow.set({"name": "delete"})], "test")  # the delete recorded
    stale = c.store.get_stream(unique, STREAM)
    mark = mark_stream_name(STREAM)
    real = c.store.delete_stream_partition

    def then_the_name_is_created_again(*args, **kwargs):
        monkeypatch.setattr(c.store, "delete_stream_partition", real)
        done = real(*args, **kwargs)
        c.streams.finish_delete_stream(c.store.get_stream(unique, STREAM))  # finisher B
        c.streams.create_stream(unique, STREAM, config())
        c.watermarks.note_time(unique, STREAM, "w", 2_000, {0: 0})
        return done

    monkeypatch.setattr(c.store, "delete_stream_partition", then_the_name_is_created_again)
    c.streams.finish_delete_stream(stale)  # finisher A

    fresh = c.store.get_stream(unique, STREAM)
    assert fresh.created_ms != stale.created_ms and fresh.state == StreamState.ACTIVE.value
    marks = c.store.get_stream(unique, mark)
    assert marks.state == StreamState.ACTIVE.value, "the stale finisher sealed the new stream's watermark stream"
    assert c.segments.info(segment_name(unique, mark, 0)).sealed is False


def test_a_stale_delete_finisher_leaves_the_new_streams_segment_alone(controller: Controller, unique: str,
                                                                      monkeypatch):
    """Finisher A of a stream's delete checked that the stream is still the incarnation it deletes and is
    about to delete segment 0; meanwhile finisher B completes the delete, the name is created again and
    a writer appends to the new segment 0. A's delete must leave the new segment and its event alone."""
    c = controller
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, STREAM, config())
    name = segment_name(unique, STREAM, 0)
    c.segments.append(name, "w", 0, 1, frame(b"old"))
    c.streams.seal_stream(unique, STREAM)
    record = c.store.get_stream(unique, STREAM)
    c.store.update(record, [record.__class__.workflow.set({"name": "delete"})], "test")  # the delete recorded
    stale = c.store.get_stream(unique, STREAM)
    real = c.segments.delete

    def then_the_name_is_created_again(segment: str, incarnation: int | None = None) -> None:
        monkeypatch.setattr(c.segments, "delete", real)
        c.streams.finish_delete_stream(c.store.get_stream(unique, STREAM))  # finisher B
        c.streams.create_stream(unique, STREAM, config())
        c.segments.append(name, "w2", 0, 1, frame(b"new"))
        real(segment, incarnation)

    monkeypatch.setattr(c.segments, "delete", then_the_name_is_created_again)
    c.streams.finish_delete_stream(stale)  # finisher A

    assert c.store.get_stream(unique, STREAM).state == StreamState.ACTIVE.value
    assert segment_events(c.segments, name) == [b"new"], "the stale finisher deleted the new stream's segment"


def test_a_stale_truncate_finisher_leaves_the_new_streams_segment_alone(controller: Controller, unique: str,
                                                                        monkeypatch):
    """Finisher A of a truncation checked that it is still in flight and is about to truncate segment 0;
    meanwhile finisher B completes it, the stream is sealed, deleted and created again, and a writer
    appends to the new segment 0. A must not truncate the new segment (here: inside its event)."""
    c = controller
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, STREAM, config())
    name = segment_name(unique, STREAM, 0)
    c.segments.append(name, "w", 0, 2, frame(b"old") + frame(b"older"))
    real = c.segments.truncate

    def then_the_name_is_created_again(segment: str, offset: int, *incarnation: int) -> None:
        monkeypatch.setattr(c.segments, "truncate", real)
        c.streams.finish_truncate_stream(c.store.get_stream(unique, STREAM))  # finisher B
        c.streams.seal_stream(unique, STREAM)
        c.streams.delete_stream(unique, STREAM)
        c.streams.create_stream(unique, STREAM, config())
        c.segments.append(name, "w2", 0, 1, frame(b"a new event longer than the cut"))
        real(segment, offset, *incarnation)

    monkeypatch.setattr(c.segments, "truncate", then_the_name_is_created_again)
    c.streams.truncate_stream(unique, STREAM, {0: 7})  # finisher A: the first event goes

    assert c.segments.info(name).start_offset == 0, "the stale finisher truncated the new stream's segment"
    assert segment_events(c.segments, name) == [b"a new event longer than the cut"]


def test_a_stale_seal_finisher_leaves_the_new_streams_segment_open(controller: Controller, unique: str,
                                                                   monkeypatch):
    """Finisher A of a seal checked that it is still in flight and is about to seal segment 0; meanwhile
    finisher B completes the seal, the stream is deleted and created again and a writer appends to it.
    A must neither seal the new segment 0 nor record a final size on its segment record."""
    c = controller
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, STREAM, config())
    name = segment_name(unique, STREAM, 0)
    c.segments.append(name, "w", 0, 1, frame(b"old"))
    real = c.segments.seal
    finisher_a_sealed = []

    def then_the_name_is_created_again(segment: str, *incarnation: int) -> int:
        monkeypatch.setattr(c.segments, "seal", real)
        c.streams.finish_seal_stream(c.store.get_stream(unique, STREAM))  # finisher B
        c.streams.delete_stream(unique, STREAM)
        c.streams.create_stream(unique, STREAM, config())
        c.segments.append(name, "w2", 0, 1, frame(b"new"))
        finisher_a_sealed.append(segment)
        return real(segment, *incarnation)

    monkeypatch.setattr(c.segments, "seal", then_the_name_is_created_again)
    c.streams.seal_stream(unique, STREAM)  # finisher A

    assert finisher_a_sealed == [name]
    assert c.segments.info(name).sealed is False, "the stale finisher sealed the new stream's segment"
    (record,) = c.store.get_segments(unique, STREAM, [0])
    assert record.sealed_size is None
    assert c.store.get_stream(unique, STREAM).state == StreamState.ACTIVE.value
    c.segments.append(name, "w2", 1, 1, frame(b"newer"))
    assert segment_events(c.segments, name) == [b"new", b"newer"]


def test_a_record_read_from_an_old_incarnation_changes_nothing_in_the_new_one(controller: Controller, unique: str):
    """A stream's version starts again when its name is created again: a finisher holding the old
    incarnation's record at the very version the new one has reached must be refused, not applied."""
    c = controller
    c.streams.create_scope(unique)
    c.streams.create_stream(unique, STREAM, config())
    stale = c.store.get_stream(unique, STREAM)
    c.streams.seal_stream(unique, STREAM)
    c.streams.delete_stream(unique, STREAM)
    c.streams.create_stream(unique, STREAM, config())
    fresh = c.store.get_stream(unique, STREAM)
    assert (fresh.version, fresh.created_ms != stale.created_ms) == (stale.version, True)
    with pytest.raises(WriteConflict):
        c.store.update(stale, [StreamRecord.state.set(StreamState.SEALED.value)], "changed concurrently")
    assert c.store.get_stream(unique, STREAM).state == StreamState.ACTIVE.value
