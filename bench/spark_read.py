"""Read N MB of events through the rillet data source (once as 64-byte events, once as 64 KiB events)
and the same number of bytes as plain S3 objects with Spark's binaryFile source, on the same moto
server, in the same Spark session; print each and its ratio to binaryFile, and the time the same query
takes over an empty stream (what a query costs before any byte: planning in Spark's Python planner,
the controller's cuts and plans, task launch), which weighs on small reads. The rillet reads ask for
one partition per task slot (``min_partitions``); the small events once more in a task per 4 MiB
object (``max_partition_bytes``), which shows what a task costs besides its bytes.

binaryFile reads S3 through Hadoop's s3a connector, which pyspark does not ship. The benchmark
fetches hadoop-aws and the AWS SDK bundle from PyPI (the sagemaker-pyspark package carries them)
into build/jars on first use. Run: ``.venv/bin/python -m bench.spark_read --mb 16``.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import boto3

import rillet
from standalone.stack import Stack, StackConfig

MB = 1024 * 1024
SLOTS = 2  # Spark's task slots (local[2]): the machine's cores
JARS = Path(__file__).resolve().parent.parent / "build" / "jars"
JAR_SOURCE = "sagemaker-pyspark==1.4.5"
WANTED = ("hadoop-aws-", "aws-java-sdk-bundle-")
S3A_NUMERIC = {  # hadoop-aws 3.3 reads these as numbers; Spark 4's Hadoop 3.5 defaults them to "60s" etc.
    "fs.s3a.threads.keepalivetime": "60", "fs.s3a.connection.establish.timeout": "5000",
    "fs.s3a.connection.timeout": "200000", "fs.s3a.multipart.purge.age": "86400",
    "fs.s3a.connection.ttl": "60000", "fs.s3a.connection.idle.time": "60000",
    "fs.s3a.connection.acquisition.timeout": "60000", "fs.s3a.connection.request.timeout": "60000",
}


def s3a_jars() -> list[str]:
    jars = [j for j in glob.glob(str(JARS / "*.jar")) if Path(j).name.startswith(WANTED)]
    if len(jars) == len(WANTED):
        return jars
    JARS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    JAR_SOURCE, "-d", str(JARS)], check=True)
    (archive,) = glob.glob(str(JARS / "sagemaker_pyspark-*.tar.gz"))
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if Path(member.name).name.startswith(WANTED) and member.name.endswith(".jar"):
                member.name = Path(member.name).name
                tar.extract(member, JARS)
    os.remove(archive)
    return s3a_jars()


def _write_events(manager, factory, scope: str, size: int, total_mb: int) -> None:
    manager.create_stream(scope, f"e{size}")
    payload = os.urandom(size)
    with factory.create_event_writer(f"e{size}", rillet.BytesSerializer(),
                                     rillet.EventWriterConfig.cost_optimized()) as writer:
        for _ in range(total_mb * MB // size):
            writer.write_event(payload, routing_key="k")


def profile(total_mb: int = 8, size: int = 64) -> str:
    """Where the source's executor side spends a read of ``size``-byte events, outside Spark: its
    ``read()`` of every partition under cProfile (the second of two passes), split into waiting for
    plan parts (S3 GETs and read-API fetches of inline bytes run in fetching threads, ahead of the
    part being unframed: only the wait for them is on the read's path), unframing and the rest (Arrow
    batches, clients)."""
    import cProfile
    import pstats

    from rillet_spark.batch import _Reader
    from rillet_spark.options import _Options
    from rillet_spark.reading import _read

    with Stack(StackConfig.ephemeral()) as stack:
        scope = "bench" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        _write_events(manager, rillet.EventStreamClientFactory(scope, stack.controller_url), scope, size, total_mb)
        options = _Options.parse({"endpoint": stack.controller_url, "stream": f"{scope}/e{size}",
                                  "s3_endpoint": stack.moto.url, "max_partition_bytes": str(4 * MB)})
        partitions = _Reader(options).partitions()
        for _ in range(2):
            profiler = cProfile.Profile()
            started = time.perf_counter()
            profiler.enable()
            batches = [batch.num_rows for partition in partitions for batch in _read(options, partition)]
            profiler.disable()
            total_s = time.perf_counter() - started
    spent = {"waiting": 0.0, "_events": 0.0}
    for (file, _, function), (_, _, _, cumulative, _) in pstats.Stats(profiler).stats.items():
        if function == "_events":
            spent["_events"] += cumulative
        elif function == "result" and file.endswith(os.path.join("concurrent", "futures", "_base.py")):
            spent["waiting"] += cumulative
    parts = [len(partition.parts) for partition in partitions]
    return (f"executor-side read of {total_mb} MB of {size}-byte events ({sum(batches)} events, {len(partitions)} "
            f"partitions, {sum(parts)} plan parts, {len(batches)} record batches): {total_s * 1000:.0f} ms; "
            f"waiting for plan parts {spent['waiting'] * 1000:.0f} ms, unframing {spent['_events'] * 1000:.0f} ms, the rest "
            f"{(total_s - sum(spent.values())) * 1000:.0f} ms")


def run(total_mb: int = 16, event_sizes: tuple[int, ...] = (64, 64 * 1024), repeat: int = 3) -> dict:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import rillet_spark

    jars = s3a_jars()
    with Stack(StackConfig.ephemeral()) as stack:
        scope = "bench" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        manager.create_stream(scope, "empty")
        factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
        for size in event_sizes:
            _write_events(manager, factory, scope, size, total_mb)
        s3 = boto3.client("s3", endpoint_url=stack.moto.url, region_name="us-east-1")
        block = os.urandom(MB)
        for i in range(total_mb):
            s3.put_object(Bucket=stack.deployment.bucket, Key=f"raw/{scope}/{i:05d}", Body=block)

        builder = (SparkSession.builder.master(f"local[{SLOTS}]").appName("rillet-bench").config("spark.ui.enabled", "false")
                   .config("spark.jars", ",".join(jars))
                   .config("spark.hadoop.fs.s3a.endpoint", stack.moto.url)
                   .config("spark.hadoop.fs.s3a.path.style.access", "true")
                   .config("spark.hadoop.fs.s3a.connection.ssl.enabled", "false")
                   .config("spark.hadoop.fs.s3a.aws.credentials.provider",
                           "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
                   .config("spark.hadoop.fs.s3a.access.key", "standalone")
                   .config("spark.hadoop.fs.s3a.secret.key", "standalone"))
        for key, value in S3A_NUMERIC.items():
            builder = builder.config(f"spark.hadoop.{key}", value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        rillet_spark.register(spark)
        try:
            def read(stream: str, **options: str):
                return (spark.read.format("rillet").option("endpoint", stack.controller_url)
                        .option("stream", f"{scope}/{stream}").option("s3_endpoint", stack.moto.url)
                        .options(**options).load())

            # one partition per task slot, as binaryFile splits its files, and as a Kafka-source user sets
            # minPartitions to the executors' cores; then small events in a task per 4 MiB object
            sources = {f"rillet {size} B": (read(f"e{size}", min_partitions=str(SLOTS)), "event",
                                            total_mb * MB // size * size) for size in event_sizes}
            sources[f"rillet {event_sizes[0]} B, 4 MiB tasks"] = (
                read(f"e{event_sizes[0]}", max_partition_bytes=str(4 * MB)), "event",
                total_mb * MB // event_sizes[0] * event_sizes[0])
            sources["rillet, empty stream"] = (read("empty"), "event", None)
            sources["binaryFile"] = (spark.read.format("binaryFile").load(f"s3a://{stack.deployment.bucket}/raw/{scope}/"),
                                     "content", total_mb * MB)
            runs: dict[str, list[float]] = {name: [] for name in sources}
            for round_ in range(repeat + 1):  # round 0 warms each path; the sources take turns in each round
                for name, (frame, column, expected) in sources.items():
                    started = time.perf_counter()
                    (size,) = frame.selectExpr(f"sum(length({column}))").collect()[0]
                    if round_:
                        runs[name].append(time.perf_counter() - started)
                    assert size == expected, (name, size, expected)
        finally:
            spark.stop()
    timings = {name: statistics.median(times) for name, times in runs.items()}
    empty_s = timings.pop("rillet, empty stream")
    raw_s = timings["binaryFile"]
    return {"total_mb": total_mb, "repeat": repeat, "mb_s": {name: total_mb / t for name, t in timings.items()},
            "ratio": {name: raw_s / t for name, t in timings.items() if name != "binaryFile"}, "empty_s": empty_s,
            "spread": {name: (min(times), max(times)) for name, times in runs.items()}}


def report(result: dict) -> str:
    lines = [(f"spark read of {result['total_mb']} MB, local[{SLOTS}] on one moto server, median of {result['repeat']} "
              "turns (a run's fastest and slowest in brackets):")]
    lines += [f"  {name:<27} {rate:7.1f} MB/s" + (f"   {result['ratio'][name]:.2f} of binaryFile"
                                                   if name in result["ratio"] else "")
              + "   [{:.1f}-{:.1f} MB/s]".format(*(result["total_mb"] / t for t in result["spread"][name][::-1]))
              for name, rate in result["mb_s"].items()]
    lines.append(f"  rillet, the same query over an empty stream: {result['empty_s']:.2f} s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3, help="timed turns of each source, taken in turn")
    parser.add_argument("--profile", action="store_true", help="profile the source's read() outside Spark instead")
    args = parser.parse_args()
    print(profile(args.mb) if args.profile else report(run(args.mb, repeat=args.repeat)))


if __name__ == "__main__":
    main()
