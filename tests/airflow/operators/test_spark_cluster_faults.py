"""Faults on the standalone cluster (``make stress``): the spark-submit driver killed mid-job (the
try fails, nothing is committed, the retry commits once), a worker killed mid-job (Spark runs
its tasks again on the other worker), speculative duplicate attempts, and the Airflow task process
killed between the job's end and the commit (the retry commits the staged result once, without
running Spark again): exact rows and one version per task every time. Files of duplicate attempts
are never referenced, and version cleanup reclaims them after its grace period."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import lance as pylance
import pyarrow as pa
import psutil
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, task_logs_to, xcom_value
from spark_cluster import SparkCluster, spark_cluster

import airflow_lance.core as lance
from airflow_lance.operators._spark_process import kill_processes, suspend_process_tree

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    # workers on 127.0.0.1 and 127.0.0.2: Spark runs a speculative copy only on another host
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster-faults"), distinct_hosts=True) as running:
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


# -- the Airflow task process killed between the Spark job's end and the commit -------------------
CHILD = pathlib.Path(__file__).resolve().parents[1] / "dag_test_child.py"
KILL_DATE = dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc)


def _staged(dataset: pathlib.Path) -> set[str]:
    """Staged job results (not commit receipts) in the dataset's staging area."""
    return {p.name for p in (dataset / "_airflow_staging").glob("*.json") if not p.name.endswith(".landed.json")}


def _dag_test_killed_when(log: pathlib.Path, staged: Callable[[], bool]) -> None:
    """Run the kill DAG's ``dag.test()`` in a child process; when ``staged()`` (a job result was
    staged), stop the child and everything it started, check, and kill them all (SIGKILL)."""
    with open(log, "ab") as out:
        child = subprocess.Popen([sys.executable, str(CHILD), "lance_test_spark_cluster.py",
                                  "lance_test_spark_cluster_kill", KILL_DATE.isoformat()],
                                 stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 600
        while not staged():
            assert child.poll() is None, f"the DAG run ended before staging a result:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, "no result was staged"
            time.sleep(0.05)
        kill_processes(suspend_process_tree(child.pid))  # stopped first: nothing can commit meanwhile
    finally:
        if child.poll() is None:  # the test failed: leave nothing running
            kill_processes(suspend_process_tree(child.pid))
        child.wait(timeout=60)
    assert child.returncode == -9


def test_the_task_process_killed_after_the_job_and_before_the_commit_commits_the_staged_result_once(
        cluster: SparkCluster, tmp_path: pathlib.Path) -> None:
    dataset = tmp_path / "killed.lance"
    log = tmp_path / "dag-test.log"
    apps_before = set(cluster.applications())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CLUSTER_TEST_ROOT", str(tmp_path))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(tmp_path)))
        mp.setenv(*connection_env("spark_cluster", conn_type="spark", host="spark://127.0.0.1", port=cluster.port))
        # 1. the write's job staged its result: the task process dies before committing it
        _dag_test_killed_when(log, lambda: bool(_staged(dataset)))
        written = _staged(dataset)
        assert not (dataset / "_versions").exists()  # nothing committed
        # 2. the write again (same run id, same key): it commits the staged result without Spark;
        #    the merge insert's job staged its result: the task process dies before committing it
        _dag_test_killed_when(log, lambda: bool(_staged(dataset) - written))
        assert pylance.dataset(str(dataset)).version == 1  # the write only
        # 3. the write finds its commit; the merge insert commits its staged result
        with task_logs_to(tmp_path / "task-logs.txt"):
            dag_run = load_dag("lance_test_spark_cluster.py", "lance_test_spark_cluster_kill").test(
                logical_date=KILL_DATE, run_after=KILL_DATE)
    tis = task_instances(dag_run)
    assert {t: ti.state for t, ti in tis.items()} == {"write": "success", "merge_insert": "success"}
    apps = [app for app in cluster.applications() if app not in apps_before]
    assert len(apps) == 2, apps  # one Spark job each: the retries committed what the killed tries staged
    logs = log.read_text(errors="replace")
    assert "Reusing the Spark output staged by an earlier try of this task" in logs  # the write, run 2
    last = (tmp_path / "task-logs.txt").read_text(errors="replace")  # run 3
    assert "This write already committed version 1" in last
    assert "Reusing the Spark merge insert staged by an earlier try of this task (Spark job not run)" in last
    ds = pylance.dataset(str(dataset))
    assert [v["version"] for v in ds.versions()] == [1, 2]  # one version per task
    key = f"lance_test_spark_cluster_kill/{dag_run.run_id}/%s/-1"
    assert [ds.read_transaction(v).transaction_properties[lance.IDEMPOTENCY_KEY] for v in (1, 2)] == [
        key % "write", key % "merge_insert"]
    old, new = range(2500), range(2500, 3500)
    expected = pa.table({"id": pa.array([*old, *new], pa.int64()),
                         "x": pa.array([i * 0.5 for i in old] + [i * -1.0 for i in new]),
                         "name": pa.array([f"row-{i}" for i in old] + [f"new-{i}" for i in new])}).cast(ds.schema)
    assert ds.to_table().sort_by("id").equals(expected)
    result = xcom_value(dag_run, "merge_insert")
    assert (result["num_inserted_rows"], result["num_updated_rows"], result["num_deleted_rows"]) == (500, 500, 0)
    assert _staged(dataset) == set()  # committed, then removed (the commit receipts remain)
    referenced = {f.path for fragment in ds.get_fragments() for f in fragment.data_files()}
    assert referenced == {p.name for p in (dataset / "data").iterdir()}  # no file written twice


# -- speculative execution -------------------------------------------------------------------
def _data_files(dataset: pathlib.Path) -> tuple[set[str], set[str]]:
    """(data files the latest version references, data files on disk)."""
    ds = pylance.dataset(str(dataset))
    referenced = {f.path for fragment in ds.get_fragments() for f in fragment.data_files()}
    return referenced, {p.name for p in (dataset / "data").iterdir()}


def test_speculative_duplicate_attempts_write_once_and_cleanup_reclaims_their_files(
        cluster: SparkCluster, tmp_path: pathlib.Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CLUSTER_TEST_ROOT", str(tmp_path))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(tmp_path)))
        mp.setenv(*connection_env("spark_cluster", conn_type="spark", host="spark://127.0.0.1", port=cluster.port))
        dag_run = load_dag("lance_test_spark_cluster.py", "lance_test_spark_cluster_speculation").test()
    ti = task_instances(dag_run)["speculated"]
    assert (ti.state, ti.try_number) == ("success", 1)
    attempts = {p.name.rsplit("-", 1)[0] for p in (tmp_path / "started").iterdir()}
    assert {"0-0", "0-1", "1-0", "2-0", "3-0"} <= attempts, attempts  # a speculative duplicate of partition 0
    dataset = tmp_path / "speculated.lance"
    ds = pylance.dataset(str(dataset))
    assert ds.version == 1 and len(ds.versions()) == 1
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(3000))
    referenced, on_disk = _data_files(dataset)
    assert len(referenced) == 12 and referenced < on_disk  # 3 files of 250 rows per partition, one attempt's
    duplicates = on_disk - referenced  # what the slow first attempt wrote before it was killed (its complete
    # files, and the temporary file it was writing)
    # version cleanup keeps unreferenced files within its grace period (they may be a write in progress)
    lance.cleanup_old_versions(str(dataset), older_than=dt.timedelta(0))
    assert _data_files(dataset) == (referenced, on_disk)
    # past the grace period (7 days: the duplicates' times moved back 8 days) it reclaims exactly them
    past = time.time() - 8 * 86400
    for name in duplicates:
        os.utime(dataset / "data" / name, (past, past))
    stats = lance.cleanup_old_versions(str(dataset), older_than=dt.timedelta(0))
    assert sorted(stats.files) == sorted(f"data/{name}" for name in duplicates)
    assert _data_files(dataset) == (referenced, referenced)
    ds = pylance.dataset(str(dataset))
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(3000))
