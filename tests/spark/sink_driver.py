"""A Spark driver of its own for tests/spark/test_sink_crash.py: copies stream ``in`` of a scope into
stream ``out`` through the rillet streaming sink until it is killed.

Usage: python sink_driver.py <controller url> <s3 url> <scope> <checkpoint dir>
"""

import os
import sys

os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark.sql import SparkSession

import rillet_spark


def main(endpoint: str, s3_endpoint: str, scope: str, checkpoint: str) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("rillet-sink-driver")
             .config("spark.ui.enabled", "false").getOrCreate())
    rillet_spark.register(spark)
    (spark.readStream.format("rillet").option("endpoint", endpoint).option("stream", f"{scope}/in")
     .option("s3_endpoint", s3_endpoint).option("min_partitions", "8").load().select("event")
     .writeStream.format("rillet").option("endpoint", endpoint).option("stream", f"{scope}/out")
     .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start()
     .awaitTermination())


if __name__ == "__main__":
    main(*sys.argv[1:])
