"""An asset that exports a stream range to Parquet through PySpark (local mode here, EMR at scale)."""

import os
import sys

from dagster import AssetExecutionContext, Config, MaterializeResult, asset

from dagster_project.resources import RilletDeployment


class ExportConfig(Config):
    stream: str  # "scope/stream"
    output: str  # a path or URL Spark can write Parquet to
    start_cut: str | None = None
    end_cut: str | None = None
    encoding: str = "binary"
    spark_master: str = "local[2]"


@asset(description="A stream range copied to Parquet by the rillet PySpark data source.")
def stream_export(context: AssetExecutionContext, config: ExportConfig, rillet: RilletDeployment) -> MaterializeResult:
    from pyspark.sql import SparkSession

    from rillet_spark.export import export

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(config.spark_master).appName(f"rillet-export-{config.stream}")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        count = export(spark, rillet.controller_url, config.stream, config.output, start_cut=config.start_cut,
                       end_cut=config.end_cut, encoding=config.encoding, s3_endpoint=rillet.endpoint_url)
    finally:
        spark.stop()
    context.log.info("exported %d events of %s to %s", count, config.stream, config.output)
    return MaterializeResult(metadata={"events": count, "output": config.output, "stream": config.stream})
