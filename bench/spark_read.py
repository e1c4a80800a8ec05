"""Read N MB through the rillet data source and the same bytes as plain S3 objects with Spark's
binaryFile source, on the same moto server, in the same Spark session; print both and the ratio.

binaryFile reads S3 through Hadoop's s3a connector, which pyspark does not ship. The benchmark
fetches hadoop-aws and the AWS SDK bundle from PyPI (the sagemaker-pyspark package carries them)
into build/jars on first use. Run: ``.venv/bin/python -m bench.spark_read --mb 64``.
"""

from __future__ import annotations

import argparse
import glob
import os
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


def run(total_mb: int = 64, event_kb: int = 64) -> dict:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import rillet_spark

    jars = s3a_jars()
    with Stack(StackConfig.ephemeral()) as stack:
        scope = "bench" + uuid.uuid4().hex[:8]
        manager = rillet.StreamManager(stack.controller_url)
        manager.create_scope(scope)
        manager.create_stream(scope, "data")
        factory = rillet.EventStreamClientFactory(scope, stack.controller_url)
        payload = os.urandom(event_kb * 1024)
        with factory.create_event_writer("data", rillet.BytesSerializer()) as writer:
            for _ in range(total_mb * 1024 // event_kb):
                writer.write_event(payload, routing_key="k")
        s3 = boto3.client("s3", endpoint_url=stack.moto.url, region_name="us-east-1")
        block = os.urandom(MB)
        for i in range(total_mb):
            s3.put_object(Bucket=stack.deployment.bucket, Key=f"raw/{scope}/{i:05d}", Body=block)

        builder = (SparkSession.builder.master("local[2]").appName("rillet-bench").config("spark.ui.enabled", "false")
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
            source = (spark.read.format("rillet").option("endpoint", stack.controller_url)
                      .option("stream", f"{scope}/data").option("s3_endpoint", stack.moto.url)
                      .option("max_partition_bytes", str(32 * MB)))
            raw = spark.read.format("binaryFile").load(f"s3a://{stack.deployment.bucket}/raw/{scope}/")
            source.load().selectExpr("sum(length(event))").collect()  # warm both paths once
            raw.selectExpr("sum(length(content))").collect()
            timings = {}
            for name, frame, column in (("rillet", source.load(), "event"), ("binaryFile", raw, "content")):
                started = time.perf_counter()
                (size,) = frame.selectExpr(f"sum(length({column}))").collect()[0]
                timings[name] = (time.perf_counter() - started, size)
        finally:
            spark.stop()
    rillet_s, rillet_bytes = timings["rillet"]
    raw_s, raw_bytes = timings["binaryFile"]
    assert rillet_bytes == raw_bytes == total_mb * MB, (rillet_bytes, raw_bytes)
    return {"total_mb": total_mb, "event_kb": event_kb, "rillet_mb_s": total_mb / rillet_s,
            "binaryfile_mb_s": total_mb / raw_s, "ratio": raw_s / rillet_s}


def report(result: dict) -> str:
    return (f"spark read: {result['total_mb']} MB as {result['event_kb']} KiB events: rillet data source "
            f"{result['rillet_mb_s']:.1f} MB/s, binaryFile on the same bytes {result['binaryfile_mb_s']:.1f} MB/s, "
            f"ratio {result['ratio']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--event-kb", type=int, default=64)
    args = parser.parse_args()
    print(report(run(args.mb, args.event_kb)))


if __name__ == "__main__":
    main()
