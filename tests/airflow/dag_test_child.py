"""Run ``dag.test()`` of one test DAG in a process of its own, so that a test can kill the Airflow
task process for real (SIGKILL, no ``on_kill``, no cleanup):

    python dag_test_child.py <DAG file> <dag_id> <logical date, ISO 8601>

The environment (AIRFLOW_HOME and its metadata database, connections, paths) is the test's. A
second run with the same logical date (also its ``run_after``) continues the same DAG run (``dag.test()`` clears its task
instances: the next try of each task)."""

from __future__ import annotations

import datetime as dt
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lance_airflow_testing import load_dag  # noqa: E402

if __name__ == "__main__":
    file_name, dag_id, logical_date = sys.argv[1:4]
    when = dt.datetime.fromisoformat(logical_date)
    load_dag(file_name, dag_id).test(logical_date=when, run_after=when)  # the run id comes from run_after
