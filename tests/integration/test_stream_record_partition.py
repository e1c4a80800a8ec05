"""Each stream's record lives in the stream's own partition; its scope's partition holds only a small
listing entry (issue 38), and a record stored under the scope by an older release moves on first read.

Before, every stream record of a scope was an item of the ``scope#<scope>`` partition, so the record
updates of every commit, watermark and workflow of the scope's streams met on one partition (7 times a
partition's write limit at the target deployment: docs/benchmarks.md, "Partition heat").
"""

from __future__ import annotations

import threading

import pytest

from controlplane.models import (
    STREAM_SK,
    MetadataItem,
    StreamNameRecord,
    StreamRecord,
    scope_pk,
    stream_pk,
    workflow_shard,
)
from rillet.errors import WriteConflict
from rillet.models import StreamConfiguration


@pytest.fixture
def scope(controller, unique) -> str:
    controller.streams.create_scope(unique)
    return unique


def _scope_partition(scope: str) -> list[MetadataItem]:
    return list(MetadataItem.query(scope_pk(scope), consistent_read=True))


def _as_older_release(scope: str, stream: str) -> StreamRecord:
    """Put the stream's record back where an older release kept it (``scope#<scope>`` / ``<stream>``,
    with its tags), in place of its listing entry, as an upgrade finds it."""
    record = StreamRecord.get(stream_pk(scope, stream), STREAM_SK, consistent_read=True)
    item = record.serialize()
    item["pk"], item["sk"] = {"S": scope_pk(scope)}, {"S": stream}
    tags = record.configuration.get("tags")
    if tags:
        item["tags"] = {"SS": sorted(tags)}
    client = StreamRecord._get_connection().connection.client
    client.put_item(TableName=StreamRecord.Meta.table_name, Item=item)
    client.delete_item(TableName=StreamRecord.Meta.table_name,
                       Key={"pk": {"S": stream_pk(scope, stream)}, "sk": {"S": STREAM_SK}})
    return record


def test_the_scope_partition_holds_one_small_entry_per_stream_that_its_life_never_rewrites(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", StreamConfiguration(tags=frozenset({"blue"})))
    entry_before = _scope_partition(scope)
    assert [(type(item), item.sk, item.tags) for item in entry_before] == [(StreamNameRecord, "s", {"blue"})]
    assert len(entry_before[0].serialize()) < 10  # a few names and numbers, whatever the stream's size

    txn = controller.transactions.begin(scope, "s")
    controller.transactions.commit(scope, "s", txn.txn_id)
    tasks.seal_stream(scope, "s")
    # A transaction and a workflow changed the stream's record, in its own partition, not the scope's.
    assert [item.serialize() for item in _scope_partition(scope)] == [entry_before[0].serialize()]
    assert controller.store.get_stream(scope, "s").pk == stream_pk(scope, "s")

    tasks.delete_stream(scope, "s")
    assert _scope_partition(scope) == []  # the entry goes with the record
    assert tasks.list_streams(scope)[0] == []


def test_a_tag_change_reaches_the_listing_and_a_late_finisher_writes_no_old_tags(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", StreamConfiguration(tags=frozenset({"a"})))
    stale = controller.store.get_stream(scope, "s")
    tasks.update_stream(scope, "s", StreamConfiguration(tags=frozenset({"b"})))
    assert tasks.list_streams(scope, tag="b")[0] == ["s"] and tasks.list_streams(scope, tag="a")[0] == []

    # A tag write of a record read before the update (a finisher resuming late) is refused.
    with pytest.raises(WriteConflict):
        controller.store.list_with_tags(stale, {"a"})
    assert tasks.list_streams(scope, tag="b")[0] == ["s"]


def test_a_record_of_an_older_release_is_listed_then_moved_on_first_read_with_its_version(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "old", StreamConfiguration(tags=frozenset({"t"})))
    tasks.create_stream(scope, "new", StreamConfiguration())
    before = _as_older_release(scope, "old")

    # Listed, and filtered by tag, while still under the scope.
    assert tasks.list_streams(scope)[0] == ["new", "old"]
    assert tasks.list_streams(scope, tag="t")[0] == ["old"]
    assert controller.store.scope_has_streams(scope)

    moved = controller.store.get_stream(scope, "old")
    assert (moved.pk, moved.sk) == (stream_pk(scope, "old"), STREAM_SK)
    assert (moved.version, moved.created_ms, moved.configuration) == (before.version, before.created_ms,
                                                                         before.configuration)
    entries = {item.sk: item for item in _scope_partition(scope)}
    assert isinstance(entries["old"], StreamNameRecord) and entries["old"].tags == {"t"}
    assert tasks.list_streams(scope, tag="t")[0] == ["old"]

    # It is a working stream: updated, sealed, deleted with its entry.
    tasks.update_stream(scope, "old", StreamConfiguration(tags=frozenset({"u"})))
    assert tasks.list_streams(scope, tag="u")[0] == ["old"]
    assert controller.store.get_stream(scope, "old").version > before.version
    tasks.seal_stream(scope, "old")
    tasks.delete_stream(scope, "old")
    assert tasks.list_streams(scope)[0] == ["new"]


def test_a_workflow_in_flight_moves_with_its_record_to_the_new_keys_index_shard(controller, scope):
    tasks = controller.streams
    tasks.create_stream(scope, "s", StreamConfiguration())
    record = controller.store.get_stream(scope, "s")
    new_shard = workflow_shard(stream_pk(scope, "s"), STREAM_SK)
    old_shard = workflow_shard(scope_pk(scope), "s")
    if old_shard == new_shard:  # both keys may hash to one shard; the move must still be seen to recompute it
        old_shard = "wf#0" if new_shard != "wf#0" else "wf#1"
    controller.store.update(record, [StreamRecord.workflow.set({"name": "seal"}), StreamRecord.state.set("SEALING"),
                                     StreamRecord.pending.set(old_shard), StreamRecord.pending_since.set(1)], "raced")
    _as_older_release(scope, "s")

    moved = controller.store.get_stream(scope, "s")
    assert moved.workflow == {"name": "seal"} and moved.pending == new_shard
    pending = [(r.pk, r.sk) for r in controller.store.pending_workflows(older_than_ms=2)]
    assert (stream_pk(scope, "s"), STREAM_SK) in pending and (scope_pk(scope), "s") not in pending


def test_readers_racing_to_move_a_record_all_get_the_one_moved_record(controller, scope):
    controller.streams.create_stream(scope, "s", StreamConfiguration())
    before = _as_older_release(scope, "s")
    barrier, results = threading.Barrier(6), []

    def read() -> None:
        barrier.wait()
        try:
            results.append(controller.store.get_stream(scope, "s"))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            results.append(e)

    threads = [threading.Thread(target=read) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 6 and not [r for r in results if isinstance(r, Exception)], results
    assert {(r.pk, r.version, r.created_ms) for r in results} == {(stream_pk(scope, "s"), before.version,
                                                                   before.created_ms)}
    assert [type(item) for item in _scope_partition(scope)] == [StreamNameRecord]
