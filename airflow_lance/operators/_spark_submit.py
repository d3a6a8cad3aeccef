"""Running one airflow-lance Spark job through ``SparkSubmitHook`` (shared by the operators).

The job spec (it may hold storage credentials) is written into a private temporary
directory (mode 0700, file mode 0600) and shipped with ``--files``; the Lance code goes
with ``--py-files`` as a zip; the application is a two-line launcher calling
:func:`airflow_lance.spark.job.main`. Nothing secret is on the command line.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import psutil
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.common.compat.sdk import AirflowException

from airflow_lance.operators._spark_code import build_code_zip, write_launcher
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec


class LanceSparkJobError(AirflowException):
    """The Spark job failed; nothing was committed."""


class LanceStagedResultError(AirflowException):
    """The staged job result cannot be committed (missing, stale or inconsistent)."""


class SparkJobRunner:
    """Submits airflow-lance Spark jobs with one set of ``SparkSubmitHook`` arguments.

    ``hook_kwargs`` are ``SparkSubmitHook`` arguments (``conn_id``, ``conf``, ``py_files``,
    ``executor_memory``, ...); ``files``, ``application_args`` and the Lance code zip are
    added per job. :meth:`kill` cancels the running job (for an operator's ``on_kill``).
    """

    def __init__(self, hook_kwargs: Mapping[str, Any]) -> None:
        self.hook_kwargs = {k: v for k, v in hook_kwargs.items() if v is not None}
        self._hook: SparkSubmitHook | None = None

    def _hook_for(self, spec_file: str, code_zip: str) -> SparkSubmitHook:
        kwargs = dict(self.hook_kwargs)
        extra_py_files = kwargs.pop("py_files", None)
        kwargs["py_files"] = ",".join([code_zip, *([extra_py_files] if extra_py_files else [])])
        kwargs["files"] = spec_file
        kwargs["application_args"] = [spec_file]
        return SparkSubmitHook(**kwargs)

    def run(self, spec_json: str, file_name: str, what: str) -> None:
        """Submit the job described by ``spec_json``; raise :class:`LanceSparkJobError` if it fails.

        ``file_name`` names the spec file (it appears in Spark's logs, so no secrets);
        ``what`` describes the job for the error message.
        """
        with tempfile.TemporaryDirectory(prefix="airflow-lance-") as tmp:  # mode 0700
            spec_file = os.path.join(tmp, file_name)
            fd = os.open(spec_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(spec_json)
            self._hook = self._hook_for(spec_file, str(build_code_zip(tmp)))
            try:
                self._hook.submit(str(write_launcher(tmp)))
            except AirflowException as exc:
                raise LanceSparkJobError(f"{what} failed; nothing was committed. {exc}") from exc
            finally:
                self._release()

    def _release(self) -> None:
        # SparkSubmitHook never closes the pipe it reads spark-submit's output from (a ResourceWarning).
        process = getattr(self._hook, "_submit_sp", None)
        if process is not None and process.stdout is not None:
            process.stdout.close()
        self._hook = None

    def kill(self) -> None:
        """Cancel the running job, if any.

        ``SparkSubmitHook.on_kill`` kills spark-submit (and the driver or application on a
        cluster); the local processes it started (the PySpark driver in client mode and its
        workers) would outlive it, so they are killed too.
        """
        hook = self._hook
        if hook is None:
            return
        process = getattr(hook, "_submit_sp", None)
        children: list[psutil.Process] = []
        if process is not None and process.poll() is None:
            with contextlib.suppress(psutil.Error):
                children = psutil.Process(process.pid).children(recursive=True)
        hook.on_kill()
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()


def spark_hook_kwargs(
    *,
    spark_conn_id: str,
    conf: Mapping[str, Any] | None,
    name: str,
    spark_binary: str | None = None,
    spark_submit_kwargs: Mapping[str, Any] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """``SparkSubmitHook`` arguments of an operator: connection, conf, application name,
    the given executor/driver ``settings`` and any further ``spark_submit_kwargs``."""
    kwargs: dict[str, Any] = {"conn_id": spark_conn_id, "conf": dict(conf or {}), "name": name, **settings}
    if spark_binary:
        kwargs["spark_binary"] = spark_binary
    kwargs.update(spark_submit_kwargs or {})
    return kwargs


def run_task_job(runner: SparkJobRunner, spec: TaskJobSpec, what: str) -> TaskJobResult:
    """Run a task job and return the result it staged (and remove it from the staging location).

    Raises :class:`LanceSparkJobError` if the job fails and :class:`LanceStagedResultError`
    if it finished without staging a result of this very spec.
    """
    runner.run(spec.to_json(), f"lance-{spec.kind.replace('_', '-')}-{spec.digest()[:12]}.json", what)
    staged = TaskJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
    if staged is None or staged.spec_digest != spec.digest():
        raise LanceStagedResultError(f"{what} finished without staging its result")
    TaskJobResult.discard(spec.staging_root, spec.staging_name, spec.storage_options)
    return staged
