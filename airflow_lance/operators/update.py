"""``LanceUpdateOperator``: set columns by SQL expressions on the rows matching a predicate."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import airflow_lance.core as lance
from airflow_lance.operators._dml import LanceDmlOperator, LanceLocalOrSparkOperator, Planned, union_of_parts
from airflow_lance.operators._dml_spark import run_fragment_job

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class LanceUpdateOperator(LanceLocalOrSparkOperator):
    """Pylance's ``ds.update(updates, where)`` as one idempotent ``Update`` commit.

    The matching rows are rewritten into new fragments with the new values (on datasets with
    stable row ids they keep their row ids) and deletion vectors mark their old copies, as in
    Lance. ``mode="local"`` does it in the worker (small changes); ``mode="spark"`` on Spark
    executors, one Spark task per fragment (or per group of fragments, ``num_tasks``): each reads
    its fragments' matching rows, evaluates the SET expressions and writes the new rows and
    deletion vectors; the worker commits them all as one version, or nothing.

    A bad column name or expression fails the task before anything is written. The commit
    carries the task instance's idempotency key: a retry after the commit landed commits nothing
    and returns the landed counts. A concurrent append is kept; a concurrent change of the same
    rows makes the update plan again on the latest version (``conflict_retries`` times).

    :param uri: the dataset (URI, path, ``lance+`` asset URI or name below the connection's root). (templated)
    :param updates: ``{column: SQL expression}`` over the old row, e.g. ``{"price": "price * 1.1"}``. (templated)
    :param where: SQL predicate choosing the rows (all rows when None). (templated)
    :param mode: ``local`` or ``spark``. (templated)
    :param num_tasks: Spark tasks (mode ``spark``; default one per fragment).
    :param conflict_retries: plans again this many times after a retryable commit conflict.
    :param idempotency_key: override the key (default ``dag_id/run_id/task_id/map_index``). (templated)
    :param python_env_archive: a packed Python environment for the executors (mode ``spark``), as
        :class:`~airflow_lance.operators.spark_write.LanceSparkWriteOperator`'s.
    :param commit_message: stored as the version's commit message. (templated)
    :param staging_uri: directory of the staged Spark result and the commit receipt (default
        ``<dataset>/_airflow_staging``). (templated)
    :param lance_conn_id, spark_conn_id, conf, py_files, spark_binary, spark_submit_kwargs,
        spark_log_level: as for :class:`~airflow_lance.operators.spark_write.LanceSparkWriteOperator`.

    Returns ``{"uri", "version", "read_version", "num_rows_updated", "mode"}`` (pylance's
    ``update`` count) and sets it as the extra of the dataset's asset event.
    """

    template_fields: Sequence[str] = (*LanceDmlOperator.template_fields, "updates", "where", "mode")
    template_fields_renderers: ClassVar[dict[str, str]] = {"updates": "json", "where": "sql", "conf": "json"}
    count_names = ("num_rows_updated",)
    what = "update"

    def __init__(self, *, uri: str, updates: Mapping[str, str], where: str | None = None, **kwargs: Any) -> None:
        super().__init__(uri=uri, **kwargs)
        self.updates = dict(updates) if isinstance(updates, Mapping) else updates
        self.where = where

    def check(self) -> None:
        super().check()
        if not isinstance(self.updates, Mapping) or not self.updates:
            raise lance.InvalidInputError(f"updates must be a non-empty dict of column name to SQL expression, "
                                          f"not {self.updates!r}")

    def describe(self) -> str:
        where = f" where {self.where}" if self.where else " (all rows)"
        return f"set {', '.join(self.updates)}{where} ({self.mode})"

    def plan(self, ds: lance.LanceDataset, key: str, context: Context) -> Planned:
        if self.mode == "local" or not ds.get_fragments():
            transaction, count = lance.update_uncommitted(ds, self.updates, self.where)
            return Planned(transaction.operation, {"num_rows_updated": count})
        # validated (and the updated fields found) before Spark runs; nothing is written
        checked, _ = lance.update_uncommitted(ds, self.updates, self.where, fragment_ids=[])
        fields = list(checked.operation.fields_for_preserving_frag_bitmap)
        results, staged = run_fragment_job(
            self.spark_runner(), ds, kind="update", key=key, params={"updates": self.updates, "where": self.where},
            storage_options=self.hook.storage_options, num_tasks=self.num_tasks, staging_uri=self.staging_uri)
        operation, count = union_of_parts(results, lambda new, updated, removed: lance.LanceOperation.Update(
            removed_fragment_ids=removed, updated_fragments=updated, new_fragments=new,
            fields_for_preserving_frag_bitmap=fields))
        return Planned(operation, {"num_rows_updated": count}, staged=staged)
