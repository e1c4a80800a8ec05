"""The backlog in a streaming query's progress: on Spark 4.2+ the source reports the streams' tails
(``reportLatestOffset``), and ``rillet_spark.backlog_bytes`` turns a progress into bytes behind per
stream: more than 0 while a rate-limited query is behind, 0 once it caught up."""

import uuid

import pyspark
import pytest

import rillet
from rillet.models import ScalingPolicy, StreamConfiguration
from rillet_spark import backlog_bytes

REPORTS_LATEST = tuple(int(n) for n in pyspark.__version__.split(".")[:2]) >= (4, 2)


@pytest.mark.skipif(not REPORTS_LATEST, reason="Spark 4.0/4.1 do not ask a Python source for its latest offset")
def test_a_rate_limited_query_reports_its_backlog_until_it_catches_up(spark, stack, manager, tmp_path):
    scope = "sparkl" + uuid.uuid4().hex[:8]
    manager.create_scope(scope)
    manager.create_stream(scope, "s", StreamConfiguration(scaling_policy=ScalingPolicy.fixed(1)))
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    with factory.create_event_writer("s", rillet.BytesSerializer(),
                                     rillet.EventWriterConfig(batch_size_bytes=512)) as writer:
        for f in [writer.write_event(f"e{i:03d}".ljust(30, ".").encode(), routing_key="k") for i in range(200)]:
            f.result()
    query = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
             .option("s3_endpoint", stack.moto.url).option("stream", f"{scope}/s")
             .option("max_events_per_trigger", "50").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="50 milliseconds").start())
    try:
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    behind = [backlog_bytes(p)[f"{scope}/s"] for p in progress]
    assert len(behind) == 4 and behind[0] > behind[1] > behind[2] > 0  # 200 events, 50 a batch
    assert behind[-1] == 0
    assert backlog_bytes({"sources": [{"endOffset": "not ours", "latestOffset": None}]}) == {}
