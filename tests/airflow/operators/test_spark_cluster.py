"""The Spark operators on a real standalone cluster (a master and two workers, each its own JVM
and work directory, tests/airflow/spark_cluster.py) through ``dag.test()``, client deploy mode:
a write, a Spark compaction and a retried write (make stress: also add columns, a merge insert and a
Kartothek import). The executors ran in the workers'
directories; pylance reads exactly the rows written."""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import lance as pylance
import pyarrow as pa
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, task_logs_to, xcom_value
from spark_cluster import SparkCluster, spark_cluster

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from kartothek_fixtures import as_expected, ground_truth  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


@dataclasses.dataclass
class ClusterRun:
    root: pathlib.Path
    dag_run: Any
    apps: list[str]
    full: bool  # with the add-columns, merge-insert and Kartothek tasks (make stress)


@pytest.fixture(scope="module")
def run(cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> ClusterRun:
    root = tmp_path_factory.mktemp("cluster-data")
    before = set(cluster.applications())
    full = bool(request.config.getoption("--run-slow"))  # make stress adds add columns, merge insert, Kartothek
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CLUSTER_TEST_FULL", "1" if full else "0")
        mp.setenv("LANCE_CLUSTER_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        mp.setenv(*connection_env("spark_cluster", conn_type="spark", host="spark://127.0.0.1", port=cluster.port))
        dag_run = load_dag("lance_test_spark_cluster.py", "lance_test_spark_cluster").test()
    return ClusterRun(root, dag_run, [app for app in cluster.applications() if app not in before], full)


def test_every_operator_ran_one_application_with_an_executor_on_each_worker(run: ClusterRun,
                                                                             cluster: SparkCluster) -> None:
    full = {"add_columns": "success", "merge_insert": "success", "kartothek": "success"} if run.full else {}
    assert {ti.task_id: ti.state for ti in run.dag_run.get_task_instances()} == {
        "write": "success", "compact": "success", **full, "task_retried": "success"}
    # write, compaction, (add columns, merge insert, Kartothek import,) retried write
    assert len(run.apps) == 3 + len(full)
    for app in run.apps:
        dirs = cluster.executor_dirs(app)
        assert all(len(executors) == 1 for executors in dirs.values()), dirs  # both workers, one executor each
    # the executors ran the Python tasks (Spark's executor log names every task it ran)
    write_log = cluster.executor_stderr(run.apps[0])
    assert write_log.count("Running task") >= 4, write_log[-3000:]
    tasks_per_worker = [sum(p.joinpath("stderr").read_text().count("Running task") for p in executors)
                        for executors in cluster.executor_dirs(run.apps[0]).values()]
    assert all(n >= 1 for n in tasks_per_worker), tasks_per_worker


@pytest.mark.slow  # make stress: the cluster DAG runs these two tasks only with --run-slow
def test_add_columns_and_merge_insert_ran_their_python_tasks_on_both_workers(run: ClusterRun,
                                                                           cluster: SparkCluster) -> None:
    for app in run.apps[2:4]:  # add columns (one task per fragment), merge insert (2 source partitions)
        tasks_per_worker = [sum(p.joinpath("stderr").read_text().count("Running task") for p in executors)
                            for executors in cluster.executor_dirs(app).values()]
        assert len(tasks_per_worker) == 2 and all(n >= 1 for n in tasks_per_worker), (app, tasks_per_worker)


def test_pylance_reads_exactly_the_rows_written_and_compacted(run: ClusterRun) -> None:
    ds = pylance.dataset(str(run.root / "written.lance"), version=2)  # create, then one Rewrite
    ids = pa.array(range(3000), pa.int64())
    expected = pa.table({"id": ids, "x": pa.array([i * 0.5 for i in range(3000)]),
                         "name": pa.array([f"row-{i}" for i in range(3000)])}).cast(ds.schema)
    assert ds.to_table().sort_by("id").equals(expected)
    assert len(ds.get_fragments()) == 2  # 12 fragments of 250 rows -> 2 of 1,500
    assert xcom_value(run.dag_run, "write")["num_fragments"] == 12
    v1 = pylance.dataset(str(run.root / "written.lance"), version=1)
    assert len(v1.get_fragments()) == 12 and v1.to_table().sort_by("id").equals(expected)


@pytest.mark.slow  # make stress: the cluster DAG runs these two tasks only with --run-slow
def test_pylance_reads_exactly_the_added_column_and_the_merged_rows(run: ClusterRun) -> None:
    uri = str(run.root / "written.lance")
    assert [v["version"] for v in pylance.dataset(uri).versions()] == [1, 2, 3, 4]
    added = pylance.dataset(uri, version=3)  # Merge: x2 = x * 2 on both fragments
    assert added.schema.names == ["id", "x", "name", "x2"] and len(added.get_fragments()) == 2
    table = added.to_table().sort_by("id")
    assert table["x2"].to_pylist() == [i * 0.5 * 2 for i in range(3000)]
    assert xcom_value(run.dag_run, "add_columns")["operation"] == "merge"
    merged = pylance.dataset(uri, version=4)  # ids 2,500-3,499 from the source: 500 updated, 500 inserted
    old, new = range(2500), range(2500, 3500)
    expected = pa.table({
        "id": pa.array([*old, *new], pa.int64()),
        "x": pa.array([i * 0.5 for i in old] + [i * -1.0 for i in new]),
        "name": pa.array([f"row-{i}" for i in old] + [f"new-{i}" for i in new]),
        "x2": pa.array([float(i) for i in old] + [i * -2.0 for i in new]),
    }).cast(merged.schema)
    assert merged.to_table().sort_by("id").equals(expected)
    result = xcom_value(run.dag_run, "merge_insert")
    assert (result["num_inserted_rows"], result["num_updated_rows"], result["num_deleted_rows"]) == (500, 500, 0)
    assert result["version"] == 4 and result["read_version"] == 3


@pytest.mark.slow  # make stress: the cluster DAG runs the Kartothek import only with --run-slow
def test_kartothek_import_on_the_cluster_equals_the_source(run: ClusterRun) -> None:
    ds = pylance.dataset(str(run.root / "two_keys.lance"))
    assert ds.version == 1
    assert as_expected(ds.to_table(), ds.schema).equals(as_expected(ground_truth("two_keys", "table"), ds.schema))
    assert xcom_value(run.dag_run, "kartothek")["execution"] == "spark"


def test_a_task_failing_on_its_first_attempt_is_retried_by_spark_and_written_once(run: ClusterRun,
                                                                                    cluster: SparkCluster) -> None:
    assert "injected failure of the first attempt of partition 1" in cluster.executor_stderr(run.apps[-1])
    ds = pylance.dataset(str(run.root / "retried.lance"))
    assert ds.version == 1 and len(ds.versions()) == 1
    assert sorted(ds.to_table()["id"].to_pylist()) == list(range(3000))
    assert ds.count_rows() == 3000 == xcom_value(run.dag_run, "task_retried")["num_rows"]
    referenced = {f.path for fragment in ds.get_fragments() for f in fragment.data_files()}
    on_disk = {p.name for p in (run.root / "retried.lance" / "data").iterdir()}
    assert referenced <= on_disk and len(referenced) == 4  # one file per partition; a failed attempt's file, if
    # any, stays unreferenced (version cleanup reclaims it after its grace period)


# -- the executors' Python environment ----------------------------------------------------------
#: What an executor had with the README's first list of packages (pyarrow, protobuf, pyroaring,
#: fsspec) and sqlglot: numpy, msgpack and zstandard are missing.
LACKING_ENV_PACKAGES = ("pyarrow", "protobuf", "pyroaring", "fsspec", "sqlglot")


def lacking_python(target: pathlib.Path) -> pathlib.Path:
    """A real virtual environment holding only :data:`LACKING_ENV_PACKAGES` (linked from this one)."""
    import importlib.metadata
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
    site = next((target / "lib").glob("python3*/site-packages"))
    for name in LACKING_ENV_PACKAGES:
        dist = importlib.metadata.distribution(name)
        base = pathlib.Path(str(dist.locate_file("")))
        tops = {pathlib.PurePosixPath(str(f)).parts[:2] if str(f).startswith("google/")
                else pathlib.PurePosixPath(str(f)).parts[:1] for f in dist.files or []}
        for parts in tops:
            if parts[0] in ("..", "__pycache__") or not (base / pathlib.Path(*parts)).exists():
                continue
            (site / pathlib.Path(*parts)).parent.mkdir(parents=True, exist_ok=True)
            if not (site / pathlib.Path(*parts)).exists():
                (site / pathlib.Path(*parts)).symlink_to(base / pathlib.Path(*parts))
    return target / "bin" / "python"


@dataclasses.dataclass
class EnvRun:
    root: pathlib.Path
    dag_run: Any
    apps: list[str]
    full: bool  # with the add-columns, merge-insert and Kartothek tasks (make stress)
    archive: pathlib.Path


@pytest.fixture(scope="module")
def env_run(cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> EnvRun:
    import subprocess

    root = tmp_path_factory.mktemp("cluster-env")
    python = lacking_python(root / "lacking-venv")
    archive = root / "env.tar.gz"  # the README's command
    subprocess.run([sys.executable, "-m", "airflow_lance.spark.pack_env", str(archive)], check=True)
    before = set(cluster.applications())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CLUSTER_TEST_ROOT", str(root))
        mp.setenv("LANCE_CLUSTER_TEST_LACKING_PYTHON", str(python))
        mp.setenv("LANCE_CLUSTER_TEST_ARCHIVE", str(archive))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        mp.setenv(*connection_env("spark_cluster", conn_type="spark", host="spark://127.0.0.1", port=cluster.port))
        with task_logs_to(root / "task-logs.txt"):
            dag_run = load_dag("lance_test_spark_cluster.py", "lance_test_spark_cluster_env").test()
    return EnvRun(root, dag_run, [app for app in cluster.applications() if app not in before], archive)


@pytest.mark.slow  # make stress: builds and packs an ~80 MB environment (minutes with a cold pip cache);
# make test keeps tests/spark/test_executor_environment.py (the same check on a Python lacking packages)
def test_executors_lacking_packages_fail_naming_them_before_writing(env_run: EnvRun) -> None:
    import json

    assert task_instances(env_run.dag_run)["lacking_python"].state == "failed"
    failure = json.loads((env_run.root / "failures" / "lacking_python.json").read_text())
    assert failure["type"] == "LanceSparkJobError"
    cause = failure["message"].splitlines()[0]
    assert cause.startswith("ExecutorEnvironmentError: the executors' Python lacks what the job needs"), cause
    for name in ("numpy", "msgpack", "zstandard"):
        assert f"{name}: not installed" in cause, cause
    for name in LACKING_ENV_PACKAGES:
        assert f"{name}:" not in cause and f"{name} " not in cause.split("(Python:")[0], cause
    assert str(env_run.root / "lacking-venv" / "bin" / "python") in cause
    assert not (env_run.root / "lacking.lance").exists()  # nothing written


@pytest.mark.slow  # make stress: builds and packs an ~80 MB environment (minutes with a cold pip cache);
# make test keeps tests/spark/test_executor_environment.py (the same check on a Python lacking packages)
def test_a_packed_environment_runs_the_executors_and_writes_exact_rows(env_run: EnvRun,
                                                                         cluster: SparkCluster) -> None:
    assert task_instances(env_run.dag_run)["packed_env"].state == "success"
    ds = pylance.dataset(str(env_run.root / "packed.lance"))
    assert ds.version == 1 and ds.count_rows() == 3000
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(3000))
    app = env_run.apps[-1]
    executors = [p for dirs in cluster.executor_dirs(app).values() for p in dirs]
    assert len(executors) == 2 and all((p / "env" / "bin" / "python").exists() for p in executors)
    assert xcom_value(env_run.dag_run, "packed_env")["num_rows"] == 3000
    # the job's check ran in the archive's Python, in the executors' directories on the workers
    logs = (env_run.root / "task-logs.txt").read_text(errors="replace")
    checked = {line.split("executors' Python checked: ")[1].split(" [airflow")[0]
               for line in logs.splitlines() if "executors' Python checked: " in line}
    assert len(checked) == 2, checked  # one per job: the lacking one, the packed one
    packed = next(pythons for pythons in checked if "lacking-venv" not in pythons)
    assert all(f"{p}/env/bin/python on " in packed for p in executors), packed
