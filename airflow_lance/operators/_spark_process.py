"""The local side of a spark-submit run: its environment, its binary and stopping its process tree.

Environment rule (what a Spark job started by an airflow-lance operator inherits from the worker):
every variable of the worker, except Airflow's own secrets and configuration

* ``AIRFLOW_CONN_*`` and ``AIRFLOW_VAR_*`` (connections and variables),
* ``AIRFLOW__*`` (Airflow's configuration: metadata database URL, fernet key, JWT secret,
  secrets backend settings, ...) and ``_AIRFLOW_*`` (Airflow's internal variables),
* any variable whose name contains ``PASSWORD``,

plus the ``env_vars`` the operator is given (``spark_submit_kwargs={"env_vars": {...}}``).
What Spark and its connectors read stays: ``JAVA_HOME``, ``PATH``, ``SPARK_HOME``,
``PYSPARK_PYTHON``, ``HADOOP_CONF_DIR``, and cloud credentials such as ``AWS_*`` or
``GOOGLE_APPLICATION_CREDENTIALS`` (s3a/gs readers use them by design).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Mapping

import psutil

#: Names of worker variables a Spark job never inherits (see the module docstring).
DROPPED_VARIABLES = re.compile(r"^(AIRFLOW_CONN_|AIRFLOW_VAR_|AIRFLOW__|_AIRFLOW_)|PASSWORD", re.IGNORECASE)


def child_environment(environ: Mapping[str, str], extra: Mapping[str, object] | None = None) -> dict[str, str]:
    """The environment of spark-submit: ``environ`` without Airflow's secrets and configuration,
    plus ``extra`` (which may set any name)."""
    env = {name: value for name, value in environ.items() if not DROPPED_VARIABLES.search(name)}
    env.update({name: str(value) for name, value in (extra or {}).items()})
    return env


def find_spark_binary(binary: str, env: Mapping[str, str]) -> str | None:
    """The path of ``binary`` (e.g. ``spark-submit``): itself if it is a path, else found on
    ``env``'s PATH, else in ``$SPARK_HOME/bin``; None if it is nowhere."""
    if os.sep in binary:
        return binary if os.path.isfile(binary) and os.access(binary, os.X_OK) else None
    found = shutil.which(binary, path=env.get("PATH", os.defpath))
    if found is None and env.get("SPARK_HOME"):
        found = shutil.which(binary, path=os.path.join(env["SPARK_HOME"], "bin"))
    return found


def suspend_process_tree(pid: int) -> list[psutil.Process]:
    """Suspend process ``pid`` and all its descendants; return them (``pid`` first).

    Every process found is suspended before its children are listed, so none can start a
    child that escapes (PySpark's worker daemon puts itself and its workers in a process
    group of their own, and children of a killed process are reparented: neither a
    process-group kill nor a kill of the parent first would reach them all).
    """
    try:
        found = {pid: psutil.Process(pid)}
    except psutil.Error:
        return []
    pending = list(found.values())
    while pending:
        for process in pending:
            with contextlib.suppress(psutil.Error):
                process.suspend()
        children: list[psutil.Process] = []
        for process in pending:
            with contextlib.suppress(psutil.Error):
                children += process.children(recursive=True)
        pending = [child for child in children if child.pid not in found]
        found.update((child.pid, child) for child in pending)
    return list(found.values())


def kill_processes(processes: list[psutil.Process], timeout: float = 10.0) -> None:
    """Kill ``processes`` and wait (at most ``timeout`` seconds) until none is running."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)


def _alive(process: psutil.Process) -> bool:
    """Running and not a zombie (a killed process whose parent has not reaped it yet is gone)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
