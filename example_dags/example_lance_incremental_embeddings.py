"""Version-triggered incremental embedding backfill: embed only the documents that changed.

prepare_documents (a documents dataset with stable row ids) -> embed_all (Spark: read the
documents with ``read_lance`` at the pinned version, compute embeddings on the executors, write
them to an embeddings dataset) -> new_documents (another writer appends, updates and deletes
documents) -> wait_for_documents (LanceVersionSensor: a data-changing version after the one
embedded; its event carries the version range and the rows inserted, updated and deleted)
-> embed_changes (Spark again, reading only the rows inserted or updated in that range:
``source_lance_since_version`` = the sensor's baseline) -> report.

In production the first three steps are other DAGs (the writer) or an earlier run: a DAG
scheduled on the documents dataset runs wait_for_documents -> embed_changes with the
baseline of its last run. Updated documents get a new embedding row here (append); to keep one
row per document, upsert them (merge-insert on ``id``) instead.

Runs as written (``airflow dags test example_lance_incremental_embeddings``) given the
``lance_default`` and ``spark_default`` connections of ``example_lance_ingest``.
"""

from __future__ import annotations

import datetime as dt
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG, task

from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from airflow_lance.sensors.version import LanceVersionSensor

DOCUMENTS = "documents.lance"  # below the lance_default connection's dataset root
EMBEDDINGS = "document_embeddings.lance"
MODEL = str(pathlib.Path(__file__).resolve().parent / "lance_embedding_model.py")
SPARK_CONF = {"spark.log.level": "WARN", "spark.ui.enabled": "false"}
#: both Spark jobs: read (id, text) of the documents, embed them on the executors, append the vectors
EMBED: dict[str, Any] = {
    "uri": EMBEDDINGS, "mode": "append", "source_lance_uri": DOCUMENTS, "source_lance_columns": ["id", "text"],
    "transform": "lance_embedding_model:embed", "py_files": MODEL, "fixed_size_lists": {"embedding": 8},
    "conf": SPARK_CONF,
}
WORDS = ("lance", "spark", "airflow", "vector", "column", "version", "fragment", "index")


def _documents(start: int, count: int, salt: str = "") -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = np.arange(start, start + count, dtype=np.int64)
    words = pa.array(np.array(WORDS)[(ids * 7 + len(salt)) % len(WORDS)])
    texts = pc.binary_join_element_wise(pa.array([salt or "doc"] * count), words,
                                        pc.cast(pa.array(ids), pa.string()), " ")
    return pa.table({"id": ids, "text": texts})


# [START example_lance_incremental_embeddings]
with DAG(
    dag_id="example_lance_incremental_embeddings",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    tags=["example", "lance"],
) as dag:

    @task
    def prepare_documents() -> int:
        """The documents dataset (created with stable row ids, so updates are told from inserts)."""
        import airflow_lance.core as lance

        hook = LanceHook()
        uri = hook.resolve_uri(DOCUMENTS)
        if hook.dataset_or_none(DOCUMENTS) is None:
            lance.write_dataset(_documents(0, 1_000), uri, max_rows_per_file=400, enable_stable_row_ids=True,
                                storage_options=hook.storage_options)
        return hook.get_dataset(DOCUMENTS).version

    embed_all = LanceSparkWriteOperator(
        task_id="embed_all", source_lance_version="{{ ti.xcom_pull(task_ids='prepare_documents') }}", **EMBED)

    @task
    def new_documents() -> int:
        """Another writer: 200 new documents, 50 rewritten (upper case), 10 deleted."""
        hook = LanceHook()
        ds = hook.get_dataset(DOCUMENTS)
        ds.insert(_documents(ds.count_rows() + 10, 200))
        ds = hook.get_dataset(DOCUMENTS)
        ds.update({"text": "upper(text)"}, where="id % 20 = 0")
        ds = hook.get_dataset(DOCUMENTS)
        ds.delete("id % 100 = 7")
        return hook.get_dataset(DOCUMENTS).version

    wait_for_documents = LanceVersionSensor(
        task_id="wait_for_documents",
        uri=DOCUMENTS,
        baseline_version="{{ ti.xcom_pull(task_ids='prepare_documents') }}",
        data_changes_only=True,
        deferrable=True,
        poke_interval=10,
        timeout=600,
    )

    embed_changes = LanceSparkWriteOperator(
        task_id="embed_changes",
        source_lance_version="{{ ti.xcom_pull(task_ids='wait_for_documents')['version'] }}",
        source_lance_since_version="{{ ti.xcom_pull(task_ids='wait_for_documents')['baseline_version'] }}",
        **EMBED,
    )

    @task
    def report(ti: Any = None) -> dict[str, Any]:
        """What changed and what was embedded."""
        sensed = ti.xcom_pull(task_ids="wait_for_documents")
        embedded = ti.xcom_pull(task_ids="embed_changes")
        print(f"documents {sensed['version_range']}: {sensed['rows_inserted']} inserted, "
              f"{sensed['rows_updated']} updated, {sensed['rows_deleted']} deleted; "
              f"{embedded['num_rows']} embeddings written in version {embedded['version']}")
        return {"version_range": sensed["version_range"], "embedded_rows": embedded["num_rows"],
                "embeddings_version": embedded["version"]}

    prepare_documents() >> embed_all >> new_documents() >> wait_for_documents >> embed_changes >> report()
# [END example_lance_incremental_embeddings]
