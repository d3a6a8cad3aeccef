"""The incremental embedding example end to end through ``dag.test()`` with real spark-submit
``local[2]``: the sensor's event carries the version range and the change counts, and the second
Spark job embeds exactly the documents pylance sees inserted or updated in that range."""

from __future__ import annotations

import pathlib
import sys

import lance as pylance
import numpy as np
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, xcom_value

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "example_dags"))
from lance_embedding_model import embed_texts  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("lance-root")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{root}"))
        dag_run = load_dag("example_lance_incremental_embeddings.py",
                           "example_lance_incremental_embeddings").test()
    return root, dag_run


def test_every_task_succeeds(run) -> None:
    _, dag_run = run
    assert {t: ti.state for t, ti in task_instances(dag_run).items()} == {
        t: "success" for t in ("prepare_documents", "embed_all", "new_documents", "wait_for_documents",
                               "embed_changes", "report")}


def test_sensor_event_carries_the_range_and_counts_pylance_sees(run) -> None:
    root, dag_run = run
    docs = str(root / "documents.lance")
    sensed = xcom_value(dag_run, "wait_for_documents")
    base, new = sensed["version_range"]
    assert (base, new) == (sensed["baseline_version"], sensed["version"]) == (1, pylance.dataset(docs).version)
    old = {r["_rowid"]: r for r in pylance.dataset(docs, version=base).to_table(with_row_id=True).to_pylist()}
    now = {r["_rowid"]: r for r in pylance.dataset(docs, version=new).to_table(with_row_id=True).to_pylist()}
    assert sensed["rows_inserted"] == len(now.keys() - old.keys()) == 198
    assert sensed["rows_updated"] == sum(1 for i in now.keys() & old.keys() if now[i] != old[i]) == 50
    assert sensed["rows_deleted"] == len(old.keys() - now.keys()) == 10


def test_the_changes_and_only_they_were_embedded(run) -> None:
    root, dag_run = run
    docs, embeddings = str(root / "documents.lance"), str(root / "document_embeddings.lance")
    sensed = xcom_value(dag_run, "wait_for_documents")
    base, new = sensed["version_range"]
    first = pylance.dataset(embeddings, version=1).to_table().sort_by("id")
    assert first.column("id").to_pylist() == pylance.dataset(docs, version=base).to_table().sort_by("id") \
        .column("id").to_pylist()
    old = {(r["id"], r["text"]) for r in pylance.dataset(docs, version=base).to_table().to_pylist()}
    changed = sorted((r["id"], r["text"]) for r in pylance.dataset(docs, version=new).to_table().to_pylist()
                     if (r["id"], r["text"]) not in old)
    embedded = pylance.dataset(embeddings).to_table()
    added = embedded.filter(np.isin(embedded.column("id").to_numpy(), [i for i, _ in changed])
                            & ~np.isin(np.arange(embedded.num_rows), np.arange(first.num_rows)))
    assert xcom_value(dag_run, "embed_changes")["num_rows"] == len(changed) == 248
    assert embedded.num_rows == first.num_rows + len(changed)
    added = added.sort_by("id")
    assert list(zip(added.column("id").to_pylist(), added.column("text").to_pylist())) == changed
    assert str(embedded.schema.field("embedding").type) == "fixed_size_list<item: float>[8]"
    assert np.allclose(np.stack(added.column("embedding").to_numpy(zero_copy_only=False)),
                       np.stack(embed_texts(added.column("text")).to_numpy(zero_copy_only=False)))
