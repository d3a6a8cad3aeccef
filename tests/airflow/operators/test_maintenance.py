"""The maintenance operators and task group through ``dag.test()``: real Airflow, datasets written
by the core, results read back with pylance."""

from __future__ import annotations

import pathlib
from typing import Any

import lance as pylance
import pyarrow as pa
import pytest
from lance_airflow_testing import asset_events, connection_env, load_dag, task_instances, xcom_value

import airflow_lance.core as lance

DAG_FILE = "lance_test_maintenance.py"


@pytest.fixture(autouse=True)
def lance_default(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv(*connection_env("lance_default", conn_type="lance", host=str(tmp_path)))


def _small_fragments(uri: str, fragments: int = 10, rows: int = 20) -> pa.Table:
    tables = []
    for i in range(fragments):
        table = pa.table({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
                          "name": pa.array([f"row-{j}" for j in range(i * rows, (i + 1) * rows)])})
        lance.write_dataset(table, uri, mode="create" if i == 0 else "append")
        tables.append(table)
    return pa.concat_tables(tables)


def _files(uri: str) -> set[str]:
    root = pathlib.Path(uri)
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _run(dag_id: str, **conf: Any) -> Any:
    return load_dag(DAG_FILE, dag_id).test(run_conf=conf)


def _states(dag_run: Any) -> dict[str, str]:
    return {task_id: ti.state for task_id, ti in task_instances(dag_run).items()}


def test_compaction_with_deletions_keeps_rows_and_order(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "small.lance")
    _small_fragments(uri)
    lance.dataset(uri).delete("id % 7 = 0")
    expected = pylance.dataset(uri).to_table()
    version_before = lance.dataset(uri).version

    dag_run = _run("lance_test_compact", uri=uri, target=100)
    assert _states(dag_run) == {"stats": "success", "compact": "success"}
    stats = xcom_value(dag_run, "stats")
    assert (stats["num_fragments"], stats["num_small_fragments"], stats["num_versions"]) == (10, 10, 11)
    assert stats["num_deleted_rows"] == 29 and stats["num_rows"] == 171
    assert stats["deleted_row_ratio"] == pytest.approx(29 / 200)
    assert stats["needs_compaction"] and stats["data_bytes"] > 0

    result = xcom_value(dag_run, "compact")
    # one version: the Rewrite (its new fragments got their ids at commit)
    assert (result["read_version"], result["version"], result["versions_created"]) == (
        version_before, version_before + 1, 1)
    assert result["files_removed"] == 10 + 10  # dropped from the dataset: data + deletion files...
    assert len(_files(uri) & {f"data/{f.path}" for v in range(1, version_before + 1)
                              for frag in lance.dataset(uri, v).get_fragments() for f in frag.data_files()}) == 10
    assert (result["fragments_before"], result["fragments_removed"]) == (10, 10)
    assert result["fragments_after"] == result["fragments_added"] == 2
    assert result["rows"] == 171

    after = pylance.dataset(uri)
    assert after.version == result["version"]
    assert after.to_table() == expected  # same rows, same order
    assert len(after.get_fragments()) == 2
    assert all(f.metadata.deletion_file is None for f in after.get_fragments())
    events = asset_events(f"lance+file://{uri}")
    assert [(e["version"], e["fragments_after"]) for e in events] == [(result["version"], 2)]

    again = _run("lance_test_compact", uri=uri, target=100)
    assert _states(again) == {"stats": "success", "compact": "skipped"}
    assert not xcom_value(again, "stats")["needs_compaction"]
    assert pylance.dataset(uri).version == result["version"]

    no_skip = _run("lance_test_compact_no_skip", uri=uri, target=100)
    assert _states(no_skip) == {"compact": "success"}
    zero = xcom_value(no_skip, "compact")
    assert (zero["version"], zero["fragments_removed"], zero["fragments_after"]) == (result["version"], 0, 2)
    assert zero["versions_created"] == 0


def test_cleanup_dry_run_lists_exactly_what_the_real_run_removes(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "versions.lance")
    rows = _small_fragments(uri, fragments=4)
    lance.compact_files(uri, target_rows_per_fragment=1_000)
    version = lance.dataset(uri).version

    dry = _run("lance_test_cleanup", uri=uri, dry_run=True)
    assert _states(dry) == {"cleanup": "success"}
    planned = xcom_value(dry, "cleanup")
    assert planned["dry_run"] and planned["old_versions"] == version - 1
    assert planned["versions_before"] == planned["versions_after"] == version
    assert len(pylance.dataset(uri).versions()) == version  # nothing deleted

    on_disk = _files(uri)
    assert set(planned["files"]) <= on_disk
    real = _run("lance_test_cleanup", uri=uri, dry_run=False)
    removed = xcom_value(real, "cleanup")
    assert not removed["dry_run"] and "files" not in removed
    for key in ("old_versions", "files_removed", "bytes_removed", "data_files_removed"):
        assert removed[key] == planned[key], key
    assert removed["data_files_removed"] == 4 and removed["bytes_removed"] > 0
    assert (removed["versions_before"], removed["versions_after"]) == (version, 1)
    assert on_disk - _files(uri) == set(planned["files"])  # exactly the listed files went
    after = pylance.dataset(uri)
    assert [v["version"] for v in after.versions()] == [version]
    assert after.to_table() == rows


def test_cleanup_fails_on_an_old_tagged_version(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "tagged.lance")
    _small_fragments(uri, fragments=3)
    lance.dataset(uri).tags.create("keep", 1)
    dag_run = _run("lance_test_cleanup_tagged", uri=uri)
    assert _states(dag_run) == {"cleanup": "failed"}
    assert len(pylance.dataset(uri).versions()) == 3
    kept = _run("lance_test_cleanup", uri=uri, dry_run=False)  # error_if_tagged_old_versions=False
    assert xcom_value(kept, "cleanup")["versions_after"] == 2  # the tagged and the latest
    assert pylance.dataset(uri, version="keep").count_rows() == 20


def test_tags_and_restore(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "restore.lance")
    _small_fragments(uri, fragments=3)
    dag_run = _run("lance_test_tags_restore", uri=uri, version=1)
    assert set(_states(dag_run).values()) == {"success"}
    assert xcom_value(dag_run, "tag") == {"uri": uri, "tag": "first", "version": 1, "previous_version": None}
    assert xcom_value(dag_run, "move_tag")["previous_version"] == 1
    restored = xcom_value(dag_run, "restore")
    assert (restored["version"], restored["restored_version"], restored["read_version"]) == (4, 2, 3)
    assert restored["num_rows"] == 40
    assert xcom_value(dag_run, "untag") == {"uri": uri, "tag": "first", "version": 2}
    assert xcom_value(dag_run, "untag_again")["version"] is None
    ds = pylance.dataset(uri)
    assert ds.version == 4 and ds.to_table() == pylance.dataset(uri, version=2).to_table()
    assert ds.tags.list() == {}
    assert [e["version"] for e in asset_events(f"lance+file://{uri}")] == [4]


def test_maintenance_task_group_compacts_only_when_needed(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "group.lance")
    rows = _small_fragments(uri, fragments=6)
    dag_run = _run("lance_test_maintenance_group", uri=uri, target=100)
    group = "lance_maintenance"
    assert _states(dag_run) == {f"{group}.{t}": "success" for t in ("stats", "decide", "compact", "cleanup")}
    compacted = xcom_value(dag_run, f"{group}.compact")
    assert (compacted["fragments_before"], compacted["fragments_after"]) == (6, 2)
    cleaned = xcom_value(dag_run, f"{group}.cleanup")
    assert cleaned["versions_after"] == 1 and cleaned["old_versions"] == compacted["version"] - 1
    ds = pylance.dataset(uri)
    assert ds.version == compacted["version"] and ds.to_table() == rows

    again = _run("lance_test_maintenance_group", uri=uri, target=100)
    assert _states(again) == {f"{group}.stats": "success", f"{group}.decide": "success",
                              f"{group}.compact": "skipped", f"{group}.cleanup": "success"}
    assert xcom_value(again, f"{group}.cleanup")["old_versions"] == 0


def test_options_are_validated_and_rendered_strings_converted() -> None:
    from airflow_lance.operators.maintenance import LanceCompactFilesOperator, compaction_options
    from airflow_lance.task_groups.maintenance import should_compact

    options = compaction_options({"target_rows_per_fragment": "100", "materialize_deletions": "False",
                                  "materialize_deletions_threshold": "0.5", "max_source_rows": "None",
                                  "excluded_fragment_ids": "[3, 1]"})
    assert (options.target_rows_per_fragment, options.materialize_deletions) == (100, False)
    assert (options.materialize_deletions_threshold, options.max_source_rows) == (0.5, None)
    assert options.excluded_fragment_ids == (1, 3)
    with pytest.raises(lance.InvalidInputError, match="unknown compaction option"):
        compaction_options({"target_rows": 5})
    with pytest.raises(ValueError, match="mode must be one of"):
        LanceCompactFilesOperator(task_id="c", uri="/tmp/x.lance", mode="yarn")
    assert LanceCompactFilesOperator(task_id="s", uri="/tmp/x.lance", mode="spark").mode == "spark"
    stats = {"needs_compaction": True, "num_small_fragments": 3, "deleted_row_ratio": 0.05}
    assert should_compact(stats)
    assert not should_compact({**stats, "needs_compaction": False})
    assert should_compact(stats, min_small_fragments=3) and not should_compact(stats, min_small_fragments=4)
    assert should_compact(stats, min_small_fragments=4, min_deleted_row_ratio=0.05)
    assert not should_compact(stats, min_deleted_row_ratio=0.1)


def test_task_group_passes_the_spark_settings_to_its_compaction() -> None:
    import datetime as dt

    from airflow.providers.common.compat.sdk import DAG

    from airflow_lance.task_groups.maintenance import lance_maintenance_task_group

    with DAG("group_spark", schedule=None, start_date=dt.datetime(2025, 1, 1)) as dag:
        lance_maintenance_task_group(uri="/tmp/x.lance", compaction_mode="spark",
                                     compaction_spark_kwargs={"spark_conn_id": "spark_yarn",
                                                              "conf": {"spark.executor.memory": "4g"}})
    compact = dag.get_task("lance_maintenance.compact")
    assert (compact.mode, compact.spark_conn_id, compact.conf) == ("spark", "spark_yarn",
                                                                   {"spark.executor.memory": "4g"})


def test_reported_version_is_the_compaction_even_when_a_writer_commits_after_it(tmp_path: pathlib.Path) -> None:
    from airflow_lance.operators.maintenance import LanceCompactFilesOperator

    uri = str(tmp_path / "busy.lance")
    _small_fragments(uri, fragments=3)
    ds = lance.dataset(uri)
    results = LanceCompactFilesOperator._rewrite_here(ds, lance.Compaction.plan(ds, target_rows_per_fragment=100))
    operator = LanceCompactFilesOperator(task_id="compact", uri=uri)
    metrics = operator._commit(ds, results, None)
    assert (metrics.version, metrics.versions_created) == (ds.version + 1, 1)
    lance.write_dataset(pa.table({"id": pa.array([999], pa.int64()), "name": ["late"]}), uri, mode="append")
    retried = operator._commit(ds, results, None)  # a retried task: nothing committed twice
    assert (retried.version, retried.versions_created) == (metrics.version, 0)
    assert lance.dataset(uri).version == metrics.version + 1


@pytest.mark.parametrize("skip_conflicting", [True, False])
def test_compaction_leaves_out_the_tasks_a_concurrent_delete_touched_by_default(tmp_path: pathlib.Path,
                                                                                 skip_conflicting: bool) -> None:
    """A writer deletes a row in the first compaction task's fragments between the plan and the commit: by
    default the operator commits the other tasks and reports the one left out; with
    ``skip_conflicting=False`` (pylance's all-or-nothing rule) it commits nothing and removes every file
    it wrote."""
    from airflow_lance.operators.maintenance import LanceCompactFilesOperator

    uri = str(tmp_path / "busy.lance")
    _small_fragments(uri, fragments=4, rows=20)
    lance.write_dataset(pa.table({"id": pa.array(range(80, 580), pa.int64()),
                                  "name": [f"big-{j}" for j in range(500)]}), uri, mode="append")
    for i in range(4):
        lance.write_dataset(pa.table({"id": pa.array(range(600 + i * 20, 620 + i * 20), pa.int64()),
                                      "name": [f"late-{j}" for j in range(20)]}), uri, mode="append")
    ds = lance.dataset(uri)
    plan = lance.Compaction.plan(ds, target_rows_per_fragment=100)
    assert [[f.id for f in t.fragments] for t in plan.tasks] == [[0, 1, 2, 3], [5, 6, 7, 8]]
    results = LanceCompactFilesOperator._rewrite_here(ds, plan)
    lance.dataset(uri).delete("id = 5")  # in fragment 0, after the plan
    before, expected = _files(uri), lance.dataset(uri).to_table().sort_by("id")
    operator = LanceCompactFilesOperator(task_id="compact", uri=uri, skip_conflicting=skip_conflicting)
    if not skip_conflicting:
        with pytest.raises(lance.CommitConflictError):
            operator._commit(ds, results, None)
        written = {f"data/{d.path}" for r in results for fragment in r.new_fragments for d in fragment.files}
        assert written <= before and _files(uri) == before - written
        assert lance.dataset(uri).version == ds.version + 1
        return
    metrics = operator._commit(ds, results, None)
    assert (metrics.tasks_skipped_conflict, metrics.fragments_removed, metrics.fragments_added) == (1, 4, 1)
    theirs = pylance.dataset(uri)
    assert [f.fragment_id for f in theirs.get_fragments()] == [0, 1, 2, 3, 4, 9]
    assert theirs.to_table().sort_by("id").equals(expected)
