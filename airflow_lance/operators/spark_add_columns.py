"""``LanceSparkAddColumnsOperator``: new columns for every fragment of a Lance dataset, computed on Spark.

1. If this task instance's commit already landed (a retry after a failure after the commit),
   return that version: nothing is run or committed again (idempotency key and commit receipt,
   as :class:`~airflow_lance.operators.spark_write.LanceSparkWriteOperator`).
2. Validate before Spark runs: input columns the dataset lacks, new columns it already has (or,
   with ``only_missing``, lacks), expressions that are not Spark SQL, a function that is not
   ``module:function`` raise typed errors and nothing is written.
3. Run the ``add_columns`` task job (:mod:`airflow_lance.spark.add_columns`): one Spark task per
   fragment writes one data file covering the fragment's physical rows; the fragments and the plan
   are staged (a staged result of an earlier try of the same job is reused).
4. Commit once at the job's read version: a ``Merge`` (new columns), or a ``DataReplacement``
   adding the file to each fragment that lacked the columns (``only_missing``). Appends and deletes
   committed while the job ran are kept (the Merge is rebuilt over them; the appended fragments
   read the new columns as null until the next ``only_missing`` run); any other concurrent change
   fails the task with a conflict and nothing is committed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from airflow.providers.common.compat.sdk import BaseOperator

import airflow_lance.core as lance
from airflow_lance.assets.lance import emit_dataset_event, with_dataset_outlet
from airflow_lance.connection import DEFAULT_CONN_ID
from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators._lineage import LanceLineageMixin, lance_dataset
from airflow_lance.operators._log_format import human_bytes
from airflow_lance.operators._spark_submit import LanceStagedResultError, SparkJobRunner
from airflow_lance.operators.spark_write import LanceSparkWriteOperator, default_idempotency_key
from airflow_lance.spark.spec import WriteReceipt, parse_type, receipt_location, staging_location
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec, encode_schema

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: Commits retried when another writer lands between reading the latest version and committing.
COMMIT_ATTEMPTS = 5


def expression_columns(expressions: Mapping[str, str], columns: Sequence[str]) -> list[str]:
    """The dataset columns the Spark SQL ``expressions`` read (Spark resolves names case-insensitively);
    SchemaEvolutionError for an expression that does not parse or reads a column the dataset lacks."""
    import sqlglot
    from sqlglot import exp

    by_lower: dict[str, list[str]] = {}
    for name in columns:
        by_lower.setdefault(name.lower(), []).append(name)
    found: list[str] = []
    for new, sql in expressions.items():
        if not isinstance(new, str) or not new or not isinstance(sql, str) or not sql.strip():
            raise lance.InvalidTransformError(f"expressions must map column names to Spark SQL, not {new!r}: {sql!r}")
        try:
            tree = sqlglot.parse_one(sql, read="spark")
        except sqlglot.errors.SqlglotError as exc:
            raise lance.SchemaEvolutionError(f"expression {sql!r} of column {new!r} is not Spark SQL: {exc}") from None
        lambdas = {p.name for lam in tree.find_all(exp.Lambda) for p in lam.expressions}
        for column in tree.find_all(exp.Column):
            name = column.name
            if name in lambdas or not name:
                continue
            match = [name] if name in columns else by_lower.get(name.lower(), [])
            if len(match) != 1:
                raise lance.SchemaEvolutionError(
                    f"expression {sql!r} of column {new!r} reads column {name!r}, which the dataset "
                    f"{'has twice (in other cases)' if match else 'does not have'} (columns: {', '.join(columns)})")
            if match[0] not in found:
                found.append(match[0])
    return found


def output_schema_of(value: pa.Schema | Mapping[str, Any] | None) -> pa.Schema | None:
    """``output_schema`` as an Arrow schema: a ``pa.Schema`` or ``{column: type name}`` (``float32``,
    ``fixed_size_list<float32>[128]``, ...; see :func:`airflow_lance.spark.spec.parse_type`)."""
    if value is None or isinstance(value, pa.Schema):
        return value
    if not isinstance(value, Mapping) or not value:
        raise lance.InvalidTransformError(f"output_schema must be a pyarrow Schema or {{column: type}}, not {value!r}")
    return pa.schema([pa.field(str(name), parse_type(text)) for name, text in value.items()])


class LanceSparkAddColumnsOperator(LanceLineageMixin, BaseOperator):
    """Add columns computed from existing ones to every fragment of a Lance dataset, on Spark,
    as one idempotent commit (pylance's ``add_columns``, distributed).

    :param uri: the dataset: a URI, a local path, a ``lance+`` asset URI, or a name resolved below
        the connection's dataset root. (templated)
    :param expressions: ``{new column: Spark SQL expression over existing columns}``, evaluated by
        Spark (e.g. ``{"price_eur": "CAST(price * 0.92 AS FLOAT)"}``). Row-wise expressions only:
        an aggregate or window expression fails the job. (templated)
    :param function: ``"package.module:function"`` mapping a ``pyarrow.RecordBatch`` of the input
        columns (live rows, batches of ``batch_size``) to a RecordBatch, Table or pandas DataFrame
        of the new columns, as pylance's ``add_columns`` UDFs; ship its module with ``py_files``.
        (templated)
    :param function_input: ``"arrow"`` (default) or ``"pandas"``: the function gets pandas DataFrames.
    :param input_columns: columns the function reads (default: all), or the expressions read
        (default: the columns they name). (templated)
    :param output_schema: the function's new columns, a ``pyarrow.Schema`` or ``{column: type name}``
        (``"float32"``, ``"fixed_size_list<float32>[128]"``, ...); the results are cast to it.
        Default: inferred by calling the function on the first row, as pylance does. (templated)
    :param only_missing: backfill: the columns exist already; compute them only for the fragments
        that lack them (appended since) and commit a ``DataReplacement``. A function needs
        ``output_schema`` (its column names) here.
    :param batch_size: rows per function call (pylance's default 8192).
    :param idempotency_key: override the key (default ``dag_id/run_id/task_id/map_index``); a key
        already committed within the last 100 versions makes the task a no-op. (templated)
    :param staging_uri: directory for the staged job result (default ``<dataset>/_airflow_staging``).
    :param commit_message: stored as the version's commit message. (templated)

    Spark settings as :class:`~airflow_lance.operators.spark_write.LanceSparkWriteOperator`:
    ``lance_conn_id``, ``spark_conn_id``, ``conf``, ``py_files``, ``jars``, ``packages``,
    ``executor_cores``, ``executor_memory``, ``driver_memory``, ``num_executors``,
    ``total_executor_cores``, ``spark_binary``, ``spark_submit_kwargs``, ``spark_log_level``,
    ``python_env_archive``.

    Returns ``{"uri", "operation", "version", "read_version", "columns", "num_fragments",
    "num_rows", "bytes_written"}`` (``operation`` is ``merge``, ``data_replacement`` or ``none``
    when ``only_missing`` found nothing to fill) and sets it as the extra of the dataset's asset event.
    """

    template_fields: Sequence[str] = (
        "uri", "expressions", "function", "input_columns", "output_schema", "conf", "py_files", "jars", "packages",
        "staging_uri", "idempotency_key", "commit_message",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"expressions": "json", "conf": "json"}
    ui_color = "#e4f0e8"

    def __init__(
        self,
        *,
        uri: str,
        expressions: Mapping[str, str] | None = None,
        function: str | None = None,
        function_input: str = "arrow",
        input_columns: Sequence[str] | None = None,
        output_schema: pa.Schema | Mapping[str, Any] | None = None,
        only_missing: bool = False,
        batch_size: int | None = None,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        spark_conn_id: str = "spark_default",
        conf: Mapping[str, Any] | None = None,
        py_files: str | None = None,
        jars: str | None = None,
        packages: str | None = None,
        executor_cores: int | None = None,
        executor_memory: str | None = None,
        driver_memory: str | None = None,
        num_executors: int | None = None,
        total_executor_cores: int | None = None,
        staging_uri: str | None = None,
        idempotency_key: str | None = None,
        commit_message: str | None = None,
        spark_binary: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        spark_log_level: str = "WARN",
        python_env_archive: str | None = None,
        **kwargs: Any,
    ) -> None:
        with_dataset_outlet(uri, kwargs)
        super().__init__(**kwargs)
        if (not expressions) == (not function):
            raise ValueError(f"{self.task_id}: give exactly one of expressions and function")
        if function_input not in ("arrow", "pandas"):
            raise ValueError(f"function_input must be 'arrow' or 'pandas', not {function_input!r}")
        self.uri = uri
        self.expressions = dict(expressions or {})
        self.function = function
        self.function_input = function_input
        self.input_columns = list(input_columns) if input_columns is not None else None
        self.output_schema = output_schema
        self.only_missing = only_missing
        self.batch_size = batch_size
        self.lance_conn_id = lance_conn_id
        self.spark_conn_id = spark_conn_id
        self.conf = dict(conf or {})
        self.py_files, self.jars, self.packages = py_files, jars, packages
        self.executor_cores, self.executor_memory, self.driver_memory = executor_cores, executor_memory, driver_memory
        self.num_executors, self.total_executor_cores = num_executors, total_executor_cores
        self.staging_uri = staging_uri
        self.idempotency_key = idempotency_key
        self.commit_message = commit_message
        self.spark_binary = spark_binary
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.spark_log_level = spark_log_level
        self.python_env_archive = python_env_archive
        self._spark_job: SparkJobRunner | None = None

    @cached_property
    def hook(self) -> LanceHook:
        """The Lance hook (created on first use, never at DAG parse time)."""
        return LanceHook(self.lance_conn_id)

    # -- execution --------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        start = time.monotonic()
        uri = self.hook.check_writable(self.uri)
        key = self.idempotency_key or default_idempotency_key(context)
        if context["ti"].try_number > 1 or self.idempotency_key:
            landed = self._landed(uri, key)
            if landed is not None:
                return self._finish(context, landed)
        ds = self.hook.get_dataset(uri)
        spec = self._spec(ds, key)
        if spec is None:
            self.log.info("Every fragment of %s (version %d) has the columns %s: nothing to backfill", uri,
                          ds.version, self._names())
            return self._finish(context, self._summary(uri, "none", ds.version, ds.version, []))
        self.log.info("Lance add columns on %s: %s", uri, spec.describe())
        staged = self._reusable_result(spec)
        job = "Spark job not run (an earlier try's result)"
        if staged is None:
            job_start = time.monotonic()
            staged = self._run_job(spec)
            job = f"Spark job {time.monotonic() - job_start:.2f} s"
            self.log.info("%s: %d fragments written, staged (not committed)", job, len(staged.results))
        commit_start = time.monotonic()
        summary = self._commit(spec, staged, key, context)
        TaskJobResult.discard(spec.staging_root, spec.staging_name, spec.storage_options)
        self.log.info("Lance add columns on %s done: %s version %d (read version %d), %d fragments, %d rows, %s; "
                      "%s, commit %.2f s, total %.2f s", uri, summary["operation"], summary["version"],
                      summary["read_version"], summary["num_fragments"], summary["num_rows"],
                      human_bytes(summary["bytes_written"]), job, time.monotonic() - commit_start,
                      time.monotonic() - start)
        return self._finish(context, summary)

    def _names(self) -> list[str]:
        schema = output_schema_of(self.output_schema)
        return list(self.expressions) if self.expressions else (schema.names if schema is not None else [])

    def _landed(self, uri: str, key: str) -> dict[str, Any] | None:
        """The summary of this task's commit if it landed (its version, or its receipt after a cleanup)."""
        landed = self.hook.find_idempotent_commit(uri, key)
        if landed is not None:
            self.log.info("These columns were already committed as version %d of %s; nothing to do",
                          landed.version, uri)
            TaskJobResult.discard(*staging_location(uri, key, self.staging_uri), self.hook.storage_options)
            return self._summary_of_landed(landed)
        receipt = WriteReceipt.load(*receipt_location(uri, key, self.staging_uri), self.hook.storage_options)
        if receipt is not None and receipt.idempotency_key == key:
            self.log.info("These columns were already committed as version %s of %s (removed by a version cleanup "
                          "since, its receipt remains); nothing to do", receipt.summary.get("version"), uri)
            return dict(receipt.summary)
        return None

    def _spec(self, ds: lance.LanceDataset, key: str) -> TaskJobSpec | None:
        """Validate against the dataset (typed errors, before anything is written); the job, or None
        when ``only_missing`` finds every fragment filled."""
        columns = ds.schema.names
        output = output_schema_of(self.output_schema)
        names = self._names()
        if self.expressions:
            inputs = list(self.input_columns) if self.input_columns is not None else expression_columns(
                self.expressions, columns)
        else:
            inputs = list(self.input_columns) if self.input_columns is not None else list(columns)
        lance.AddColumnsPlan.check_input_columns(ds, inputs)
        if self.only_missing:
            if not names:
                raise lance.InvalidTransformError("only_missing with a function needs output_schema (the columns "
                                                  "to backfill)")
            fragment_ids = lance.AddColumnsPlan.missing_fragments(ds, names)
            if output is not None:  # its types must be the columns'
                lance.AddColumnsPlan.plan(ds, output, inputs, only_missing=True)
            if not fragment_ids:
                return None
        else:
            clash = [n for n in names if n in columns]
            if clash:
                raise lance.SchemaEvolutionError(f"column(s) {clash} already exist in the dataset (use "
                                                 "only_missing=True to fill fragments appended since they were added)")
            fragment_ids = [f.fragment_id for f in ds.get_fragments()]
            if not fragment_ids:
                raise lance.SchemaEvolutionError(f"{ds.uri} has no rows: there is nothing to compute new columns from")
        params: dict[str, Any] = {"read_version": ds.version, "input_columns": inputs,
                                  "only_missing": bool(self.only_missing)}
        if self.expressions:
            params["expressions"] = [[name, sql] for name, sql in self.expressions.items()]
        else:
            params.update(function=self.function, function_input=self.function_input)
            if output is not None:
                params["output_schema"] = encode_schema(output)
        if self.batch_size is not None:
            params["batch_size"] = int(self.batch_size)
        staging_root, staging_name = staging_location(ds.uri, key, self.staging_uri)
        return TaskJobSpec(kind="add_columns", uri=ds.uri, tasks=tuple({"fragment_id": i} for i in fragment_ids),
                           staging_root=staging_root, staging_name=staging_name,
                           storage_options=self.hook.storage_options, params=params)

    def _reusable_result(self, spec: TaskJobSpec) -> TaskJobResult | None:
        """The result an earlier try staged for this very job, if all its files are there."""
        staged = TaskJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
        if staged is None or staged.spec_digest != spec.digest():
            return None
        fragments = [lance.FragmentMetadata.from_json(r) for r in staged.results]
        plan = lance.AddColumnsPlan.from_json(staged.info["plan"])
        if plan.missing_files(self.hook.get_dataset(spec.uri), fragments):
            self.log.warning("Not reusing the staged result of an earlier try: data files are missing")
            return None
        self.log.info("Reusing the Spark output staged by an earlier try of this task: %d fragments", len(fragments))
        return staged

    def _run_job(self, spec: TaskJobSpec) -> TaskJobResult:
        self._spark_job = LanceSparkWriteOperator._runner(self)  # type: ignore[arg-type]
        self._spark_job.run(spec.to_json(), f"lance-add-columns-{spec.digest()[:12]}.json",
                            f"the Spark add-columns job for {spec.uri}")
        staged = TaskJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
        if staged is None or staged.spec_digest != spec.digest() or "plan" not in staged.info:
            raise LanceStagedResultError(
                f"the Spark add-columns job for {spec.uri} finished without staging its result")
        return staged

    def _commit(self, spec: TaskJobSpec, staged: TaskJobResult, key: str, context: Context) -> dict[str, Any]:
        plan = lance.AddColumnsPlan.from_json(staged.info["plan"])
        written = [lance.FragmentMetadata.from_json(r) for r in staged.results]
        kind = "data_replacement" if plan.only_missing else "merge"
        message = self.commit_message or f"airflow-lance add columns by {context['ti'].dag_id}.{context['ti'].task_id}"
        for attempt in range(COMMIT_ATTEMPTS):
            latest = self.hook.get_dataset(spec.uri)
            try:
                operation, at = plan.operation(latest, written)  # CommitConflictError: not over what landed
            except lance.LanceError:
                self._discard(spec, plan, written)
                raise
            try:
                ds = self.hook.commit(spec.uri, operation, at, idempotency_key=key, commit_message=message,
                                      transaction_properties=LanceSparkWriteOperator._transaction_properties(context))
                break
            except lance.CommitStateUnknownError:
                raise  # the version may reference the files: keep them
            except lance.CommitConflictError as exc:
                if plan.only_missing or attempt == COMMIT_ATTEMPTS - 1:
                    self._discard(spec, plan, written)
                    raise
                self.log.info("Another writer committed version %d or later meanwhile (%s); rebuilding the Merge",
                              at + 1, exc)
            except lance.LanceError:
                self._discard(spec, plan, written)
                raise
        self.log.info("Committed version %d of %s (read version %d)", ds.version, spec.uri, plan.read_version)
        summary = self._summary(spec.uri, kind, ds.version, plan.read_version, written, plan.output_schema.names)
        LanceSparkWriteOperator._leave_receipt(self, spec.uri, key, summary)  # type: ignore[arg-type]
        return summary

    def _discard(self, spec: TaskJobSpec, plan: lance.AddColumnsPlan,
                 written: Sequence[lance.FragmentMetadata]) -> None:
        """The files of a job that will not be committed, and its staged result, are removed."""
        plan.discard(self.hook.get_dataset(spec.uri), written)
        TaskJobResult.discard(spec.staging_root, spec.staging_name, spec.storage_options)

    def _summary(self, uri: str, operation: str, version: int, read_version: int,
                 fragments: Sequence[lance.FragmentMetadata], columns: Sequence[str] | None = None) -> dict[str, Any]:
        return {
            "uri": uri,
            "operation": operation,
            "version": version,
            "read_version": read_version,
            "columns": list(columns if columns is not None else self._names()),
            "num_fragments": len(fragments),
            "num_rows": sum(f.physical_rows for f in fragments),
            "bytes_written": sum(f.files[-1].file_size_bytes or 0 for f in fragments if f.files),
        }

    def _summary_of_landed(self, ds: lance.LanceDataset) -> dict[str, Any]:
        txn = ds.read_transaction()
        op = txn.operation if txn is not None else None
        if isinstance(op, lance.LanceOperation.DataReplacement):
            ids = {g.fragment_id for g in op.replacements}
            fragments = [f.metadata for f in ds.get_fragments() if f.fragment_id in ids]
            return self._summary(ds.uri, "data_replacement", ds.version, txn.read_version, fragments)
        fragments = [f for f in getattr(op, "fragments", ())]
        read_version = txn.read_version if txn is not None else ds.version - 1
        before = set(ds.checkout_version(read_version).schema.names) if read_version > 0 else set()
        added = [n for n in ds.schema.names if n not in before]
        return self._summary(ds.uri, "merge", ds.version, read_version, fragments, added)

    def _finish(self, context: Context, summary: dict[str, Any]) -> dict[str, Any]:
        options = self.hook.storage_options
        self.record_lineage(
            inputs=[lance_dataset(summary["uri"], summary["read_version"], storage_options=options)],
            outputs=[lance_dataset(summary["uri"], summary["version"], summary["read_version"],
                                   storage_options=options)])
        return emit_dataset_event(self.outlets, context["outlet_events"], summary)

    def on_kill(self) -> None:
        """Cancel the running Spark job (nothing is committed)."""
        if self._spark_job is not None:
            self._spark_job.kill()


__all__ = ["LanceSparkAddColumnsOperator", "expression_columns", "output_schema_of"]
