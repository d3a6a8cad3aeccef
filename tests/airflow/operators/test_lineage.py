"""OpenLineage reports of the operators: ``tests/airflow/dags/lance_test_lineage.py`` (a Spark write
from Parquet, a Spark compaction, stats, a Kartothek import, a version sensor) runs through ``dag.test()`` with real
``spark-submit`` on ``local[2]``, in a child process where OpenLineage is configured with its
``file`` transport (Airflow loads the OpenLineage listener when it first loads its plugins, so the
configuration must be there from the start); its events are read back from the file.

The same DAG runs with OpenLineage disabled: the operators work alike and nothing is emitted.
Dataset names are checked against the OpenLineage client's own naming classes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import lance as pylance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lance_airflow_testing import SparkSubmitSpy, connection_env

import airflow_lance.core as lance
from airflow_lance.operators._lineage import dataset_name

REPO = pathlib.Path(__file__).resolve().parents[3]
FIXTURE_STORE = REPO / "tests" / "fixtures" / "kartothek" / "store"
NAMESPACE = "airflow-lance-tests"
DAG_ID = "lance_test_lineage"

_RUN_DAG = f"""
import json, sys
sys.path[:0] = [{str(REPO)!r}, {str(REPO / "tests" / "airflow")!r}]
from lance_airflow_testing import load_dag
dag_run = load_dag("lance_test_lineage.py", sys.argv[1]).test()
# one write with its newline: print() writes the line and its end separately, and a log line of the
# OpenLineage client's thread landed between them once
states = {{ti.task_id: ti.state for ti in dag_run.get_task_instances()}}
sys.stdout.write("\\nTASK_STATES=" + json.dumps(states) + "\\n")
sys.stdout.flush()
"""


@dataclasses.dataclass
class LineageRun:
    root: pathlib.Path
    states: dict[str, str]
    events: list[dict[str, Any]]
    events_file: pathlib.Path
    version_before: int
    spark_calls: list[list[str]]

    @property
    def uri(self) -> str:
        return str(self.root / "ds.lance")

    def complete(self, task_id: str) -> dict[str, Any]:
        [event] = [e for e in self.events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{DAG_ID}.{task_id}"]
        return event


def _prepare(root: pathlib.Path) -> int:
    """A dataset of small fragments (for the compaction) and the Parquet file the write appends."""
    uri = str(root / "ds.lance")
    for i in range(4):
        ids = pa.array(range(i * 20, (i + 1) * 20), pa.int64())
        lance.write_dataset(pa.table({"id": ids, "name": pa.array([f"r{j}" for j in ids.to_pylist()])}), uri,
                            mode="create" if i == 0 else "append")
    ids = pa.array(range(80, 130), pa.int64())
    pq.write_table(pa.table({"id": ids, "name": pa.array([f"r{j}" for j in ids.to_pylist()])}),
                   root / "input.parquet")
    return lance.dataset(uri).version


def _run(root: pathlib.Path, extra_env: dict[str, str], dag_id: str = DAG_ID) -> tuple[dict[str, str], str]:
    env = {**os.environ, "LANCE_TEST_ROOT": str(root),
           **dict([connection_env("lance_default", conn_type="lance", host=str(root))]), **extra_env}
    result = subprocess.run([sys.executable, "-c", _RUN_DAG, dag_id], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=900, check=False)
    output = result.stdout + result.stderr
    states = [line for line in result.stdout.splitlines() if line.startswith("TASK_STATES=")]
    assert result.returncode == 0 and states, output[-5000:]
    return json.JSONDecoder().raw_decode(states[-1].removeprefix("TASK_STATES="))[0], output


def _openlineage_env(events_file: pathlib.Path, **settings: str) -> dict[str, str]:
    return {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file),
                                                           "append": True}),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": NAMESPACE, **settings}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> LineageRun:
    root = tmp_path_factory.mktemp("lineage")
    version_before = _prepare(root)
    events_file = root / "openlineage-events.jsonl"
    calls_before = len([argv for _, argv, _ in spark_submit_spy.runs()])
    states, _ = _run(root, _openlineage_env(events_file, AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO="true"))
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    calls = [argv for _, argv, _ in spark_submit_spy.runs()][calls_before:]
    return LineageRun(root, states, events, events_file, version_before, calls)


def _names(datasets: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in datasets]


def _versions(dataset: dict[str, Any]) -> tuple[str, int, int | None]:
    facets = dataset["facets"]
    return facets["version"]["datasetVersion"], facets["lance"]["version"], facets["lance"].get("readVersion")


def test_the_tasks_ran_and_committed_one_version_each(run: LineageRun) -> None:
    assert run.states == dict.fromkeys(("write", "compact", "stats", "kartothek", "sense", "update", "copy"),
                                       "success")
    ds = pylance.dataset(run.uri)
    assert ds.version == run.version_before + 3 and ds.count_rows() == 130
    assert pylance.dataset(str(run.root / "copy.lance")).to_table().sort_by("id") == ds.to_table().sort_by("id")
    assert lance.dataset(run.uri).read_transaction(run.version_before + 1).kind == "append"
    assert lance.dataset(run.uri).read_transaction(run.version_before + 2).kind == "rewrite"


def test_the_write_reports_its_parquet_source_and_the_version_it_committed(run: LineageRun) -> None:
    event = run.complete("write")
    assert _names(event["inputs"]) == [("file", str(run.root / "input.parquet"))]
    assert _names(event["outputs"]) == [("file", run.uri)]
    written = run.version_before + 1
    assert _versions(event["outputs"][0]) == (str(written), written, run.version_before)
    assert event["job"]["namespace"] == NAMESPACE


def test_the_compaction_reads_and_writes_the_dataset_at_its_versions(run: LineageRun) -> None:
    event = run.complete("compact")
    assert _names(event["inputs"]) == _names(event["outputs"]) == [("file", run.uri)]
    read, written = run.version_before + 1, run.version_before + 2
    assert _versions(event["inputs"][0])[:2] == (str(read), read)
    assert _versions(event["outputs"][0]) == (str(written), written, read)


def test_stats_only_read_and_the_kartothek_import_writes_its_first_version(run: LineageRun) -> None:
    stats = run.complete("stats")
    assert _names(stats["inputs"]) == [("file", run.uri)] and stats["outputs"] == []
    assert _versions(stats["inputs"][0])[:2] == (str(run.version_before + 2), run.version_before + 2)
    imported = run.complete("kartothek")
    assert _names(imported["inputs"]) == [("file", f"{FIXTURE_STORE}/two_keys/table")]
    target = str(run.root / "two_keys.lance")
    assert _names(imported["outputs"]) == [("file", target)]
    assert pylance.dataset(target).version == 1 and _versions(imported["outputs"][0])[:2] == ("1", 1)


def test_the_update_reads_and_writes_the_dataset_and_the_copy_reads_its_lance_source(run: LineageRun) -> None:
    event = run.complete("update")
    read, written = run.version_before + 2, run.version_before + 3
    assert _names(event["inputs"]) == _names(event["outputs"]) == [("file", run.uri)]
    assert _versions(event["inputs"][0])[:2] == (str(read), read)
    assert _versions(event["outputs"][0]) == (str(written), written, read)
    copy = run.complete("copy")
    assert _names(copy["inputs"]) == [("file", run.uri)]
    assert _versions(copy["inputs"][0])[:2] == (str(written), written)
    assert _names(copy["outputs"]) == [("file", str(run.root / "copy.lance"))]
    assert _versions(copy["outputs"][0])[:2] == ("1", 1)


def test_the_version_sensor_reports_the_version_it_found(run: LineageRun) -> None:
    event = run.complete("sense")
    assert _names(event["inputs"]) == [("file", run.uri)] and event["outputs"] == []
    assert _versions(event["inputs"][0])[:2] == (str(run.version_before + 2), run.version_before + 2)


def test_spark_jobs_carry_the_task_as_their_openlineage_parent(run: LineageRun) -> None:
    conf = {task: dict(a.split("=", 1) for a in argv if a.startswith("spark.openlineage."))
            for argv in run.spark_calls for task in ("write", "compact", "copy") if f"airflow-lance-{task}" in argv}
    assert set(conf) == {"write", "compact", "copy"} and len(run.spark_calls) == 3
    for task, properties in conf.items():
        start = next(e for e in run.events if e["eventType"] == "START" and e["job"]["name"] == f"{DAG_ID}.{task}")
        assert properties["spark.openlineage.parentJobName"] == f"{DAG_ID}.{task}"
        assert properties["spark.openlineage.parentJobNamespace"] == NAMESPACE
        assert properties["spark.openlineage.parentRunId"] == start["run"]["runId"]
        assert not any(key.startswith("spark.openlineage.transport") for key in properties)


@pytest.mark.parametrize(("dag_id", "tasks", "spark_jobs"), [
    # the local tasks and a task asking what its Spark job's conf would be given (no spark-submit)
    ("lance_test_lineage_disabled_local", ("compact", "stats", "kartothek", "sense", "update", "spark_conf"), 0),
    pytest.param("lance_test_lineage_disabled", ("write", "compact", "stats", "kartothek", "sense", "update"), 1,
                 marks=pytest.mark.slow),
])
def test_with_openlineage_disabled_the_operators_work_and_emit_nothing(
        tmp_path: pathlib.Path, spark_submit_spy: SparkSubmitSpy, dag_id: str, tasks: tuple[str, ...],
        spark_jobs: int) -> None:
    """With parent-job injection on and OpenLineage off: no events, no spark.openlineage.* properties."""
    version_before = _prepare(tmp_path)
    events_file = tmp_path / "openlineage-events.jsonl"
    calls_before = len([argv for _, argv, _ in spark_submit_spy.runs()])
    states, _ = _run(tmp_path, _openlineage_env(events_file, AIRFLOW__OPENLINEAGE__DISABLED="true",
                                                AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO="true"),
                     dag_id=dag_id)
    assert states == dict.fromkeys(tasks, "success")
    # the compaction and the update commit, and the write where it runs (on Spark)
    assert pylance.dataset(str(tmp_path / "ds.lance")).version == version_before + 2 + spark_jobs
    assert not events_file.exists()
    runs = [argv for _, argv, _ in spark_submit_spy.runs()][calls_before:]
    assert len(runs) == spark_jobs and not any("spark.openlineage." in a for argv in runs for a in argv)


def test_the_operator_modules_do_not_import_openlineage() -> None:
    """Only Airflow's provider discovery (which the Spark provider's imports trigger) touches the
    OpenLineage provider's package when the operators are imported; its client is never imported."""
    code = ("import sys; import {}; "
            "print(sorted(m for m in sys.modules if m.startswith(('openlineage', 'airflow.providers.openlineage'))))")

    def imported(modules: str) -> str:
        result = subprocess.run([sys.executable, "-c", code.format(modules)], cwd=REPO, capture_output=True,
                                text=True, check=True)
        return result.stdout.strip()

    ours = imported("airflow_lance.operators.spark_write, airflow_lance.operators.maintenance, "
                    "airflow_lance.operators.kartothek")
    assert ours == imported("airflow.providers.apache.spark.hooks.spark_submit, airflow.providers.common.compat.sdk")
    assert "'openlineage" not in ours


@pytest.mark.parametrize("uri", [
    "/data/lance/ds.lance", "file:///data/lance/ds.lance", "lance+file:///data/ds.lance",
    "s3://bucket/a/b/ds.lance", "s3+ddb://bucket/a/ds.lance?ddbTableName=t", "gs://bucket/a/ds.lance",
    "abfss://container@account.dfs.core.windows.net/a/ds.lance", "az://container/a/ds.lance",
    "hdfs://namenode:8020/a/ds.lance",
])
def test_names_follow_the_openlineage_naming_spec(uri: str) -> None:
    from openlineage.client.naming import dataset as naming

    options = {"azure_storage_account_name": "account"}
    expected = {
        "/data/lance/ds.lance": naming.LocalFileSystem(path="/data/lance/ds.lance"),
        "file:///data/lance/ds.lance": naming.LocalFileSystem(path="/data/lance/ds.lance"),
        "lance+file:///data/ds.lance": naming.LocalFileSystem(path="/data/ds.lance"),
        "s3://bucket/a/b/ds.lance": naming.S3(bucket_name="bucket", object_key="a/b/ds.lance"),
        "s3+ddb://bucket/a/ds.lance?ddbTableName=t": naming.S3(bucket_name="bucket", object_key="a/ds.lance"),
        "gs://bucket/a/ds.lance": naming.GCS(bucket_name="bucket", object_key="a/ds.lance"),
        "abfss://container@account.dfs.core.windows.net/a/ds.lance":
            naming.ABFSS(container="container", service="account", path="a/ds.lance"),
        "az://container/a/ds.lance": naming.ABFSS(container="container", service="account", path="a/ds.lance"),
        "hdfs://namenode:8020/a/ds.lance": naming.HDFS(namenode_host="namenode", namenode_port="8020",
                                                       path="/a/ds.lance"),
    }[uri]
    assert dataset_name(uri, options) == (expected.get_namespace(), expected.get_name())


def test_merge_insert_reports_its_source_and_a_lance_source_at_its_pinned_version(tmp_path: pathlib.Path) -> None:
    from airflow_lance.operators._lineage import spark_source_datasets
    from airflow_lance.operators.merge_insert import LanceSparkMergeInsertOperator
    from airflow_lance.spark.spec import LanceSourceSpec, SourceSpec

    op = LanceSparkMergeInsertOperator(task_id="upsert", uri=str(tmp_path / "t.lance"), on="id",
                                       source_path=str(tmp_path / "in.parquet"))
    assert [(d.namespace, d.name) for d in op.lineage_sources()] == [("file", str(tmp_path / "in.parquet"))]
    pinned = SourceSpec("lance", lance=LanceSourceSpec(uri=str(tmp_path / "src.lance"), version=7))
    [source] = spark_source_datasets(pinned)
    assert (source.namespace, source.name, source.version) == ("file", str(tmp_path / "src.lance"), 7)
    assert spark_source_datasets(SourceSpec.from_fields(sql="SELECT 1")) == []
