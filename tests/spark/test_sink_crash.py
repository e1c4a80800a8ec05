"""The streaming sink through a driver killed (SIGKILL, its whole process group: Python, the JVM, the
Python workers) while the server commits a batch: the server finishes the commit (transactions and sink
record), Spark never records it in its commit log. The query restarted on the same checkpoint re-runs
that batch; the sink record proves it a duplicate, so no batch is lost and none is doubled."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import rillet
from controlplane.models import SinkRecord, stream_pk
from rillet.models import StreamConfiguration
from rillet_spark.options import _Options
from rillet_spark.sink import _StreamWriter

DRIVER = Path(__file__).with_name("sink_driver.py")


def _sink_record(scope, sink):
    try:
        return SinkRecord.get(stream_pk(scope, "out"), f"sink#{sink}", consistent_read=True)
    except SinkRecord.DoesNotExist:
        return None


@pytest.mark.timeout(300)
def test_a_driver_killed_while_the_server_commits_a_batch_neither_loses_nor_doubles_it(
        spark, stack, manager, deployment, tmp_path):
    scope = "crash" + uuid.uuid4().hex[:8]
    manager.create_scope(scope)
    for name in ("in", "out"):
        manager.create_stream(scope, name, StreamConfiguration())
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    with factory.create_event_writer("in", rillet.BytesSerializer()) as writer:
        for i in range(400):
            writer.write_event(f"e{i}".encode(), routing_key=f"k{i % 4}")
    checkpoint = tmp_path / "checkpoint"
    sink = _StreamWriter(_Options.parse({"endpoint": stack.controller_url, "stream": f"{scope}/out",
                                         "checkpointLocation": str(checkpoint)}, write=True))._sink()

    with open(tmp_path / "driver.log", "w") as log:
        driver = subprocess.Popen([sys.executable, str(DRIVER), stack.controller_url, stack.moto.url, scope,
                                   str(checkpoint)], start_new_session=True, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 150
        while (record := _sink_record(scope, sink)) is None or record.pending_batch is None:
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert record is None or record.last_batch < 0, "the commit went by unseen"
            assert time.monotonic() < deadline, "batch 0 was never committed"
            time.sleep(0.005)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # mid-commit: eight transactions to commit, then the record
        driver.wait()
    deadline = time.monotonic() + 60
    while (record := _sink_record(scope, sink)).last_batch < 0:  # the server finishes what it began
        assert time.monotonic() < deadline, "the server did not finish the batch's commit"
        time.sleep(0.1)
    assert not (checkpoint / "commits" / "0").exists()  # Spark never recorded batch 0: it will run it again

    def read_out():
        return sorted(bytes(r.event).decode() for r in spark.read.format("rillet")
                      .option("endpoint", stack.controller_url).option("stream", f"{scope}/out")
                      .option("s3_endpoint", stack.moto.url).load().collect())

    assert read_out() == sorted(f"e{i}" for i in range(400))
    query = (spark.readStream.format("rillet").option("endpoint", stack.controller_url)
             .option("stream", f"{scope}/in").option("s3_endpoint", stack.moto.url).load().select("event")
             .writeStream.format("rillet").option("endpoint", stack.controller_url).option("stream", f"{scope}/out")
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        assert (checkpoint / "commits" / "0").exists()  # batch 0 ran again, as a proven duplicate
        with factory.create_event_writer("in", rillet.BytesSerializer()) as writer:
            for i in range(400, 450):
                writer.write_event(f"e{i}".encode(), routing_key="k")
        query.processAllAvailable()
    finally:
        query.stop()
    assert read_out() == sorted(f"e{i}" for i in range(450))
    assert _sink_record(scope, sink).last_batch >= 1
