"""spark-submit entry point of the airflow-lance Spark jobs: ``main([spec_file])``; with
``main(["--connect", settings_file, spec_file])`` the same job as a Spark Connect client
(:func:`connect_session`; the tasks go to the executors with DataFrame APIs only,
:mod:`airflow_lance.spark.distributed`).

The spec file (a local path on the driver in client deploy mode; shipped with ``--files`` in
cluster deploy mode, where the job deletes the copies when it ends) is either

* a :class:`~airflow_lance.spark.spec.WriteJobSpec`: load the source as a DataFrame, write
  fragments on the executors, validate the row count and stage the
  :class:`~airflow_lance.spark.spec.WriteJobResult`; or
* a :class:`~airflow_lance.spark.task_spec.TaskJobSpec` (it has a ``job`` key): run
  compaction tasks or write Kartothek partitions on the executors and stage the
  :class:`~airflow_lance.spark.task_spec.TaskJobResult` (:mod:`airflow_lance.spark.tasks`).

Before either runs, the job checks on its executors that the packages the shipped code needs
import, in the versions it needs (:func:`check_executor_environment`). A job never commits: the
operator does, once, from the staged result. Exit status 0 on
success, 1 with a one-line ``airflow-lance job failed: ...`` message (plus the traceback)
otherwise. Nothing printed contains storage options. The application keeps the name
spark-submit gives it (``--name``); ``airflow-lance`` only when it has none.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_lance.core import dataset
from airflow_lance.spark.merge_insert import run_merge_insert
from airflow_lance.spark.merge_insert_spec import MERGE_INSERT_KEY, MergeInsertJobSpec
from airflow_lance.spark.environment import check_on_executors, executor_problems, load_requirements
from airflow_lance.core import SchemaMismatchError
from airflow_lance.spark.direct import DirectPlan, plan_direct, run_direct
from airflow_lance.spark.distributed import default_parallelism
from airflow_lance.spark.spec import JobSpecError, SourceSpec, WriteJobResult, WriteJobSpec, check_against_dataset
from airflow_lance.spark.task_spec import JOB_KEY, TaskJobSpec
from airflow_lance.spark.tasks import run_task_job
from airflow_lance.spark.writer import write_dataframe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

APP_NAME = "airflow-lance"


class ExecutorEnvironmentError(JobSpecError):
    """The executors' Python lacks a package the job needs (or has a version it cannot use)."""


def check_executor_environment(spark: SparkSession) -> None:
    """Before anything is written: the packages the shipped code needs import on the executors,
    in the versions it needs (:mod:`airflow_lance.spark.environment`); else ExecutorEnvironmentError."""
    requirements = load_requirements()
    if not requirements:
        return
    reports = check_on_executors(spark, requirements)
    pythons = sorted({f"{r['python']} on {r['host']}" for r in reports})
    print(f"airflow-lance job: executors' Python checked: {', '.join(pythons)}", flush=True)
    problems = executor_problems(reports)
    if problems:
        raise ExecutorEnvironmentError(problems)


#: A Lance error as an executor's traceback ends with it (inside Spark's PythonException text).
_EXECUTOR_ERROR = re.compile(r"^airflow_lance\.[\w.]+\.(\w+(?:Error|Exception)): (.+)$", re.MULTILINE)
#: A Spark error with an error class: ``[PATH_NOT_FOUND] Path does not exist: ... SQLSTATE: 42K03``.
_SPARK_ERROR_CLASS = re.compile(r"^\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\] (.*?)(?:\s*SQLSTATE: \w+)?$")


def describe_failure(exc: BaseException) -> str:
    """``Type: message`` of a failure; for an error raised on an executor (wrapped by Spark),
    the Lance error it ends with rather than Spark's wrapper; for a Spark error with an error
    class, ``CLASS: message`` (e.g. ``PATH_NOT_FOUND: Path does not exist: file:/x.``)."""
    if _grpc_status(exc) == "UNAUTHENTICATED":
        details = _GRPC_DETAILS.search(str(exc))
        return (f"Spark Connect authentication failed: the server refused the connection's token "
                f"({details.group(1) if details else _first_line(exc)}); set the connection's password to the "
                "server's token (spark.connect.authenticate.token)")
    found = _EXECUTOR_ERROR.findall(str(exc))
    if found:
        name, message = found[-1]
        return f"{name}: {message} (on an executor)"
    first_line = _first_line(exc)
    spark_error = _SPARK_ERROR_CLASS.match(first_line)
    if spark_error:
        return f"{spark_error.group(1)}: {spark_error.group(2)}"
    return f"{type(exc).__name__}: {first_line}"


#: the server's message in a gRPC error's text: ``details = "Invalid authentication token"``
_GRPC_DETAILS = re.compile(r'details = "([^"]*)"')


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else ""


def _grpc_status(exc: BaseException) -> str | None:
    """The gRPC status name of a Spark Connect client error (``UNAUTHENTICATED``, ...), else None."""
    getter = getattr(exc, "getGrpcStatusCode", None)
    try:
        code = getter() if callable(getter) else None
    except Exception:  # noqa: BLE001 - not a Connect error after all
        return None
    return getattr(code, "name", None)


def parse_spec(text: str | bytes) -> WriteJobSpec | TaskJobSpec | MergeInsertJobSpec:
    """A write job spec, a task job spec when the document names its ``job``, a merge-insert job
    spec when it has ``merge_insert``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise JobSpecError(f"job spec is not JSON: {exc}") from None
    if isinstance(data, dict) and JOB_KEY in data:
        return TaskJobSpec.from_dict(data)
    if isinstance(data, dict) and MERGE_INSERT_KEY in data:
        return MergeInsertJobSpec.from_dict(data)
    return WriteJobSpec.from_json(text)


def read_spec(argument: str) -> WriteJobSpec | TaskJobSpec | MergeInsertJobSpec:
    """Load the spec from ``argument``: a local path, else a file distributed with ``--files``."""
    path, _ = find_spec_file(argument)
    with open(path, "rb") as handle:
        return parse_spec(handle.read())


def find_spec_file(argument: str) -> tuple[str, bool]:
    """The spec file of ``argument`` and whether it is a copy Spark distributed (``--files``):
    ``argument`` itself if it is a local file, else the distributed copy."""
    if os.path.isfile(argument):
        return argument, False
    candidates = [argument]
    try:
        from pyspark import SparkFiles

        candidates.append(SparkFiles.get(os.path.basename(argument)))
    except Exception:  # noqa: BLE001, S110 - no SparkContext / no distributed files: look in the cwd
        pass
    candidates.append(os.path.basename(argument))
    for path in candidates[1:]:
        if os.path.isfile(path):
            return path, True
    raise JobSpecError(f"job spec file {argument!r} not found (looked in {candidates})")


def remove_shipped_spec(spark: SparkSession, name: str) -> None:
    """Delete the executors' copies of the spec shipped with ``--files`` (cluster deploy mode).

    Spark cannot take back a distributed file, so one task per core slot deletes the copy
    in its executor's directory. Best effort: Spark does not promise that the tasks reach
    every executor (on YARN and Kubernetes the container directories go with the
    application anyway; on a standalone cluster, executors that ran none of these tasks keep
    the copy until the worker's own cleanup, ``spark.worker.cleanup.enabled``).
    """
    slots = max(spark.sparkContext.defaultParallelism, 1)
    spark.sparkContext.parallelize(range(slots), slots).foreachPartition(
        functools.partial(_remove_distributed_file, name))


def _remove_distributed_file(name: str, _rows: object = None) -> None:
    from pyspark import SparkFiles

    with contextlib.suppress(OSError):
        os.remove(SparkFiles.get(name))


def load_source(spark: SparkSession, source: SourceSpec) -> DataFrame:
    """The source as a DataFrame: Spark-readable path(s), a SQL query, ``module:function(spark)``,
    or a Lance dataset (``read_lance``)."""
    if source.kind == "path":
        reader = spark.read.format(source.format).options(**source.options)
        return reader.load(list(source.paths) if len(source.paths) > 1 else source.paths[0])
    if source.kind == "sql":
        return spark.sql(source.query or "")
    if source.kind == "lance" and source.lance is not None:
        from airflow_lance.spark.read import read_lance

        lance = source.lance
        return read_lance(spark, lance.uri, version=lance.version, columns=lance.columns, filter=lance.filter,
                          storage_options=lance.storage_options, since_version=lance.since_version)
    return call_for_dataframe(source.callable or "", "source callable", spark)


def apply_transform(df: DataFrame, transform: str) -> DataFrame:
    """``module:function(df)``: the DataFrame to write, computed from the source's."""
    return call_for_dataframe(transform, "transform", df)


def call_for_dataframe(reference: str, what: str, argument: object) -> DataFrame:
    """Import ``module:function``, call it with ``argument``; JobSpecError unless it gives a DataFrame."""
    from pyspark.sql import DataFrame

    module_name, _, function_name = reference.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise JobSpecError(f"cannot import {what} {reference!r}: {exc}") from exc
    result = function(argument)
    if not isinstance(result, DataFrame):
        raise JobSpecError(f"{what} {reference!r} returned {type(result).__name__}, not a DataFrame")
    return result


def _target_schema(spec: WriteJobSpec) -> pa.Schema | None:
    """The dataset's schema at the read version, for appends (Spark's types are converted to it)."""
    if spec.mode != "append":
        return None
    return dataset(spec.uri, spec.read_version, storage_options=spec.storage_options).schema


def choose_reader(spark: SparkSession, spec: WriteJobSpec) -> DirectPlan | None:
    """The direct-ingest plan when the spec's source is read directly, else None (Spark-row path);
    logs which path reads the source and, when Spark does under ``reader="auto"``, why."""
    if spec.reader == "spark" or spec.source.kind != "path":
        why = "reader='spark'" if spec.reader == "spark" else f"a {spec.source.kind} source"
        print(f"airflow-lance job: reading through Spark rows ({why})", flush=True)
        return None
    if spec.transform:
        reason: DirectPlan | str = "a transform needs the DataFrame"
    else:
        reason = plan_direct(spark, spec.source, spec.reader, _tasks(spark, spec))
    if isinstance(reason, DirectPlan):
        print(f"airflow-lance job: reading directly with pyarrow ({reason.kind}, {len(reason.splits)} splits, "
              f"reader={spec.reader!r})", flush=True)
        return reason
    if spec.reader == "direct":
        raise JobSpecError(f"reader='direct' cannot read this source exactly: {reason}")
    print(f"airflow-lance job: reading through Spark rows (reader='auto': {reason})", flush=True)
    return None


def _tasks(spark: SparkSession, spec: WriteJobSpec) -> int:
    return spec.num_partitions or default_parallelism(spark)


def run_direct_write(spark: SparkSession, spec: WriteJobSpec, plan: DirectPlan) -> WriteJobResult:
    """Write the planned splits as fragments on the executors (same writer and conversions as the
    Spark-row path) and check the row count against the files' (Parquet footers) or the rows read."""
    from airflow_lance.spark.writer import check_row_count, result_schema

    start = time.monotonic()
    target_schema = _target_schema(spec)
    sizes, casts = dict(spec.fixed_size_lists), dict(spec.cast)
    for name in [*sizes, *casts]:
        if plan.schema.get_field_index(name) < 0:
            raise SchemaMismatchError(f"column {name!r} is not a column of the source "
                                      f"(columns: {', '.join(plan.schema.names)})")
    if target_schema is not None:
        check_against_dataset(target_schema, sizes, casts)
    fragments, schemas, rows = run_direct(spark, plan, _tasks(spark, spec), dict(
        uri=spec.uri, mode=spec.mode, storage_options=dict(spec.storage_options),
        max_rows_per_file=spec.max_rows_per_file, max_bytes_per_file=spec.max_bytes_per_file,
        target_schema=target_schema, data_storage_version=spec.data_storage_version,
        fixed_size_lists=sizes, cast=casts))
    if plan.expected_rows is not None:
        check_row_count(fragments, plan.expected_rows, spec.uri)
    check_row_count(fragments, rows, spec.uri)
    schema = result_schema(set(schemas), target_schema, lambda: plan.schema, sizes, casts, "the splits")
    return WriteJobResult(spec_digest=spec.digest(), fragments=tuple(fragments), num_rows=rows,
                          bytes_written=sum(d.file_size_bytes or 0 for f in fragments for d in f.files),
                          schema=schema, elapsed_seconds=time.monotonic() - start)


def run(spark: SparkSession, spec: WriteJobSpec) -> WriteJobResult:
    """Write the spec's source as fragments and stage the result; return it."""
    plan = choose_reader(spark, spec)
    if plan is not None:
        result = run_direct_write(spark, spec, plan)
        result.save(spec.staging_root, spec.staging_name, spec.storage_options)
        return result
    df = load_source(spark, spec.source)
    if spec.transform:
        df = apply_transform(df, spec.transform)
    if spec.num_partitions is not None:
        df = df.repartition(spec.num_partitions)
    result = write_dataframe(
        df,
        uri=spec.uri,
        mode=spec.mode,
        storage_options=spec.storage_options,
        max_rows_per_file=spec.max_rows_per_file,
        max_bytes_per_file=spec.max_bytes_per_file,
        target_schema=_target_schema(spec),
        data_storage_version=spec.data_storage_version,
        spec_digest=spec.digest(),
        fixed_size_lists=spec.fixed_size_lists,
        cast=spec.cast,
    )
    result.save(spec.staging_root, spec.staging_name, spec.storage_options)
    return result


#: ``job.py --connect <settings.json> <spec.json>``: run as a Spark Connect client.
CONNECT_OPTION = "--connect"


def connect_session(settings_file: str) -> SparkSession:
    """A new Spark Connect session from the settings file the operator wrote (mode 0600):
    ``{"remote": "sc://...", "conf": {...}, "artifacts": [paths]}``; the artifacts (the Lance
    code zip, the operator's ``py_files``) are added as Python files, so the server's Python
    workers import the shipped code. The remote URL may hold a token: it is never printed."""
    from pyspark.sql import SparkSession

    with open(settings_file, "rb") as handle:
        settings = json.loads(handle.read())
    builder = SparkSession.builder.remote(settings["remote"])
    if settings.get("conf"):
        builder = builder.config(map={str(k): str(v) for k, v in settings["conf"].items()})
    spark = builder.create()
    try:
        for artifact in settings.get("artifacts") or ():
            spark.addArtifacts(artifact, pyfile=True)
    except BaseException:
        spark.stop()
        raise
    return spark


def _interrupt_on_sigterm(spark: SparkSession) -> None:
    """On SIGTERM (the operator killing this client), interrupt the session's running operations
    on the server before exiting: a Connect server does not stop them when a client goes away."""
    import signal

    def interrupt(signum: int, _frame: object) -> None:
        with contextlib.suppress(Exception):
            spark.interruptAll()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, interrupt)


def _session(args: list[str]) -> tuple[SparkSession, bool]:
    """The job's session and whether it is a Spark Connect one."""
    from pyspark.sql import SparkSession

    if args[0] == CONNECT_OPTION:
        spark = connect_session(args[1])
        _interrupt_on_sigterm(spark)
        print(f"airflow-lance job: Spark Connect session {spark.session_id}", flush=True)
        return spark, True
    builder = SparkSession.builder
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):  # spark-submit names every application (--name)
        builder = builder.appName(APP_NAME)
    spark = builder.getOrCreate()
    print(f"airflow-lance job: application {spark.sparkContext.appName!r} "
          f"({spark.sparkContext.applicationId})", flush=True)
    return spark, False


def _report_failure(exc: BaseException) -> None:
    """The ``airflow-lance job failed: ...`` line, in one write: Spark runs the driver with
    ``PYTHONUNBUFFERED``, where ``print`` writes the text and the newline apart, and the JVM's log
    lines, copied onto the same output, could land between the two."""
    sys.stderr.write(f"airflow-lance job failed: {describe_failure(exc)}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry point (and Spark Connect client: ``--connect <settings> <spec>``);
    returns the process exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != (3 if args[:1] == [CONNECT_OPTION] else 1):
        print(f"usage: job.py [{CONNECT_OPTION} <settings.json>] <spec.json>", file=sys.stderr)
        return 2
    start = time.monotonic()
    try:
        spark, connect = _session(args)
    except Exception as exc:  # noqa: BLE001 - reported to the operator through the exit status
        traceback.print_exc()
        _report_failure(exc)
        return 1
    args = args[-1:]
    shipped: str | None = None
    try:
        path, was_shipped = (args[0], False) if connect else find_spec_file(args[0])
        if was_shipped:
            shipped = os.path.basename(path)
        with open(path, "rb") as handle:
            spec = parse_spec(handle.read())
        if shipped:
            os.remove(path)  # the driver's copy; the executors' go at the end
        check_executor_environment(spark)
        if isinstance(spec, TaskJobSpec):
            print(f"airflow-lance job: {spec.describe()}", flush=True)
            staged = run_task_job(spark, spec)
            print(f"airflow-lance job: staged {len(staged.results)} task results in "
                  f"{time.monotonic() - start:.1f} s (not committed)", flush=True)
            return 0
        if isinstance(spec, MergeInsertJobSpec):
            print(f"airflow-lance job: {spec.describe()}", flush=True)
            merged = run_merge_insert(spark, spec)
            print(f"airflow-lance job: staged {len(merged.new_fragments)} new fragments, "
                  f"{len(merged.updated_fragments)} deletion vectors, {merged.counts} in "
                  f"{time.monotonic() - start:.1f} s (not committed)", flush=True)
            return 0
        print(f"airflow-lance job: {spec.mode} {spec.uri} from {spec.source.describe()}", flush=True)
        result = run(spark, spec)
        print(
            f"airflow-lance job: staged {len(result.fragments)} fragments, {result.num_rows} rows, "
            f"{result.bytes_written} bytes in {time.monotonic() - start:.1f} s (not committed)",
            flush=True,
        )
        return 0
    except Exception as exc:  # noqa: BLE001 - reported to the operator through the exit status
        traceback.print_exc()
        _report_failure(exc)
        return 1
    finally:
        try:
            if shipped:
                remove_shipped_spec(spark, shipped)
        except Exception as exc:  # noqa: BLE001 - best effort, the job's outcome stands
            print(f"airflow-lance job: could not remove the shipped spec: {describe_failure(exc)}", flush=True)
        finally:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
