"""Rewrite the rows a rule marks: ``LanceUpdateOperator`` in the worker and on Spark.

``reprice`` (``mode="local"``, for small changes) raises the price of one category;
``normalise`` (``mode="spark"``, for large rewrites: one Spark task per fragment) rewrites a
column for every row matching a predicate. Each is pylance's ``ds.update(updates, where)`` as one
version, committed exactly once (``num_rows_updated`` in the XCom); on datasets with stable row
ids the rewritten rows keep their ids.

Runs as written (``airflow dags test example_lance_update``) given a ``lance_default``
connection holding the dataset root, e.g.
``AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "file:///tmp/lance-example"}'``,
and a ``spark_default`` connection (``local[*]`` by default).
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.common.compat.sdk import DAG, task

from airflow_lance.operators.update import LanceUpdateOperator

DATASET = "products.lance"  # below the lance_default connection's dataset root


@task
def seed(uri: str) -> int:
    """A product table of 10,000 rows in 4 fragments, when the dataset does not exist yet."""
    import numpy as np
    import pyarrow as pa

    import airflow_lance.core as lance
    from airflow_lance.hooks.lance import LanceHook

    hook = LanceHook()
    existing = hook.dataset_or_none(uri)
    if existing is not None:
        return existing.version
    ids = np.arange(10_000)
    table = pa.table({"id": pa.array(ids, pa.int64()), "category": pa.array(np.array(["a", "b", "c", "d"])[ids % 4]),
                      "price": pa.array(ids * 0.25), "sku": [f"sku-{i}" for i in ids]})
    return lance.write_dataset(table, hook.resolve_uri(uri), storage_options=hook.storage_options,
                               max_rows_per_file=2_500).version


# [START example_lance_update]
with DAG(
    dag_id="example_lance_update",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    tags=["example", "lance"],
) as dag:
    reprice = LanceUpdateOperator(
        task_id="reprice",
        uri=DATASET,
        updates={"price": "price * 1.1"},
        where="category = 'a'",
        mode="local",
    )
    normalise = LanceUpdateOperator(
        task_id="normalise",
        uri=DATASET,
        updates={"sku": "upper(sku)"},
        where="price >= 100",
        mode="spark",
        conf={"spark.sql.shuffle.partitions": "4"},
    )
    seed(DATASET) >> reprice >> normalise
# [END example_lance_update]
