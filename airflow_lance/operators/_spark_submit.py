"""Running one airflow-lance Spark job through ``SparkSubmitHook`` (shared by the operators).

The job spec (it may hold storage credentials) is written into a private temporary
directory (mode 0700, file mode 0600). In client deploy mode (the default, and every
``local`` master) the driver reads it from there and the executors get the storage options
in memory, in the closures of their tasks: the spec is not shipped. In cluster deploy mode
it is shipped with ``--files`` and the job deletes the copies it can reach when it ends (see
:func:`airflow_lance.spark.job.remove_shipped_spec`). The Lance code goes with ``--py-files``
as a zip; the application is a two-line launcher calling :func:`airflow_lance.spark.job.main`.
Nothing secret is on the command line, and spark-submit runs without Airflow's secrets in
its environment (:mod:`airflow_lance.operators._spark_process`).

If the run ends by any exception (an ``execution_timeout``, a SIGTERM, ...) spark-submit and
every local process it started are killed before the exception propagates.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.common.compat.sdk import AirflowException

from airflow_lance.core import FragmentMetadata
from airflow_lance.operators._lineage import with_parent_job_information
from airflow_lance.operators._spark_code import build_code_zip, write_launcher
from airflow_lance.operators._spark_connect import SparkConnectJobRunner, is_connect_connection
from airflow_lance.operators._spark_process import (
    child_environment,
    find_spark_binary,
    kill_processes,
    suspend_process_tree,
)
from airflow_lance.spark.spec import missing_fragment_files
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec

log = logging.getLogger(__name__)

#: Spark's log levels (``spark.log.level``, ``SparkContext.setLogLevel``).
SPARK_LOG_LEVELS = ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN")
#: The line :mod:`airflow_lance.spark.job` prints when it fails (without a Spark log record copied onto its end).
_JOB_FAILED = re.compile(r"airflow-lance job failed: (.+?)(?=\d\d/\d\d/\d\d \d\d:\d\d:\d\d [A-Z]+ |$)")
#: spark-submit's own complaints and a JVM's uncaught exception (when the job never ran).
_SUBMIT_ERROR = re.compile(r"^(?:Error: .+|Exception in thread .+|(?:\w+\.)+\w*(?:Exception|Error)(?:: .+)?)$")
_TAIL_HEADER = "\nLast spark-submit output:\n"
#: Where a ``python_env_archive`` is unpacked in the executors' (and a cluster driver's) directories.
PYTHON_ENV_ALIAS = "env"


class LanceSparkJobError(AirflowException):
    """The Spark job failed; nothing was committed."""


class SparkSubmitNotFoundError(LanceSparkJobError):
    """The ``spark-submit`` binary is not installed where the worker looks for it."""


class LanceStagedResultError(AirflowException):
    """The staged job result cannot be committed (missing, stale or inconsistent)."""


class _SparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` running the binary the runner located, in the environment it gives."""

    binary_path: str | None = None
    #: The cause the job printed when it failed (masked as the hook masks its output).
    job_failure: str | None = None

    @property
    def binary_name(self) -> str:
        return str(self._connection["spark_binary"])

    @property
    def cluster_deploy_mode(self) -> bool:
        return self._connection["deploy_mode"] == "cluster"

    def ship_file(self, path: str) -> None:
        """Add ``path`` to ``--files``."""
        self._files = ",".join([*([self._files] if self._files else []), path])

    def use_python_env(self, archive: str, environ: Mapping[str, str]) -> None:
        """Run the executors' Python from a packed environment: ``--archives <archive>#env`` and
        ``spark.pyspark.python=./env/bin/python``; in client deploy mode the driver keeps this
        machine's Python (``spark.pyspark.driver.python``: ``PYSPARK_DRIVER_PYTHON``, else the
        worker's own interpreter), since the archive is unpacked only where Spark runs containers.
        Settings given in ``conf`` win."""
        if str(self._connection["master"]).startswith("local"):
            raise LanceSparkJobError(
                f"python_env_archive needs a cluster master, not {self._connection['master']!r}: with a local "
                "master the executors are this machine's Python (set PYSPARK_PYTHON instead); nothing ran")
        self._archives = ",".join([*([self._archives] if self._archives else []), f"{archive}#{PYTHON_ENV_ALIAS}"])
        conf = dict(self._conf or {})
        conf.setdefault("spark.pyspark.python", f"./{PYTHON_ENV_ALIAS}/bin/python")
        if not self.cluster_deploy_mode:
            conf.setdefault("spark.pyspark.driver.python", environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable)
        self._conf = conf

    def _get_spark_binary_path(self) -> list[str]:
        return [self.binary_path or self.binary_name]

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        super()._process_spark_submit_log(self._watch_for_job_failure(itr))

    def _watch_for_job_failure(self, itr: Iterator[Any]) -> Iterator[Any]:
        """Keep the job's ``airflow-lance job failed: ...`` line (the output tail may not reach it)."""
        for line in itr:
            found = _JOB_FAILED.search(str(line).strip())
            if found:
                self.job_failure = self._mask_cmd([found.group(1)])
            yield line

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        # With env_vars, submit() would start spark-submit with all of os.environ plus them;
        # the runner passes its filtered environment (which holds env_vars) instead.
        self._env = None
        return args


def check_deploy_mode(hook: _SparkSubmitHook, what: str) -> None:
    """Cluster deploy mode runs a Python application's driver only on YARN and Kubernetes: Spark
    refuses it on a standalone master (``spark://``, SparkSubmit: "Cluster deploy mode is currently
    not supported for python applications on standalone clusters"). Refused here, naming the way out."""
    master = str(hook._connection["master"])
    if hook.cluster_deploy_mode and master.startswith("spark://"):
        raise LanceSparkJobError(
            f"deploy_mode='cluster' on the standalone master {master}: Spark runs the driver of a Python "
            f"application in cluster deploy mode only on YARN and Kubernetes; {what} did not run and nothing was "
            "written. Use client deploy mode (the default) on a standalone cluster")


def job_failure_message(what: str, exc: AirflowException, job_failure: str | None = None) -> str:
    """The error of a failed spark-submit: the root cause first, the output tail below.

    The cause is ``job_failure``, the job's ``airflow-lance job failed: ...`` line (for Spark's
    errors, their error class and message, e.g. ``PATH_NOT_FOUND: Path does not exist: ...``),
    else that line in the tail, else the last error spark-submit printed, else its exit status
    (or the hook's own message when spark-submit did not exit with one).
    """
    text = str(exc)
    head, _, tail = text.partition(_TAIL_HEADER)
    status = re.search(r"Error code is: (-?\d+)", head)
    exit_status = f"exit status {status.group(1)}" if status else "failed"
    lines = [line.strip() for line in tail.splitlines()]
    causes = [job_failure] if job_failure else [m.group(1) for m in map(_JOB_FAILED.search, lines) if m]
    if not causes:
        causes = [line for line in lines if _SUBMIT_ERROR.match(line)]
    if causes:
        cause = re.sub(r'^Exception in thread "[^"]*" ', "", causes[-1])
    elif status and int(status.group(1)) < 0:
        cause = f"spark-submit was killed (signal {-int(status.group(1))})"
    elif status or not head.strip():
        cause = f"spark-submit {exit_status}"
    else:  # the hook refused or lost the job (no exit status): its own words
        cause = head.strip().splitlines()[0]
    message = f"{cause}\n{what[:1].upper()}{what[1:]} failed (spark-submit {exit_status}); nothing was committed."
    return message + (_TAIL_HEADER + tail if tail else "")


class SparkJobRunner:
    """Submits airflow-lance Spark jobs with one set of ``SparkSubmitHook`` arguments.

    ``hook_kwargs`` are ``SparkSubmitHook`` arguments (``conn_id``, ``conf``, ``py_files``,
    ``executor_memory``, ``env_vars``, ...) and ``python_env_archive`` (a packed Python
    environment for the executors, :meth:`_SparkSubmitHook.use_python_env`); the spec,
    ``application_args`` and the Lance code zip are added per job. :meth:`kill` cancels the
    running job (for an operator's ``on_kill``).
    """

    def __init__(self, hook_kwargs: Mapping[str, Any]) -> None:
        self.hook_kwargs = {k: v for k, v in hook_kwargs.items() if v is not None}
        self.python_env_archive: str | None = self.hook_kwargs.pop("python_env_archive", None) or None
        self._hook: _SparkSubmitHook | None = None
        self._connect: SparkConnectJobRunner | None = None

    def _hook_for(self, spec_file: str, code_zip: str) -> _SparkSubmitHook:
        kwargs = dict(self.hook_kwargs)
        extra_py_files = kwargs.pop("py_files", None)
        kwargs["py_files"] = ",".join([code_zip, *([extra_py_files] if extra_py_files else [])])
        kwargs["application_args"] = [spec_file]
        hook = _SparkSubmitHook(**kwargs)
        if hook.cluster_deploy_mode:  # the driver runs elsewhere: it gets the spec through Spark
            hook.ship_file(spec_file)
        if self.python_env_archive:
            hook.use_python_env(self.python_env_archive, self.environment())
        return hook

    def environment(self) -> dict[str, str]:
        """spark-submit's environment: the worker's without Airflow's secrets, plus ``env_vars``."""
        return child_environment(os.environ, self.hook_kwargs.get("env_vars"))

    def run(self, spec_json: str, file_name: str, what: str) -> None:
        """Submit the job described by ``spec_json``; raise :class:`LanceSparkJobError` if it fails.

        ``file_name`` names the spec file (it appears in Spark's logs, so no secrets);
        ``what`` describes the job for the error message. Raises
        :class:`SparkSubmitNotFoundError` before anything runs when spark-submit is missing.
        With a Spark Connect connection (conn type ``spark_connect``) the job runs as a Connect
        client instead (:mod:`airflow_lance.operators._spark_connect`).
        """
        if is_connect_connection(self.hook_kwargs.get("conn_id")):
            self._connect = SparkConnectJobRunner(self.hook_kwargs, self.python_env_archive)
            try:
                self._connect.run(spec_json, file_name, what)
            finally:
                self._connect = None
            return
        env = self.environment()
        with tempfile.TemporaryDirectory(prefix="airflow-lance-") as tmp:  # mode 0700
            spec_file = os.path.join(tmp, file_name)
            fd = os.open(spec_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(spec_json)
            hook = self._hook_for(spec_file, str(build_code_zip(tmp)))
            check_deploy_mode(hook, what)
            hook.binary_path = find_spark_binary(hook.binary_name, env)
            if hook.binary_path is None:
                raise SparkSubmitNotFoundError(
                    f"{hook.binary_name} not found on the PATH or in $SPARK_HOME/bin: {what} did not run and "
                    f'nothing was written. Install PySpark, which brings it: pip install "airflow-lance[spark]"; '
                    "or give the operator spark_binary (its path), or set SPARK_HOME."
                )
            self._hook = hook
            try:
                hook.submit(str(write_launcher(tmp)), env=env)
            except AirflowException as exc:
                raise LanceSparkJobError(job_failure_message(what, exc, hook.job_failure)) from exc
            except BaseException:
                self.kill()  # a timeout or a signal: the job must not run on (and stage a result)
                raise
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
        cluster); the local processes it started (the PySpark driver in client mode, Python
        workers in local mode) would outlive it, so they are stopped first and killed with it.
        """
        if self._connect is not None:
            self._connect.kill()
            return
        hook = self._hook
        if hook is None:
            return
        process = getattr(hook, "_submit_sp", None)
        local = suspend_process_tree(process.pid) if process is not None and process.poll() is None else []
        try:
            hook.on_kill()  # while spark-submit still runs: the hook kills a YARN application only then
        finally:
            kill_processes(local)
            if process is not None:
                process.wait(timeout=60)


def spark_hook_kwargs(
    *,
    spark_conn_id: str,
    conf: Mapping[str, Any] | None,
    name: str,
    spark_binary: str | None = None,
    spark_submit_kwargs: Mapping[str, Any] | None = None,
    spark_log_level: str = "WARN",
    python_env_archive: str | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """``SparkSubmitHook`` arguments of an operator: connection, conf, application name,
    the given executor/driver ``settings`` and any further ``spark_submit_kwargs``.

    ``spark_log_level`` becomes ``spark.log.level`` unless ``conf`` sets it. With
    ``[openlineage] spark_inject_parent_job_info``, ``conf`` gets the OpenLineage parent job
    properties of the running task (:func:`~airflow_lance.operators._lineage.with_parent_job_information`).
    ``python_env_archive`` is a packed Python environment for the executors (see
    :meth:`_SparkSubmitHook.use_python_env`).
    """
    level = str(spark_log_level).upper()
    if level not in SPARK_LOG_LEVELS:
        raise ValueError(f"spark_log_level must be one of {SPARK_LOG_LEVELS}, not {spark_log_level!r}")
    conf = with_parent_job_information({"spark.log.level": level, **dict(conf or {})})
    kwargs: dict[str, Any] = {"conn_id": spark_conn_id, "conf": conf,
                              "name": name, **settings}
    if spark_binary:
        kwargs["spark_binary"] = spark_binary
    if python_env_archive:
        kwargs["python_env_archive"] = python_env_archive
    kwargs.update(spark_submit_kwargs or {})
    return kwargs


def reusable_task_result(spec: TaskJobSpec, written: Callable[[Any], Iterable[FragmentMetadata]]
                          ) -> TaskJobResult | None:
    """The result an earlier try staged for this very job, if it is complete and every file it
    names is there; else None (the job has to run).

    "This very job": the same staging location (the task instance's idempotency key) and the same
    spec digest (read version, tasks and parameters), with one result per task. ``written(result)``
    gives the fragments one task result wrote (their data and deletion files are checked). A try
    that failed between the job's end and the commit leaves such a result; its retry commits it
    instead of running the Spark job again.
    """
    staged = TaskJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
    if staged is None or staged.spec_digest != spec.digest() or len(staged.results) != len(spec.tasks):
        return None
    missing = missing_fragment_files(spec.uri, spec.storage_options,
                                     [fragment for result in staged.results for fragment in written(result)])
    if missing:
        log.warning("Not reusing the result an earlier try staged: %d of its files are missing (%s, ...); "
                    "running the Spark job again", len(missing), missing[0])
        return None
    return staged


def run_task_job(runner: SparkJobRunner, spec: TaskJobSpec, what: str,
                 written: Callable[[Any], Iterable[FragmentMetadata]]) -> TaskJobResult:
    """The staged result of the task job ``spec``: one an earlier try staged
    (:func:`reusable_task_result`; the Spark job does not run), or the result of running the job now.

    The result stays staged: the caller removes it (``TaskJobResult.discard``) once its commit
    landed, or with the files when it gives them up. Raises :class:`LanceSparkJobError` if the job
    fails and :class:`LanceStagedResultError` if it finished without staging a result of this very spec.
    """
    staged = reusable_task_result(spec, written)
    if staged is not None:
        log.info("Reusing the result of %s that an earlier try of this task staged (%d task results; the Spark "
                 "job did not run again)", what, len(staged.results))
        return staged
    runner.run(spec.to_json(), f"lance-{spec.kind.replace('_', '-')}-{spec.digest()[:12]}.json", what)
    staged = TaskJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
    if staged is None or staged.spec_digest != spec.digest():
        raise LanceStagedResultError(f"{what} finished without staging its result")
    return staged
