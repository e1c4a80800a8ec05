"""A streaming query's backlog: ``RilletLagListener`` asks the controller at each progress report (every
Spark 4 line); on Spark 4.2+ the source also reports the streams' tails (``reportLatestOffset``), and
``rillet_spark.backlog_bytes`` turns a progress into bytes behind per stream. Both read more than 0
while a rate-limited query is behind, 0 once it caught up."""

import time
import uuid

import pyspark
import pytest

import rillet
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet_spark import RilletLagListener, backlog_bytes

REPORTS_LATEST = tuple(int(n) for n in pyspark.__version__.split(".")[:2]) >= (4, 2)


def _stream_of(manager, stack, events: int) -> str:
    """A new one-segment stream holding ``events`` equal 30-byte events (in blocks of 512 bytes); its name."""
    scope = "sparkl" + uuid.uuid4().hex[:8]
    manager.create_scope(scope)
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    with factory.create_event_writer("s", rillet.BytesSerializer(),
                                     rillet.EventWriterConfig(batch_size_bytes=512)) as writer:
        for f in [writer.write_event(f"e{i:03d}".ljust(30, ".").encode(), routing_key="k") for i in range(events)]:
            f.result()
    return f"{scope}/s"


def _rate_limited_query(spark, stack, name: str, tmp_path):
    """A query of ``name`` reading 50 events a batch into nothing, started."""
    return (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
            .option("s3_endpoint", stack.moto.url).option("stream", name)
            .option("max_events_per_trigger", "50").load()
            .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="50 milliseconds").start())


@pytest.mark.skipif(not REPORTS_LATEST, reason="Spark 4.0/4.1 do not ask a Python source for its latest offset")
def test_a_rate_limited_query_reports_its_backlog_until_it_catches_up(spark, stack, manager, tmp_path):
    name = _stream_of(manager, stack, 200)
    query = _rate_limited_query(spark, stack, name, tmp_path)
    try:
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    behind = [backlog_bytes(p)[name] for p in progress]
    assert len(behind) == 4 and behind[0] > behind[1] > behind[2] > 0  # 200 events, 50 a batch
    assert behind[-1] == 0


def test_both_helpers_read_the_progress_of_query_last_progress_on_every_line(spark, stack, manager, tmp_path):
    """``query.lastProgress`` on Spark 4.0 holds each source offset as the repr of its parsed JSON
    (``"{'cuts': [...]}"``), on 4.2+ as JSON: ``measure`` and ``backlog_bytes`` read both. After the
    first of two batches of 50 equal events, half the stream is behind; ``backlog_bytes``
    reads it on 4.2+, and 0 on 4.0/4.1, where the progress' ``latestOffset`` is the batch's end."""
    name = _stream_of(manager, stack, 100)
    tail_bytes = sum(p.offset for p in manager.get_tail(*name.split("/")).positions)
    query = _rate_limited_query(spark, stack, name, tmp_path)
    try:
        query.processAllAvailable()
        first = next(p for p in query.recentProgress if p["numInputRows"])
    finally:
        query.stop()
    assert first["numInputRows"] == 50
    lag = RilletLagListener(stack.controller_url).measure(first)
    assert lag is not None and lag.streams == {name: tail_bytes // 2}
    assert backlog_bytes(first) == {name: tail_bytes // 2 if REPORTS_LATEST else 0}


def test_a_progress_offset_that_does_not_parse_raises_rather_than_reading_no_backlog(stack):
    """Another source's offset (JSON, or its repr on 4.0) is none of the helpers' business; text
    that is neither would have read as no backlog: it raises, naming the text."""
    others = {"sources": [{"startOffset": "None", "endOffset": '{"orders": {"0": 12}}', "latestOffset": "12"},
                          {"startOffset": None, "endOffset": "{'orders': {'0': 12}}", "latestOffset": "None"}],
              "id": "q", "batchId": 0}
    assert backlog_bytes(others) == {}
    assert RilletLagListener(stack.controller_url).measure(others) is None
    garbled = {"sources": [{"endOffset": "{'cuts': ['a/s@1|0:0'", "latestOffset": "{'cuts': ['a/s@1|0:9'"}],
               "id": "q", "batchId": 0}
    with pytest.raises(ValueError, match="neither JSON nor a Python literal: .*cuts"):
        backlog_bytes(garbled)
    with pytest.raises(ValueError, match="neither JSON nor a Python literal: .*cuts"):
        RilletLagListener(stack.controller_url).measure(garbled)


def test_the_lag_listener_shows_a_rate_limited_query_fall_behind_and_catch_up(spark, stack, manager, tmp_path):
    """Rounds of 60 events, each followed by two progress reports of batches of at most 10: the lag
    grows round by round, per segment too, and reads 0 once the writes stop and the query caught up."""
    scope = "sparkl" + uuid.uuid4().hex[:8]
    name = f"{scope}/s"
    manager.create_scope(scope)
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(2)))
    lags = []
    listener = RilletLagListener(stack.controller_url, on_lag=lags.append)
    spark.streams.addListener(listener)
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    query = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
             .option("s3_endpoint", stack.moto.url).option("stream", name)
             .option("max_events_per_trigger", "10").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        behind = []
        with factory.create_event_writer("s", rillet.BytesSerializer()) as writer:
            for round_ in range(3):
                for i in range(60):
                    writer.write_event(f"r{round_}e{i:02d}".ljust(30, ".").encode(), routing_key=f"k{i}")
                writer.flush()
                behind.append(_second_report_from_now(lags))
        _wait(lambda: listener.latest[query.id].streams[name] == 0, "the query to catch up")
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    assert 0 < behind[0].streams[name] < behind[1].streams[name] < behind[2].streams[name]
    assert len(behind[2].segments[name]) == 2 and behind[2].metrics["maxBytesBehindLatest"] > 0
    assert listener.latest[query.id].metrics == {
        "minBytesBehindLatest": 0, "avgBytesBehindLatest": 0, "maxBytesBehindLatest": 0}


def _second_report_from_now(lags: list):
    """The lag of the second progress report from now: measured after now (the first may be under way)."""
    seen = len(lags)
    _wait(lambda: len(lags) >= seen + 2, "two progress reports")
    return lags[-1]


def _wait(condition, what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.05)
