"""The Spark operators through Spark Connect (a ``spark_connect`` connection, ``sc://127.0.0.1:<port>``)
against a real Connect server (tests/airflow/spark_connect_server.py, one per module) through
``dag.test()``: create, append and Spark compaction commit exactly the rows; a job failing on the
server after writing files commits nothing. ``make test`` runs the short DAG (a create and the
failing write); ``make stress`` the full one."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from collections.abc import Iterator
from typing import Any

import lance as pylance
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, task_logs_to, xcom_value
from spark_connect_server import ConnectServer, spark_connect_server

from airflow_lance.operators._spark_connect import SparkConnectJobRunner
from airflow_lance.operators._spark_submit import LanceSparkJobError


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with spark_connect_server(tmp_path_factory.mktemp("spark-connect")) as running:
        yield running


@dataclasses.dataclass
class ConnectRun:
    root: pathlib.Path
    dag_run: Any
    log: str


def _run(server: ConnectServer, root: pathlib.Path, dag_id: str, data: pathlib.Path) -> ConnectRun:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CONNECT_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        mp.setenv(*connection_env("spark_connect_test", conn_type="spark_connect", host="sc://127.0.0.1",
                                  port=server.port))
        handler = logging.FileHandler(root / "airflow-lance.log")
        logging.getLogger("airflow_lance").addHandler(handler)
        try:
            with task_logs_to(root / "task.log"):
                dag_run = load_dag("lance_test_spark_connect.py", dag_id).test()
        finally:
            logging.getLogger("airflow_lance").removeHandler(handler)
            handler.close()
    return ConnectRun(data, dag_run, (root / "task.log").read_text() + (root / "airflow-lance.log").read_text())


@pytest.fixture(scope="module")
def run(server: ConnectServer, tmp_path_factory: pytest.TempPathFactory) -> ConnectRun:
    """The full DAG: create, append, compaction, and the failing write."""
    root = tmp_path_factory.mktemp("connect-data")
    return _run(server, root, "lance_test_spark_connect", root)


@pytest.fixture(scope="module")
def short_run(server: ConnectServer, tmp_path_factory: pytest.TempPathFactory) -> ConnectRun:
    """The short DAG (default suite): the create and the failing write."""
    root = tmp_path_factory.mktemp("connect-short")
    return _run(server, root, "lance_test_spark_connect_short", root / "short")


def test_short_create_commits_exactly_the_rows_and_a_failing_job_nothing(short_run: ConnectRun) -> None:
    states = {task_id: ti.state for task_id, ti in task_instances(short_run.dag_run).items()}
    assert states == {"create": "success", "failing": "failed"}, short_run.log[-5000:]
    ds = pylance.dataset(str(short_run.root / "written.lance"))
    assert ds.version == 1
    table = ds.to_table().sort_by("id")
    assert table.column("id").to_pylist() == list(range(1000))
    assert table.column("name").to_pylist() == [f"row-{i}" for i in range(1000)]
    assert "as a Spark Connect client of connection 'spark_connect_test'" in short_run.log
    _assert_nothing_committed(short_run)


@pytest.mark.slow  # make stress: four Connect jobs (the short version above runs in make test)
def test_create_append_and_compaction_commit_exactly_the_rows(run: ConnectRun) -> None:
    states = {task_id: ti.state for task_id, ti in task_instances(run.dag_run).items()}
    assert states == {"create": "success", "append": "success", "compact": "success", "failing": "failed"}, \
        run.log[-5000:]
    ds = pylance.dataset(str(run.root / "written.lance"))
    assert ds.version == 3  # create, append, compaction: one version each
    table = ds.to_table().sort_by("id")
    assert table.column("id").to_pylist() == list(range(1600))
    assert table.column("x").to_pylist() == [i * 0.5 for i in range(1600)]
    assert table.column("name").to_pylist() == [f"row-{i}" for i in range(1600)]
    assert ds.version == 3 and len(ds.get_fragments()) == 2  # 20 files (12 + 8) compacted to 2 of 800 rows
    assert xcom_value(run.dag_run, "create")["num_rows"] == 1000
    assert xcom_value(run.dag_run, "append")["num_rows"] == 600
    assert pylance.dataset(str(run.root / "written.lance"), version=2).count_rows() == 1600
    # the job ran as a Connect client, its tasks on the server's Python workers
    assert run.log.count("Spark Connect session") >= 3
    assert "as a Spark Connect client of connection 'spark_connect_test'" in run.log


def _assert_nothing_committed(run: ConnectRun) -> None:
    failed = run.root / "failed.lance"
    # the source's partition 1 failed after its rows went to the writer: other files may exist, no version does
    assert not (failed / "_versions").exists() or not any((failed / "_versions").iterdir())
    with pytest.raises(ValueError):
        pylance.dataset(str(failed))
    assert "injected failure of the first attempt of partition 1" in run.log
    assert "nothing was committed" in run.log
    # the source module came to the server's Python workers as an artifact (py_files)
    assert "cluster_sources.py" in run.log


@pytest.mark.slow  # make stress (with the full DAG)
def test_a_job_failing_on_the_server_commits_nothing(run: ConnectRun) -> None:
    _assert_nothing_committed(run)


def test_settings_a_connect_server_cannot_take_fail_before_anything_runs() -> None:
    with pytest.raises(LanceSparkJobError, match=r"takes none of executor_memory, packages.*nothing ran"):
        SparkConnectJobRunner({"conn_id": "spark_connect_test", "executor_memory": "1g", "packages": "x:y:1"})
    with pytest.raises(LanceSparkJobError, match="python_env_archive"):
        SparkConnectJobRunner({"conn_id": "spark_connect_test"}, python_env_archive="env.tar.gz")

