"""Spark's own Parquet write of the scale test's source files (the comparison of tests/airflow/spark_scale.py):

    spark-submit [--master ...] [--conf ...] scale_parquet_job.py <source directory> <output directory>
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession

if __name__ == "__main__":
    source, output = sys.argv[1], sys.argv[2]
    spark = SparkSession.builder.appName("scale-parquet").getOrCreate()
    start = time.monotonic()
    spark.read.parquet(source).write.parquet(output)
    print(f"scale parquet job: {source} written in {time.monotonic() - start:.2f} s", flush=True)
    spark.stop()
