"""What the row-changing operators share (merge insert, update, delete): one idempotent commit.

1. If this task instance's commit already landed (a retry after a failure that happened after
   the commit), return its counts: nothing is run or committed again. The commit carries the
   idempotency key (``dag_id/run_id/task_id/map_index`` unless ``idempotency_key`` is given)
   and the counts as transaction properties; a receipt in the staging area covers a version
   that a cleanup removed since (as :class:`~airflow_lance.operators.spark_write.LanceSparkWriteOperator`).
2. Otherwise plan on the latest version (the subclass writes the new rows and deletion vectors,
   in this process or on Spark; nothing is committed), and commit the one operation at that
   read version. The core rebases it over compatible concurrent commits (appends, deletes of
   other rows); a retryable conflict (a concurrent writer changed the same rows) plans again on
   the latest version, at most ``conflict_retries`` times; an incompatible one fails the task.
   Files written for a plan that is never committed are left for version cleanup.
3. Return the summary (counts under pylance's names) and set it as the extra of the
   dataset's asset event.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import BaseOperator

import airflow_lance.core as lance
from airflow_lance.assets.lance import emit_dataset_event, with_dataset_outlet
from airflow_lance.connection import DEFAULT_CONN_ID
from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators._lineage import LanceLineageMixin, LineageDataset, lance_dataset
from airflow_lance.operators._spark_submit import SparkJobRunner, spark_hook_kwargs
from airflow_lance.operators.spark_write import LanceSparkWriteOperator, default_idempotency_key
from airflow_lance.spark.spec import StagedResult, WriteReceipt, receipt_location

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: transaction property prefix of the counts a commit records
COUNT_PROPERTY = "airflow."
DML_MODES = ("local", "spark")


@dataclasses.dataclass
class Planned:
    """A planned (written, uncommitted) change: the operation, its counts, and anything staged
    for it (``(root, name)`` removed after the commit)."""

    operation: lance.LanceOperation.BaseOperation
    counts: dict[str, int]
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    staged: tuple[str, str] | None = None


class LanceDmlOperator(LanceLineageMixin, BaseOperator):
    """Base of the operators that change rows with one idempotent ``Update`` / ``Delete`` commit."""

    template_fields: Sequence[str] = ("uri", "conf", "idempotency_key", "commit_message", "staging_uri")
    #: the counts a commit records, pylance's names
    count_names: ClassVar[tuple[str, ...]] = ()
    #: what the log calls the change
    what: ClassVar[str] = "change"

    def __init__(
        self,
        *,
        uri: str,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        spark_conn_id: str = "spark_default",
        conf: Mapping[str, Any] | None = None,
        py_files: str | None = None,
        spark_binary: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        spark_log_level: str = "WARN",
        python_env_archive: str | None = None,
        idempotency_key: str | None = None,
        staging_uri: str | None = None,
        commit_message: str | None = None,
        conflict_retries: int = 3,
        **kwargs: Any,
    ) -> None:
        with_dataset_outlet(uri, kwargs)
        super().__init__(**kwargs)
        self.uri = uri
        self.lance_conn_id = lance_conn_id
        self.spark_conn_id = spark_conn_id
        self.conf = dict(conf or {})
        self.py_files = py_files
        self.spark_binary = spark_binary
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.spark_log_level = spark_log_level
        self.python_env_archive = python_env_archive
        self.idempotency_key = idempotency_key
        self.staging_uri = staging_uri
        self.commit_message = commit_message
        if isinstance(conflict_retries, bool) or not isinstance(conflict_retries, int) or conflict_retries < 0:
            raise ValueError(f"conflict_retries must be a non-negative integer, not {conflict_retries!r}")
        self.conflict_retries = conflict_retries
        self._spark_job: SparkJobRunner | None = None

    @cached_property
    def hook(self) -> LanceHook:
        """The Lance hook (created on first use, never at DAG parse time)."""
        return LanceHook(self.lance_conn_id)

    # -- to implement ------------------------------------------------------------------------
    def check(self) -> None:
        """Validate the operator's (rendered) fields before anything runs."""

    def plan(self, ds: lance.LanceDataset, key: str, context: Context) -> Planned:
        """Write the change planned on ``ds`` (uncommitted); return it."""
        raise NotImplementedError

    def describe(self) -> str:
        """A log line's description of the change (no option values)."""
        return self.what

    def details(self) -> dict[str, Any]:
        """Entries of the summary besides the version and the counts (also of a landed commit)."""
        return {}

    # -- execution -------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        start = time.monotonic()
        self.check()
        uri = self.hook.check_writable(self.uri)
        key = self.idempotency_key or default_idempotency_key(context)
        landed = self._landed(uri, key, context)
        if landed is not None:
            return self._finish(context, landed)
        for attempt in range(self.conflict_retries + 1):
            ds = self.hook.get_dataset(uri)
            self.log.info("Lance %s of %s at version %d: %s", self.what, uri, ds.version, self.describe())
            plan_start = time.monotonic()
            planned = self.plan(ds, key, context)
            plan_seconds = time.monotonic() - plan_start
            self.log.info("Planned in %.2f s (nothing committed yet): %s", plan_seconds, self._counts_text(planned.counts))
            try:
                committed = self.hook.commit(
                    uri, planned.operation, ds.version, idempotency_key=key,
                    transaction_properties={**self._transaction_properties(context),
                                            **{COUNT_PROPERTY + k: str(v) for k, v in planned.counts.items()}},
                    commit_message=self.commit_message or f"airflow-lance {self.what} by {context['ti'].dag_id}."
                    f"{context['ti'].task_id}",
                )
            except lance.IncompatibleTransactionError:
                self._discard_staged(planned)
                raise
            except lance.CommitConflictError as exc:
                self._discard_staged(planned)
                if attempt == self.conflict_retries:
                    raise
                self.log.warning("The %s planned on version %d conflicts with a concurrent commit (%s); planning "
                                 "again on the latest version (retry %d of %d)", self.what, ds.version, exc,
                                 attempt + 1, self.conflict_retries)
                continue
            summary = {"uri": uri, "version": committed.version, "read_version": ds.version,
                       **planned.counts, **self.details(), **planned.details}
            self._leave_receipt(uri, key, summary)
            self._discard_staged(planned)
            self.log.info("Lance %s of %s done: version %d (read version %d), %s; plan %.2f s, total %.2f s",
                          self.what, uri, committed.version, ds.version, self._counts_text(planned.counts),
                          plan_seconds, time.monotonic() - start)
            return self._finish(context, summary)
        raise AssertionError("unreachable")

    @staticmethod
    def _counts_text(counts: Mapping[str, int]) -> str:
        return ", ".join(f"{name} {value:,}" for name, value in counts.items())

    def _landed(self, uri: str, key: str, context: Context) -> dict[str, Any] | None:
        """The summary of this change if its commit already landed (retry, or a reused key)."""
        if context["ti"].try_number <= 1 and not self.idempotency_key:
            return None
        landed = self.hook.find_idempotent_commit(uri, key)
        if landed is not None:
            txn = landed.read_transaction()
            props = txn.transaction_properties if txn is not None else {}
            counts = {name: int(props.get(COUNT_PROPERTY + name, 0)) for name in self.count_names}
            self.log.info("This %s already committed version %d of %s; nothing to do", self.what, landed.version, uri)
            return {"uri": uri, "version": landed.version,
                    "read_version": txn.read_version if txn is not None else landed.version - 1, **counts,
                    **self.details()}
        receipt = WriteReceipt.load(*receipt_location(uri, key, self.staging_uri), self.hook.storage_options)
        if receipt is not None and receipt.idempotency_key == key:
            self.log.info("This %s already committed version %s of %s (removed by a version cleanup since, its "
                          "receipt remains); nothing to do", self.what, receipt.summary.get("version"), uri)
            return dict(receipt.summary)
        return None

    def _leave_receipt(self, uri: str, key: str, summary: Mapping[str, Any]) -> None:
        try:
            WriteReceipt(key, summary).save(*receipt_location(uri, key, self.staging_uri), self.hook.storage_options)
        except (lance.LanceError, OSError) as exc:
            self.log.warning("Committed, but could not leave the commit receipt (%s): a retry after a version "
                             "cleanup may not recognise this commit", exc)

    def _discard_staged(self, planned: Planned) -> None:
        if planned.staged is not None:
            StagedResult.discard(*planned.staged, self.hook.storage_options)

    _transaction_properties = staticmethod(LanceSparkWriteOperator._transaction_properties)

    def lineage_sources(self) -> list[LineageDataset]:
        """Datasets read besides the target (a merge insert's source)."""
        return []

    def _finish(self, context: Context, summary: dict[str, Any]) -> dict[str, Any]:
        options = self.hook.storage_options
        self.record_lineage(
            inputs=[lance_dataset(summary["uri"], summary["read_version"], storage_options=options),
                    *self.lineage_sources()],
            outputs=[lance_dataset(summary["uri"], summary["version"], summary["read_version"],
                                   storage_options=options)])
        return emit_dataset_event(self.outlets, context["outlet_events"], summary)

    # -- Spark -------------------------------------------------------------------------------
    def spark_runner(self) -> SparkJobRunner:
        """A runner for this operator's Spark job (killed by ``on_kill``)."""
        self._spark_job = SparkJobRunner(spark_hook_kwargs(
            spark_conn_id=self.spark_conn_id, conf=self.conf, name=f"airflow-lance-{self.task_id}",
            spark_binary=self.spark_binary, spark_submit_kwargs=self.spark_submit_kwargs,
            spark_log_level=self.spark_log_level, py_files=self.py_files,
            python_env_archive=self.python_env_archive,
        ))
        return self._spark_job

    def on_kill(self) -> None:
        """Cancel the running Spark job, if any (nothing is committed)."""
        if self._spark_job is not None:
            self._spark_job.kill()


class LanceLocalOrSparkOperator(LanceDmlOperator):
    """Base of the row-changing operators that plan in the worker (``mode="local"``) or on Spark
    (``mode="spark"``: one Spark task per fragment, or per group of ``num_tasks``)."""

    def __init__(self, *, mode: str = "local", num_tasks: int | None = None, conflict_retries: int = 10,
                 **kwargs: Any) -> None:
        super().__init__(conflict_retries=conflict_retries, **kwargs)
        self.mode = mode
        self.num_tasks = num_tasks
        if "{{" not in str(mode):
            check_mode(mode)

    def check(self) -> None:
        check_mode(self.mode)

    def details(self) -> dict[str, Any]:
        return {"mode": self.mode}


def check_mode(mode: str) -> str:
    """``mode`` if it is ``local`` or ``spark``; ValueError otherwise."""
    if mode not in DML_MODES:
        raise ValueError(f"mode must be one of {DML_MODES}, not {mode!r}")
    return mode


def union_of_parts(results: Sequence[Mapping[str, Any]],
                   make: Callable[[list, list, list], lance.LanceOperation.BaseOperation]) -> tuple[Any, int]:
    """The operation made of the parts of a Spark update / delete job (disjoint fragments each):
    ``make(new fragments, updated fragments, removed fragment ids)``, and the rows counted."""
    new = [lance.FragmentMetadata.from_json(f) for r in results for f in r["new_fragments"]]
    updated = [lance.FragmentMetadata.from_json(f) for r in results for f in r["updated_fragments"]]
    removed = [int(i) for r in results for i in r["removed_fragment_ids"]]
    return make(new, updated, removed), sum(int(r["num_rows"]) for r in results)
