"""Copy a stream range to Parquet: the body of the EMR job script and of the Dagster export asset."""

from __future__ import annotations

from pyspark.sql import SparkSession

from rillet_spark.datasource import RilletDataSource


def export(spark: SparkSession, endpoint: str, stream: str, output: str, *, start_cut: str | None = None,
           end_cut: str | None = None, encoding: str = "binary", s3_endpoint: str | None = None) -> int:
    """Write the events of ``stream`` ("scope/stream") between two cuts to Parquet; returns the count."""
    spark.dataSource.register(RilletDataSource)
    reader = spark.read.format("rillet").option("endpoint", endpoint).option("stream", stream)
    for name, value in (("start_cut", start_cut), ("end_cut", end_cut), ("encoding", encoding),
                        ("s3_endpoint", s3_endpoint)):
        if value is not None:
            reader = reader.option(name, value)
    frame = reader.load().cache()
    frame.write.mode("overwrite").parquet(output)
    count = frame.count()
    frame.unpersist()
    return count
