"""The maintenance task group: stats -> compact if needed -> optimize indices (opt-in) -> cleanup.

::

    with DAG("lance_maintenance", schedule="@daily", ...):
        lance_maintenance_task_group(uri="events.lance", compaction_options={"target_rows_per_fragment": 100_000},
                                     cleanup_older_than=dt.timedelta(days=7))

Inside the group (ids prefixed with ``group_id``):

* ``stats`` (:class:`~airflow_lance.operators.maintenance.LanceDatasetStatsOperator`);
* ``decide``: a branch that runs ``compact`` only when the stats say compaction has work
  (``needs_compaction``: the compaction plan with the same options has tasks) and, when
  ``min_small_fragments`` / ``min_deleted_row_ratio`` are given, at least one of those
  thresholds is reached; otherwise it goes straight to ``cleanup``;
* ``compact`` (:class:`~airflow_lance.operators.maintenance.LanceCompactFilesOperator`);
* ``optimize_indices`` (:class:`~airflow_lance.operators.maintenance.LanceOptimizeIndicesOperator`),
  only when ``min_unindexed_rows`` is given: after compaction (or a skipped one), folds new
  fragments into the indices when one misses more than ``min_unindexed_rows`` rows;
* ``cleanup`` (:class:`~airflow_lance.operators.maintenance.LanceCleanupOldVersionsOperator`),
  which runs after compaction or after a skipped one (trigger rule
  ``none_failed_min_one_success``), never after a failed one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.providers.common.compat.sdk import TaskGroup
from airflow.providers.standard.operators.python import BranchPythonOperator

from airflow_lance.connection import DEFAULT_CONN_ID
from airflow_lance.operators.maintenance import (
    LanceCleanupOldVersionsOperator,
    LanceCompactFilesOperator,
    LanceDatasetStatsOperator,
    LanceOptimizeIndicesOperator,
)


def should_compact(
    stats: Mapping[str, Any], *, min_small_fragments: int | None = None, min_deleted_row_ratio: float | None = None
) -> bool:
    """Whether stats of :class:`LanceDatasetStatsOperator` make compaction worth running."""
    if not stats or not stats.get("needs_compaction"):
        return False
    if min_small_fragments is None and min_deleted_row_ratio is None:
        return True
    return bool(
        (min_small_fragments is not None and stats["num_small_fragments"] >= min_small_fragments)
        or (min_deleted_row_ratio is not None and stats["deleted_row_ratio"] >= min_deleted_row_ratio)
    )


def lance_maintenance_task_group(
    *,
    uri: str,
    group_id: str = "lance_maintenance",
    lance_conn_id: str | None = DEFAULT_CONN_ID,
    compaction_options: Mapping[str, Any] | None = None,
    min_small_fragments: int | None = None,
    min_deleted_row_ratio: float | None = None,
    cleanup_older_than: dt.timedelta | float | str | None = None,
    retain_versions: int | str | None = None,
    delete_unverified: bool | str = False,
    error_if_tagged_old_versions: bool | str = True,
    dry_run: bool | str = False,
    outlets: Sequence[Any] | None = None,
    tooltip: str = "Lance maintenance: stats -> compact if needed -> cleanup",
    compaction_mode: str = "local",
    compaction_spark_kwargs: Mapping[str, Any] | None = None,
    min_unindexed_rows: int | str | None = None,
    num_indices_to_merge: int | str | None = None,
) -> TaskGroup:
    """Build the maintenance task group in the current DAG (see the module docstring).

    :param uri: the dataset (URI, local path, ``lance+`` asset URI or name below the
        connection's root). (templated)
    :param group_id: the task group id.
    :param lance_conn_id: the ``lance`` connection.
    :param compaction_options: pylance ``compact_files`` options, for the stats and the
        compaction. (templated)
    :param min_small_fragments: compact only with at least this many small fragments...
    :param min_deleted_row_ratio: ... or at least this fraction of deleted rows (both None:
        whenever the compaction plan has tasks).
    :param cleanup_older_than: ``older_than`` of the cleanup (timedelta or days). (templated)
        Keep it at least as long as the retry window of the writers that can retry while the
        cleanup runs: a retried write finds its landed commit only while that version exists.
        The cleanup task logs a warning when it is shorter (see
        :class:`~airflow_lance.operators.maintenance.LanceCleanupOldVersionsOperator`).
    :param retain_versions: ``retain_versions`` of the cleanup. (templated) Alone (without
        ``cleanup_older_than``) it removes versions of any age, however recent.
    :param delete_unverified: ``delete_unverified`` of the cleanup. (templated)
    :param error_if_tagged_old_versions: ``error_if_tagged_old_versions`` of the cleanup. (templated)
    :param dry_run: run the cleanup as a dry run. (templated)
    :param outlets: extra outlets of the compaction task (e.g. an ``AssetAlias``).
    :param compaction_mode: ``local`` or ``spark`` (rewrite tasks on Spark executors). (templated)
    :param compaction_spark_kwargs: Spark arguments of the compaction task (``spark_conn_id``,
        ``conf``, ``spark_binary``, ``spark_submit_kwargs``).
    :param min_unindexed_rows: add the ``optimize_indices`` step, optimizing when an index misses
        more than this many rows (None: no index step). (templated)
    :param num_indices_to_merge: pylance's ``num_indices_to_merge`` of that step (None: 1, vector indices 0).
        (templated)
    """
    with TaskGroup(group_id=group_id, tooltip=tooltip) as group:
        stats = LanceDatasetStatsOperator(
            task_id="stats", uri=uri, compaction_options=compaction_options, lance_conn_id=lance_conn_id
        )
        compact = LanceCompactFilesOperator(
            task_id="compact",
            uri=uri,
            compaction_options=compaction_options,
            lance_conn_id=lance_conn_id,
            outlets=list(outlets or []),
            mode=compaction_mode,
            **dict(compaction_spark_kwargs or {}),
        )
        cleanup = LanceCleanupOldVersionsOperator(
            task_id="cleanup",
            uri=uri,
            older_than=cleanup_older_than,
            retain_versions=retain_versions,
            delete_unverified=delete_unverified,
            error_if_tagged_old_versions=error_if_tagged_old_versions,
            dry_run=dry_run,
            lance_conn_id=lance_conn_id,
            trigger_rule="none_failed_min_one_success",
        )
        after_compaction = cleanup
        if min_unindexed_rows is not None:
            after_compaction = LanceOptimizeIndicesOperator(
                task_id="optimize_indices",
                uri=uri,
                min_unindexed_rows=min_unindexed_rows,
                num_indices_to_merge=num_indices_to_merge,
                lance_conn_id=lance_conn_id,
                trigger_rule="none_failed_min_one_success",
            )
        stats_id, compact_id, next_id = stats.task_id, compact.task_id, after_compaction.task_id

        def _decide(ti: Any) -> str:
            result = ti.xcom_pull(task_ids=stats_id)
            if should_compact(result, min_small_fragments=min_small_fragments,
                              min_deleted_row_ratio=min_deleted_row_ratio):
                return compact_id
            return next_id

        decide = BranchPythonOperator(task_id="decide", python_callable=_decide)
        stats >> decide >> [compact, after_compaction]
        compact >> after_compaction
        if after_compaction is not cleanup:
            after_compaction >> cleanup
    return group
