"""``compact_files`` and the distributed ``Compaction.plan / CompactionTask.execute / Compaction.commit``.

::

    plan = Compaction.plan(uri, target_rows_per_fragment=100_000)     # on the driver
    results = [task.execute(uri) for task in plan.tasks]               # anywhere (picklable / JSON)
    metrics = Compaction.commit(uri, results)                          # on the driver

``compact_files`` does the three steps in one process. Either way a compaction
commits exactly one version, a Rewrite whose new fragments get their ids at
commit (no separate fragment-id reservation; see :mod:`.committer`), and
nothing when there is nothing to compact.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_lance.core.errors import CommitStateUnknownError, LanceError
from airflow_lance.core.optimize.committer import as_rewrite_result, commit_compaction
from airflow_lance.core.optimize.options import CompactionOptions
from airflow_lance.core.optimize.planner import CompactionPlan, plan_compaction
from airflow_lance.core.optimize.results import CompactionMetrics, RewriteResult
from airflow_lance.core.optimize.source import DatasetOrUri, open_source
from airflow_lance.core.optimize.task import delete_written, rewrite_task
from airflow_lance.core.write import MAX_BYTES_PER_FILE

log = logging.getLogger(__name__)


class Compaction:
    """pylance's ``lance.optimize.Compaction``: plan, (execute tasks), commit."""

    @staticmethod
    def plan(
        dataset_or_uri: DatasetOrUri,
        options: Mapping[str, Any] | CompactionOptions | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> CompactionPlan:
        """Plan against the given handle's version (or the latest version of a URI).

        Options come as a pylance-style dict and/or keyword arguments
        (``target_rows_per_fragment``, ``max_bytes_per_file``, ...).
        """
        store, source = open_source(dataset_or_uri, storage_options)
        return plan_compaction(store.uri, source, CompactionOptions.build(options, **kwargs))

    @staticmethod
    def commit(
        dataset_or_uri: DatasetOrUri,
        rewrites: Sequence[RewriteResult | Mapping[str, Any] | str],
        options: Mapping[str, Any] | CompactionOptions | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        skip_conflicting: bool = False,
    ) -> CompactionMetrics:
        """Commit finished tasks (results or their JSON) as one Rewrite with the plan's read version:
        one new version, ``metrics.version``.

        All or nothing by default, as pylance: a concurrent commit that changed a fragment of any
        task is a :class:`~airflow_lance.core.errors.CommitConflictError`. With ``skip_conflicting``
        the tasks it conflicts with are left out (their files deleted, counted in
        ``metrics.tasks_skipped_conflict``) and the rest committed; the error only when every
        task conflicts. ``options`` is accepted for pylance compatibility and only validated.
        """
        CompactionOptions.build(options)
        store, _ = open_source(dataset_or_uri, storage_options)
        return commit_compaction(store, rewrites, skip_conflicting=skip_conflicting)

    @staticmethod
    def discard(
        dataset_or_uri: DatasetOrUri,
        rewrites: Sequence[RewriteResult | Mapping[str, Any] | str],
        *,
        storage_options: Mapping[str, str] | None = None,
    ) -> int:
        """Delete the data files written by tasks whose results will not be committed (for
        example after :meth:`commit` failed with a conflict); returns how many were deleted.

        Only for results no version references: never after ``CommitStateUnknownError``.
        """
        store, _ = open_source(dataset_or_uri, storage_options)
        fragments = [f for item in rewrites for f in as_rewrite_result(item).new_fragments]
        delete_written(store, fragments)
        return sum(len(f.files) for f in fragments)

    @staticmethod
    def execute(
        dataset_or_uri: DatasetOrUri,
        options: Mapping[str, Any] | CompactionOptions | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> CompactionMetrics:
        """Plan, run every task here, and commit (what ``compact_files`` does)."""
        store, source = open_source(dataset_or_uri, storage_options)
        plan = plan_compaction(store.uri, source, CompactionOptions.build(options, **kwargs))
        if not plan.tasks:
            return CompactionMetrics(fragments_skipped_indexed=plan.fragments_skipped_indexed)
        results: list[RewriteResult] = []
        try:
            for task in plan.tasks:
                results.append(rewrite_task(store, source, task))
        except BaseException:
            delete_written(store, [f for r in results for f in r.new_fragments])
            raise
        try:
            metrics = commit_compaction(store, results)
        except CommitStateUnknownError:
            raise  # the version may reference the files: keep them
        except LanceError:  # nothing landed; the files are ours alone
            delete_written(store, [f for r in results for f in r.new_fragments])
            raise
        metrics.fragments_skipped_indexed = plan.fragments_skipped_indexed
        return metrics


def compact_files(
    dataset_or_uri: DatasetOrUri,
    *,
    target_rows_per_fragment: int = 1024 * 1024,
    max_bytes_per_file: int = MAX_BYTES_PER_FILE,
    materialize_deletions: bool = True,
    materialize_deletions_threshold: float = 0.1,
    max_source_fragments: int | None = None,
    max_source_rows: int | None = None,
    excluded_fragment_ids: Iterable[int] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> CompactionMetrics:
    """Merge small fragments and materialise deletions, keeping insertion order (pylance's defaults).

    One commit: a Rewrite planned on the handle's (or latest) version, whose new
    fragments get ids above ``max_fragment_id`` when it lands, so it creates exactly
    one version (``metrics.version``; pylance 14 first commits a separate
    ReserveFragments version, which would keep every pre-compaction file alive
    through ``cleanup_old_versions(retain_versions=2)``). Concurrent appends are
    compatible; a concurrent delete of a rewritten fragment makes it fail with
    :class:`~airflow_lance.core.errors.CommitConflictError` (retry it), and the
    files written for it are removed again. ``files_removed`` counts files the
    dataset no longer references; they leave storage with ``cleanup_old_versions``.
    """
    options = CompactionOptions(
        target_rows_per_fragment=target_rows_per_fragment,
        max_bytes_per_file=max_bytes_per_file,
        materialize_deletions=materialize_deletions,
        materialize_deletions_threshold=materialize_deletions_threshold,
        max_source_fragments=max_source_fragments,
        max_source_rows=max_source_rows,
        excluded_fragment_ids=tuple(excluded_fragment_ids) if excluded_fragment_ids is not None else (),
    )
    return Compaction.execute(dataset_or_uri, options, storage_options=storage_options)


class DatasetOptimizer:
    """``LanceDataset.optimize``: maintenance bound to one dataset handle (pylance's name)."""

    def __init__(self, dataset: DatasetOrUri) -> None:
        self._dataset = dataset

    def compact_files(self, **kwargs: Any) -> CompactionMetrics:
        """:func:`compact_files` planned on this handle's version; the handle then moves to the
        version the compaction committed, as pylance's does."""
        metrics = compact_files(self._dataset, **kwargs)
        if metrics.versions_created and not isinstance(self._dataset, (str, os.PathLike)):
            self._dataset._advance(self._dataset.checkout_version(metrics.version))
        return metrics

    def optimize_indices(self, **kwargs: Any) -> None:
        """pylance's ``ds.optimize.optimize_indices(...)`` (see :mod:`airflow_lance.core.indices.optimize`)."""
        from airflow_lance.core.dataset import dataset as open_dataset

        target = open_dataset(self._dataset) if isinstance(self._dataset, (str, os.PathLike)) else self._dataset
        target.optimize_indices(**kwargs)
