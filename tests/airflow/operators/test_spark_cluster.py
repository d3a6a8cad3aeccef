"""The Spark operators on a real standalone cluster (a master and two workers, each its own JVM
and work directory, tests/airflow/spark_cluster.py) through ``dag.test()``, client deploy mode:
a write, a Spark compaction and a Kartothek import. The executors ran in the workers'
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
from lance_airflow_testing import connection_env, load_dag, task_instances, xcom_value
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


@pytest.fixture(scope="module")
def run(cluster: SparkCluster, tmp_path_factory: pytest.TempPathFactory) -> ClusterRun:
    root = tmp_path_factory.mktemp("cluster-data")
    before = set(cluster.applications())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_CLUSTER_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        mp.setenv(*connection_env("spark_cluster", conn_type="spark", host="spark://127.0.0.1", port=cluster.port))
        dag_run = load_dag("lance_test_spark_cluster.py", "lance_test_spark_cluster").test()
    return ClusterRun(root, dag_run, [app for app in cluster.applications() if app not in before])


def test_every_operator_ran_one_application_with_an_executor_on_each_worker(run: ClusterRun,
                                                                             cluster: SparkCluster) -> None:
    assert {ti.task_id: ti.state for ti in run.dag_run.get_task_instances()} == {
        "write": "success", "compact": "success", "kartothek": "success"}
    assert len(run.apps) == 3  # write, compaction, Kartothek import: one application each
    for app in run.apps:
        dirs = cluster.executor_dirs(app)
        assert all(len(executors) == 1 for executors in dirs.values()), dirs  # both workers, one executor each
    # the executors ran the Python tasks (Spark's executor log names every task it ran)
    write_log = cluster.executor_stderr(run.apps[0])
    assert write_log.count("Running task") >= 4, write_log[-3000:]
    tasks_per_worker = [sum(p.joinpath("stderr").read_text().count("Running task") for p in executors)
                        for executors in cluster.executor_dirs(run.apps[0]).values()]
    assert all(n >= 1 for n in tasks_per_worker), tasks_per_worker


def test_pylance_reads_exactly_the_rows_written_and_compacted(run: ClusterRun) -> None:
    ds = pylance.dataset(str(run.root / "written.lance"))
    assert ds.version == 2  # create, then one Rewrite
    ids = pa.array(range(3000), pa.int64())
    expected = pa.table({"id": ids, "x": pa.array([i * 0.5 for i in range(3000)]),
                         "name": pa.array([f"row-{i}" for i in range(3000)])}).cast(ds.schema)
    assert ds.to_table().sort_by("id").equals(expected)
    assert len(ds.get_fragments()) == 2  # 12 fragments of 250 rows -> 2 of 1,500
    assert xcom_value(run.dag_run, "write")["num_fragments"] == 12
    v1 = pylance.dataset(str(run.root / "written.lance"), version=1)
    assert len(v1.get_fragments()) == 12 and v1.to_table().sort_by("id").equals(expected)


def test_kartothek_import_on_the_cluster_equals_the_source(run: ClusterRun) -> None:
    ds = pylance.dataset(str(run.root / "two_keys.lance"))
    assert ds.version == 1
    assert as_expected(ds.to_table(), ds.schema).equals(as_expected(ground_truth("two_keys", "table"), ds.schema))
    assert xcom_value(run.dag_run, "kartothek")["execution"] == "spark"
