"""Faults on the standalone cluster (``make stress``): the spark-submit driver killed mid-job (the
try fails, nothing is committed, the retry commits once) and a worker killed mid-job (Spark runs
its tasks again on the other worker): exact rows and one version either way."""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Callable, Iterator

import lance as pylance
import psutil
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances
from spark_cluster import SparkCluster, spark_cluster

from airflow_lance.operators._spark_process import kill_processes, suspend_process_tree

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster-faults")) as running:
        yield running


def _run_with(cluster: SparkCluster, root: pathlib.Path, fault: Callable[[], None], tasks_started: int):
    """Run the faults DAG; when ``tasks_started`` Python tasks wait, call ``fault`` and release them."""
    errors: list[BaseException] = []

    def inject() -> None:
        try:
            deadline = time.monotonic() + 300
            while len(list((root / "started").glob("*"))) < tasks_started:
                assert time.monotonic() < deadline, "the tasks never started"
                time.sleep(0.2)
            fault()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            (root / "release").touch()

    thread = threading.Thread(target=inject, daemon=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CLUSTER_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        mp.setenv(*connection_env("spark_cluster", conn_type="spark", host="spark://127.0.0.1", port=cluster.port))
        thread.start()
        dag_run = load_dag("lance_test_spark_cluster.py", "lance_test_spark_cluster_faults").test()
        thread.join(timeout=60)
    assert not errors, errors
    return dag_run


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone, or a zombie
        return []


def _exactly_once(root: pathlib.Path) -> None:
    ds = pylance.dataset(str(root / "slow.lance"))
    assert ds.version == 1 and len(ds.versions()) == 1
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(3000))


def test_a_killed_driver_fails_the_try_and_the_retry_commits_once(cluster: SparkCluster,
                                                                  tmp_path: pathlib.Path) -> None:
    killed: list[int] = []

    def kill_driver() -> None:
        drivers = [p for p in psutil.Process().children(recursive=True)
                   if "org.apache.spark.deploy.SparkSubmit" in " ".join(_cmdline(p))]
        assert len(drivers) == 1, drivers
        kill_processes(suspend_process_tree(drivers[0].pid))  # the JVM and its Python driver
        killed.append(drivers[0].pid)

    dag_run = _run_with(cluster, tmp_path, kill_driver, tasks_started=2)
    ti = task_instances(dag_run)["slow_write"]
    assert killed and ti.state == "success" and ti.try_number == 2
    _exactly_once(tmp_path)
    staging = [p.name for p in (tmp_path / "slow.lance" / "_airflow_staging").rglob("*.json")]
    assert len(staging) == 1 and staging[0].endswith(".landed.json"), staging  # the commit's receipt only


def test_a_killed_worker_loses_its_executor_and_spark_reruns_its_tasks(cluster: SparkCluster,
                                                                       tmp_path: pathlib.Path) -> None:
    victim = cluster.processes[-1]  # the last worker: its JVM, its executor and their Python workers

    def kill_worker() -> None:
        kill_processes(suspend_process_tree(victim.pid))

    dag_run = _run_with(cluster, tmp_path, kill_worker, tasks_started=2)
    ti = task_instances(dag_run)["slow_write"]
    assert victim.poll() is not None and ti.state == "success" and ti.try_number == 1
    _exactly_once(tmp_path)
    partitions = [name.name.split("-")[0] for name in (tmp_path / "started").iterdir()]
    assert len(partitions) > 4  # the lost executor's tasks ran again on the other worker
