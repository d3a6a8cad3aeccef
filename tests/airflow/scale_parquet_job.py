"""Spark's own Parquet write of the scale test's source (the comparison of tests/airflow/spark_scale.py):

    spark-submit [--master ...] [--conf ...] scale_parquet_job.py <rows> <partitions> <output directory>
"""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from spark_scale import source_sql  # noqa: E402

if __name__ == "__main__":
    rows, partitions, output = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    spark = SparkSession.builder.appName("scale-parquet").getOrCreate()
    start = time.monotonic()
    spark.sql(source_sql(rows, partitions)).write.parquet(output)
    print(f"scale parquet job: {rows} rows written in {time.monotonic() - start:.2f} s", flush=True)
    spark.stop()
