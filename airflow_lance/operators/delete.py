"""``LanceDeleteOperator``: delete the rows matching a SQL predicate."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import airflow_lance.core as lance
from airflow_lance.operators._dml import LanceDmlOperator, LanceLocalOrSparkOperator, Planned, union_of_parts
from airflow_lance.operators._dml_spark import run_fragment_job

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class LanceDeleteOperator(LanceLocalOrSparkOperator):
    """Pylance's ``ds.delete(predicate)`` as one idempotent ``Delete`` commit.

    Deletion vectors mark the matching rows (a fragment whose every row goes is dropped), as in
    Lance. ``mode="local"`` evaluates the predicate in the worker; ``mode="spark"`` on Spark
    executors, one Spark task per fragment (or per group of fragments, ``num_tasks``), each
    writing its fragments' deletion vectors; the worker commits them as one version, or nothing.
    A predicate matching no row commits a version too, as pylance's ``delete`` does.

    A bad predicate fails the task before anything is written; a retry after the commit landed
    commits nothing; a concurrent append is kept, concurrent deletes of other rows are merged,
    and a concurrent delete of the same rows makes it plan again (``conflict_retries`` times).

    :param uri: the dataset. (templated)
    :param predicate: SQL predicate, e.g. ``"ts < timestamp '2024-01-01 00:00:00'"``. (templated)
    :param mode: ``local`` or ``spark``. (templated)
    :param num_tasks: Spark tasks (mode ``spark``; default one per fragment).
    :param conflict_retries, idempotency_key, commit_message, staging_uri, lance_conn_id,
        spark_conn_id, conf, py_files, spark_binary, spark_submit_kwargs, spark_log_level,
        python_env_archive:
        as for :class:`~airflow_lance.operators.update.LanceUpdateOperator`.

    Returns ``{"uri", "version", "read_version", "num_deleted_rows", "mode"}`` and sets it as the
    extra of the dataset's asset event.
    """

    template_fields: Sequence[str] = (*LanceDmlOperator.template_fields, "predicate", "mode")
    template_fields_renderers: ClassVar[dict[str, str]] = {"predicate": "sql", "conf": "json"}
    count_names = ("num_deleted_rows",)
    what = "delete"

    def __init__(self, *, uri: str, predicate: str, **kwargs: Any) -> None:
        super().__init__(uri=uri, **kwargs)
        self.predicate = predicate

    def check(self) -> None:
        super().check()
        if not isinstance(self.predicate, str) or not self.predicate.strip():
            raise lance.InvalidInputError(f"predicate must be a SQL string, not {self.predicate!r}")

    def describe(self) -> str:
        return f"where {self.predicate} ({self.mode})"

    def plan(self, ds: lance.LanceDataset, key: str, context: Context) -> Planned:
        if self.mode == "local" or not ds.get_fragments():
            transaction, count = lance.delete_uncommitted(ds, self.predicate)
            return Planned(transaction.operation, {"num_deleted_rows": count})
        lance.delete_uncommitted(ds, self.predicate, fragment_ids=[])  # a bad predicate fails before Spark runs
        results, staged = run_fragment_job(
            self.spark_runner(), ds, kind="delete", key=key, params={"predicate": self.predicate},
            storage_options=self.hook.storage_options, num_tasks=self.num_tasks, staging_uri=self.staging_uri)
        operation, count = union_of_parts(results, lambda new, updated, removed: lance.LanceOperation.Delete(
            updated, removed, self.predicate))
        return Planned(operation, {"num_deleted_rows": count}, staged=staged)
