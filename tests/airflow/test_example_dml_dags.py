"""The merge-insert, update and delete example DAGs run as written (real ``spark-submit`` on
``local[2]``); each result equals pylance's ``merge_insert`` / ``update`` / ``delete`` applied to
a copy of the version the example seeded."""

from __future__ import annotations

import datetime as dt
import pathlib
from typing import Any

import lance as pylance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, xcom_value

def _run(root: pathlib.Path, file_name: str, dag_id: str, **kwargs: Any) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{root}"))
        return load_dag(file_name, dag_id).test(**kwargs)


def _copy_of_version(uri: str, version: int, to: pathlib.Path) -> pylance.LanceDataset:
    """A pylance dataset holding what ``uri`` held at ``version``."""
    return pylance.write_dataset(pylance.dataset(uri, version=version).to_table(), str(to))


def _rows(table: pa.Table, key: str) -> dict[str, list[Any]]:
    return table.sort_by(key).to_pydict()


def test_merge_insert_example(tmp_path: pathlib.Path) -> None:
    root, data_dir = tmp_path / "root", tmp_path / "extracts"
    dag_run = _run(root, "example_lance_merge_insert.py", "example_lance_merge_insert",
                   run_conf={"data_dir": str(data_dir)})
    assert {t: ti.state for t, ti in task_instances(dag_run).items()} == {
        t: "success" for t in ("extract", "seed", "upsert_customers", "report")}
    uri = str(root / "customers.lance")
    oracle = _copy_of_version(uri, 1, tmp_path / "oracle.lance")
    source = pq.read_table(next(data_dir.glob("customers-*.parquet")))
    expected = (oracle.merge_insert("customer_id").when_matched_update_all("source.updated_at > target.updated_at")
                .when_not_matched_insert_all().when_not_matched_by_source_delete().execute(source))
    counts = xcom_value(dag_run, "report")
    assert counts == {k: expected[k] for k in counts} == {
        "num_inserted_rows": 200, "num_updated_rows": 90, "num_deleted_rows": 100}
    assert _rows(pylance.dataset(uri).to_table(), "customer_id") == _rows(
        pylance.dataset(str(tmp_path / "oracle.lance")).to_table(), "customer_id")


def test_update_example(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    dag_run = _run(root, "example_lance_update.py", "example_lance_update")
    assert {t: ti.state for t, ti in task_instances(dag_run).items()} == {
        t: "success" for t in ("seed", "reprice", "normalise")}
    uri = str(root / "products.lance")
    oracle = _copy_of_version(uri, 1, tmp_path / "oracle.lance")
    first = oracle.update({"price": "price * 1.1"}, where="category = 'a'")
    second = oracle.update({"sku": "upper(sku)"}, where="price >= 100")
    assert xcom_value(dag_run, "reprice")["num_rows_updated"] == first["num_rows_updated"] == 2_500
    assert xcom_value(dag_run, "normalise")["num_rows_updated"] == second["num_rows_updated"]
    assert xcom_value(dag_run, "normalise")["mode"] == "spark"
    assert _rows(pylance.dataset(uri).to_table(), "id") == _rows(oracle.to_table(), "id")


def test_delete_example(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "root"
    dag_run = _run(root, "example_lance_delete.py", "example_lance_delete")
    assert {t: ti.state for t, ti in task_instances(dag_run).items()} == {
        t: "success" for t in ("seed", "expire_old_events")}
    uri = str(root / "events.lance")
    oracle = _copy_of_version(uri, 1, tmp_path / "oracle.lance")
    # the seed wrote the 30 days before the run's date; the retention param keeps 14 of them
    cutoff = max(pylance.dataset(uri, version=1).to_table().column("day").to_pylist()) + dt.timedelta(days=1 - 14)
    before = oracle.count_rows()
    oracle.delete(f"day < date '{cutoff.isoformat()}'")
    deleted = xcom_value(dag_run, "expire_old_events")["num_deleted_rows"]
    assert deleted == before - oracle.count_rows() == 16_000
    assert _rows(pylance.dataset(uri).to_table(), "id") == _rows(oracle.to_table(), "id")
