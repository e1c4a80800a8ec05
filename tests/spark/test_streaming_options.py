"""Per-trigger limits in events (with and without one in bytes), Trigger.AvailableNow and several streams
in one source, with real local Spark against the standalone stack, on every Spark `make test` runs."""

import json
import uuid

import pyspark
import pytest

import rillet
from rillet.models import ScalingPolicy, StreamConfiguration

# Spark 4.2 added Trigger.AvailableNow (and admission control) to Python stream sources.
AVAILABLE_NOW = tuple(int(n) for n in pyspark.__version__.split(".")[:2]) >= (4, 2)


@pytest.fixture
def scope(manager):
    name = "sparko" + uuid.uuid4().hex[:8]
    manager.create_scope(name)
    return name


def _write(stack, scope, stream, events, batch=512):
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    config = rillet.EventWriterConfig(batch_size_bytes=batch)  # quick writes: blocks of about `batch`
    with factory.create_event_writer(stream, rillet.BytesSerializer(), config) as writer:
        futures = [writer.write_event(event, routing_key=key) for key, event in events]
    return [f.result() for f in futures]


def _source(spark, stack, tmp_path, **options):
    reader = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
              .option("s3_endpoint", stack.moto.url).option("encoding", "utf-8"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _collect_into(batches):
    return lambda frame, batch_id: batches.append([(r.stream, r.event) for r in frame.collect()])


def test_max_events_per_trigger_alone_and_with_a_tighter_byte_limit(spark, stack, manager, scope, tmp_path):
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    events = [(f"k{i % 5}", f"e{i:03d}".ljust(30, ".").encode()) for i in range(250)]  # 34 framed bytes each
    _write(stack, scope, "s", events)  # blocks of ~15 events
    expected = sorted(e.decode() for _, e in events)

    def run(checkpoint, **limits):
        batches = []
        query = (_source(spark, stack, tmp_path, stream=f"{scope}/s", **limits).writeStream
                 .foreachBatch(_collect_into(batches)).option("checkpointLocation", str(tmp_path / checkpoint))
                 .trigger(processingTime="50 milliseconds").start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert sorted(event for batch in batches for _, event in batch) == expected  # each event once
        return [len(batch) for batch in batches if batch]

    by_events = run("events", max_events_per_trigger=50)
    assert max(by_events) <= 50 and len(by_events) >= 5, by_events  # 250 events
    both = run("both", max_events_per_trigger=50, max_bytes_per_trigger=30 * 34)
    assert max(both) <= 30 + 2 * 15 and len(both) > len(by_events), both  # bytes, give or take a block a segment


def test_trigger_available_now_reads_what_was_there_at_its_start_within_the_limit(
        spark, stack, manager, scope, tmp_path):
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    _write(stack, scope, "s", [(f"k{i % 5}", f"a{i}".encode()) for i in range(200)])
    batches = []

    def collect(frame, batch_id):
        _collect_into(batches)(frame, batch_id)
        if batch_id == 0:  # written while the run goes on: not the run's to read
            _write(stack, scope, "s", [("k", f"late{i}".encode()) for i in range(20)])

    def run():
        query = (_source(spark, stack, tmp_path, stream=f"{scope}/s", max_events_per_trigger=40).writeStream
                 .foreachBatch(collect).option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(90), "the AvailableNow run did not end"
        assert query.exception() is None

    run()
    first = [event for batch in batches for _, event in batch]
    sizes = [len(batch) for batch in batches if batch]
    assert max(sizes) <= 40
    if AVAILABLE_NOW:
        assert sorted(first) == sorted(f"a{i}" for i in range(200)) and len(sizes) >= 5, sizes
    else:  # Spark 4.0/4.1 run one batch, the first within the limit, and end (docs/spark.md)
        assert len(sizes) == 1 and len(first) == len(set(first)) <= 40, sizes
    while len({event for batch in batches for _, event in batch}) < 220:
        count = sum(len(batch) for batch in batches)
        run()  # the next runs go on from the checkpoint, never twice over an event
        assert sum(len(batch) for batch in batches) > count, "a run read nothing"
    read = [event for batch in batches for _, event in batch]
    assert sorted(read) == sorted([f"a{i}" for i in range(200)] + [f"late{i}" for i in range(20)])


def test_several_streams_in_one_source(spark, stack, manager, scope, tmp_path):
    other = "sparko" + uuid.uuid4().hex[:8]
    manager.create_scope(other)
    manager.create_stream(scope, "a", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    manager.create_stream(other, "b", StreamConfiguration())
    _write(stack, scope, "a", [(f"k{i % 3}", f"a{i}".encode()) for i in range(60)])
    _write(stack, other, "b", [("k", f"b{i}".encode()) for i in range(40)])
    streams = f"{scope}/a, {other}/b"
    a_middle = manager.get_tail(scope, "a")

    rows = (spark.read.format("rillet").option("endpoint", stack.controller_url).option("streams", streams)
            .option("s3_endpoint", stack.moto.url).option("encoding", "utf-8").load().collect())
    assert sorted((r.stream, r.event) for r in rows) == sorted(
        [(f"{scope}/a", f"a{i}") for i in range(60)] + [(f"{other}/b", f"b{i}") for i in range(40)])
    _write(stack, scope, "a", [("k", f"a-late{i}".encode()) for i in range(10)])
    rows = (spark.read.format("rillet").option("endpoint", stack.controller_url).option("streams", streams)
            .option("start_cut", a_middle.to_text()).option("encoding", "utf-8").load().collect())
    assert sorted(r.event for r in rows if r.stream == f"{scope}/a") == sorted(f"a-late{i}" for i in range(10))
    assert len([r for r in rows if r.stream == f"{other}/b"]) == 40  # no cut given for b: from its head

    batches = []

    def start():
        return (_source(spark, stack, tmp_path, streams=streams, max_events_per_trigger=40).writeStream
                .foreachBatch(_collect_into(batches)).option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="50 milliseconds").start())

    query = start()
    try:
        query.processAllAvailable()
        offsets = tmp_path / "checkpoint" / "offsets"
        last = max(offsets.iterdir(), key=lambda path: int(path.name) if path.name.isdigit() else -1)
        cuts = json.loads(last.read_text().splitlines()[-1])["cuts"]
        names = [cut.split("|")[0].split("@")[0] for cut in cuts]  # "scope/stream@incarnation|..."
        assert names == sorted([f"{scope}/a", f"{other}/b"])
        assert all(rillet.StreamCut.from_text(cut).incarnation is not None for cut in cuts)
    finally:
        query.stop()
    _write(stack, other, "b", [("k", f"b-late{i}".encode()) for i in range(25)])
    query = start()  # per-stream positions from the checkpoint: only b moves on
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert all(len(batch) <= 40 for batch in batches)
    read = sorted(pair for batch in batches for pair in batch)
    assert read == sorted([(f"{scope}/a", f"a{i}") for i in range(60)] +
                          [(f"{scope}/a", f"a-late{i}") for i in range(10)] +
                          [(f"{other}/b", f"b{i}") for i in range(40)] +
                          [(f"{other}/b", f"b-late{i}") for i in range(25)])


def test_stream_options_are_checked(spark, stack, manager, scope):
    manager.create_stream(scope, "a", StreamConfiguration())
    reader = spark.read.format("rillet").option("endpoint", stack.controller_url)
    with pytest.raises(Exception, match='"stream" and "streams" both'):
        reader.option("stream", f"{scope}/a").option("streams", f"{scope}/a").load().collect()
    with pytest.raises(Exception, match="the cut of .* is not one per stream of the source"):
        (spark.read.format("rillet").option("endpoint", stack.controller_url).option("streams", f"{scope}/a")
         .option("start_cut", f"{scope}/other|0:0.0:1.0:0").load().collect())
    frame = spark.createDataFrame([("x",)], "event string")
    with pytest.raises(Exception, match="a write goes to one stream"):
        (frame.write.format("rillet").option("endpoint", stack.controller_url)
         .option("streams", f"{scope}/a,{scope}/b").mode("append").save())
