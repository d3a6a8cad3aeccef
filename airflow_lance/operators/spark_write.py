"""``LanceSparkWriteOperator``: write a Spark source into a Lance dataset, committed once.

1. If this task instance's commit already landed (a retry after a failure that
   happened after the commit), return that version: nothing is run or committed again.
2. Otherwise run :mod:`airflow_lance.spark.job` through ``SparkSubmitHook``: executors
   write fragments; the job validates the row count and stages the fragment list
   (a staged result of an earlier try of the same write is reused instead).
3. Commit one Append / Overwrite (or the dataset's first version) from the staged
   fragments, with an idempotency key built from dag_id, run_id, task_id and map_index:
   a retried task never appends twice and never loses its rows (``rewrite_on_retry=True``
   adds the try number: every try writes anew, which may append the same rows again).
4. Return a JSON-ready summary and set it as the extra of the dataset's asset event.

The log has one line per step (source, Spark job, commit) and a closing line with rows,
fragments, size (``104.2 MiB (109,264,512 bytes)``), version and the durations of the Spark
job (spark-submit start to exit, measured here), the commit and the whole task.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, get_args

from airflow.providers.common.compat.sdk import BaseOperator

import airflow_lance.core as lance
from airflow_lance.assets.lance import emit_dataset_event, with_dataset_outlet
from airflow_lance.connection import DEFAULT_CONN_ID
from airflow_lance.hooks.lance import IDEMPOTENCY_LOOKBACK, LanceHook
from airflow_lance.operators._lineage import LanceLineageMixin, lance_dataset, spark_source_datasets
from airflow_lance.operators._log_format import human_bytes
from airflow_lance.operators._spark_submit import (
    LanceSparkJobError,
    LanceStagedResultError,
    SparkJobRunner,
    SparkSubmitNotFoundError,
    spark_hook_kwargs,
)
from airflow_lance.spark.spec import (
    MAX_BYTES_PER_FILE,
    MAX_ROWS_PER_FILE,
    LanceSourceSpec,
    SourceSpec,
    WriteJobResult,
    WriteJobSpec,
    WriteMode,
    WriteReceipt,
    check_against_dataset,
    pin_lance_source,
    receipt_location,
    staging_location,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


def default_idempotency_key(context: Context) -> str:
    """``dag_id/run_id/task_id/map_index`` of the running task instance (not the try number)."""
    ti = context["ti"]
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}"


#: transaction properties naming the task instance that committed a version (try number aside)
_TASK_INSTANCE_PROPERTIES = ("airflow.dag_id", "airflow.run_id", "airflow.task_id", "airflow.map_index")


def _summary(uri: str, mode: str, version: int, read_version: int, fragments: Sequence[lance.FragmentMetadata],
             num_rows: int, bytes_written: int) -> dict[str, Any]:
    return {
        "uri": uri,
        "mode": mode,
        "version": version,
        "read_version": read_version,
        "num_rows": num_rows,
        "num_fragments": len(fragments),
        "bytes_written": bytes_written,
    }


class LanceSparkWriteOperator(LanceLineageMixin, BaseOperator):
    """Write data read by Spark into a Lance dataset, as one idempotent commit.

    :param uri: the dataset: a URI, a local path, a ``lance+`` asset URI, or a name
        resolved below the connection's dataset root. (templated)
    :param mode: ``create`` (fails if the dataset exists), ``append`` (creates it when
        missing) or ``overwrite``. (templated)
    :param source_path: Spark-readable path or list of paths. (templated)
    :param source_format: Spark data source of ``source_path`` (default ``parquet``). (templated)
    :param source_options: options of the Spark reader. (templated)
    :param source_sql: a Spark SQL query; a ``.sql`` file is read as a template. (templated)
    :param source_callable: ``"package.module:function"``; called with the SparkSession, it
        returns the DataFrame. Ship its module with ``py_files``. (templated)
    :param source_lance_uri: read another Lance dataset instead (``read_lance`` on the
        executors), resolved with ``source_lance_conn_id``. (templated)
    :param source_lance_version: its version number or tag (default: the latest when the task
        runs, pinned for the job). (templated)
    :param source_lance_columns: the columns to read (default all). (templated)
    :param source_lance_filter: a SQL filter pushed down to the fragment reads. (templated)
    :param source_lance_since_version: only rows inserted or updated after this version. (templated)
    :param transform: ``"package.module:function"`` mapping the source DataFrame to the one
        written (e.g. computing an embedding column); ship its module with ``py_files``. (templated)
    :param source_lance_conn_id: the ``lance`` connection of the source (dataset root, storage
        options; default ``lance_conn_id``). Its storage options travel in the private spec file.
    :param lance_conn_id: the ``lance`` connection (dataset root, storage options).
    :param spark_conn_id: the ``spark`` connection (master, deploy mode, ...).
    :param conf: Spark configuration. (templated)
    :param py_files: extra Python files for the job (the Lance code is shipped automatically). (templated)
    :param jars: extra jars (comma-separated). (templated)
    :param packages: Maven coordinates, e.g. ``org.apache.hadoop:hadoop-aws:3.4.1``. (templated)
    :param executor_cores: cores per executor.
    :param executor_memory: memory per executor, e.g. ``4g``.
    :param driver_memory: driver memory, e.g. ``2g``.
    :param num_executors: executors to launch (YARN).
    :param total_executor_cores: total cores (standalone / Mesos).
    :param num_partitions: repartition the source to this many writers before writing.
    :param max_rows_per_file: rows per data file (pylance's default 1,048,576).
    :param max_bytes_per_file: bytes per data file.
    :param data_storage_version: Lance file format of a new dataset (``"2.0"``, ``"2.1"``,
        ``"2.2"``; default: the core's, as pylance's). Appends keep the dataset's format.
    :param fixed_size_lists: array columns to store as fixed-size lists, ``{column: size}``
        (e.g. ``{"embedding": 768}``) or ``{column: (size, element type)}`` (e.g.
        ``{"embedding": (768, "float32")}``, also ``[768, "float32"]``: the elements are cast,
        so a JSON source's doubles become ``fixed_size_list<float32>[768]``). Spark arrays have
        no fixed size, but Lance's vector indices need ``fixed_size_list<float>[dim]``. A Spark
        column whose metadata holds ``arrow.fixed-size-list.size`` (lance-spark's convention) is
        stored so too. A row of another length fails the job; appends keep the dataset's types.
        (templated)
    :param cast: columns cast on the executors (vectorised, Arrow's cast), ``{column: type}``
        with pyarrow type names (``float32``, ``float64``, ``int64``, ``string``, ``bool``,
        ``date32``, ``timestamp[us]``, ...), ``list<T>``, ``large_list<T>`` and
        ``fixed_size_list<T>[N]``. An unknown type (or, when appending, a column the dataset
        lacks) fails the task before Spark runs; a value that cannot be cast fails the job with
        a message naming its column. (templated)
    :param reader: how a ``source_path`` is read: ``"auto"`` (default) has the executors read
        Parquet and Arrow IPC files (and CSV/JSON with ``mode=FAILFAST``) directly with pyarrow,
        split by row groups or byte ranges, where the result equals Spark's (same rows, schema,
        hive partition columns), else through Spark's rows; ``"direct"`` always reads directly
        (a source it cannot read exactly fails the job); ``"spark"`` always through Spark's rows.
        The job log says which path ran and why. (templated)
    :param staging_uri: directory for the staged job result (default
        ``<dataset>/_airflow_staging``). (templated)
    :param idempotency_key: override the key (default ``dag_id/run_id/task_id/map_index``);
        a key already committed within the last 100 versions makes the task a no-op. (templated)
    :param rewrite_on_retry: every try writes anew: the try number is added to the key, so a
        retry (automatic, or a cleared task) runs the job and commits again even when an earlier
        try's commit landed. With ``mode="append"`` that appends the same rows again; with
        ``overwrite`` it replaces them. Default False: the default key never duplicates.
    :param commit_message: stored as the version's commit message. (templated)
    :param spark_binary: ``spark-submit`` by default.
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments (keytab, principal,
        proxy_user, properties_file, yarn_queue, deploy_mode, ...).
    :param spark_log_level: Spark's log level (``spark.log.level``, unless ``conf`` sets it):
        ``WARN`` by default, ``INFO`` or ``DEBUG`` to see Spark's progress.
    :param python_env_archive: a packed Python environment for the executors (``.tar.gz``, a
        local path or a URL Spark reads, e.g. built by ``python -m airflow_lance.spark.pack_env``):
        shipped with ``--archives <archive>#env``, the executors run ``./env/bin/python``; in
        client deploy mode the driver keeps this machine's Python. Cluster masters only. (templated)

    Returns ``{"uri", "mode", "version", "read_version", "num_rows", "num_fragments",
    "bytes_written"}``. A dataset given by a static URI or path is added to ``outlets``;
    the event of each outlet naming this dataset carries that dict as its extra. For a
    dataset named relative to the connection's root, add an ``AssetAlias`` to ``outlets``:
    the operator adds the dataset's asset event (with that extra) to it.
    """

    template_fields: Sequence[str] = (
        "uri",
        "mode",
        "source_path",
        "source_format",
        "source_options",
        "source_sql",
        "source_callable",
        "source_lance_uri",
        "source_lance_version",
        "source_lance_columns",
        "source_lance_filter",
        "source_lance_since_version",
        "transform",
        "conf",
        "py_files",
        "jars",
        "packages",
        "staging_uri",
        "idempotency_key",
        "commit_message",
        "fixed_size_lists",
        "cast",
        "python_env_archive",
        "reader",
    )
    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "source_sql": "sql", "conf": "json", "source_options": "json"}
    ui_color = "#e4f0e8"

    def __init__(
        self,
        *,
        uri: str,
        mode: str = "append",
        source_path: str | Sequence[str] | None = None,
        source_format: str | None = None,
        source_options: Mapping[str, Any] | None = None,
        source_sql: str | None = None,
        source_callable: str | None = None,
        source_lance_uri: str | None = None,
        source_lance_version: int | str | None = None,
        source_lance_columns: Sequence[str] | None = None,
        source_lance_filter: str | None = None,
        source_lance_since_version: int | str | None = None,
        source_lance_conn_id: str | None = None,
        transform: str | None = None,
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
        num_partitions: int | None = None,
        max_rows_per_file: int = MAX_ROWS_PER_FILE,
        max_bytes_per_file: int = MAX_BYTES_PER_FILE,
        data_storage_version: str | None = None,
        staging_uri: str | None = None,
        idempotency_key: str | None = None,
        commit_message: str | None = None,
        spark_binary: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        fixed_size_lists: Mapping[str, Any] | None = None,
        cast: Mapping[str, str] | None = None,
        reader: str = "auto",
        rewrite_on_retry: bool = False,
        spark_log_level: str = "WARN",
        python_env_archive: str | None = None,
        **kwargs: Any,
    ) -> None:
        with_dataset_outlet(uri, kwargs)
        super().__init__(**kwargs)
        self.uri = uri
        self.mode = mode
        self.source_path = source_path
        self.source_format = source_format
        self.source_options = dict(source_options or {})
        self.source_sql = source_sql
        self.source_callable = source_callable
        self.source_lance_uri, self.source_lance_version = source_lance_uri, source_lance_version
        self.source_lance_columns, self.source_lance_filter = source_lance_columns, source_lance_filter
        self.source_lance_since_version, self.source_lance_conn_id = source_lance_since_version, source_lance_conn_id
        self.transform = transform
        self.lance_conn_id = lance_conn_id
        self.spark_conn_id = spark_conn_id
        self.conf = dict(conf or {})
        self.py_files = py_files
        self.jars = jars
        self.packages = packages
        self.executor_cores = executor_cores
        self.executor_memory = executor_memory
        self.driver_memory = driver_memory
        self.num_executors = num_executors
        self.total_executor_cores = total_executor_cores
        self.num_partitions = num_partitions
        self.max_rows_per_file = max_rows_per_file
        self.max_bytes_per_file = max_bytes_per_file
        self.data_storage_version = data_storage_version
        self.staging_uri = staging_uri
        self.idempotency_key = idempotency_key
        self.commit_message = commit_message
        self.spark_binary = spark_binary
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.fixed_size_lists = dict(fixed_size_lists or {})
        self.cast, self.rewrite_on_retry = dict(cast or {}), rewrite_on_retry
        self.reader = reader
        self.spark_log_level = spark_log_level
        self.python_env_archive = python_env_archive
        self._spark_job: SparkJobRunner | None = None
        self._pinned_source: SourceSpec | None = None
        if "{{" not in str(mode):
            self._check_mode(mode)
        sources = [s for s in (source_path, source_sql, source_callable, source_lance_uri) if s not in (None, "", [], ())]
        if len(sources) != 1:
            raise ValueError(f"{self.task_id}: give exactly one of source_path, source_sql, source_callable "
                             "and source_lance_uri")

    @staticmethod
    def _check_mode(mode: str) -> WriteMode:
        if mode not in get_args(WriteMode):
            raise ValueError(f"mode must be one of {get_args(WriteMode)}, not {mode!r}")
        return mode  # type: ignore[return-value]

    @cached_property
    def hook(self) -> LanceHook:
        """The Lance hook (created on first use, never at DAG parse time)."""
        return LanceHook(self.lance_conn_id)

    # -- execution --------------------------------------------------------------------------
    def idempotency_key_of(self, context: Context) -> str:
        """The key this try commits with: ``idempotency_key``, else the task instance's
        (:func:`default_idempotency_key`), plus ``/try-<n>`` with ``rewrite_on_retry``."""
        key = self.idempotency_key or default_idempotency_key(context)
        return f"{key}/try-{context['ti'].try_number}" if self.rewrite_on_retry else key

    def execute(self, context: Context) -> dict[str, Any]:
        start = time.monotonic()
        mode = self._check_mode(self.mode)
        uri = self.hook.check_writable(self.uri)  # unsupported stores fail before the Spark job
        key = self.idempotency_key_of(context)
        if context["ti"].try_number > 1 or self.idempotency_key:
            landed = self.hook.find_idempotent_commit(uri, key)
            if landed is not None:
                self.log.info("This write already committed version %d of %s; nothing to do", landed.version, uri)
                WriteJobResult.discard(*staging_location(uri, key, self.staging_uri), self.hook.storage_options)
                return self._finish(context, self._summary_of_landed(landed, mode))
            receipt = WriteReceipt.load(*receipt_location(uri, key, self.staging_uri), self.hook.storage_options)
            if receipt is not None and receipt.idempotency_key == key:
                self.log.info("This write already committed version %s of %s (removed by a version cleanup since, "
                              "its receipt remains); nothing to do", receipt.summary.get("version"), uri)
                return self._finish(context, dict(receipt.summary))
            if self.idempotency_key or self.rewrite_on_retry:
                self._discard_earlier_tries(uri, key, context)
        spec = self._spec(uri, mode, key)
        self.log.info("Lance %s of %s (read version %d) from %s", mode, uri, spec.read_version,
                      spec.source.describe())
        staged = self._reusable_result(spec)
        job = "Spark job not run (an earlier try's result)"
        if staged is None:
            job_start = time.monotonic()
            staged = self._run_job(spec)
            job = f"Spark job {time.monotonic() - job_start:.2f} s"
            self.log.info("%s: %d rows in %d fragments, %s staged (not committed)", job, staged.num_rows,
                          len(staged.fragments), human_bytes(staged.bytes_written))
        commit_start = time.monotonic()
        summary = self._commit(spec, staged, key, context)
        commit_seconds = time.monotonic() - commit_start
        WriteJobResult.discard(spec.staging_root, spec.staging_name, spec.storage_options)
        self.log.info("Lance %s of %s done: version %d, %d rows, %d fragments, %s; %s, commit %.2f s, total %.2f s",
                      mode, uri, summary["version"], summary["num_rows"], summary["num_fragments"],
                      human_bytes(summary["bytes_written"]), job, commit_seconds, time.monotonic() - start)
        return self._finish(context, summary)

    def _leave_receipt(self, uri: str, key: str, summary: Mapping[str, Any]) -> None:
        """Record the landed commit in the staging area, for a retry that runs after a version
        cleanup removed the version (best effort: the commit has landed either way)."""
        try:
            WriteReceipt(key, summary).save(*receipt_location(uri, key, self.staging_uri), self.hook.storage_options)
        except (lance.LanceError, OSError) as exc:
            self.log.warning("Committed, but could not leave the commit receipt (%s): a retry after a version "
                             "cleanup may not recognise this commit", exc)

    def _discard_earlier_tries(self, uri: str, key: str, context: Context) -> None:
        """A try whose key differs from earlier tries' (``rewrite_on_retry``, or a key template that
        changes): warn if an earlier try of this task instance committed (this try writes anew, and
        with ``mode="append"`` adds the same rows again), and remove the results earlier tries staged
        (never reused under another key: their files may be committed already)."""
        earlier = self._earlier_try_commit(uri, context)
        keys = {earlier[1]} if earlier is not None else set()
        if self.rewrite_on_retry:
            base = self.idempotency_key or default_idempotency_key(context)
            keys |= {f"{base}/try-{n}" for n in range(1, context["ti"].try_number)}
        for old_key in keys - {key}:
            WriteJobResult.discard(*staging_location(uri, old_key, self.staging_uri), self.hook.storage_options)
        if earlier is not None and earlier[1] != key:
            self.log.warning(
                "Try %s of this task committed version %d with idempotency key %r; this try's key is %r, so it "
                "writes again%s", earlier[2], earlier[0], earlier[1], key,
                " and appends the same rows a second time" if self.mode == "append" else "")

    def _earlier_try_commit(self, uri: str, context: Context) -> tuple[int, str, str] | None:
        """(version, idempotency key, try number) of the latest commit of an earlier try of this
        task instance among the last versions the idempotency look-back reads."""
        ds = self.hook.dataset_or_none(uri)
        if ds is None:
            return None
        mine = self._transaction_properties(context)
        for version in range(ds.version, max(0, ds.version - IDEMPOTENCY_LOOKBACK), -1):
            try:
                txn = ds.read_transaction(version)
            except (lance.VersionNotFoundError, FileNotFoundError):  # cleaned up: older versions are gone too
                return None
            props = txn.transaction_properties if txn is not None else {}
            if all(props.get(name) == mine[name] for name in _TASK_INSTANCE_PROPERTIES):
                return version, str(props.get(lance.IDEMPOTENCY_KEY)), str(props.get("airflow.try_number"))
        return None

    def _spec(self, uri: str, mode: WriteMode, key: str) -> WriteJobSpec:
        existing = self.hook.dataset_or_none(uri)
        if mode == "create" and existing is not None:
            raise lance.DatasetAlreadyExistsError(f"dataset {uri} already exists (use mode='append' or 'overwrite')")
        job_mode: WriteMode = "create" if existing is None and mode == "append" else mode
        staging_root, staging_name = staging_location(uri, key, self.staging_uri)
        spec = WriteJobSpec(
            uri=uri,
            mode=job_mode,
            source=SourceSpec.from_fields(path=self.source_path, format=self.source_format,
                                          options=self.source_options, sql=self.source_sql,
                                          callable=self.source_callable, lance=self._lance_source()),
            read_version=existing.version if existing is not None else 0,
            staging_root=staging_root,
            staging_name=staging_name,
            storage_options=self.hook.storage_options,
            max_rows_per_file=self.max_rows_per_file,
            max_bytes_per_file=self.max_bytes_per_file,
            num_partitions=self.num_partitions,
            data_storage_version=self.data_storage_version,
            fixed_size_lists=self.fixed_size_lists,
            cast=self.cast,
            transform=self.transform or None,
            reader=self.reader,
        )
        if job_mode == "append" and existing is not None:  # named columns and types checked before Spark runs
            check_against_dataset(existing.schema, spec.fixed_size_lists, spec.cast)
        self._pinned_source = spec.source
        return spec

    def _lineage_source(self) -> SourceSpec | None:
        """The source as the job read it (the Lance source at its pinned version), for lineage."""
        if self._pinned_source is not None:
            return self._pinned_source
        if self.source_lance_uri not in (None, ""):  # an earlier try committed: the version it read is not known
            return SourceSpec("lance", lance=LanceSourceSpec(uri=LanceHook(
                self.source_lance_conn_id or self.lance_conn_id).resolve_uri(self.source_lance_uri)))
        return SourceSpec.from_fields(path=self.source_path, format=self.source_format, options=self.source_options,
                                      sql=self.source_sql, callable=self.source_callable)

    def _lance_source(self) -> LanceSourceSpec | None:
        """The Lance source with its version pinned, checked (version, tag, columns, filter)
        before Spark runs."""
        if self.source_lance_uri in (None, ""):
            return None

        def version_of(value: Any) -> int | str | None:
            text = str(value).strip() if value is not None else ""
            return None if text == "" else int(text) if text.isdigit() else text

        hook = LanceHook(self.source_lance_conn_id or self.lance_conn_id)
        columns = [self.source_lance_columns] if isinstance(self.source_lance_columns, str) \
            else self.source_lance_columns
        return pin_lance_source(hook.resolve_uri(self.source_lance_uri), version=version_of(self.source_lance_version),
                                columns=columns, filter=self.source_lance_filter or None,
                                since_version=version_of(self.source_lance_since_version),
                                storage_options=hook.storage_options)

    def _reusable_result(self, spec: WriteJobSpec) -> WriteJobResult | None:
        """The result an earlier try staged for this very write, if all its files are there."""
        staged = WriteJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
        if staged is None or staged.spec_digest != spec.digest():
            return None
        missing = staged.missing_files(spec.uri, spec.storage_options)
        if missing:
            self.log.warning("Not reusing the staged result of an earlier try: %d data files are missing",
                             len(missing))
            return None
        self.log.info("Reusing the Spark output staged by an earlier try of this task: %d rows in %d fragments, %s",
                      staged.num_rows, len(staged.fragments), human_bytes(staged.bytes_written))
        return staged

    def _runner(self) -> SparkJobRunner:
        return SparkJobRunner(spark_hook_kwargs(
            spark_conn_id=self.spark_conn_id,
            conf=self.conf,
            name=f"airflow-lance-{self.task_id}",
            spark_binary=self.spark_binary,
            spark_submit_kwargs=self.spark_submit_kwargs,
            spark_log_level=self.spark_log_level,
            python_env_archive=self.python_env_archive,
            py_files=self.py_files,
            jars=self.jars,
            packages=self.packages,
            executor_cores=self.executor_cores,
            executor_memory=self.executor_memory,
            driver_memory=self.driver_memory,
            num_executors=self.num_executors,
            total_executor_cores=self.total_executor_cores,
        ))

    def _run_job(self, spec: WriteJobSpec) -> WriteJobResult:
        self._spark_job = self._runner()
        self._spark_job.run(spec.to_json(), f"lance-write-{spec.digest()[:12]}.json",
                            f"the Spark write job for {spec.uri}")
        staged = WriteJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
        if staged is None or staged.spec_digest != spec.digest():
            raise LanceStagedResultError(f"the Spark job for {spec.uri} finished without staging its result")
        return staged

    def _commit(self, spec: WriteJobSpec, staged: WriteJobResult, key: str, context: Context) -> dict[str, Any]:
        fragments = staged.fragments
        if sum(f.physical_rows for f in fragments) != staged.num_rows:
            raise LanceStagedResultError(
                f"staged fragments of {spec.uri} do not hold the {staged.num_rows} rows counted"
            )
        if spec.mode == "append" and not fragments:
            self.log.info("The source is empty: nothing to append, no version committed")
            return _summary(spec.uri, self.mode, spec.read_version, spec.read_version, fragments, 0, 0)
        operation: lance.LanceOperation.BaseOperation
        if spec.mode == "append":
            operation = lance.LanceOperation.Append(list(fragments))
        else:
            if staged.schema is None:
                raise LanceStagedResultError(f"the staged result for {spec.uri} has no schema")
            operation = lance.LanceOperation.Overwrite(staged.schema, list(fragments))
        ds = self.hook.commit(
            spec.uri,
            operation,
            spec.read_version,
            idempotency_key=key,
            transaction_properties=self._transaction_properties(context),
            commit_message=self.commit_message or f"airflow-lance {self.mode} by {context['ti'].dag_id}."
            f"{context['ti'].task_id}",
            create_only=spec.mode == "create",  # a dataset created while the Spark job ran is not replaced
        )
        self.log.info("Committed version %d of %s (read version %d)", ds.version, spec.uri, spec.read_version)
        summary = _summary(spec.uri, self.mode, ds.version, spec.read_version, fragments, staged.num_rows,
                           staged.bytes_written)
        self._leave_receipt(spec.uri, key, summary)  # right after the commit: the smallest window to lose it
        return summary

    @staticmethod
    def _transaction_properties(context: Context) -> dict[str, str]:
        ti = context["ti"]
        return {
            "airflow.dag_id": str(ti.dag_id),
            "airflow.run_id": str(ti.run_id),
            "airflow.task_id": str(ti.task_id),
            "airflow.map_index": str(ti.map_index),
            "airflow.try_number": str(ti.try_number),
        }

    def _summary_of_landed(self, ds: lance.LanceDataset, mode: str) -> dict[str, Any]:
        txn = ds.read_transaction()
        fragments = list(getattr(txn.operation, "fragments", ())) if txn is not None else []
        return _summary(
            ds.uri, mode, ds.version, txn.read_version if txn is not None else ds.version - 1, fragments,
            sum(f.physical_rows for f in fragments),
            sum(d.file_size_bytes or 0 for f in fragments for d in f.files),
        )

    def _finish(self, context: Context, summary: dict[str, Any]) -> dict[str, Any]:
        """Set ``summary`` as the extra of this dataset's outlet event(s); record the lineage; return it."""
        self.record_lineage(inputs=spark_source_datasets(self._lineage_source()), outputs=[lance_dataset(
            summary["uri"], summary["version"], summary["read_version"], storage_options=self.hook.storage_options)])
        return emit_dataset_event(self.outlets, context["outlet_events"], summary)

    def on_kill(self) -> None:
        """Cancel the running Spark job (nothing is committed)."""
        if self._spark_job is not None:
            self._spark_job.kill()


__all__ = [
    "LanceSparkJobError",
    "LanceSparkWriteOperator",
    "LanceStagedResultError",
    "SparkSubmitNotFoundError",
    "default_idempotency_key",
]
