"""The example DAGs import without errors and run as written: the ingest example end to end with
real spark-submit ``local[2]`` (its result read back by pylance), then the asset-watcher example,
and, in make stress, one day of the daily pipeline on local disk (tests/airflow/test_daily_pipeline.py
runs it for consecutive days on S3 in make test) and the add-columns example."""

from __future__ import annotations

import dataclasses
import datetime as dt
import pathlib
from typing import Any

import lance as pylance
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from lance_airflow_testing import asset_events, connection_env, load_dag, task_instances, xcom_value

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "example_dags"


def test_example_dags_import_without_errors() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"example_lance_ingest", "example_lance_asset_watcher", "example_kartothek_import",
                                 "example_lance_maintenance", "example_lance_daily_pipeline",
                                 "example_lance_incremental_embeddings",
                                 "example_lance_add_columns",
                                 "example_lance_merge_insert", "example_lance_update", "example_lance_delete",
                                 "example_lance_create_index"}


@dataclasses.dataclass
class IngestRun:
    root: pathlib.Path
    data_dir: pathlib.Path
    dag_run: Any

    @property
    def uri(self) -> str:
        return str(self.root / "readings.lance")


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> IngestRun:
    root, data_dir = tmp_path_factory.mktemp("lance-root"), tmp_path_factory.mktemp("lance-data")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{root}"))
        dag_run = load_dag("example_lance_ingest.py", "example_lance_ingest").test(run_conf={"data_dir": str(data_dir)})
    return IngestRun(root, data_dir, dag_run)


def _rows(table: pa.Table) -> dict[str, list[Any]]:
    return table.sort_by("id").to_pydict()


def test_ingest_example_runs_and_pylance_reads_what_spark_wrote(ingest: IngestRun) -> None:
    assert {t: ti.state for t, ti in task_instances(ingest.dag_run).items()} == {
        t: "success" for t in ("generate_samples", "create_dataset", "append_batch", "wait_for_new_version", "report")}
    batch_1 = pq.read_table(ingest.data_dir / "incoming" / "batch_1.parquet")
    batch_2 = pq.read_table(ingest.data_dir / "incoming" / "batch_2.parquet")
    created = pylance.dataset(ingest.uri, version=1).to_table()
    assert created.schema.names == batch_1.schema.names
    assert _rows(created) == _rows(batch_1)
    assert _rows(pylance.dataset(ingest.uri, version=2).to_table()) == _rows(pa.concat_tables([batch_1, batch_2]))
    assert len(pylance.dataset(ingest.uri, version=1).get_fragments()) == 3  # max_rows_per_file=4,000 of 10,000


def test_ingest_example_results_sensor_and_asset_events(ingest: IngestRun) -> None:
    create = xcom_value(ingest.dag_run, "create_dataset")
    append = xcom_value(ingest.dag_run, "append_batch")
    assert (create["mode"], create["version"], create["read_version"], create["num_rows"]) == ("create", 1, 0, 10_000)
    assert (append["mode"], append["version"], append["read_version"], append["num_rows"]) == ("append", 2, 1, 2_500)
    sensed = xcom_value(ingest.dag_run, "wait_for_new_version")
    assert (sensed["version"], sensed["baseline_version"], sensed["operation"]) == (2, 1, "append")
    report = xcom_value(ingest.dag_run, "report")
    assert report["rows_per_version"] == {"1": 10_000, "2": 12_500}
    extras = asset_events(f"lance+file://{ingest.uri}")
    assert [(e["version"], e["num_rows"]) for e in extras] == [(1, 10_000), (2, 2_500)]


def test_asset_watcher_example_runs_and_watches_with_the_lance_trigger(ingest: IngestRun) -> None:
    from airflow_lance.triggers.version import LanceVersionTrigger

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_LANCE_EXAMPLE_DATASET", ingest.uri)
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{ingest.root}"))
        dag = load_dag("example_lance_asset_watcher.py", "example_lance_asset_watcher")
        (asset,) = dag.timetable.asset_condition.objects
        (watcher,) = asset.watchers
        assert asset.uri == f"lance+file://{ingest.uri}"
        assert isinstance(watcher.trigger, LanceVersionTrigger) and watcher.trigger.data_changes_only
        dag_run = dag.test()
    assert task_instances(dag_run)["read_new_version"].state == "success"
    assert xcom_value(dag_run, "read_new_version") == {"uri": ingest.uri, "version": 2, "num_rows": 12_500}


@pytest.mark.slow  # make test runs this DAG for two days on S3 (tests/airflow/test_daily_pipeline.py)
def test_daily_pipeline_example_runs_a_day_on_local_disk(tmp_path: pathlib.Path) -> None:
    root, data_dir = tmp_path / "lance", tmp_path / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{root}"))
        dag = load_dag("example_lance_daily_pipeline.py", "example_lance_daily_pipeline")
        assert dag.schedule == "@daily"
        dag_run = dag.test(logical_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
                           run_conf={"data_dir": str(data_dir)})
    states = {t: ti.state for t, ti in task_instances(dag_run).items()}
    assert states == dict.fromkeys(dag.task_ids, "success")
    readings = pq.read_table(data_dir / "2025-01-01" / "readings.parquet")
    late = pq.read_table(data_dir / "2025-01-01" / "late.parquet")
    expected = pa.concat_tables([readings, late.filter(pc.is_valid(late["reading"]))])
    ds = pylance.dataset(str(root / "daily_readings.lance"))
    assert _rows(ds.to_table()) == _rows(expected)
    compacted = xcom_value(dag_run, "lance_maintenance.compact")
    assert ds.version == compacted["version"] and ds.tags.list()["daily-20250101"]["version"] == ds.version
    assert xcom_value(dag_run, "lance_maintenance.cleanup")["old_versions"] >= 1


@pytest.mark.slow  # four spark-submits; tests/airflow/operators/test_spark_add_columns.py runs the operator in make test
def test_add_columns_example_computes_features_and_embeddings_then_backfills(tmp_path: pathlib.Path) -> None:
    import sys

    sys.path.insert(0, str(EXAMPLES))
    from lance_example_embeddings import embed

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{tmp_path}"))
        dag_run = load_dag("example_lance_add_columns.py", "example_lance_add_columns").test()
    assert {t: ti.state for t, ti in task_instances(dag_run).items()} == dict.fromkeys(
        ["seed_products", "add_features", "add_embeddings", "append_products", "backfill_embeddings",
         "backfill_features", "report"], "success")
    ds = pylance.dataset(str(tmp_path / "products.lance"))
    table = ds.to_table()
    assert table.num_rows == 23_000 and table.column_names == [
        "id", "name", "price", "price_with_tax", "name_upper", "embedding"]
    names = table.select(["name"]).combine_chunks().to_batches()[0]
    assert table["embedding"].combine_chunks().equals(embed(names).column(0))
    assert table["name_upper"] == pc.utf8_upper(table["name"])
    assert xcom_value(dag_run, "report") == {"version": ds.version, "num_rows": 23_000, "missing_embeddings": 0,
                                             "missing_features": 0}
    assert [xcom_value(dag_run, t)["operation"] for t in ("add_features", "add_embeddings", "backfill_embeddings",
                                                          "backfill_features")] == [
        "merge", "merge", "data_replacement", "data_replacement"]
