"""``python_env_archive``: the spark-submit command line it makes (the cluster run is in
test_spark_cluster.py), its refusal with a local master, and the operators passing it on."""

from __future__ import annotations

import sys

import pytest
from lance_airflow_testing import connection_env

from airflow_lance.operators._spark_submit import LanceSparkJobError, SparkJobRunner, spark_hook_kwargs
from airflow_lance.operators.kartothek import KartothekToLanceOperator
from airflow_lance.operators.maintenance import LanceCompactFilesOperator
from airflow_lance.operators.spark_write import LanceSparkWriteOperator


def _command(conf: dict | None = None, deploy_mode: str | None = None, **kwargs: object) -> list[str]:
    runner = SparkJobRunner(spark_hook_kwargs(spark_conn_id="spark_archive_test", conf=conf, name="n",
                                              python_env_archive="hdfs:///envs/lance.tar.gz",
                                              spark_submit_kwargs={"deploy_mode": deploy_mode} if deploy_mode else None,
                                              **kwargs))
    return runner._hook_for("/tmp/spec.json", "/tmp/code.zip")._build_spark_submit_command("/tmp/app.py")


def _confs(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")


@pytest.fixture
def cluster_connection(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv(*connection_env("spark_archive_test", conn_type="spark", host="spark://127.0.0.1", port=7077))
    return monkeypatch


def test_client_mode_ships_the_archive_and_keeps_the_drivers_python(cluster_connection: pytest.MonkeyPatch) -> None:
    cluster_connection.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    command = _command(archives="extra.zip#x")
    assert command[command.index("--archives") + 1] == "extra.zip#x,hdfs:///envs/lance.tar.gz#env"
    assert _confs(command)["spark.pyspark.python"] == "./env/bin/python"
    assert _confs(command)["spark.pyspark.driver.python"] == sys.executable
    cluster_connection.setenv("PYSPARK_DRIVER_PYTHON", "/opt/py/bin/python")
    assert _confs(_command())["spark.pyspark.driver.python"] == "/opt/py/bin/python"


def test_cluster_mode_driver_uses_the_archive_and_conf_wins(cluster_connection: pytest.MonkeyPatch) -> None:
    confs = _confs(_command(deploy_mode="cluster"))
    assert confs["spark.pyspark.python"] == "./env/bin/python" and "spark.pyspark.driver.python" not in confs
    confs = _confs(_command(conf={"spark.pyspark.python": "./env/bin/python3.11"}))
    assert confs["spark.pyspark.python"] == "./env/bin/python3.11"


def test_a_local_master_is_refused_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(*connection_env("spark_archive_test", conn_type="spark", host="local[2]"))
    with pytest.raises(LanceSparkJobError, match=r"python_env_archive needs a cluster master, not 'local\[2\]'"):
        _command()


def test_the_operators_pass_it_on(cluster_connection: pytest.MonkeyPatch) -> None:
    write = LanceSparkWriteOperator(task_id="w", uri="/tmp/x.lance", source_sql="SELECT 1 AS id",
                                    spark_conn_id="spark_archive_test", python_env_archive="env.tar.gz")
    assert "python_env_archive" in write.template_fields
    assert write._runner().python_env_archive == "env.tar.gz"
    compact = LanceCompactFilesOperator(task_id="c", uri="/tmp/x.lance", mode="spark",
                                        python_env_archive="env.tar.gz")
    kartothek = KartothekToLanceOperator(task_id="k", store_uri="file:///s", dataset_uuid="d", target="/tmp/t.lance",
                                         execution="spark", python_env_archive="env.tar.gz")
    assert compact.python_env_archive == kartothek.python_env_archive == "env.tar.gz"
