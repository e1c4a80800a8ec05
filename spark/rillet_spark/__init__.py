"""Rillet for PySpark: ``register(spark)`` makes ``format("rillet")`` available (see datasource.py)."""

try:
    from rillet_spark.datasource import RilletDataSource
except ModuleNotFoundError as missing:  # Spark 3.5 (EMR 7.x) has no Python Data Source API
    if missing.name != "pyspark.sql.datasource":
        raise
    import pyspark

    raise ImportError(f"rillet_spark needs Spark 4.0 or later (its Python Data Source API); this is Spark "
                      f"{pyspark.__version__}. Supported: Spark 4.0 (EMR emr-spark-8.0.0) to 4.3.") from None


from rillet_spark.lag import Lag, RilletLagListener, backlog_bytes


def register(spark) -> None:
    spark.dataSource.register(RilletDataSource)


__all__ = ["Lag", "RilletDataSource", "RilletLagListener", "backlog_bytes", "register"]
