"""Test DAGs of LanceVersionSensor: one small DAG per scenario. The dataset comes from the
``uri`` param (``dag.test(run_conf={"uri": ...})``); connections are ``lance_default``."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.sensors.version import LanceVersionSensor

ARGS: dict[str, Any] = {"start_date": dt.datetime(2025, 1, 1), "schedule": None, "catchup": False,
                        "params": {"uri": "", "baseline": ""}}


def mark_started(context: Any) -> None:
    """Tell the test the sensor is executing (``<uri>-started``): a writer may commit now."""
    pathlib.Path(f"{context['params']['uri']}-started").touch()


FAST: dict[str, Any] = {"uri": "{{ params.uri }}", "poke_interval": 0.5, "timeout": 60,
                        "on_execute_callback": mark_started}

with DAG("lance_test_sensor_poke", **ARGS) as poke_dag:
    LanceVersionSensor(task_id="wait", mode="poke", **FAST)

with DAG("lance_test_sensor_reschedule", **ARGS) as reschedule_dag:
    LanceVersionSensor(task_id="wait", mode="reschedule", **FAST)

with DAG("lance_test_sensor_deferrable", **ARGS) as deferrable_dag:
    LanceVersionSensor(task_id="wait", deferrable=True, **FAST)

with DAG("lance_test_sensor_data_changes", **ARGS) as data_changes_dag:
    LanceVersionSensor(task_id="wait", baseline_version="{{ params.baseline }}", data_changes_only=True, **FAST)

with DAG("lance_test_sensor_tag", **ARGS) as tag_dag:
    LanceVersionSensor(task_id="wait", tag="release", deferrable=True, **FAST)



def record_failure(context: Any) -> None:
    """Keep the exception of a failed sensor next to the dataset (``<uri>-failures/<task>.json``)."""
    folder = pathlib.Path(f"{context['params']['uri']}-failures")
    folder.mkdir(exist_ok=True)
    exc = context.get("exception")
    (folder / f"{context['ti'].task_id}.json").write_text(json.dumps({"type": type(exc).__name__, "message": str(exc)}))


with DAG("lance_test_sensor_timeout", **ARGS) as timeout_dag:
    for name, deferrable in (("poke", False), ("deferred", True)):
        LanceVersionSensor(task_id=name, uri="{{ params.uri }}", poke_interval=0.5, timeout=2, deferrable=deferrable,
                           on_failure_callback=record_failure)
