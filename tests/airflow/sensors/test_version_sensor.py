"""LanceVersionSensor through ``dag.test()``: poke, reschedule and deferrable mode (the trigger runs
to completion in line), the data-change filter, the tag condition and timeouts. A background thread
commits once the sensor is running, as another writer would."""

from __future__ import annotations

import contextlib
import json
import pathlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, xcom_value

import airflow_lance.core as lance

DAG_FILE = "lance_test_sensors.py"


@pytest.fixture(autouse=True)
def lance_default(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setenv(*connection_env("lance_default", conn_type="lance", host=str(tmp_path)))


@pytest.fixture
def uri(tmp_path: pathlib.Path) -> str:
    path = str(tmp_path / "events.lance")
    lance.write_dataset(pa.table({"id": pa.array([1, 2, 3], pa.int64())}), path)
    return path


def _append(uri: str) -> None:
    lance.write_dataset(pa.table({"id": pa.array([4, 5], pa.int64())}), uri, mode="append")


def _rewrite(uri: str) -> None:
    """Commit a compaction-style Rewrite of every fragment (same rows, new files)."""
    ds = lance.dataset(uri)
    old = [f.metadata for f in ds.get_fragments()]
    new = lance.write_fragments(ds.to_table(), uri, mode="append")
    group = lance.LanceOperation.RewriteGroup(old, new)
    lance.LanceDataset.commit(uri, lance.LanceOperation.Rewrite([group]), ds.version)


@contextlib.contextmanager
def once_sensor_runs(uri: str, action: Callable[[], None]) -> Iterator[None]:
    """Run ``action`` in a thread a moment after the sensor started executing (its first check is done)."""
    errors: list[BaseException] = []
    started = pathlib.Path(f"{uri}-started")

    def worker() -> None:
        try:
            deadline = time.monotonic() + 120
            while not started.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the sensor on {uri} never started")
                time.sleep(0.1)
            time.sleep(1.5)
            action()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if errors:
        raise errors[0]


def _run(dag_id: str, action: Callable[[], None] | None = None, **conf: Any) -> Any:
    dag = load_dag(DAG_FILE, dag_id)
    if action is None:
        return dag.test(run_conf=conf)
    with once_sensor_runs(conf["uri"], action):
        return dag.test(run_conf=conf)


def test_poke_mode_waits_for_a_version_newer_than_at_the_first_poke(uri: str) -> None:
    dag_run = _run("lance_test_sensor_poke", lambda: _append(uri), uri=uri)
    assert task_instances(dag_run)["wait"].state == "success"
    info = xcom_value(dag_run, "wait")
    assert {k: info[k] for k in ("uri", "version", "baseline_version", "operation")} == {
        "uri": uri, "version": 2, "baseline_version": 1, "operation": "append"}
    assert {k: info[k] for k in ("version_range", "rows_inserted", "rows_updated", "rows_deleted")} == {
        "version_range": [1, 2], "rows_inserted": 2, "rows_updated": 0, "rows_deleted": 0}


def test_reschedule_mode_remembers_the_baseline_across_reschedules(uri: str) -> None:
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    dag_run = _run("lance_test_sensor_reschedule", lambda: _append(uri), uri=uri)
    ti = task_instances(dag_run)["wait"]
    assert (ti.state, ti.try_number) == ("success", 1)
    with create_session() as session:
        reschedules = session.scalar(select(func.count(TaskReschedule.id)).where(TaskReschedule.ti_id == ti.id))
    assert reschedules >= 1  # it really was rescheduled, and still fired for the version after its first poke
    assert xcom_value(dag_run, "wait")["version"] == 2


def test_deferrable_mode_runs_the_trigger_to_completion(uri: str) -> None:
    dag_run = _run("lance_test_sensor_deferrable", lambda: _append(uri), uri=uri)
    assert task_instances(dag_run)["wait"].state == "success"
    info = xcom_value(dag_run, "wait")
    assert (info["version"], info["baseline_version"]) == (2, 1)


def test_data_changes_only_ignores_a_compaction_rewrite(uri: str) -> None:
    _rewrite(uri)  # version 2: same rows, new files
    assert lance.dataset(uri).read_transaction().kind == "rewrite"
    dag_run = _run("lance_test_sensor_data_changes", lambda: _append(uri), uri=uri, baseline="1")
    info = xcom_value(dag_run, "wait")
    assert (info["version"], info["data_version"], info["operation"]) == (3, 3, "append")


def test_tag_condition_fires_when_the_tag_is_created(uri: str) -> None:
    _append(uri)
    dag_run = _run("lance_test_sensor_tag", lambda: lance.dataset(uri).tags.create("release", 1), uri=uri)
    info = xcom_value(dag_run, "wait")
    assert (info["tag"], info["version"]) == ("release", 1)


def test_timeouts_fail_the_sensor_in_poke_and_deferrable_mode(uri: str) -> None:
    dag_run = _run("lance_test_sensor_timeout", uri=uri)
    tis = task_instances(dag_run)
    assert (tis["poke"].state, tis["deferred"].state) == ("failed", "failed")
    for task_id in ("poke", "deferred"):
        failure = json.loads(pathlib.Path(f"{uri}-failures/{task_id}.json").read_text())
        assert failure["type"] == "AirflowSensorTimeout"
