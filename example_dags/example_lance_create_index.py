"""Index a dataset with ``LanceCreateIndexOperator``: a BTREE on a key and an IVF_PQ on embeddings.

``index_ids`` builds a scalar BTREE index (filters such as ``doc_id = 42`` or ``doc_id < 100``
use it), ``index_embeddings`` an IVF_PQ vector index (cosine) for nearest-neighbour search, both
in pylance 14's format. With ``mode="spark"`` (the ``mode`` param's default) the build runs on
Spark executors, one task per fragment: sorted runs merged into the BTREE; IVF centroids and PQ
codebooks trained on the driver from a sample, the vectors assigned and encoded on the executors.
``mode="local"`` builds in the worker. Each index is one version, committed exactly once; a
retry after the commit commits nothing.

Runs as written (``airflow dags test example_lance_create_index``) given a ``lance_default``
connection holding the dataset root, e.g.
``AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "file:///tmp/lance-example"}'``,
and a ``spark_default`` connection (``local[*]`` by default).
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.common.compat.sdk import DAG, Param, task

from airflow_lance.operators.create_index import LanceCreateIndexOperator

DATASET = "documents.lance"  # below the lance_default connection's dataset root


@task
def seed(uri: str) -> int:
    """8,000 documents with a 16-dimensional embedding in 4 fragments, when the dataset does not exist yet."""
    import numpy as np
    import pyarrow as pa

    import airflow_lance.core as lance
    from airflow_lance.hooks.lance import LanceHook

    hook = LanceHook()
    existing = hook.dataset_or_none(uri)
    if existing is not None:
        return existing.version
    rng = np.random.default_rng(0)
    topics = rng.normal(size=(16, 16))
    embeddings = (topics[rng.integers(0, 16, 8_000)] + rng.normal(scale=0.3, size=(8_000, 16))).astype(np.float32)
    table = pa.table({"doc_id": pa.array(rng.permutation(8_000), pa.int64()),
                      "embedding": pa.FixedSizeListArray.from_arrays(pa.array(embeddings.reshape(-1)), 16)})
    return lance.write_dataset(table, hook.resolve_uri(uri), storage_options=hook.storage_options,
                               max_rows_per_file=2_000).version


# [START example_lance_create_index]
with DAG(
    dag_id="example_lance_create_index",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    params={"mode": Param("spark", enum=["spark", "local"])},
    tags=["example", "lance", "spark"],
) as dag:
    index_ids = LanceCreateIndexOperator(
        task_id="index_ids",
        uri=DATASET,
        column="doc_id",
        index_type="BTREE",
        replace=True,
        mode="{{ params.mode }}",
    )
    index_embeddings = LanceCreateIndexOperator(
        task_id="index_embeddings",
        uri=DATASET,
        column="embedding",
        index_type="IVF_PQ",
        metric="cosine",
        num_partitions=8,
        num_sub_vectors=4,
        replace=True,
        mode="{{ params.mode }}",
        conf={"spark.sql.shuffle.partitions": "4"},
    )
    seed(DATASET) >> index_ids >> index_embeddings
# [END example_lance_create_index]
