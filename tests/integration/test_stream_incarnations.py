"""A stream deleted and created again under its name is a new stream everywhere (issue 36).

Each test stages the delete and create again between the steps of something that kept an offset, an
object key or a workflow of the old stream, and checks that the old one never meets the new stream's
bytes or metadata: reads, locations, plans and tail checks naming the old incarnation are refused
(StreamRecreated), chunk object keys never repeat (so a presigned URL of the old stream cannot serve
the new one's bytes), and a scale finisher that stalled across it writes nothing into the new stream.
"""

from __future__ import annotations

import pytest
import urllib3
from dataplane_model import payload, small_store

from rillet.errors import StreamNotFound, StreamRecreated
from rillet.framing import frame
from rillet.keyspace import segment_id
from rillet.models import ScalingPolicy, StreamConfiguration, StreamState
from rillet.names import segment_name

SIZES = [40, 30, 50, 20, 60, 35]  # inline blocks: tiering packs them into chunks of about 150 bytes


def _fill(store, segment: str, writer: str) -> bytes:
    data = b""
    for i, size in enumerate(SIZES):
        block = payload(f"{writer}{i}", size)
        store.append(segment, writer, i, 1, block)
        data += block
    return data


def _chunk_locations(store, segment: str, incarnation: int | None = None) -> list:
    located = store.locate(segment, 0, incarnation=incarnation).locations
    return [x for x in located if x.object_key and "/c/" in x.object_key]


def test_a_presigned_chunk_url_of_a_deleted_segment_never_serves_a_new_incarnations_bytes(deployment, unique):
    store = small_store(deployment)
    segment = f"{unique}/s/0"
    store.create(segment, stream_incarnation=1)
    old = _fill(store, segment, "w")
    assert store.tier(segment) > 0
    first = _chunk_locations(store, segment)[0]
    url = deployment.s3.generate_presigned_url("get_object", ExpiresIn=300, Params={
        "Bucket": deployment.bucket, "Key": first.object_key})
    http = urllib3.PoolManager(retries=False)
    before = http.request("GET", url)
    assert before.status == 200 and before.data == old[first.offset:first.offset + first.length]

    store.seal(segment)
    store.delete(segment, store.info(segment).created_ms)
    store.create(segment, stream_incarnation=2)  # the same name, the same block sizes, other bytes
    new = _fill(store, segment, "v")
    assert store.tier(segment) > 0
    keys = {x.object_key for x in _chunk_locations(store, segment)}
    assert first.object_key not in keys, "a chunk of the new incarnation reuses the old one's object key"
    after = http.request("GET", url)
    assert after.status != 200 and new[first.offset:first.offset + first.length] not in after.data


def test_reads_naming_another_incarnation_are_refused_and_name_both(deployment, unique):
    store = small_store(deployment)
    segment = f"{unique}/s/0"
    store.create(segment, stream_incarnation=7)
    data = _fill(store, segment, "w")
    assert store.read(segment, 0, incarnation=7).data == data
    assert store.read(segment, 0).data == data  # a position that names no incarnation: as before
    refusals = [lambda: store.read(segment, 0, incarnation=6), lambda: store.locate(segment, 0, incarnation=6),
                lambda: store.plan(segment, 0, len(data), incarnation=6), lambda: store.tails([segment], 6)]
    for refused in refusals:
        with pytest.raises(StreamRecreated) as e:
            refused()
        assert e.value.status == 410 and e.value.details == {"expected": 6, "current": 7}
    assert store.tails([segment], 7)[0].length == len(data)


def test_a_segment_created_before_incarnations_were_recorded_takes_any(deployment, unique):
    store = small_store(deployment)
    segment = f"{unique}/s/0"
    store.create(segment)  # no stream incarnation on its head record, as segments created before
    data = _fill(store, segment, "w")
    assert store.read(segment, 0, incarnation=5).data == data


def test_old_and_new_chunk_object_keys_are_both_recognised_as_orphans(deployment, unique):
    from dataplane.storage_writer import _chunk_pass_over

    assert _chunk_pass_over("c/00-10-3", epoch=4, incarnation=9)  # an earlier pass, key without incarnation
    assert not _chunk_pass_over("c/00-10-4", epoch=4, incarnation=9)  # the pass running now
    assert _chunk_pass_over("c/00-10-7-8", epoch=4, incarnation=9)  # another incarnation's, any epoch
    assert not _chunk_pass_over("c/00-10-4-9", epoch=4, incarnation=9)
    assert _chunk_pass_over("c/00-10-3-9", epoch=4, incarnation=9)


def test_a_scale_finisher_stalled_across_a_delete_and_create_again_writes_nothing_into_the_new_stream(
        controller, unique, monkeypatch):
    """The finisher checks that its scale is in flight, then stalls; meanwhile another finisher (the
    sweeper's) completes the scale, the stream is sealed, deleted and created again. The stalled one
    resumes: it must create no segment, record no segment, successor or epoch in the new stream."""
    c, scope, stream = controller, unique, "s"
    c.streams.create_scope(scope)
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2))
    c.streams.create_stream(scope, stream, config)
    c.segments.append(segment_name(scope, stream, 0), "w", 0, 1, frame(b"x" * 10))
    s0, _ = c.streams.current_segments(scope, stream)
    new_ranges = [(s0.low, s0.high / 2), (s0.high / 2, s0.high)]

    stalled: dict = {}
    real_in_flight = type(c.streams)._in_flight

    def in_flight_then_stall(self, record):
        answer = real_in_flight(self, record)
        if answer and not stalled:
            stalled["record"] = record
            monkeypatch.setattr(type(c.streams), "_in_flight", real_in_flight)
            # another finisher (with a record of its own) completes the scale meanwhile
            c.streams.finish_scale_stream(c.store.get_stream(scope, stream))
            c.streams.seal_stream(scope, stream)
            c.streams.delete_stream(scope, stream)
            c.streams.create_stream(scope, stream, config)
        return answer

    monkeypatch.setattr(type(c.streams), "_in_flight", in_flight_then_stall)
    assert c.streams.scale_stream(scope, stream, [s0.segment_id], new_ranges) == 1
    assert stalled, "the staging never ran"

    record = c.store.get_stream(scope, stream)
    assert record.created_ms != stalled["record"].created_ms
    assert (StreamState(record.state), record.current_epoch) == (StreamState.ACTIVE, 0)
    assert [e.epoch for e in c.store.list_epochs(scope, stream)] == [0]
    assert sorted(r.segment_id for r in c.store.list_segments(scope, stream)) == [0, 1]
    assert all(list(r.successors) == [] for r in c.store.list_segments(scope, stream))
    for number in (2, 3):
        with pytest.raises(Exception, match="does not exist"):
            c.segments.info(segment_name(scope, stream, segment_id(1, number)))
    for sid in (0, 1):
        assert c.segments.info(segment_name(scope, stream, sid)).stream_incarnation == record.created_ms


@pytest.mark.parametrize("created_again", [False, True])
def test_a_next_cut_across_a_delete_is_a_typed_error_not_a_5xx(controller, unique, monkeypatch, created_again):
    """A reader asks how far it may read (next cut) while the stream is sealed, deleted and perhaps created
    again between the cut's resolution and the listing of its segments (seen as an HTTP 500, KeyError 0,
    under a running Spark query): the answer is StreamNotFound, or StreamRecreated for a cut of the old
    incarnation, as it would have been a moment later."""
    c, scope, stream = controller, unique, "s"
    c.streams.create_scope(scope)
    c.streams.create_stream(scope, stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    c.segments.append(segment_name(scope, stream, 0), "w", 0, 1, frame(b"x" * 10))
    c.streams.scale_stream(scope, stream, [0], [(0.0, 0.5), (0.5, 1.0)])  # segment 0 sealed, two successors
    old = int(c.store.get_stream(scope, stream).created_ms)
    staged = []
    real_resolve = type(c.streams).resolve_cut

    def resolve_then_delete(self, *args):
        answer = real_resolve(self, *args)
        if not staged:
            staged.append(True)
            c.streams.seal_stream(scope, stream)
            c.streams.delete_stream(scope, stream)
            if created_again:
                c.streams.create_stream(scope, stream, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
        return answer

    monkeypatch.setattr(type(c.streams), "resolve_cut", resolve_then_delete)
    with pytest.raises(StreamRecreated if created_again else StreamNotFound):
        c.streams.next_cut(scope, stream, {0: 10}, incarnation=old)
    assert staged, "the staging never ran"
