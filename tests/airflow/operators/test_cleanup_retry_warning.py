"""The cleanup warns when its policy can remove a version a racing writer's retry still looks for."""

from __future__ import annotations

import datetime as dt
import pathlib
from typing import Any

import pyarrow as pa
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, xcom_value

import airflow_lance.core as lance


@pytest.fixture(autouse=True)
def lance_default(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv(*connection_env("lance_default", conn_type="lance", host=str(tmp_path)))


def _dag(max_active_runs: int = 16, *, upstream: bool = True, older_than: Any = None, retain_versions: Any = 2,
         uri: str = "ds.lance", **writer: Any) -> tuple[Any, Any]:
    """A DAG with one writer (retries 3 x 5 min unless given) and the maintenance group; (dag, cleanup task)."""
    from airflow.providers.common.compat.sdk import DAG

    from airflow_lance.operators.spark_write import LanceSparkWriteOperator
    from airflow_lance.task_groups.maintenance import lance_maintenance_task_group

    with DAG("retry_window", start_date=dt.datetime(2025, 1, 1), schedule=None,
             max_active_runs=max_active_runs) as dag:
        write = LanceSparkWriteOperator(task_id="write", uri=uri, source_path="/in", mode="append",
                                        **{"retries": 3, "retry_delay": dt.timedelta(minutes=5), **writer})
        group = lance_maintenance_task_group(uri="ds.lance", retain_versions=retain_versions,
                                             cleanup_older_than=older_than)
        if upstream:
            write >> group
    return dag, dag.get_task("lance_maintenance.cleanup")


def _warning(cleanup: Any, older_than: dt.timedelta | None, retain_versions: int | None) -> str | None:
    from airflow_lance.operators._cleanup_safety import cleanup_warning

    return cleanup_warning(cleanup, older_than, retain_versions, cleanup.hook.resolve_uri)


def test_retry_window_follows_airflows_delays() -> None:
    from airflow_lance.operators._cleanup_safety import retry_window

    dag, _ = _dag()
    assert retry_window(dag.get_task("write")) == dt.timedelta(minutes=15)
    dag, _ = _dag(retry_exponential_backoff=2.0, max_retry_delay=dt.timedelta(minutes=30))
    assert retry_window(dag.get_task("write")) == dt.timedelta(minutes=10 + 20 + 30)  # 2x 5, 10, capped 40
    dag, _ = _dag(retries=0)
    assert retry_window(dag.get_task("write")) == dt.timedelta(0)


def test_a_count_only_cleanup_warns_about_a_writer_that_can_retry_while_it_runs() -> None:
    _, cleanup = _dag()  # upstream, but up to 16 runs at once: another run's cleanup can race the retry
    warning = _warning(cleanup, None, 2)
    assert warning is not None
    assert warning.startswith("this cleanup (retain_versions=2 without older_than) can remove a version committed "
                              "less than 0:15:00 ago, the retry window of task 'write'")
    assert "Set older_than (cleanup_older_than) to at least 0:15:00" in warning
    _, cleanup = _dag(1, upstream=False)  # one run at a time, but the writer may retry while cleanup runs
    assert _warning(cleanup, None, 2) is not None
    assert "older_than=0:10:00 with retain_versions=2" in _warning(cleanup, dt.timedelta(minutes=10), 2)
    _, cleanup = _dag(uri="{{ params.uri }}")  # templated: may be this dataset
    assert _warning(cleanup, None, 2) is not None


@pytest.mark.parametrize(
    ("dag_kwargs", "older_than", "retain_versions"),
    [
        ({"max_active_runs": 1}, None, 2),  # upstream, one run at a time: its retries end before cleanup
        ({}, dt.timedelta(minutes=15), 2),  # versions younger than the retry window stay
        ({}, None, None),  # the default policy keeps 14 days
        ({"retries": 0}, None, 2),  # no retries
        ({"uri": "other.lance"}, None, 2),  # writes another dataset
    ],
)
def test_no_warning_when_no_retry_can_lose_its_commit(dag_kwargs: dict[str, Any], older_than: Any,
                                                     retain_versions: Any) -> None:
    _, cleanup = _dag(**dag_kwargs)
    assert _warning(cleanup, older_than, retain_versions) is None


@pytest.mark.parametrize(("older_than", "warns"), [("", True), ("1", False)])
def test_the_cleanup_task_logs_the_warning(tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str],
                                           older_than: str, warns: bool) -> None:
    uri = str(tmp_path / "ds.lance")
    for i in range(4):
        lance.write_dataset(pa.table({"id": [i]}), uri, mode="create" if i == 0 else "append")
    capfd.readouterr()
    dag_run = load_dag("lance_test_cleanup_retry.py", "lance_test_cleanup_retry_window").test(
        run_conf={"uri": uri, "older_than": older_than})
    states = {task_id: ti.state for task_id, ti in task_instances(dag_run).items()}
    assert states["write"] == "skipped" and states["lance_maintenance.cleanup"] == "success"
    out = capfd.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if "the retry window of task 'write'" in line]
    assert len(lines) == (1 if warns else 0)
    if warns:
        assert "[warning" in lines[0] and "retain_versions=2 without older_than" in lines[0]
        assert "LanceCleanupOldVersionsOperator" in lines[0]
    assert (xcom_value(dag_run, "lance_maintenance.cleanup")["old_versions"] > 0) == warns  # 1 day: all kept
