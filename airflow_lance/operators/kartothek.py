"""``KartothekToLanceOperator``: import one table of a Kartothek dataset as a Lance dataset.

The worker validates the source (pyarrow reads the metadata and every payload file's
footer) and plans the import; the partitions are then read and written as fragments either
in the worker (``execution="local"``, :func:`airflow_lance.core.import_kartothek`) or in
parallel on Spark executors (``execution="spark"``: the Lance code is shipped to them as for
the Spark write operator, one Spark task per group of partitions), and the worker commits
everything in one atomic commit. The import is idempotent: a re-run (or a retry after the
commit landed) of the same source state writes nothing and returns the version that holds
it; a retry after a Spark job that finished but whose result was not committed commits that
staged result without running Spark again (when every file it wrote is still there). A broken
source (missing files, malformed metadata) fails the task with the typed error listing every
problem, before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException, BaseOperator, mask_secret

import airflow_lance.core as lance
from airflow_lance.assets.lance import emit_dataset_event, with_dataset_outlet
from airflow_lance.connection import DEFAULT_CONN_ID
from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators._lineage import LanceLineageMixin, file_dataset, lance_dataset
from airflow_lance.operators._spark_submit import LanceSparkJobError, SparkJobRunner, run_task_job, spark_hook_kwargs
from airflow_lance.operators.spark_write import default_idempotency_key
from airflow_lance.spark.spec import MAX_BYTES_PER_FILE, MAX_ROWS_PER_FILE, staging_location
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec, split_evenly

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

MODES = ("create", "overwrite")
PARTITION_COLUMNS = ("restore", "drop")
EXECUTIONS = ("local", "spark")


class KartothekImportError(AirflowFailException):
    """The import cannot succeed by retrying: the source is invalid, missing or unsupported, the
    target exists (mode ``create``), or the verification found differences (the commit stays)."""


def _written_fragments(result: Any) -> tuple[lance.FragmentMetadata, ...]:
    """The fragments one Spark task of an import wrote (its ``PartitionsWritten`` JSON)."""
    return lance.PartitionsWritten.from_json(result).fragments


def _check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, not {value!r}")


class KartothekToLanceOperator(LanceLineageMixin, BaseOperator):
    """Import one table of a Kartothek dataset as a Lance dataset, in one idempotent commit.

    :param store_uri: the Kartothek storage location holding the dataset's
        ``<uuid>.by-dataset-metadata.*`` file (a local path or an fsspec URL). (templated)
    :param dataset_uuid: the Kartothek dataset's uuid. (templated)
    :param table: the Kartothek table to import (each table is its own Lance dataset). (templated)
    :param target: the Lance dataset: a URI, a local path, a ``lance+`` asset URI, or a name
        resolved below the Lance connection's dataset root. (templated)
    :param mode: ``create`` (the target must not exist) or ``overwrite`` (a new version
        replacing what the target holds). (templated)
    :param partition_columns: ``restore`` rebuilds the partition columns from the paths with
        the table schema's types; ``drop`` leaves them out. (templated)
    :param max_rows_per_file: rows per data file (each partition becomes one or more fragments).
    :param max_bytes_per_file: bytes per data file.
    :param verify: after the import, compare row counts and column checksums per partition
        value between source and target; a difference fails the task (the commit stays).
    :param lance_conn_id: the ``lance`` connection (dataset root and storage options of the target).
    :param source_storage_options: fsspec storage options of the source. Not templated and
        never logged: its values are registered with the secrets masker.
    :param execution: where the partitions are read and written: ``local`` (the worker) or
        ``spark`` (executors, through spark-submit; planning, validation and the commit stay
        in the worker). (templated)
    :param num_partitions: Spark tasks to spread the Kartothek partitions over (default: one
        per Kartothek partition).
    :param spark_conn_id: the ``spark`` connection (``execution="spark"``).
    :param conf: Spark configuration (``execution="spark"``). (templated)
    :param spark_binary: ``spark-submit`` by default (``execution="spark"``).
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments (``executor_memory``,
        ``num_executors``, ``deploy_mode``, ``packages``, ...).
    :param spark_log_level: Spark's log level (``spark.log.level``, unless ``conf`` sets it):
        ``WARN`` by default, ``INFO`` or ``DEBUG`` to see Spark's progress.
    :param python_env_archive: a packed Python environment for the executors, as
        ``LanceSparkWriteOperator``'s (README: Running on a cluster).

    Returns ``{"uri", "dataset_uuid", "table", "mode", "version", "partitions",
    "empty_partitions", "rows", "fragments", "bytes", "already_imported", "partition_keys",
    "secondary_indices", "verification", "execution"}``; ``already_imported`` is true when the task found
    this import already committed and wrote nothing. A target given by a static URI or path is
    added to ``outlets``; the event of each outlet naming the target carries that dict as its
    extra. For a target named relative to the connection's root, add an ``AssetAlias`` to
    ``outlets``: the operator adds the dataset's asset event (with that extra) to it.
    """

    template_fields: Sequence[str] = (
        "store_uri", "dataset_uuid", "table", "target", "mode", "partition_columns", "execution", "conf",
    )
    ui_color = "#e8e4f0"

    def __init__(
        self,
        *,
        store_uri: str,
        dataset_uuid: str,
        target: str,
        table: str = "table",
        mode: str = "create",
        partition_columns: str = "restore",
        max_rows_per_file: int = MAX_ROWS_PER_FILE,
        max_bytes_per_file: int = MAX_BYTES_PER_FILE,
        verify: bool = False,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        source_storage_options: Mapping[str, str] | None = None,
        execution: str = "local",
        num_partitions: int | None = None,
        spark_conn_id: str = "spark_default",
        conf: Mapping[str, Any] | None = None,
        spark_binary: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        spark_log_level: str = "WARN",
        python_env_archive: str | None = None,
        **kwargs: Any,
    ) -> None:
        with_dataset_outlet(target, kwargs)
        super().__init__(**kwargs)
        self.store_uri = store_uri
        self.dataset_uuid = dataset_uuid
        self.table = table
        self.target = target
        self.mode = mode
        self.partition_columns = partition_columns
        self.max_rows_per_file = max_rows_per_file
        self.max_bytes_per_file = max_bytes_per_file
        self.verify = verify
        self.lance_conn_id = lance_conn_id
        self.source_storage_options = dict(source_storage_options or {})
        self.execution = execution
        self.num_partitions = num_partitions
        self.spark_conn_id = spark_conn_id
        self.conf = dict(conf or {})
        self.spark_binary = spark_binary
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.spark_log_level = spark_log_level
        self.python_env_archive = python_env_archive
        self._spark_job: SparkJobRunner | None = None
        if num_partitions is not None and (isinstance(num_partitions, bool) or not isinstance(num_partitions, int)
                                           or num_partitions <= 0):
            raise ValueError(f"num_partitions must be a positive integer, not {num_partitions!r}")
        if "{{" not in str(execution):
            _check_choice("execution", execution, EXECUTIONS)
        if "{{" not in str(mode):
            _check_choice("mode", mode, MODES)
        if "{{" not in str(partition_columns):
            _check_choice("partition_columns", partition_columns, PARTITION_COLUMNS)

    @cached_property
    def hook(self) -> LanceHook:
        """The Lance hook of the target (created on first use, never at DAG parse time)."""
        return LanceHook(self.lance_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        _check_choice("mode", self.mode, MODES)
        _check_choice("partition_columns", self.partition_columns, PARTITION_COLUMNS)
        _check_choice("execution", self.execution, EXECUTIONS)
        for value in self.source_storage_options.values():
            mask_secret(value)
        start = time.monotonic()
        uri = self.hook.check_writable(self.target)  # unsupported stores fail before anything runs
        self.log.info("Importing table %r of Kartothek dataset %r in %s into %s (mode %s, partition columns %s, "
                      "execution %s)", self.table, self.dataset_uuid, self.store_uri, uri, self.mode,
                      self.partition_columns, self.execution)
        try:
            result = self._import_on_spark(uri, context) if self.execution == "spark" else self._import_here(uri)
        except (lance.KartothekError, lance.DatasetAlreadyExistsError, lance.InvalidInputError,
                lance.UnsupportedFeatureError) as exc:
            outcome = ("was committed, but its verification found differences" if hasattr(exc, "differences")
                       else "failed; nothing was committed")
            raise KartothekImportError(
                f"Kartothek import of table {self.table!r} of dataset {self.dataset_uuid!r} from {self.store_uri} "
                f"into {uri} {outcome}: {type(exc).__name__}: {exc}"
            ) from exc
        summary = self._summary(json.loads(json.dumps(result.to_dict())), uri)  # tuples as lists: plain JSON
        if summary["already_imported"]:
            self.log.info("This import already landed as version %d of %s; nothing was written",
                          summary["version"], uri)
        else:
            self.log.info("Imported %d partitions (%d empty): %d rows in %d fragments, %d bytes, as version %d "
                          "of %s in %.1f s", summary["partitions"], summary["empty_partitions"], summary["rows"],
                          summary["fragments"], summary["bytes"], summary["version"], uri, time.monotonic() - start)
        for index in summary["secondary_indices"]:
            self.log.info("Kartothek secondary index (not converted): %s", index)
        return self._finish(context, summary)

    def _arguments(self, uri: str) -> dict[str, Any]:
        """Arguments of the core's import functions (``import_kartothek``, ``plan_kartothek_import``)."""
        return {
            "store_uri": self.store_uri,
            "dataset_uuid": self.dataset_uuid,
            "table": self.table,
            "target_uri": uri,
            "mode": self.mode,
            "partition_columns": self.partition_columns,
            "max_rows_per_file": self.max_rows_per_file,
            "max_bytes_per_file": self.max_bytes_per_file,
            "storage_options": self.source_storage_options or None,
            "target_storage_options": self.hook.storage_options,
        }

    def _import_here(self, uri: str) -> lance.KartothekImportResult:
        return lance.import_kartothek(**self._arguments(uri), verify=self.verify)

    def _plan(self, uri: str) -> lance.KartothekImportPlan | lance.KartothekImportResult:
        return lance.plan_kartothek_import(**self._arguments(uri))

    def _import_on_spark(self, uri: str, context: Context) -> lance.KartothekImportResult:
        """Plan here, write the partitions on Spark executors, commit here (then verify)."""
        planned = self._plan(uri)
        if isinstance(planned, lance.KartothekImportPlan):
            written, staged = self._write_on_spark(planned, context)
            result = self._plan(uri) if written is None else lance.commit_kartothek_import(planned, written)
            if staged is not None:  # committed (or found committed): the staged result has served
                TaskJobResult.discard(*staged, self.hook.storage_options)
            if isinstance(result, lance.KartothekImportPlan):  # the job found it landed; it vanished since
                raise LanceSparkJobError(f"the Kartothek import into {uri} was reported committed but is not")
        else:
            result = planned
        if self.verify:
            report = lance.verify_kartothek_import(
                self.store_uri, self.dataset_uuid, result.target_uri, self.table, version=result.version,
                storage_options=self.source_storage_options or None, target_storage_options=self.hook.storage_options,
            )
            result = dataclasses.replace(result, verification=report)
        return result

    def _write_on_spark(self, plan: lance.KartothekImportPlan, context: Context
                        ) -> tuple[lance.PartitionsWritten | None, tuple[str, str] | None]:
        """The partitions written by a Spark job (None: the job found the import already landed), and
        where the job's result is staged (None when there was nothing to write): the caller removes
        it after the commit. A result an earlier try of this task staged for the same import (same
        source state and partition groups; every file it wrote still there) is reused instead of
        running the job again."""
        labels = [partition.label for partition in plan.source.partitions]
        if not labels:
            return lance.PartitionsWritten(fragments=(), partitions=0, empty_partitions=0, rows=0,
                                           bytes_written=0), None
        storage_options = self.hook.storage_options
        staging_root, staging_name = staging_location(plan.target_uri,
                                                      f"kartothek/{default_idempotency_key(context)}")
        spec = TaskJobSpec(
            kind="kartothek_import",
            uri=plan.target_uri,
            tasks=tuple(tuple(group) for group in split_evenly(labels, self.num_partitions)),
            staging_root=staging_root,
            staging_name=staging_name,
            storage_options=storage_options,
            params={"store_uri": str(self.store_uri), "dataset_uuid": self.dataset_uuid, "table": self.table,
                    "mode": self.mode, "partition_columns": self.partition_columns,
                    "max_rows_per_file": self.max_rows_per_file, "max_bytes_per_file": self.max_bytes_per_file,
                    "idempotency_key": plan.idempotency_key},
            source_storage_options=self.source_storage_options,
        )
        self.log.info("Writing %d partitions in %d Spark tasks", len(labels), len(spec.tasks))
        self._spark_job = SparkJobRunner(spark_hook_kwargs(
            spark_conn_id=self.spark_conn_id, conf=self.conf, name=f"airflow-lance-{self.task_id}",
            spark_binary=self.spark_binary, spark_submit_kwargs=self.spark_submit_kwargs,
            spark_log_level=self.spark_log_level, python_env_archive=self.python_env_archive,
        ))
        staged = run_task_job(self._spark_job, spec, f"the Spark Kartothek import job for {plan.target_uri}",
                              _written_fragments)
        if staged.info.get("already_imported_version") is not None:
            return None, (staging_root, staging_name)
        written = lance.PartitionsWritten.combine(lance.PartitionsWritten.from_json(r) for r in staged.results)
        if written.partitions != len(labels):
            raise LanceSparkJobError(f"the Spark job wrote {written.partitions} of {len(labels)} partitions; "
                                     "nothing was committed")
        self.log.info("Spark wrote %d rows in %d fragments (%d bytes) in %.1f s", written.rows,
                      len(written.fragments), written.bytes_written, staged.elapsed_seconds)
        return written, (staging_root, staging_name)

    def on_kill(self) -> None:
        """Cancel the running Spark job (``execution="spark"``); nothing is committed."""
        if self._spark_job is not None:
            self._spark_job.kill()

    def _summary(self, result: dict[str, Any], uri: str) -> dict[str, Any]:
        return {
            "uri": uri,
            "dataset_uuid": result["dataset_uuid"],
            "table": result["table"],
            "mode": self.mode,
            "version": result["version"],
            "partitions": result["partitions"],
            "empty_partitions": result["empty_partitions"],
            "rows": result["rows"],
            "fragments": result["fragments"],
            "bytes": result["bytes_written"],
            "already_imported": result["already_imported"],
            "partition_keys": result["partition_keys"],
            "secondary_indices": result["secondary_indices"],
            "verification": result["verification"],
            "execution": self.execution,
        }

    def _finish(self, context: Context, summary: dict[str, Any]) -> dict[str, Any]:
        """Set ``summary`` as the extra of this dataset's outlet event(s); record the lineage (input: the
        Kartothek table ``<store>/<dataset uuid>/<table>``, output: the Lance dataset); return it."""
        table = f"{str(self.store_uri).rstrip('/')}/{self.dataset_uuid}/{self.table}"
        self.record_lineage(inputs=[file_dataset(table, self.source_storage_options)], outputs=[lance_dataset(
            summary["uri"], summary["version"], storage_options=self.hook.storage_options)])
        return emit_dataset_event(self.outlets, context["outlet_events"], summary)


__all__ = ["KartothekImportError", "KartothekToLanceOperator"]
