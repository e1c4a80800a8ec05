"""The rillet PySpark data source with real local Spark against the standalone stack."""

import time
import uuid

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

import rillet
from controlplane.service import Controller
from rillet.connection import Connection
from rillet.models import RetentionPolicy, ScalingPolicy, StreamConfiguration
from standalone.resources import bind_all


@pytest.fixture
def scope(manager):
    name = "spark" + uuid.uuid4().hex[:8]
    manager.create_scope(name)
    return name


def _reader(spark, stack, stream, **options):
    reader = (spark.read.format("rillet").option("endpoint", stack.controller_url).option("stream", stream)
              .option("s3_endpoint", stack.moto.url))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader


def _write(stack, scope, stream, events, max_latency_ms=5, batch=16 * 1024):
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    config = rillet.EventWriterConfig(max_latency_ms=max_latency_ms, batch_size_bytes=batch)
    with factory.create_event_writer(stream, rillet.BytesSerializer(), config) as writer:
        futures = [writer.write_event(event, routing_key=key) for key, event in events]
    return [f.result() for f in futures]


def test_batch_read_returns_exactly_what_the_sdk_wrote(spark, stack, manager, scope):
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(3)))
    events = [(f"k{i % 7}", f"event-{i}-".encode() + bytes([i % 256]) * (i % 700)) for i in range(1500)]
    events += [("big", b"B" * 200_000), ("big", b"C" * 5)]  # a block large enough for its own S3 object
    acks = _write(stack, scope, "s", events)
    frame = _reader(spark, stack, f"{scope}/s", max_partition_bytes=50_000).load()
    assert frame.rdd.getNumPartitions() > 3  # ranges were split at event boundaries
    rows = frame.collect()
    assert sorted(r.event for r in rows) == sorted(e for _, e in events)
    located = {(r.segment_id, r.offset): r.event for r in rows}
    assert all(located[(a.segment_id, a.offset)] == e for a, (_, e) in zip(acks, events))
    assert {r.stream for r in rows} == {f"{scope}/s"}


def test_a_block_of_a_few_bytes_shares_a_partition_with_its_neighbour(spark, stack, manager, scope):
    """A small first and last block (the cost writer's first block, a tail still inline) ride with the
    large blocks beside them instead of costing a task each; min_partitions, which asks for a count,
    still gets one partition per block."""
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    large = [bytes([i]) * 300_000 for i in range(3)]  # each block large enough for an S3 object of its own
    events = [b"first", *large, b"last"]
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    with factory.create_event_writer("s", rillet.BytesSerializer()) as writer:
        for event in events:
            writer.write_event(event, routing_key="k").result()  # one block each
    segments = Connection(stack.controller_url).segments
    plan = segments.plan(scope, "s", 0, 0, segments.info(scope, "s", 0).length)
    assert [part.object_key is None for part in plan.parts] == [True, False, False, False, True]
    # a limit of one large frame (4-byte header + 300,000): without the small blocks' slack, 5 partitions
    folded = _reader(spark, stack, f"{scope}/s", max_partition_bytes=300_004).load()
    assert folded.rdd.getNumPartitions() == 3  # [first, large 0], [large 1], [large 2, last]
    assert sorted(r.event for r in folded.collect()) == sorted(events)
    counted = _reader(spark, stack, f"{scope}/s", max_partition_bytes=300_004, min_partitions=5).load()
    assert counted.rdd.getNumPartitions() == 5
    assert sorted(r.event for r in counted.collect()) == sorted(events)


def test_batch_read_between_cuts_and_as_text(spark, stack, manager, scope):
    manager.create_stream(scope, "s")
    _write(stack, scope, "s", [("k", f"first-{i}".encode()) for i in range(50)])
    middle = manager.get_tail(scope, "s")
    _write(stack, scope, "s", [("k", f"second-{i}".encode()) for i in range(30)])
    rows = _reader(spark, stack, f"{scope}/s", start_cut=middle.to_text(), encoding="utf-8").load().collect()
    assert sorted(r.event for r in rows) == sorted(f"second-{i}" for i in range(30))
    rows = _reader(spark, stack, f"{scope}/s", end_cut=middle.to_text(), encoding="utf-8").load().collect()
    assert sorted(r.event for r in rows) == sorted(f"first-{i}" for i in range(50))


def test_a_failed_write_job_leaves_nothing_visible(spark, stack, manager, scope):
    manager.create_stream(scope, "out", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))

    @F.udf(returnType=StringType())
    def explode_on_the_last_row(value):
        if value == "v-199":
            raise RuntimeError("task failure in the middle of a write")
        return value

    source = spark.createDataFrame([(f"v-{i}", f"k{i % 5}") for i in range(200)], "event string, routing_key string")
    failing = source.repartition(4).withColumn("event", explode_on_the_last_row("event"))
    with pytest.raises(PySparkException):
        (failing.write.format("rillet").option("endpoint", stack.controller_url).option("stream", f"{scope}/out")
         .mode("append").save())
    assert _reader(spark, stack, f"{scope}/out").load().count() == 0

    source.write.format("rillet").option("endpoint", stack.controller_url).option("stream", f"{scope}/out") \
        .mode("append").save()
    rows = _reader(spark, stack, f"{scope}/out", encoding="utf-8").load().collect()
    assert sorted(r.event for r in rows) == sorted(f"v-{i}" for i in range(200))


def _stream_until(query, done, timeout_s=90):
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "the streaming query did not catch up in time"
        assert query.exception() is None, query.exception()
        time.sleep(0.5)


def _events_of_each_batch(batches: dict):
    """A foreachBatch function keeping each batch's events under its id. Spark runs a batch again after
    a restart when the query stopped before its commit was logged (foreachBatch is at least once); the
    rerun has the same id and offsets, so it replaces its first run here, as an idempotent sink would."""
    return lambda frame, batch_id: batches.__setitem__(batch_id, [r.event for r in frame.collect()])


def _all_events(batches: dict) -> list:
    return [event for batch_id in sorted(batches) for event in batches[batch_id]]


def test_streaming_read_across_a_scale_keeps_per_key_order(spark, stack, manager, scope, tmp_path):
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    written = []

    def write(start, stop):
        events = [(f"k{i % 6}", f"k{i % 6}:{i}".encode()) for i in range(start, stop)]
        _write(stack, scope, "s", events)
        written.extend(e.decode() for _, e in events)

    batches = []
    write(0, 200)
    query = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
             .option("stream", f"{scope}/s").option("s3_endpoint", stack.moto.url).option("encoding", "utf-8").load()
             .writeStream.foreachBatch(lambda frame, batch_id: batches.append(
                 (batch_id, [(r.segment_id, r.offset, r.event) for r in frame.collect()])))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="500 milliseconds")
             .start())
    try:
        _stream_until(query, lambda: sum(len(rows) for _, rows in batches) >= 200)
        manager.scale_stream(scope, "s", [0], [(0.0, 0.5), (0.5, 1.0)])
        write(200, 400)
        epoch = manager.get_stream_info(scope, "s").current_epoch
        a, b = [s.segment_id for s in manager.get_stream_info(scope, "s").current_segments]
        manager.scale_stream(scope, "s", [a, b], [(0.0, 1.0)])
        write(400, 600)
        _stream_until(query, lambda: sum(len(rows) for _, rows in batches) >= 600)
    finally:
        query.stop()
    assert epoch == 1
    read = [event for _, rows in sorted(batches) for event in rows]
    assert sorted(e for _, _, e in read) == sorted(written)  # each event once
    for batch_id, rows in batches:
        segments_of_key = {}
        for segment, _, event in rows:
            segments_of_key.setdefault(event.split(":")[0], set()).add(segment)
        assert all(len(s) == 1 for s in segments_of_key.values()), f"batch {batch_id} mixes a key's segments"
    per_key = {}
    for batch_id, rows in sorted(batches):
        for _, offset, event in sorted(rows, key=lambda r: (r[0], r[1])):
            key, number = event.split(":")
            per_key.setdefault(key, []).append(int(number))
    assert all(numbers == sorted(numbers) for numbers in per_key.values())


def test_a_streaming_query_is_a_retention_subscriber(spark, stack, manager, scope, tmp_path, deployment):
    policy = RetentionPolicy.by_size(0).with_consumption(subscriber_timeout=600_000)
    manager.create_stream(scope, "s", StreamConfiguration(retention_policy=policy))
    _write(stack, scope, "s", [("k", f"e{i}".encode()) for i in range(100)])
    first_tail = manager.get_tail(scope, "s").offsets[0]
    consumed = []
    query = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
             .option("stream", f"{scope}/s").option("s3_endpoint", stack.moto.url).option("subscriber", "sparkq")
             .load().writeStream.foreachBatch(lambda frame, _: consumed.extend(r.offset for r in frame.collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="500 milliseconds")
             .start())
    controller = Controller.for_deployment(stack.deployment)
    try:
        _stream_until(query, lambda: len(consumed) >= 100)
        group = rillet.ReaderGroupManager(scope, stack.controller_url).get_reader_group("sparkq")
        assert group.config.retention_type == rillet.StreamDataRetention.MANUAL_RELEASE_AT_USER_STREAMCUT
        # Spark commits a batch's end offset once it moves on to the next batch: give it one.
        _write(stack, scope, "s", [("k", f"later{i}".encode()) for i in range(10)])
        _stream_until(query, lambda: len(consumed) >= 110)
        _stream_until(query, lambda: controller.retention.subscribers(scope, "s")[0].cut[0][3] >= first_tail)
        acknowledged = controller.retention.subscribers(scope, "s")[0].cut[0][3]
        decision = controller.retention.cycle(scope, "s")
    finally:
        query.stop()
        bind_all(deployment)
    assert decision.outcome == "truncated"
    head = manager.get_head(scope, "s").offsets[0]
    assert head == acknowledged  # exactly up to what the query committed, never past it
    assert head <= max(consumed) + 1


def test_a_restarted_streaming_query_resumes_where_it_committed(spark, stack, manager, scope, tmp_path):
    """Spark 4.0 and 4.1 call ``latestOffset()`` without the start: after a restart the reader must learn
    where the checkpoint left off, not begin again at the head (duplicates) nor skip ahead (loss)."""
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    batches = {}

    def start_query():
        return (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
                .option("stream", f"{scope}/s").option("s3_endpoint", stack.moto.url).option("encoding", "utf-8")
                .load().writeStream.foreachBatch(_events_of_each_batch(batches))
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="300 milliseconds").start())

    _write(stack, scope, "s", [(f"k{i % 5}", f"a{i}".encode()) for i in range(100)])
    query = start_query()
    try:
        _stream_until(query, lambda: len(_all_events(batches)) >= 100)
        manager.scale_stream(scope, "s", [0], [(0.0, 0.5), (0.5, 1.0)])  # the head is no longer a start
        _write(stack, scope, "s", [(f"k{i % 5}", f"b{i}".encode()) for i in range(50)])
        _stream_until(query, lambda: len(_all_events(batches)) >= 150)
    finally:
        query.stop()
    _write(stack, scope, "s", [(f"k{i % 5}", f"c{i}".encode()) for i in range(70)])
    query = start_query()
    try:
        _stream_until(query, lambda: len(_all_events(batches)) >= 220)
        time.sleep(1.5)  # a few more triggers: nothing may be read twice
    finally:
        query.stop()
    expected = [f"{p}{i}" for p, n in (("a", 100), ("b", 50), ("c", 70)) for i in range(n)]
    assert sorted(_all_events(batches)) == sorted(expected)


def test_options_are_checked_and_a_misspelt_one_is_named(spark, stack, manager, scope):
    manager.create_stream(scope, "s", StreamConfiguration())
    with pytest.raises(Exception, match="no option 'maxoffsetspertrigger'.*max_bytes_per_trigger"):
        _reader(spark, stack, f"{scope}/s", maxOffsetsPerTrigger=10).load().collect()
    with pytest.raises(Exception, match="start_cut and starting_timestamp_ms both say where to start"):
        _reader(spark, stack, f"{scope}/s", start_cut=manager.get_head(scope, "s").to_text(),
                starting_timestamp_ms=0).load().collect()
    with pytest.raises(Exception, match="for batch reads") as refused:
        (spark.readStream.format("rillet").option("endpoint", stack.controller_url).option("stream", f"{scope}/s")
         .option("end_cut", manager.get_tail(scope, "s").to_text()).load()
         .writeStream.format("console").start().processAllAvailable())
    assert "UnboundLocalError" not in str(refused.value)  # raised where pyspark's runner has its reader


def test_batch_reads_start_and_end_at_times(spark, stack, manager, scope):
    manager.create_stream(scope, "s", StreamConfiguration())
    _write(stack, scope, "s", [("k", f"early{i}".encode()) for i in range(20)])
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    _write(stack, scope, "s", [("k", f"late{i}".encode()) for i in range(30)])
    late = _reader(spark, stack, f"{scope}/s", encoding="utf-8", starting_timestamp_ms=middle).load().collect()
    early = _reader(spark, stack, f"{scope}/s", encoding="utf-8", ending_timestamp_ms=middle).load().collect()
    assert sorted(r.event for r in late) == sorted(f"late{i}" for i in range(30))
    assert sorted(r.event for r in early) == sorted(f"early{i}" for i in range(20))


def test_a_stream_query_starts_at_the_tail_and_reads_a_backlog_in_bounded_batches(
        spark, stack, manager, scope, tmp_path):
    """``starting_position=tail`` skips what was written before the query (Kafka's ``latest``);
    ``max_bytes_per_trigger`` cuts a backlog into batches of about that size (whole appended blocks)."""
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    _write(stack, scope, "s", [("k", b"before") for _ in range(10)])
    batches = []
    query = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
             .option("stream", f"{scope}/s").option("s3_endpoint", stack.moto.url).option("encoding", "utf-8")
             .option("starting_position", "tail").option("max_bytes_per_trigger", 4096).load()
             .writeStream.foreachBatch(lambda frame, batch_id: batches.append(
                 [(r.segment_id, r.offset, r.event) for r in frame.collect()]))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="200 milliseconds")
             .start())
    try:
        _stream_until(query, lambda: query.lastProgress is not None)
        query.stop()
        # A backlog of ~40 KB in ~1 KB blocks, then the query again from its checkpoint.
        events = [(f"k{i % 7}", f"e{i:04d}".ljust(100, ".").encode()) for i in range(400)]
        _write(stack, scope, "s", events, max_latency_ms=1000, batch=1024)
        query = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
                 .option("stream", f"{scope}/s").option("s3_endpoint", stack.moto.url).option("encoding", "utf-8")
                 .option("starting_position", "tail").option("max_bytes_per_trigger", 4096).load()
                 .writeStream.foreachBatch(lambda frame, batch_id: batches.append(
                     [(r.segment_id, r.offset, r.event) for r in frame.collect()]))
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="100 milliseconds").start())
        _stream_until(query, lambda: sum(len(b) for b in batches) >= 400)
    finally:
        query.stop()
    read = [event for batch in batches for _, _, event in batch]
    assert sorted(read) == sorted(e.decode() for _, e in events)  # nothing before the start, each event once
    sizes = [len(batch) * (100 + 4) for batch in batches if batch]  # framed bytes of each batch
    assert len(sizes) >= 8, sizes
    assert max(sizes) <= 4096 + 2 * 1024 + 200, sizes  # the budget, give or take a block per segment


def test_data_truncated_behind_a_stopped_query_fails_it_by_default_or_is_skipped(spark, stack, manager, scope,
                                                                                tmp_path):
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    batches = {}

    def start_query(**options):
        reader = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
                  .option("stream", f"{scope}/s").option("s3_endpoint", stack.moto.url).option("encoding", "utf-8"))
        for key, value in options.items():
            reader = reader.option(key, value)
        return (reader.load().writeStream.foreachBatch(_events_of_each_batch(batches))
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="200 milliseconds").start())

    _write(stack, scope, "s", [("k", f"a{i}".encode()) for i in range(50)])
    query = start_query()
    try:
        _stream_until(query, lambda: len(_all_events(batches)) >= 50)
        query.processAllAvailable()  # its last batch committed: a rerun would meet the truncation below
    finally:
        query.stop()
    _write(stack, scope, "s", [("k", f"b{i}".encode()) for i in range(50)])
    Connection(stack.controller_url).controller.truncate_stream(scope, "s", manager.get_tail(scope, "s").offsets)
    _write(stack, scope, "s", [("k", f"c{i}".encode()) for i in range(30)])

    query = start_query()
    deadline = time.monotonic() + 60
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not query.isActive
    assert "were truncated before this query read them" in str(query.exception())
    assert "fail_on_data_loss=false" in str(query.exception())

    query = start_query(fail_on_data_loss="false")
    try:
        _stream_until(query, lambda: len(_all_events(batches)) >= 80)
        time.sleep(1)
    finally:
        query.stop()
    assert sorted(_all_events(batches)) == sorted([f"a{i}" for i in range(50)] + [f"c{i}" for i in range(30)])


def test_min_partitions_splits_a_segment_at_block_boundaries(spark, stack, manager, scope):
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    _write(stack, scope, "s", [("k", f"e{i:03d}".ljust(200, ".").encode()) for i in range(200)], max_latency_ms=1000,
           batch=2048)
    plain = _reader(spark, stack, f"{scope}/s", encoding="utf-8").load()
    split = _reader(spark, stack, f"{scope}/s", encoding="utf-8", min_partitions=6).load()
    assert plain.rdd.getNumPartitions() == 1
    assert split.rdd.getNumPartitions() >= 6
    assert sorted(r.event for r in split.collect()) == sorted(r.event for r in plain.collect())
    offsets = [r.offset for r in split.orderBy("offset").collect()]
    assert len(offsets) == len(set(offsets)) == 200


def test_streaming_writes_never_drop_a_batch_silently(spark, stack, manager, scope, tmp_path):
    """Two queries into one stream each keep their own sink (named from their checkpoints); a query under
    a sink id another query has moved past fails with the reason instead of losing its batches."""
    for name in ("in", "out", "out2"):
        manager.create_stream(scope, name, StreamConfiguration())

    def copy(checkpoint, out="out", **options):
        writer = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
                  .option("stream", f"{scope}/in").option("s3_endpoint", stack.moto.url).option("encoding", "utf-8")
                  .load().select("event").writeStream.format("rillet").option("endpoint", stack.controller_url)
                  .option("stream", f"{scope}/{out}").option("checkpointLocation", str(tmp_path / checkpoint)))
        for key, value in options.items():
            writer = writer.option(key, value)
        return writer.trigger(processingTime="200 milliseconds").start()

    def count(stream):
        return _reader(spark, stack, f"{scope}/{stream}").load().count()

    _write(stack, scope, "in", [("k", f"e{i}".encode()) for i in range(100)])
    first, second = copy("a"), copy("b")
    try:
        _stream_until(first, lambda: count("out") >= 200)
    finally:
        first.stop()
        second.stop()
    assert count("out") == 200  # both queries' events, each once

    shared = copy("c", out="out2", sink_id="shared")
    try:
        _stream_until(shared, lambda: count("out2") >= 100)
        _write(stack, scope, "in", [("k", f"f{i}".encode()) for i in range(10)])
        _stream_until(shared, lambda: count("out2") >= 110)
    finally:
        shared.stop()
    late = copy("d", out="out2", sink_id="shared")  # a fresh checkpoint under a used sink id
    deadline = time.monotonic() + 90
    while late.isActive and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not late.isActive
    assert "is not a re-execution" in str(late.exception())
    assert count("out2") == 110


def test_a_query_of_a_stream_deleted_and_created_again_fails_rather_than_reading_the_new_one(
        spark, stack, manager, scope, tmp_path):
    """Spark's offsets name the stream incarnation (``scope/stream@<created_at_ms>|...``): once the name
    holds a new stream, the query fails with StreamRecreated instead of reading the new stream at the
    old offsets (which skipped or garbled its events), and the error says how to go on: the query
    started as it says (a new checkpoint location) reads the new stream from its head. A batch read
    from an old cut is refused too."""
    config = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1))
    manager.create_stream(scope, "s", config)
    _write(stack, scope, "s", [("k", f"a:{i}".encode()) for i in range(50)])
    old_tail = manager.get_tail(scope, "s")
    batches = {}

    def start_query(checkpoint="checkpoint"):
        return (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
                .option("stream", f"{scope}/s").option("s3_endpoint", stack.moto.url).option("encoding", "utf-8")
                .load().writeStream.foreachBatch(_events_of_each_batch(batches))
                .option("checkpointLocation", str(tmp_path / checkpoint)).trigger(processingTime="300 milliseconds")
                .start())

    # The query is stopped across the delete and the create: a running one may poll in between and fail
    # with StreamNotFound instead, which is right but not what this test is about.
    query = start_query()
    try:
        _stream_until(query, lambda: sum(len(events) for events in batches.values()) >= 50)
    finally:
        query.stop()
    manager.seal_stream(scope, "s")
    manager.delete_stream(scope, "s")
    manager.create_stream(scope, "s", config)
    _write(stack, scope, "s", [("k", f"b:{i}".encode()) for i in range(80)])
    query = start_query()
    try:
        deadline = time.monotonic() + 60
        while query.exception() is None and query.isActive:
            assert time.monotonic() < deadline, "the query went on after its stream was re-created"
            time.sleep(0.3)
        assert "StreamRecreated" in str(query.exception())
        assert "start the query with a new checkpointLocation" in str(query.exception())
    finally:
        query.stop()
    assert not any(event.startswith("b:") for events in batches.values() for event in events)
    batches.clear()
    query = start_query("new-checkpoint")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert _all_events(batches) == [f"b:{i}" for i in range(80)]
    with pytest.raises(Exception, match="StreamRecreated"):
        _reader(spark, stack, f"{scope}/s", start_cut=old_tail.to_text()).load().collect()
