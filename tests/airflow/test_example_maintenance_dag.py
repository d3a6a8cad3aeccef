"""The maintenance example DAG runs as written: on a dataset of small fragments written by the core
(with deletions), it compacts, cleans up old versions and tags the result; pylance reads it back."""

from __future__ import annotations

import pathlib

import lance as pylance
import pyarrow as pa
import pytest
from lance_airflow_testing import asset_events, connection_env, load_dag, task_instances, xcom_value

import airflow_lance.core as lance


def test_maintenance_example_compacts_cleans_up_and_tags(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "readings.lance")
    for i in range(5):
        table = pa.table({"id": pa.array(range(i * 100, (i + 1) * 100), pa.int64()),
                          "reading": pa.array([float(j) for j in range(100)])})
        lance.write_dataset(table, uri, mode="create" if i == 0 else "append")
    lance.dataset(uri).delete("id % 10 = 0")
    expected = pylance.dataset(uri).to_table()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{tmp_path}"))
        dag = load_dag("example_lance_maintenance.py", "example_lance_maintenance")
        assert dag.schedule == "@daily"
        dag_run = dag.test(run_conf={"older_than_days": 0})
    group = "lance_maintenance"
    assert {t: ti.state for t, ti in task_instances(dag_run).items()} == {
        t: "success" for t in (f"{group}.stats", f"{group}.decide", f"{group}.compact", f"{group}.cleanup",
                               "tag_release")}
    stats = xcom_value(dag_run, f"{group}.stats")
    assert (stats["num_fragments"], stats["num_small_fragments"], stats["num_versions"]) == (5, 5, 6)
    compacted = xcom_value(dag_run, f"{group}.compact")
    assert (compacted["read_version"], compacted["fragments_before"], compacted["fragments_after"]) == (6, 5, 1)
    cleaned = xcom_value(dag_run, f"{group}.cleanup")
    assert cleaned["versions_after"] == 1 and cleaned["old_versions"] == compacted["version"] - 1
    assert cleaned["bytes_removed"] > 0
    after = pylance.dataset(uri)
    assert after.version == compacted["version"] and after.to_table() == expected
    assert [v["version"] for v in after.versions()] == [compacted["version"]]
    assert after.tags.list()["release"]["version"] == compacted["version"]
    assert [e["version"] for e in asset_events(f"lance+file://{uri}")] == [compacted["version"]]
