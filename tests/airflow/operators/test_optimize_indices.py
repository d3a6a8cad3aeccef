"""Index maintenance through ``dag.test()``: ``LanceOptimizeIndicesOperator`` and the index step of
the maintenance task group (compaction remaps the index, then new rows are folded in); pylance 14
uses the indices (scalar and IVF_PQ) and its indexed queries equal full scans."""

from __future__ import annotations

import pathlib
from typing import Any

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, xcom_value

import airflow_lance.core as lance

pytestmark = pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")

DAG_FILE = "lance_test_maintenance.py"
GROUP = "lance_maintenance"


@pytest.fixture(autouse=True)
def lance_default(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv(*connection_env("lance_default", conn_type="lance", host=str(tmp_path)))


def _append(uri: str, start: int, n: int, mode: str = "append") -> None:
    lance.write_dataset(pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                                  "k": pa.array([i % 7 for i in range(start, start + n)], pa.int64())}), uri, mode=mode)


def _run(dag_id: str, **conf: Any) -> Any:
    return load_dag(DAG_FILE, dag_id).test(run_conf=conf)


def _states(dag_run: Any) -> dict[str, str]:
    return {task_id: ti.state for task_id, ti in task_instances(dag_run).items()}


def _check(uri: str) -> None:
    ds = pylance.dataset(uri)
    for query in ("id = 5", "id >= 150 AND id < 260", "k = 3"):
        assert "ScalarIndexQuery" in ds.scanner(filter=query).explain_plan(), query
        assert ds.to_table(filter=query).sort_by("id").equals(
            ds.to_table(filter=query, use_scalar_index=False).sort_by("id")), query


def test_maintenance_group_compacts_indexed_fragments_and_optimizes_indices(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "indexed.lance")
    for i in range(4):
        _append(uri, i * 50, 50, "append" if i else "create")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    pylance.dataset(uri).create_scalar_index("k", "BITMAP")
    _append(uri, 200, 60)
    lance.dataset(uri).delete("id % 9 = 0")
    dag_run = _run("lance_test_index_group", uri=uri, target=1000)
    assert _states(dag_run) == {f"{GROUP}.{t}": "success" for t in
                                ("stats", "decide", "compact", "optimize_indices", "cleanup")}
    compacted = xcom_value(dag_run, f"{GROUP}.compact")
    assert (compacted["fragments_skipped_indexed"], compacted["versions_created"]) == (0, 2)
    optimized = xcom_value(dag_run, f"{GROUP}.optimize_indices")
    assert optimized["optimized"] and optimized["unindexed_rows_after"] == {"id_idx": 0, "k_idx": 0}
    assert optimized["unindexed_rows_before"] == {"id_idx": 54, "k_idx": 54}  # the appended rows, 6 deleted
    assert [len(d.segments) for d in pylance.dataset(uri).describe_indices()] == [1, 1]
    _check(uri)

    _append(uri, 260, 30)  # below the threshold: nothing to compact, indices left alone
    again = _run("lance_test_index_group", uri=uri, target=20)
    assert _states(again)[f"{GROUP}.optimize_indices"] == "success"
    assert not xcom_value(again, f"{GROUP}.optimize_indices")["optimized"]
    assert _states(again)[f"{GROUP}.cleanup"] == "success"


def test_optimize_indices_operator_adds_a_delta_segment(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "delta.lance")
    _append(uri, 0, 200, "create")
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).create_scalar_index("k", "BITMAP")
    _append(uri, 200, 100)
    dag_run = _run("lance_test_optimize_indices", uri=uri)
    result = xcom_value(dag_run, "optimize")
    assert result["optimized"] and result["num_segments"] == {"id_idx": 2, "k_idx": 2}
    assert result["version"] == result["read_version"] + 1 == pylance.dataset(uri).version
    _check(uri)


def test_maintenance_group_maintains_a_vector_index(tmp_path: pathlib.Path) -> None:
    """Our IVF_PQ index: the group's compaction rewrites the indexed fragments (remapping the index)
    and its index step folds the appended rows in; pylance's vector search then uses the index only."""
    uri = str(tmp_path / "vectors.lance")
    rng = np.random.default_rng(7)
    centers = rng.normal(size=(8, 16)) * 3
    vectors = (centers[rng.integers(0, 8, 2700)] + rng.normal(size=(2700, 16))).astype(np.float32)

    def chunk(start: int, stop: int) -> pa.Table:
        return pa.table({"id": pa.array(range(start, stop), pa.int64()),
                         "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors[start:stop].reshape(-1)), 16)})

    for i in range(4):
        lance.write_dataset(chunk(i * 600, (i + 1) * 600), uri, mode="append" if i else "create")
    lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=4)
    [before] = lance.dataset(uri).list_indices()
    lance.write_dataset(chunk(2400, 2700), uri, mode="append")
    lance.dataset(uri).delete("id % 9 = 0")
    dag_run = _run("lance_test_index_group", uri=uri, target=10_000)
    assert _states(dag_run) == {f"{GROUP}.{t}": "success" for t in
                                ("stats", "decide", "compact", "optimize_indices", "cleanup")}
    compacted = xcom_value(dag_run, f"{GROUP}.compact")
    assert (compacted["fragments_skipped_indexed"], compacted["versions_created"]) == (0, 2)
    optimized = xcom_value(dag_run, f"{GROUP}.optimize_indices")
    assert optimized["optimized"] and optimized["unindexed_rows_after"] == {"vec_idx": 0}
    indices = pylance.dataset(uri).list_indices()
    assert before["uuid"] not in {i["uuid"] for i in indices}  # remapped by the compaction
    assert sorted(f for i in indices for f in i["fragment_ids"]) == sorted(
        f.fragment_id for f in pylance.dataset(uri).get_fragments())
    plan = pylance.dataset(uri).scanner(nearest={"column": "vec", "q": vectors[3], "k": 10}).explain_plan()
    assert "ANNIvfPartition" in plan and "KNNVectorDistance" not in plan
    got = pylance.dataset(uri).to_table(nearest={"column": "vec", "q": vectors[5], "k": 10, "nprobes": 2})
    assert got.num_rows == 10 and all(i % 9 for i in got["id"].to_pylist())
