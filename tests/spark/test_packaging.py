"""The job archive as docs/spark.md builds it (the SDK, the data source and their dependencies in a
venv-pack archive, nothing of the server, no Spark of its own) runs the export job under spark-submit."""

import os
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

import rillet
from rillet.models import StreamConfiguration

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"
SERVER_SIDE = ("dagster", "moto", "pynamodb", "controlplane", "dataplane", "pyspark", "py4j")


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("emr")
    venv = build / "venv"
    subprocess.run([str(UV), "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    subprocess.run([str(UV), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                    "--constraint", str(ROOT / "requirements.lock"), str(ROOT / "client"), str(ROOT / "spark"),
                    "venv-pack==0.2.0"], check=True)
    packed = build / "rillet-emr.tar.gz"
    subprocess.run([str(venv / "bin" / "venv-pack"), "--quiet", "-p", str(venv), "-o", str(packed)], check=True)
    return packed


@pytest.mark.timeout(300)
def test_the_job_archive_exports_a_stream_with_spark_submit(archive, stack, manager, tmp_path):
    with tarfile.open(archive) as tar:
        top = {Path(name).parts[3] for name in tar.getnames() if name.startswith("lib/python3.11/site-packages/")
               and len(Path(name).parts) > 3}
    assert {"rillet", "rillet_spark", "boto3", "pyarrow"} <= top
    assert not [name for name in top if name.split("-")[0].split(".")[0] in SERVER_SIDE], sorted(top)

    scope = "pack" + uuid.uuid4().hex[:8]
    manager.create_scope(scope)
    manager.create_stream(scope, "s", StreamConfiguration())
    factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
    with factory.create_event_writer("s", rillet.BytesSerializer()) as writer:
        for i in range(300):
            writer.write_event(f"event-{i}".encode(), routing_key=f"k{i % 3}")

    # As on EMR: Spark (spark-submit, pyspark) is the cluster's; Python and everything else the archive's.
    # Local mode runs the source's Python planner beside the driver, so the archive is unpacked in its
    # working directory too (EMR unpacks spark.archives there itself).
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": "./environment/bin/python",
           "PYSPARK_DRIVER_PYTHON": "./environment/bin/python", "PYTHONPATH": ""}
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "environment", filter="tar")
    output = tmp_path / "parquet"
    done = subprocess.run(
        [str(spark_submit), "--master", "local[2]", "--archives", f"{archive}#environment",
         "--conf", "spark.ui.enabled=false", str(ROOT / "spark" / "jobs" / "export_to_parquet.py"),
         "--endpoint", stack.controller_url, "--stream", f"{scope}/s", "--output", str(output),
         "--encoding", "utf-8", "--s3-endpoint", stack.moto.url],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False)
    (tmp_path / "stdout").write_text(done.stdout)
    (tmp_path / "stderr").write_text(done.stderr)
    assert done.returncode == 0, _problem(done.stdout + done.stderr)
    assert f"exported 300 events of {scope}/s" in done.stdout
    events = pq.read_table(output).column("event").to_pylist()
    assert sorted(events) == sorted(f"event-{i}" for i in range(300))


def _problem(output: str) -> str:
    """The Python error of a failed job without Spark's log lines and JVM frames."""
    return "\n".join(line for line in output.splitlines()
                     if not line.lstrip().startswith("at ") and not line[:2].isdigit())[-3000:]
