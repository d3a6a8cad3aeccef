"""Spark sources for the write operator tests (shipped to the job with ``py_files``)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

EXTRA_IDS = (1000, 1400)


def extra_rows(spark: SparkSession) -> DataFrame:
    """400 rows shaped like the test dataset (id, label, values), in Spark's own Arrow types."""
    ids = spark.range(*EXTRA_IDS, numPartitions=2)
    return ids.select(
        F.col("id"),
        F.concat(F.lit("extra-"), F.col("id").cast("string")).alias("label"),
        F.array(F.col("id").cast("double"), F.lit(0.5)).alias("values"),
    )


def vector_rows(spark: SparkSession) -> DataFrame:
    """300 rows with two vector columns: ``embedding`` (2 floats) marked as a fixed-size list
    in its Spark metadata (lance-spark's convention), ``other`` (3 floats) left unmarked."""
    ids = spark.range(0, 300, 1, 3)
    return ids.select(
        F.col("id"),
        F.concat(F.lit("new-"), F.col("id").cast("string")).alias("label"),
        F.array(F.col("id").cast("float"), F.lit(0.5).cast("float")).alias(
            "embedding", metadata={"arrow.fixed-size-list.size": 2}),
        F.array(F.lit(1.0), F.lit(2.0), F.col("id").cast("double")).alias("other"),
    )


def slow_rows(spark: SparkSession) -> DataFrame:
    """Never returns in time: the job sits in the driver until it is killed."""
    import time

    time.sleep(600)
    return spark.range(1)
