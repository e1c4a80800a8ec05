"""A local Spark session (local[2]) with the rillet data source registered, once per test session."""

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Python workers and the data source planner
    from pyspark.sql import SparkSession

    import rillet_spark

    session = (SparkSession.builder.master("local[2]").appName("rillet-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    expected = os.environ.get("RILLET_SPARK_VERSION")  # set by `make test`'s run on EMR's Spark line
    assert not expected or session.version.startswith(expected), f"Spark {session.version}, not {expected}"
    rillet_spark.register(session)
    yield session
    session.stop()
