"""The Spark source's ``routing_key`` and ``timestamp`` columns (Kafka's ``key`` and ``timestamp``) from
events whose writer kept them (``EventWriterConfig.store_key_and_time``), and the sink keeping them,
with real local Spark against the standalone stack."""

import datetime
import time
import uuid

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

import rillet
from rillet.models import ScalingPolicy, StreamConfiguration

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in ms: a multiple of every window below


@pytest.fixture
def scope(manager):
    name = "sparkk" + uuid.uuid4().hex[:8]
    manager.create_scope(name)
    return name


def _write(stack, scope, stream, events, keep=True):
    """``events``: (event bytes, routing key, timestamp ms) written by the SDK, keeping key and time or not."""
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    config = rillet.EventWriterConfig(max_latency_ms=5, batch_size_bytes=16 * 1024, store_key_and_time=keep)
    with factory.create_event_writer(stream, rillet.BytesSerializer(), config) as writer:
        futures = [writer.write_event(event, routing_key=key, timestamp_ms=ms) for event, key, ms in events]
    return [f.result() for f in futures]


def _read(spark, stack, stream, streaming=False, **options):
    reader = (spark.readStream if streaming else spark.read).format("rillet") \
        .option("endpoint", stack.controller_url).option("stream", stream).option("s3_endpoint", stack.moto.url)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _rows(frame):
    """(event, routing key, timestamp in ms since the epoch) per row, sorted."""
    return sorted(tuple(r) for r in frame.selectExpr("event", "routing_key", "unix_millis(timestamp)").collect())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_batch_read_has_the_kept_key_and_time_and_nulls_for_plain_events(spark, stack, manager, scope):
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    plain = [(f"plain-{i}".encode(), f"k{i % 3}", None) for i in range(40)]
    kept = [(f"kept-{i}".encode(), f"k{i % 3}", T0 + i) for i in range(60)]
    kept += [(b"no key", None, T0 - 1), (b"big", "big", T0 + 7), (b"B" * 200_000, "big", T0 + 8)]  # S3 object
    _write(stack, scope, "s", plain, keep=False)
    before = _now_ms()
    kept += [(b"now", "k0", None)]  # the writer's now
    acks = _write(stack, scope, "s", kept)
    after = _now_ms()

    frame = _read(spark, stack, f"{scope}/s")
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in frame.schema.fields[4:]] == [
        ("routing_key", "string", True), ("timestamp", "timestamp", True)]
    rows = _rows(frame)
    now = [r for r in rows if r[0] == b"now"]
    assert len(now) == 1 and now[0][1] == "k0" and before <= now[0][2] <= after
    expected = sorted([(e, None, None) for e, _, _ in plain] + [(e, k, ms) for e, k, ms in kept if e != b"now"])
    assert [r for r in rows if r[0] != b"now"] == expected
    located = {(r.segment_id, r.offset): r.event for r in frame.select("segment_id", "offset", "event").collect()}
    assert all(located[(a.segment_id, a.offset)] == e for a, (e, _, _) in zip(acks, kept, strict=True))


def test_a_watermarked_window_count_over_kept_times(spark, stack, manager, scope, tmp_path):
    """``withWatermark("timestamp", ...)`` as over Kafka's source: windows close once the event times
    written after them pass their end by the delay, and each holds exactly its events."""
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    seconds = [1, 2, 3, 12, 15, 21, 22, 25, 29, 45]  # windows of 10 s: 3, 2, 4, closed; 1 still open
    _write(stack, scope, "s", [(f"e{s}".encode(), f"k{s % 4}", T0 + s * 1000) for s in seconds])
    closed = []
    counts = (_read(spark, stack, f"{scope}/s", streaming=True).withWatermark("timestamp", "5 seconds")
              .groupBy(F.window("timestamp", "10 seconds")).count()
              .selectExpr("unix_millis(window.start) AS start", "count"))
    query = (counts.writeStream.outputMode("append")
             .foreachBatch(lambda frame, _: closed.extend(tuple(r) for r in frame.collect()))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="200 milliseconds")
             .start())
    try:
        deadline = time.monotonic() + 60
        while len(closed) < 3:
            assert time.monotonic() < deadline, f"the windows did not close in time: {closed}"
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
        time.sleep(1)  # more triggers: the window of 45 s stays open (the watermark is at 40 s)
    finally:
        query.stop()
    assert sorted(closed) == [(T0, 3), (T0 + 10_000, 2), (T0 + 20_000, 4)]


def test_a_streaming_copy_keeps_key_and_time(spark, stack, manager, scope, tmp_path):
    """Read, write to another stream with the sink's defaults, read again: what was kept is kept; a plain
    event (no key, no time) gets the sink's now."""
    for name in ("in", "out"):
        manager.create_stream(scope, name, StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    kept = [(f"e{i}".encode(), f"k{i % 5}", T0 + i * 17) for i in range(50)] + [(b"keyless", None, T0)]
    _write(stack, scope, "in", kept)
    _write(stack, scope, "in", [(b"plain", "p", None)], keep=False)
    before = _now_ms()
    query = (_read(spark, stack, f"{scope}/in", streaming=True).writeStream.format("rillet")
             .option("endpoint", stack.controller_url).option("stream", f"{scope}/out")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    after = _now_ms()
    rows = _rows(_read(spark, stack, f"{scope}/out"))
    (copied_plain,) = [r for r in rows if r[0] == b"plain"]
    assert copied_plain[1] is None and before <= copied_plain[2] <= after
    assert [r for r in rows if r[0] != b"plain"] == sorted(kept)


def test_batch_writes_take_the_time_from_a_timestamp_column_or_write_plain_events(spark, stack, manager, scope):
    for name in ("timed", "plain", "refused"):
        manager.create_stream(scope, name)
    utc = datetime.UTC
    source = spark.createDataFrame([
        ("a", "ka", datetime.datetime(2026, 1, 1, 0, 0, 0, 123_999, tzinfo=utc)),  # microseconds: floor to ms
        ("b", None, datetime.datetime(1970, 1, 1, tzinfo=utc)),
        ("c", "kc", None),  # null: the writer's now
    ], "event string, routing_key string, event_time timestamp")

    def write(stream, **options):
        writer = source.write.format("rillet").option("endpoint", stack.controller_url) \
            .option("stream", f"{scope}/{stream}").mode("append")
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save()

    before = _now_ms()
    write("timed", timestamp_column="event_time")
    after = _now_ms()
    rows = _rows(_read(spark, stack, f"{scope}/timed", encoding="utf-8"))
    assert rows[:2] == [("a", "ka", T0 + 123), ("b", None, 0)]
    assert rows[2][:2] == ("c", "kc") and before <= rows[2][2] <= after

    write("plain", timestamp_column="event_time", store_key_and_time="false")
    assert _rows(_read(spark, stack, f"{scope}/plain", encoding="utf-8")) == [
        ("a", None, None), ("b", None, None), ("c", None, None)]

    with pytest.raises(PySparkException, match='"timestamp_column"'):
        source.withColumn("event_time", F.col("event_time").cast("string")).write.format("rillet") \
            .option("endpoint", stack.controller_url).option("stream", f"{scope}/refused") \
            .option("timestamp_column", "event_time").mode("append").save()
    with pytest.raises(PySparkException, match='option "store_key_and_time" is "true" or "false"'):
        write("refused", store_key_and_time="yes")
    assert _read(spark, stack, f"{scope}/refused").count() == 0
