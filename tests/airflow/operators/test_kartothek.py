"""KartothekToLanceOperator through ``dag.test()`` (in-process import).

One run of ``tests/airflow/dags/lance_test_kartothek.py`` is shared by the assertions: a
templated import with verification into a static path (asset event), its no-op re-run, an
import into a dataset named below the connection's root (event through an ``AssetAlias``), a
source with a missing payload file and a create into an existing dataset. The example DAG runs too.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Any

import lance as pylance
import pytest
from lance_airflow_testing import asset_events, connection_env, load_dag, rendered_fields, task_instances, xcom_value

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from kartothek_fixtures import as_expected, copy_datasets, ground_truth, kartothek_read  # noqa: E402

SECRET = "S3cr3t-source-option-never-logged-51c0"


@dataclasses.dataclass
class ImportRun:
    root: pathlib.Path
    store: pathlib.Path
    victims: list[pathlib.Path]
    dag_run: Any
    tis: dict[str, Any]

    def failure(self, task_id: str) -> dict[str, Any]:
        return json.loads((self.root / "failures" / f"{task_id}.json").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> ImportRun:
    root = tmp_path_factory.mktemp("kartothek-import")
    store = copy_datasets(tmp_path_factory.mktemp("kartothek-store"), "one_key")
    victims = sorted((store / "one_key" / "table").rglob("*.parquet"))[:1]
    for victim in victims:
        victim.unlink()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KARTOTHEK_TEST_ROOT", str(root))
        mp.setenv("KARTOTHEK_TEST_STORE", str(store))
        mp.setenv("KARTOTHEK_TEST_SECRET", SECRET)
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        dag_run = load_dag("lance_test_kartothek.py", "lance_test_kartothek").test()
    return ImportRun(root, store, victims, dag_run, task_instances(dag_run))


def test_import_reads_back_with_pylance_equal_to_the_kartothek_data(run: ImportRun) -> None:
    assert run.tis["import_two_keys"].state == "success"
    ds = pylance.dataset(str(run.root / "two_keys.lance"))
    assert ds.version == 1
    data = ds.to_table()
    assert as_expected(data, ds.schema).equals(as_expected(ground_truth("two_keys", "table"), ds.schema))
    assert as_expected(data, ds.schema).equals(as_expected(kartothek_read("two_keys", "table"), ds.schema))
    assert ds.schema.field("day").type == ground_truth("two_keys", "table").schema.field("day").type
    assert all(f.count_rows() <= 1 for f in ds.get_fragments())  # max_rows_per_file=1


def test_import_returns_counts_and_emits_the_asset_event(run: ImportRun) -> None:
    uri = str(run.root / "two_keys.lance")
    result = xcom_value(run.dag_run, "import_two_keys")
    ds = pylance.dataset(uri)
    assert result["uri"] == uri and result["dataset_uuid"] == "two_keys" and result["table"] == "table"
    assert (result["mode"], result["version"], result["already_imported"]) == ("create", 1, False)
    assert (result["partitions"], result["rows"], result["fragments"]) == (12, 24, len(ds.get_fragments()))
    assert result["bytes"] == sum(p.stat().st_size for p in (run.root / "two_keys.lance" / "data").iterdir())
    assert result["partition_keys"] == ["day", "code"]
    assert [i["column"] for i in result["secondary_indices"]] == ["name"]
    assert result["verification"]["ok"] and result["verification"]["differences"] == []
    assert rendered_fields(run.dag_run)["import_two_keys"]["dataset_uuid"] == "two_keys"  # templated
    events = asset_events(f"lance+file://{uri}")
    assert [(e["version"], e["rows"], e["already_imported"]) for e in events] == [(1, 24, False), (1, 24, True)]


def test_reimport_is_a_no_op(run: ImportRun) -> None:
    assert run.tis["reimport_two_keys"].state == "success"
    result = xcom_value(run.dag_run, "reimport_two_keys")
    first = xcom_value(run.dag_run, "import_two_keys")
    assert result["already_imported"] is True
    assert {k: result[k] for k in ("version", "rows", "fragments", "partitions")} == {
        k: first[k] for k in ("version", "rows", "fragments", "partitions")}
    ds = pylance.dataset(str(run.root / "two_keys.lance"))
    assert ds.version == 1 and len(ds.versions()) == 1


def test_named_target_resolves_below_the_connection_root_and_feeds_the_alias(run: ImportRun) -> None:
    assert run.tis["import_multi_table_helper"].state == "success"
    uri = str(run.root / "helper.lance")
    result = xcom_value(run.dag_run, "import_multi_table_helper")
    assert result["uri"] == uri and result["version"] == 1
    ds = pylance.dataset(uri)
    expected = ground_truth("multi_table", "helper").drop_columns(["part"])
    assert "part" not in ds.schema.names  # partition_columns="drop"
    assert as_expected(ds.to_table(), ds.schema).equals(as_expected(expected, ds.schema))
    assert [e["rows"] for e in asset_events(f"lance+file://{uri}")] == [result["rows"]]


def test_source_storage_options_stay_out_of_results_rendered_fields_and_the_dataset(run: ImportRun) -> None:
    for task_id in run.tis:
        assert SECRET not in json.dumps(xcom_value(run.dag_run, task_id), default=str)
    assert SECRET not in json.dumps(rendered_fields(run.dag_run), default=str)
    ds = pylance.dataset(str(run.root / "helper.lance"))
    assert SECRET not in repr(ds.schema.metadata)
    assert not any(SECRET.encode() in p.read_bytes() for p in (run.root / "helper.lance").rglob("*") if p.is_file())


def test_broken_source_fails_with_a_clear_error_and_writes_nothing(run: ImportRun) -> None:
    assert run.tis["import_broken"].state == "failed"
    failure = run.failure("import_broken")
    assert failure["type"] == "KartothekImportError" and "AirflowFailException" in failure["mro"]
    assert failure["cause"] == "KartothekValidationError"
    assert str(run.victims[0].relative_to(run.store)) in failure["message"]
    assert "nothing was committed" in failure["message"]
    target = run.root / "broken.lance"
    assert not target.exists() or [p for p in target.rglob("*") if p.is_file()] == []
    assert asset_events(f"lance+file://{target}") == []


def test_create_into_an_existing_dataset_fails_and_leaves_it_untouched(run: ImportRun) -> None:
    assert run.tis["create_existing"].state == "failed"
    failure = run.failure("create_existing")
    assert (failure["type"], failure["cause"]) == ("KartothekImportError", "DatasetAlreadyExistsError")
    assert "already exists" in failure["message"]
    ds = pylance.dataset(str(run.root / "two_keys.lance"))
    assert ds.version == 1 and ds.count_rows() == 24


def test_invalid_arguments_are_refused_at_parse_time() -> None:
    from airflow_lance.operators.kartothek import KartothekToLanceOperator

    with pytest.raises(ValueError, match="mode"):
        KartothekToLanceOperator(task_id="t", store_uri="/s", dataset_uuid="u", target="/t", mode="append")
    with pytest.raises(ValueError, match="partition_columns"):
        KartothekToLanceOperator(task_id="t", store_uri="/s", dataset_uuid="u", target="/t",
                                 partition_columns="keep")
    with pytest.raises(TypeError):
        KartothekToLanceOperator("t", "/s", "u", "/t")  # type: ignore[misc]


def test_example_dag_imports_the_fixture_on_spark_and_a_local_rerun_is_a_no_op(tmp_path: pathlib.Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=f"file://{tmp_path}"))
        dag = load_dag("example_kartothek_import.py", "example_kartothek_import")
        first, second = dag.test(run_conf={"execution": "spark"}), dag.test(run_conf={"execution": "local"})
    uri = str(tmp_path / "kartothek" / "one_key.lance")
    ds = pylance.dataset(uri)
    assert ds.version == 1  # the second run found the import landed
    assert as_expected(ds.to_table(), ds.schema).equals(as_expected(ground_truth("one_key", "table"), ds.schema))
    for dag_run, already in ((first, False), (second, True)):
        assert {t: ti.state for t, ti in task_instances(dag_run).items()} == {
            "import_one_key": "success", "report": "success"}
        imported = xcom_value(dag_run, "import_one_key")
        assert (imported["version"], imported["already_imported"], imported["verification"]["ok"]) == (1, already, True)
        assert imported["execution"] == ("local" if already else "spark")
        report = xcom_value(dag_run, "report")
        assert (report["version"], report["rows"]) == (1, ds.count_rows())
    assert [e["already_imported"] for e in asset_events(f"lance+file://{uri}")] == [False, True]
