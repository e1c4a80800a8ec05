"""Rillet for PySpark: ``register(spark)`` makes ``format("rillet")`` available (see datasource.py)."""

from rillet_spark.datasource import RilletDataSource


def register(spark) -> None:  # noqa: ANN001 - a SparkSession
    spark.dataSource.register(RilletDataSource)


__all__ = ["RilletDataSource", "register"]
