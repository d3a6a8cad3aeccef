"""Test DAG: a large write of ids and 256-float32 embeddings (Parquet files, the reader picked by
default) through LanceSparkWriteOperator (tests/airflow/operators/test_spark_scale.py and
bench/bench_spark_scale.py measure its memory). The source folder, the dataset's folder and the
Spark connection (``spark_default``: local[2]; ``spark_cluster``: the standalone cluster) come from
LANCE_SCALE_* variables, set before parsing."""

from __future__ import annotations

import datetime as dt
import os

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from spark_scale import DIM

ROOT = os.environ.get("LANCE_SCALE_ROOT", "/tmp/airflow-lance-scale")
SOURCE = os.environ.get("LANCE_SCALE_SOURCE", f"{ROOT}/source")
CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.executor.memory": "512m",
        "spark.scheduler.minRegisteredResourcesRatio": "1.0"}

with DAG("lance_test_spark_scale", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    LanceSparkWriteOperator(task_id="write", uri=f"{ROOT}/scale.lance", mode="create", source_path=SOURCE,
                            fixed_size_lists={"embedding": DIM}, lance_conn_id="lance_test",
                            spark_conn_id=os.environ.get("LANCE_SCALE_SPARK_CONN", "spark_default"), conf=CONF)
