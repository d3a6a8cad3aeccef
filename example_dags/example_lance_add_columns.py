"""Feature and embedding columns for a Lance table, computed on Spark, then an incremental backfill.

seed_products (a small product table; replaced on every run) -> add_features (Spark SQL
expressions: one Merge) -> add_embeddings (a ``module:function`` embedding model shipped with
``py_files``: one Merge) -> append_products (new rows arrive; their fragments read the new
columns as null) -> backfill_embeddings and backfill_features (``only_missing=True``: only the
appended fragments are computed, one DataReplacement each) -> report.

Runs as written (``airflow dags test example_lance_add_columns``) given a ``lance_default``
connection holding the dataset root, e.g.
``AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "file:///tmp/lance-example"}'``,
a ``spark_default`` connection (e.g. ``{"conn_type": "spark", "host": "local[2]"}``) and
``spark-submit`` on the PATH.
"""

from __future__ import annotations

import datetime as dt
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG, task

from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators.spark_add_columns import LanceSparkAddColumnsOperator

DATASET = "products.lance"  # below the lance_default connection's dataset root
EMBEDDINGS = str(pathlib.Path(__file__).resolve().parent / "lance_example_embeddings.py")
SPARK_CONF = {"spark.log.level": "WARN", "spark.ui.enabled": "false"}
FEATURES = {"price_with_tax": "CAST(ROUND(price * 1.19, 2) AS DOUBLE)", "name_upper": "upper(name)"}


def _products(start: int, rows: int) -> Any:
    import numpy as np
    import pyarrow as pa

    ids = np.arange(start, start + rows)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "name": pa.array([f"product {i} {'blue' if i % 3 else 'red'}" for i in ids]),
                     "price": pa.array((ids % 97) * 1.25 + 0.99)})


# [START example_lance_add_columns]
with DAG(
    dag_id="example_lance_add_columns",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    tags=["example", "lance", "spark"],
) as dag:

    @task
    def seed_products() -> int:
        import airflow_lance.core as lance

        uri = LanceHook().resolve_uri(DATASET)
        return lance.write_dataset(_products(0, 20_000), uri, mode="overwrite", max_rows_per_file=5_000).version

    add_features = LanceSparkAddColumnsOperator(task_id="add_features", uri=DATASET, expressions=FEATURES,
                                                conf=SPARK_CONF)
    add_embeddings = LanceSparkAddColumnsOperator(
        task_id="add_embeddings", uri=DATASET, function="lance_example_embeddings:embed", input_columns=["name"],
        py_files=EMBEDDINGS, conf=SPARK_CONF,
    )

    @task
    def append_products() -> int:
        import airflow_lance.core as lance

        uri = LanceHook().resolve_uri(DATASET)
        return lance.write_dataset(_products(20_000, 3_000), uri, mode="append").version

    backfill_embeddings = LanceSparkAddColumnsOperator(
        task_id="backfill_embeddings", uri=DATASET, function="lance_example_embeddings:embed",
        input_columns=["name"], output_schema={"embedding": "fixed_size_list<float32>[16]"}, only_missing=True,
        py_files=EMBEDDINGS, conf=SPARK_CONF,
    )
    backfill_features = LanceSparkAddColumnsOperator(task_id="backfill_features", uri=DATASET, expressions=FEATURES,
                                                     only_missing=True, conf=SPARK_CONF)

    @task
    def report() -> dict[str, Any]:
        ds = LanceHook().get_dataset(DATASET)
        table = ds.to_table(columns=["embedding", "price_with_tax"])
        return {"version": ds.version, "num_rows": table.num_rows,
                "missing_embeddings": table.column("embedding").null_count,
                "missing_features": table.column("price_with_tax").null_count}

    (seed_products() >> add_features >> add_embeddings >> append_products()
     >> backfill_embeddings >> backfill_features >> report())
# [END example_lance_add_columns]
