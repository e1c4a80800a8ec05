"""Rillet for PySpark: ``register(spark)`` makes ``format("rillet")`` available (see datasource.py)."""

from rillet_spark.datasource import RilletDataSource


def register(spark) -> None:
    spark.dataSource.register(RilletDataSource)


__all__ = ["RilletDataSource", "register"]
