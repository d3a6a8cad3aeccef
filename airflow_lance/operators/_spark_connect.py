"""Running one airflow-lance Spark job through Spark Connect (a ``spark_connect`` connection).

The job (:mod:`airflow_lance.spark.job`) runs as a Spark Connect client in a subprocess of the
Airflow worker: ``python airflow_lance_job.py --connect <settings.json> <spec.json>``, with the
Lance code zip first on its ``PYTHONPATH``. It opens a new session on the server named by the
connection (``SparkConnectHook.get_connection_url``: ``sc://host:port/;token=...``), adds the
code zip and the operator's ``py_files`` as artifacts (``spark.addArtifacts(..., pyfile=True)``)
so the server's Python workers import the shipped code, runs the same job with DataFrame APIs
(:mod:`airflow_lance.spark.distributed`) and stages its result as under spark-submit; the
operator commits once, as always.

The spec and the settings (the URL may hold the connection's token, its password) are files of
mode 0600 in a private temporary directory, never on the command line or in the environment; the
client's environment is spark-submit's (:mod:`airflow_lance.operators._spark_process`) without
``SPARK_CONNECT_AUTHENTICATE_TOKEN`` (pyspark's fallback token). A server refusing the token fails
the task with ``Spark Connect authentication failed: ...``. pyspark sends a token only over TLS
(``use_ssl``), or without TLS to the host ``localhost`` (gRPC's local credentials). Killing the task (timeout,
``on_kill``) sends SIGTERM to the client, which interrupts the session's operations on the server
before it exits (the server would otherwise run them on), then kills what is left.

What a Connect session cannot take: settings that size or place the application (executor and
driver memory and cores, ``jars``, ``packages``, ``python_env_archive``, keytabs, ...): the server
was started with its own; they fail the task before anything runs. ``conf`` is applied to the
session, where the server allows it (runtime SQL settings; others are ignored by the server).
``py_files`` (local paths) are artifacts for the server and on the client's ``sys.path`` (a
source callable or transform is called there).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from airflow_lance.operators._spark_code import build_code_zip, write_launcher
from airflow_lance.operators._spark_process import child_environment, kill_processes, suspend_process_tree

#: the job's option naming the Connect settings file (``airflow_lance.spark.job.CONNECT_OPTION``)
CONNECT_OPTION = "--connect"
#: the conn type of the Spark provider's ``SparkConnectHook``
CONNECT_CONN_TYPE = "spark_connect"
#: SparkSubmitHook arguments a Connect session takes; the others fail the task (see the module docstring)
CONNECT_ARGUMENTS = frozenset({"conn_id", "conf", "name", "py_files", "env_vars", "spark_binary"})
#: pyspark's fallback for a URL without a token; never passed to the client (the connection says)
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
_JOB_FAILED = re.compile(r"airflow-lance job failed: (.+)$")
_TAIL_LINES = 40

log = logging.getLogger(__name__)


def is_connect_connection(conn_id: str | None) -> bool:
    """Whether ``conn_id`` is a Spark Connect connection (conn type ``spark_connect``)."""
    if not conn_id:
        return False
    from airflow.providers.common.compat.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - a missing connection fails in SparkSubmitHook as before
        return False
    return conn.conn_type == CONNECT_CONN_TYPE


class SparkConnectJobRunner:
    """Runs airflow-lance jobs as Spark Connect clients (see the module docstring).

    ``hook_kwargs`` are the operator's ``SparkSubmitHook`` arguments; those a Connect session
    cannot take raise :class:`~airflow_lance.operators._spark_submit.LanceSparkJobError` here.
    """

    def __init__(self, hook_kwargs: Mapping[str, Any], python_env_archive: str | None = None) -> None:
        from airflow_lance.operators._spark_submit import LanceSparkJobError

        unsupported = sorted(set(hook_kwargs) - CONNECT_ARGUMENTS) + (
            ["python_env_archive"] if python_env_archive else [])
        if unsupported:
            raise LanceSparkJobError(
                f"Spark connection {hook_kwargs.get('conn_id')!r} is a Spark Connect server, which takes none of "
                f"{', '.join(unsupported)} (the server was started with its own resources and environment); "
                "nothing ran. Give them when starting the server, or use a spark connection")
        self.conn_id = str(hook_kwargs["conn_id"])
        # spark.log.level is the server's (a session cannot change it)
        self.conf = {str(k): str(v) for k, v in dict(hook_kwargs.get("conf") or {}).items() if k != "spark.log.level"}
        self.py_files = [p.strip() for p in str(hook_kwargs.get("py_files") or "").split(",") if p.strip()]
        self.env_vars = dict(hook_kwargs.get("env_vars") or {})
        self._process: subprocess.Popen[str] | None = None

    def remote_url(self) -> str:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        return SparkConnectHook(self.conn_id).get_connection_url()

    def run(self, spec_json: str, file_name: str, what: str) -> None:
        """Run the job of ``spec_json`` as a Connect client; LanceSparkJobError if it fails."""
        from airflow_lance.operators._spark_submit import LanceSparkJobError

        with tempfile.TemporaryDirectory(prefix="airflow-lance-") as tmp:  # mode 0700
            code_zip = str(build_code_zip(tmp))
            settings = {"remote": self.remote_url(), "conf": self.conf, "artifacts": [code_zip, *self.py_files]}
            settings_file = _private_file(tmp, "connect.json", json.dumps(settings))
            spec_file = _private_file(tmp, file_name, spec_json)
            env = child_environment(os.environ, self.env_vars)
            env.pop(TOKEN_VARIABLE, None)  # pyspark's token fallback: only the connection's token counts
            env["PYTHONPATH"] = os.pathsep.join([code_zip, *_client_paths(tmp, self.py_files),
                                                 *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
            command = [sys.executable, str(write_launcher(tmp)), CONNECT_OPTION, settings_file, spec_file]
            log.info("Running %s as a Spark Connect client of connection %r", what, self.conn_id)
            failure, tail = None, []
            self._process = process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env,
                cwd=tmp, start_new_session=True)
            try:
                assert process.stdout is not None
                for raw in process.stdout:
                    line = raw.rstrip("\n")
                    log.info("%s", line)
                    tail = [*tail[-(_TAIL_LINES - 1):], line]
                    found = _JOB_FAILED.search(line.strip())
                    if found:
                        failure = found.group(1)
                status = process.wait()
            except BaseException:
                self.kill()  # a timeout or a signal: the job must not run on (and stage a result)
                raise
            finally:
                if process.stdout is not None:
                    process.stdout.close()
                self._process = None
            if status != 0:
                cause = failure or (f"the Spark Connect client was killed (signal {-status})" if status < 0
                                    else f"the Spark Connect client exited with status {status}")
                raise LanceSparkJobError(
                    f"{cause}\n{what[:1].upper()}{what[1:]} failed (Spark Connect client exit status {status}); "
                    "nothing was committed.\nLast client output:\n" + "\n".join(tail))

    def kill(self, grace: float = 30.0) -> None:
        """SIGTERM to the client (it interrupts its operations on the server), then kill what is left."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            kill_processes(suspend_process_tree(process.pid))
            process.wait(timeout=60)


def _client_paths(directory: str, py_files: list[str]) -> list[str]:
    """``sys.path`` entries giving the client the ``py_files`` (a source callable or transform runs
    there): ``.zip``/``.egg`` files themselves, ``.py`` files copied into one directory."""
    modules = os.path.join(directory, "py_files")
    paths = []
    for path in py_files:
        if path.endswith(".py"):
            os.makedirs(modules, exist_ok=True)
            shutil.copy(path, modules)
            if modules not in paths:
                paths.append(modules)
        else:
            paths.append(path)
    return paths


def _private_file(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path
