"""Cluster deploy mode: the spec reaches the driver with ``--files`` (never on the command line),
the result comes back through staging; a standalone master (where Spark refuses Python drivers
in cluster mode) is refused before spark-submit runs."""

from __future__ import annotations

import json
import pathlib

import pytest
from lance_airflow_testing import connection_env

from airflow_lance.operators._spark_submit import LanceSparkJobError, SparkJobRunner, spark_hook_kwargs


def _runner(conn_id: str) -> SparkJobRunner:
    return SparkJobRunner(spark_hook_kwargs(spark_conn_id=conn_id, conf=None, name="airflow-lance-t",
                                            spark_binary="/nonexistent/spark-submit"))


def test_cluster_mode_ships_the_spec_with_files_and_no_secret_on_the_command_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv(*connection_env("spark_yarn", conn_type="spark", host="yarn",
                                       extra={"deploy-mode": "cluster"}))
    spec = tmp_path / "lance-write-x.json"
    spec.write_text(json.dumps({"storage_options": {"aws_secret_access_key": "s3cr3t"}}))
    hook = _runner("spark_yarn")._hook_for(str(spec), str(tmp_path / "airflow_lance.zip"))
    command = hook._build_spark_submit_command(str(tmp_path / "airflow_lance_job.py"))
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    assert command[command.index("--files") + 1] == str(spec)
    assert command[-1] == str(spec)  # the application argument: the driver finds the shipped copy by its name
    assert not any("s3cr3t" in arg for arg in command)


def test_client_mode_does_not_ship_the_spec(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv(*connection_env("spark_yarn_client", conn_type="spark", host="yarn"))
    hook = _runner("spark_yarn_client")._hook_for(str(tmp_path / "spec.json"), str(tmp_path / "code.zip"))
    assert "--files" not in hook._build_spark_submit_command("app.py")


def test_cluster_mode_on_a_standalone_master_is_refused_before_spark_submit_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(*connection_env("spark_standalone_cluster", conn_type="spark", host="spark://127.0.0.1",
                                       port=7077, extra={"deploy-mode": "cluster"}))
    with pytest.raises(LanceSparkJobError, match=r"deploy_mode='cluster' on the standalone master "
                                                  r"spark://127\.0\.0\.1:7077: .*only on YARN and Kubernetes; "
                                                  r"the test job did not run and nothing was written"):
        _runner("spark_standalone_cluster").run("{}", "lance-test.json", "the test job")
