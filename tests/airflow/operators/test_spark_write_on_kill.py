"""``on_kill`` cancels the running Spark write job: the JVM is gone, the task fails with
``LanceSparkJobError`` and nothing is committed."""

from __future__ import annotations

import pathlib
import threading
import time
import types

import psutil
import pyarrow as pa
from lance_airflow_testing import SparkSubmitSpy

import airflow_lance.core as lance
from airflow_lance.operators.spark_write import LanceSparkJobError, LanceSparkWriteOperator

SOURCES = str(pathlib.Path(__file__).resolve().parents[1] / "spark_sources.py")


def test_on_kill_cancels_the_running_spark_job(tmp_path: pathlib.Path, spark_submit_spy: SparkSubmitSpy) -> None:
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(pa.table({"id": pa.array([1, 2], pa.int64())}), uri)
    operator = LanceSparkWriteOperator(
        task_id="slow_write", uri=uri, mode="append", source_callable="spark_sources:slow_rows", py_files=SOURCES,
        lance_conn_id=None, conf={"spark.ui.enabled": "false", "spark.log.level": "WARN"},
    )
    ti = types.SimpleNamespace(dag_id="kill_test", run_id="manual_1", task_id="slow_write", map_index=-1,
                               try_number=1)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            operator.execute({"ti": ti})  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 180
    while "airflow-lance job: append" not in spark_submit_spy.output():  # the job is in its source callable
        assert time.monotonic() < deadline and thread.is_alive(), "the Spark job never started"
        time.sleep(0.2)
    (argv_file,) = spark_submit_spy.folder.glob("argv-*")
    pid = int(argv_file.name.split("-")[1])
    driver_processes = psutil.Process(pid).children(recursive=True)  # the PySpark driver (client mode)
    assert driver_processes
    operator.on_kill()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], LanceSparkJobError), outcome
    for process in [psutil.Process(pid) if psutil.pid_exists(pid) else None, *driver_processes]:
        assert process is None or not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    assert lance.dataset(uri).version == 1
