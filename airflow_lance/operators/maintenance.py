"""Maintenance operators for Lance datasets: stats, compaction, version cleanup, tags, restore.

Every operator resolves its dataset through :class:`~airflow_lance.hooks.lance.LanceHook`
(a URI, a local path, a ``lance+`` asset URI, or a name below the connection's root),
logs what it changed and returns a JSON-ready dict. Operators that create a version
(compaction, restore) add the dataset's asset to ``outlets`` when the URI is static and
absolute, and put their result (with the new ``version``) into the extra of that asset's
event; an ``AssetAlias`` in ``outlets`` receives the dataset's event as well.

* :class:`LanceDatasetStatsOperator`: fragment count, small fragments, deleted-row ratio,
  version count, bytes, and whether compaction would do anything (``needs_compaction``).
* :class:`LanceCompactFilesOperator`: compaction planned and committed in the worker, the
  rewrite tasks run in the worker (mode ``local``) or on Spark executors (mode ``spark``);
  skips the task when there is nothing to compact.
* :class:`LanceOptimizeIndicesOperator`: ``optimize_indices`` when indices miss new rows.
* :class:`LanceCleanupOldVersionsOperator`: ``cleanup_old_versions`` (with ``dry_run``).
* :class:`LanceCreateTagOperator` / :class:`LanceDeleteTagOperator`.
* :class:`LanceRestoreOperator`: make an old version (or tag) the latest one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.common.compat.sdk import AirflowSkipException, BaseOperator

import airflow_lance.core as lance
from airflow_lance.assets.lance import emit_dataset_event, with_dataset_outlet
from airflow_lance.connection import DEFAULT_CONN_ID
from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators._cleanup_safety import cleanup_warning
from airflow_lance.operators._lineage import LanceLineageMixin, lance_dataset
from airflow_lance.operators._spark_submit import SparkJobRunner, run_task_job, spark_hook_kwargs
from airflow_lance.operators.spark_write import default_idempotency_key
from airflow_lance.spark.spec import staging_location
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: Where compaction tasks run: in the worker, or on Spark executors through spark-submit.
COMPACTION_MODES = ("local", "spark")
#: Most file paths a dry-run cleanup returns (the count is always exact).
MAX_LISTED_FILES = 1000

_INT_OPTIONS = ("target_rows_per_fragment", "max_bytes_per_file", "max_source_fragments", "max_source_rows")


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    raise ValueError(f"{name} must be a boolean, not {value!r}")


def _as_optional_int(name: str, value: Any) -> int | None:
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an integer, not {value!r}") from exc


def compaction_options(options: Mapping[str, Any] | None) -> lance.CompactionOptions:
    """Validated compaction options from a (rendered) dict; numeric strings are converted."""
    data = dict(options or {})
    for name in _INT_OPTIONS:
        if isinstance(data.get(name), str):
            data[name] = _as_optional_int(name, data[name])
    if isinstance(data.get("materialize_deletions_threshold"), str):
        data["materialize_deletions_threshold"] = float(data["materialize_deletions_threshold"])
    if "materialize_deletions" in data:
        data["materialize_deletions"] = _as_bool("materialize_deletions", data["materialize_deletions"])
    if isinstance(data.get("excluded_fragment_ids"), str):
        text = data["excluded_fragment_ids"].strip().strip("[]()")
        data["excluded_fragment_ids"] = [int(i) for i in text.split(",") if i.strip()]
    return lance.CompactionOptions.build(data)


def _as_older_than(value: Any) -> dt.timedelta | None:
    """A timedelta, a number of days, or None."""
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"older_than must be a timedelta or a number of days, not {value!r}")
    try:
        return dt.timedelta(days=float(value))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"older_than must be a timedelta or a number of days, not {value!r}") from exc


def _rewritten_fragments(result: Any) -> tuple[lance.FragmentMetadata, ...]:
    """The fragments one compaction task wrote (its ``RewriteResult`` JSON)."""
    return lance.RewriteResult.from_json(result).new_fragments


def dataset_stats(ds: lance.LanceDataset, options: lance.CompactionOptions) -> dict[str, Any]:
    """Stats of one dataset version (see :class:`LanceDatasetStatsOperator`)."""
    fragments = [f.metadata for f in ds.get_fragments()]
    physical = sum(f.physical_rows for f in fragments)
    deleted = sum(f.num_deletions for f in fragments)
    sizes = [d.file_size_bytes for f in fragments for d in f.files]
    plan = lance.Compaction.plan(ds, options)
    return {
        "uri": ds.uri,
        "version": ds.version,
        "num_versions": len(ds.versions()),
        "num_tags": len(ds.tags.list()),
        "num_fragments": len(fragments),
        "num_small_fragments": sum(1 for f in fragments if f.physical_rows < options.target_rows_per_fragment),
        "num_rows": physical - deleted,
        "num_deleted_rows": deleted,
        "deleted_row_ratio": deleted / physical if physical else 0.0,
        "num_data_files": len(sizes),
        "data_bytes": sum(s for s in sizes if s),
        "data_bytes_complete": all(s is not None for s in sizes),
        "compaction_tasks": len(plan.tasks),
        "compaction_source_fragments": sum(len(t.fragments) for t in plan.tasks),
        "fragments_skipped_indexed": plan.fragments_skipped_indexed,
        "needs_compaction": bool(plan.tasks),
    }


class _LanceMaintenanceOperator(LanceLineageMixin, BaseOperator):
    """Common parts: the hook, the uri, and asset events."""

    ui_color = "#e8f0fe"
    creates_version: ClassVar[bool] = False

    def __init__(self, *, uri: str, lance_conn_id: str | None = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        if self.creates_version:
            with_dataset_outlet(uri, kwargs)
        super().__init__(**kwargs)
        self.uri = uri
        self.lance_conn_id = lance_conn_id

    @cached_property
    def hook(self) -> LanceHook:
        """The Lance hook (created on first use, never at DAG parse time)."""
        return LanceHook(self.lance_conn_id)

    def _emit(self, context: Context, summary: dict[str, Any]) -> dict[str, Any]:
        """Set ``summary`` as the extra of this dataset's outlet event(s); record the lineage (input: the
        dataset at the version read; output, for operators creating a version: at that version); return it."""
        read = summary.get("read_version", summary["version"])
        options = self.hook.storage_options
        self.record_lineage(inputs=[lance_dataset(summary["uri"], read, storage_options=options)],
                            outputs=[lance_dataset(summary["uri"], summary["version"], read, storage_options=options)]
                            if self.creates_version else ())
        return emit_dataset_event(self.outlets, context["outlet_events"], summary)


class LanceDatasetStatsOperator(_LanceMaintenanceOperator):
    """Report the shape of a Lance dataset, to decide whether maintenance is worth running.

    :param uri: the dataset (URI, local path, ``lance+`` asset URI or name below the
        connection's root). (templated)
    :param compaction_options: the options compaction would run with (pylance names:
        ``target_rows_per_fragment``, ``materialize_deletions_threshold``, ...); they define
        what a small fragment is and whether compaction has work. (templated)
    :param lance_conn_id: the ``lance`` connection.

    Returns ``{"uri", "version", "num_versions", "num_tags", "num_fragments",
    "num_small_fragments", "num_rows", "num_deleted_rows", "deleted_row_ratio",
    "num_data_files", "data_bytes", "data_bytes_complete", "compaction_tasks",
    "compaction_source_fragments", "fragments_skipped_indexed", "needs_compaction"}``.
    ``needs_compaction`` is true when a compaction plan with these options has tasks.
    ``data_bytes`` sums the sizes recorded in the manifest (``data_bytes_complete`` is false
    when some data file has no recorded size).
    """

    template_fields: Sequence[str] = ("uri", "compaction_options")
    template_fields_renderers: ClassVar[dict[str, str]] = {"compaction_options": "json"}

    def __init__(
        self,
        *,
        uri: str,
        compaction_options: Mapping[str, Any] | None = None,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(uri=uri, lance_conn_id=lance_conn_id, **kwargs)
        self.compaction_options = dict(compaction_options or {})

    def execute(self, context: Context) -> dict[str, Any]:
        ds = self.hook.get_dataset(self.uri)
        stats = dataset_stats(ds, compaction_options(self.compaction_options))
        self.log.info(
            "%s version %d: %d fragments (%d small), %d rows, %.1f%% deleted, %d versions, %d data bytes; "
            "compaction %s (%d tasks)",
            ds.uri, ds.version, stats["num_fragments"], stats["num_small_fragments"], stats["num_rows"],
            100 * stats["deleted_row_ratio"], stats["num_versions"], stats["data_bytes"],
            "needed" if stats["needs_compaction"] else "not needed", stats["compaction_tasks"],
        )
        self.record_lineage(inputs=[lance_dataset(ds.uri, ds.version, storage_options=self.hook.storage_options)])
        return stats


class LanceCompactFilesOperator(_LanceMaintenanceOperator):
    """Merge small fragments and materialise deletions (Lance's ``compact_files``).

    The worker plans the compaction (pylance's candidate selection and binning), the rewrite
    tasks run in the worker (mode ``local``) or as a Spark job, one Spark task per
    compaction task (mode ``spark``: the Lance code is shipped to the executors as for
    :class:`~airflow_lance.operators.spark_write.LanceSparkWriteOperator`), and the worker
    commits all of them as one Rewrite, or nothing: one new version in either mode (the
    new fragments get their ids at commit), two when scalar indices cover rewritten fragments
    (a ``ReserveFragments`` first, then the Rewrite with the indices remapped, as pylance). The
    commit uses the plan's read version, so a delete or update committed concurrently never
    brings deleted rows back: the compaction tasks whose fragments a concurrent commit changed
    are left out of the commit (their files removed, logged, counted in
    ``tasks_skipped_conflict``; the next run compacts those fragments) and the others commit,
    so maintenance makes progress beside writers that never pause. When every task conflicts
    (or with ``skip_conflicting=False``, any), the task fails with a retryable conflict and
    commits nothing; a concurrent append is compatible. In mode ``spark`` the job's result is
    staged until the commit: a retry of a try that failed after the job and before the commit
    commits that result without running Spark again, when it plans the same compaction (same read
    version and tasks) and every file the job wrote is still there; otherwise the job runs again.
    A retry after the commit landed finds nothing to compact (as any re-run).

    :param uri: the dataset (URI, local path, ``lance+`` asset URI or name below the
        connection's root). (templated)
    :param compaction_options: pylance's ``compact_files`` options:
        ``target_rows_per_fragment``, ``max_bytes_per_file``, ``materialize_deletions``,
        ``materialize_deletions_threshold``, ``max_source_fragments``, ``max_source_rows``,
        ``excluded_fragment_ids``. (templated)
    :param mode: ``local`` or ``spark``. (templated)
    :param skip_when_nothing_to_compact: mark the task skipped when the plan has no tasks
        (default); otherwise return zero metrics.
    :param skip_conflicting: commit the tasks no concurrent commit conflicts with and leave out
        the others (default); False: all or nothing, as pylance's ``compact_files``.
    :param lance_conn_id: the ``lance`` connection.
    :param spark_conn_id: the ``spark`` connection (mode ``spark``).
    :param conf: Spark configuration (mode ``spark``). (templated)
    :param spark_binary: ``spark-submit`` by default (mode ``spark``).
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments (``executor_memory``,
        ``num_executors``, ``deploy_mode``, ``packages``, ...) (mode ``spark``).
    :param spark_log_level: Spark's log level (``spark.log.level``, unless ``conf`` sets it):
        ``WARN`` by default, ``INFO`` or ``DEBUG`` to see Spark's progress.
    :param python_env_archive: a packed Python environment for the executors, as
        ``LanceSparkWriteOperator``'s (README: Running on a cluster).

    Returns ``{"uri", "version", "read_version", "mode", "fragments_before", "fragments_after",
    "fragments_removed", "fragments_added", "files_removed", "files_added", "rows", "bytes",
    "fragments_skipped_indexed", "tasks_skipped_conflict", "versions_created", "seconds"}`` and sets it
    as the extra of the dataset's asset event. ``version`` is the compaction's version (the dataset's version
    when there was nothing to compact), ``versions_created`` 1 (2 with remapped indices, one more for
    each commit attempt that lost the race to a concurrent writer and remapped them again; 0 when
    nothing was committed).
    ``files_removed`` counts the files the compaction dropped from the dataset: they stay in
    storage, referenced by older versions, until :class:`LanceCleanupOldVersionsOperator`
    removes those versions.
    """

    template_fields: Sequence[str] = ("uri", "compaction_options", "mode", "conf")
    template_fields_renderers: ClassVar[dict[str, str]] = {"compaction_options": "json", "conf": "json"}
    creates_version = True

    def __init__(
        self,
        *,
        uri: str,
        compaction_options: Mapping[str, Any] | None = None,
        mode: str = "local",
        skip_when_nothing_to_compact: bool = True,
        skip_conflicting: bool = True,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        spark_conn_id: str = "spark_default",
        conf: Mapping[str, Any] | None = None,
        spark_binary: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        spark_log_level: str = "WARN",
        python_env_archive: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(uri=uri, lance_conn_id=lance_conn_id, **kwargs)
        self.compaction_options = dict(compaction_options or {})
        self.mode = mode
        self.skip_when_nothing_to_compact = skip_when_nothing_to_compact
        self.skip_conflicting = skip_conflicting
        self.spark_conn_id = spark_conn_id
        self.conf = dict(conf or {})
        self.spark_binary = spark_binary
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.spark_log_level = spark_log_level
        self.python_env_archive = python_env_archive
        self._spark_job: SparkJobRunner | None = None
        if "{{" not in str(mode):
            self._check_mode(mode)

    @staticmethod
    def _check_mode(mode: str) -> str:
        if mode not in COMPACTION_MODES:
            raise ValueError(f"mode must be one of {COMPACTION_MODES}, not {mode!r}")
        return mode

    def execute(self, context: Context) -> dict[str, Any]:
        self._check_mode(self.mode)
        options = compaction_options(self.compaction_options)
        self.hook.check_writable(self.uri)
        ds = self.hook.get_dataset(self.uri)
        before = len(ds.get_fragments())
        plan = lance.Compaction.plan(ds, options)
        if not plan.tasks:
            message = f"Nothing to compact in {ds.uri} at version {ds.version} ({before} fragments)"
            if plan.fragments_skipped_indexed:
                message += f"; {plan.fragments_skipped_indexed} fragments left alone because an index covers them"
            if self.skip_when_nothing_to_compact:
                raise AirflowSkipException(message)
            self.log.info(message)
            metrics = lance.CompactionMetrics(fragments_skipped_indexed=plan.fragments_skipped_indexed)
            return {**self._summary(ds, ds, before, metrics, 0.0), "mode": self.mode}
        self.log.info("Compacting %s at version %d (%s mode): %d tasks over %d of %d fragments", ds.uri,
                      ds.version, self.mode, len(plan.tasks), sum(len(t.fragments) for t in plan.tasks), before)
        start = time.monotonic()
        if self.mode == "spark":
            results, staged = self._rewrite_on_spark(ds, plan, context)
        else:
            results, staged = self._rewrite_here(ds, plan), None
        self.log.info("Rewrote %d tasks in %.2f s; committing", len(results), time.monotonic() - start)
        metrics = self._commit(ds, results, staged)
        metrics.fragments_skipped_indexed = plan.fragments_skipped_indexed
        seconds = time.monotonic() - start
        latest = self.hook.get_dataset(self.uri)  # writers may have committed after the compaction
        after_ds = latest.checkout_version(metrics.version) if 0 < metrics.version < latest.version else latest
        summary = self._summary(ds, after_ds, before, metrics, seconds)
        summary["mode"] = self.mode
        self.log.info(
            "Compacted %s: version %d -> %d (%d version created), fragments %d -> %d (%d removed, %d added), "
            "%d rows and %d bytes rewritten, %d files dropped from the dataset (storage keeps them until "
            "cleanup_old_versions removes the versions that reference them), in %.2f s",
            ds.uri, ds.version, after_ds.version, metrics.versions_created, before, summary["fragments_after"],
            metrics.fragments_removed, metrics.fragments_added, metrics.rows, metrics.bytes,
            metrics.files_removed, seconds,
        )
        if metrics.fragments_skipped_indexed:
            self.log.warning("%d fragments were not compacted because an index covers them",
                             metrics.fragments_skipped_indexed)
        if metrics.tasks_skipped_conflict:
            self.log.warning("%d of %d compaction tasks were left out: concurrent commits changed their fragments "
                             "(the next run compacts them)", metrics.tasks_skipped_conflict, len(results))
        return self._emit(context, summary)

    @staticmethod
    def _rewrite_here(ds: lance.LanceDataset, plan: lance.CompactionPlan) -> list[lance.RewriteResult]:
        """Run every task in this process (on failure, the files already written are removed)."""
        results: list[lance.RewriteResult] = []
        try:
            for task in plan.tasks:
                results.append(task.execute(ds))
        except BaseException:
            lance.Compaction.discard(ds, results)
            raise
        return results

    def _rewrite_on_spark(self, ds: lance.LanceDataset, plan: lance.CompactionPlan,
                          context: Context) -> tuple[list[Any], tuple[str, str]]:
        """Run every task on Spark executors, or reuse the result an earlier try of this task staged
        for the same plan (same read version and tasks; every file it wrote still there): the
        ``RewriteResult`` JSON of each task, in task order, and where the result is staged (it
        stays there until the commit landed)."""
        storage_options = self.hook.storage_options
        staging_root, staging_name = staging_location(ds.uri, f"compaction/{default_idempotency_key(context)}")
        spec = TaskJobSpec(kind="compaction", uri=ds.uri, tasks=tuple(t.to_json() for t in plan.tasks),
                           staging_root=staging_root, staging_name=staging_name, storage_options=storage_options)
        self._spark_job = SparkJobRunner(spark_hook_kwargs(
            spark_conn_id=self.spark_conn_id, conf=self.conf, name=f"airflow-lance-{self.task_id}",
            spark_binary=self.spark_binary, spark_submit_kwargs=self.spark_submit_kwargs,
            spark_log_level=self.spark_log_level, python_env_archive=self.python_env_archive,
        ))
        staged = run_task_job(self._spark_job, spec, f"the Spark compaction job for {ds.uri}", _rewritten_fragments)
        if len(staged.results) != len(plan.tasks):
            self._discard(ds, list(staged.results), (staging_root, staging_name))
            raise lance.InvalidInputError(
                f"the Spark compaction job returned {len(staged.results)} results for {len(plan.tasks)} tasks"
            )
        return list(staged.results), (staging_root, staging_name)

    def _commit(self, ds: lance.LanceDataset, results: Sequence[Any],
                staged: tuple[str, str] | None) -> lance.CompactionMetrics:
        """One Rewrite at the plan's read version; the new files (and the staged result) are removed if it
        cannot land, the staged result once it landed."""
        try:
            metrics = lance.Compaction.commit(ds, results, skip_conflicting=self.skip_conflicting)
        except lance.CommitStateUnknownError:
            raise  # the version may reference the files: keep them (a retry finds the files and the result)
        except lance.LanceError:
            self._discard(ds, results, staged)
            raise
        if staged is not None:
            TaskJobResult.discard(*staged, self.hook.storage_options)
        return metrics

    def _discard(self, ds: lance.LanceDataset, results: Sequence[Any], staged: tuple[str, str] | None) -> None:
        lance.Compaction.discard(ds, results)
        if staged is not None:
            TaskJobResult.discard(*staged, self.hook.storage_options)

    def on_kill(self) -> None:
        """Cancel the running Spark job (mode ``spark``); nothing is committed."""
        if self._spark_job is not None:
            self._spark_job.kill()

    @staticmethod
    def _summary(ds: lance.LanceDataset, after: lance.LanceDataset, before: int,
                 metrics: lance.CompactionMetrics, seconds: float) -> dict[str, Any]:
        return {
            **metrics.to_json(),
            "uri": ds.uri,
            "version": after.version,
            "read_version": ds.version,
            "fragments_before": before,
            "fragments_after": len(after.get_fragments()),
            "seconds": round(seconds, 3),
        }


class LanceCleanupOldVersionsOperator(_LanceMaintenanceOperator):
    """Remove old versions and the files only they reference (Lance's ``cleanup_old_versions``).

    The latest version, recent versions and tagged versions are kept with everything they
    reference; unreferenced files younger than 7 days are kept unless ``delete_unverified``.

    :param uri: the dataset (URI, local path, ``lance+`` asset URI or name below the
        connection's root). (templated)
    :param older_than: versions older than this go: a ``timedelta`` or a number of days
        (default 14 days when ``retain_versions`` is not given either). (templated)
    :param retain_versions: always keep this many newest versions. (templated)

    A retried write finds its landed commit (by its idempotency key) only while that version
    exists. Before cleaning up, the operator logs a warning when a writer of the same dataset in
    its DAG (a ``LanceSparkWriteOperator`` with retries that is not upstream of the cleanup in a
    DAG with ``max_active_runs=1``) can retry while the cleanup runs and the policy can remove a
    version younger than that writer's retry window (``retain_versions`` without ``older_than``,
    or ``older_than`` shorter than the window).
    :param delete_unverified: also delete unreferenced files younger than 7 days (only
        when no writer can be running). (templated)
    :param error_if_tagged_old_versions: fail (deleting nothing) when a tagged version is
        old; otherwise tagged versions are kept silently. (templated)
    :param dry_run: list what would be removed, remove nothing. (templated)
    :param lance_conn_id: the ``lance`` connection.

    Returns ``{"uri", "version", "dry_run", "old_versions", "bytes_removed", "files_removed",
    "data_files_removed", "deletion_files_removed", "transaction_files_removed",
    "index_files_removed", "failed_deletes", "versions_before", "versions_after"}``, plus
    ``files`` (at most 1,000 paths relative to the dataset) in a dry run. No version is
    created; the dict becomes the extra of the dataset's event only if the dataset's asset
    (or an ``AssetAlias``) is among ``outlets``.
    """

    template_fields: Sequence[str] = (
        "uri", "older_than", "retain_versions", "delete_unverified", "error_if_tagged_old_versions", "dry_run",
    )

    def __init__(
        self,
        *,
        uri: str,
        older_than: dt.timedelta | float | str | None = None,
        retain_versions: int | str | None = None,
        delete_unverified: bool | str = False,
        error_if_tagged_old_versions: bool | str = True,
        dry_run: bool | str = False,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(uri=uri, lance_conn_id=lance_conn_id, **kwargs)
        self.older_than = older_than
        self.retain_versions = retain_versions
        self.delete_unverified = delete_unverified
        self.error_if_tagged_old_versions = error_if_tagged_old_versions
        self.dry_run = dry_run

    def execute(self, context: Context) -> dict[str, Any]:
        older_than = _as_older_than(self.older_than)
        retain_versions = _as_optional_int("retain_versions", self.retain_versions)
        dry_run = _as_bool("dry_run", self.dry_run)
        if not dry_run:
            self.hook.check_writable(self.uri)
        warning = cleanup_warning(self, older_than, retain_versions, self.hook.resolve_uri)
        if warning:
            self.log.warning("%s", warning)
        ds = self.hook.get_dataset(self.uri)
        versions_before = len(ds.versions())
        stats = lance.cleanup_old_versions(
            ds,
            older_than=older_than,
            retain_versions=retain_versions,
            delete_unverified=_as_bool("delete_unverified", self.delete_unverified),
            error_if_tagged_old_versions=_as_bool("error_if_tagged_old_versions", self.error_if_tagged_old_versions),
            dry_run=dry_run,
        )
        versions_after = versions_before if dry_run else len(self.hook.get_dataset(self.uri).versions())
        summary: dict[str, Any] = {"uri": ds.uri, "version": ds.version}
        summary.update({k: v for k, v in dataclasses.asdict(stats).items() if k != "files"})
        summary.update(versions_before=versions_before, versions_after=versions_after)
        if dry_run:
            summary["files"] = list(stats.files[:MAX_LISTED_FILES])
            self.log.info("Dry run on %s: would remove %d old versions, %d files, %d bytes", ds.uri,
                          stats.old_versions, stats.files_removed, stats.bytes_removed)
            for path in stats.files[:MAX_LISTED_FILES]:
                self.log.info("  would remove %s", path)
        else:
            self.log.info("Cleaned up %s: removed %d old versions (%d -> %d), %d files, %d bytes reclaimed",
                          ds.uri, stats.old_versions, versions_before, versions_after, stats.files_removed,
                          stats.bytes_removed)
            if stats.failed_deletes:
                self.log.warning("%d files could not be deleted", stats.failed_deletes)
        return self._emit(context, summary)


class LanceOptimizeIndicesOperator(_LanceMaintenanceOperator):
    """Fold fragments appended since an index was built into it (pylance's ``optimize_indices``).

    Scalar indices (BTREE, BITMAP, LABEL_LIST) get a delta segment over the unindexed fragments
    (``num_indices_to_merge=0``) or the ``num_indices_to_merge`` newest segments and the
    unindexed fragments merged into one (default 1, as pylance 14; ``retrain``: all segments);
    IVF_FLAT/IVF_PQ indices get a delta by default (pylance 14's vector rule);
    one ``CreateIndex`` version. Runs only when some index leaves more than
    ``min_unindexed_rows`` live rows unindexed (or with ``retrain``); otherwise it commits
    nothing and returns ``optimized`` false (the task is not skipped, so what follows it runs).

    :param uri: the dataset (URI, local path, ``lance+`` asset URI or name below the
        connection's root). (templated)
    :param index_names: the indices to optimize (default: all). (templated)
    :param num_indices_to_merge: pylance's ``num_indices_to_merge`` (None: 1, vector indices 0). (templated)
    :param retrain: merge every segment of each index into one. (templated)
    :param min_unindexed_rows: optimize only when an index misses more rows than this. (templated)
    :param lance_conn_id: the ``lance`` connection.

    Returns ``{"uri", "version", "read_version", "optimized", "unindexed_rows_before",
    "unindexed_rows_after", "num_segments"}`` (``unindexed_rows_*`` and ``num_segments`` per
    index name) and sets it as the extra of the dataset's asset event.
    """

    template_fields: Sequence[str] = ("uri", "index_names", "num_indices_to_merge", "retrain", "min_unindexed_rows")
    creates_version = True

    def __init__(
        self,
        *,
        uri: str,
        index_names: Sequence[str] | None = None,
        num_indices_to_merge: int | str | None = None,
        retrain: bool | str = False,
        min_unindexed_rows: int | str = 0,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(uri=uri, lance_conn_id=lance_conn_id, **kwargs)
        self.index_names = index_names
        self.num_indices_to_merge = num_indices_to_merge
        self.retrain = retrain
        self.min_unindexed_rows = min_unindexed_rows

    @staticmethod
    def _state(ds: lance.LanceDataset, names: Sequence[str] | None) -> tuple[dict[str, int], dict[str, int]]:
        segments: dict[str, int] = {}
        for index in ds.list_indices():
            if names is None or index["name"] in names:
                segments[index["name"]] = segments.get(index["name"], 0) + 1
        return {name: lance.unindexed_rows(ds, name) for name in segments}, segments

    def execute(self, context: Context) -> dict[str, Any]:
        merge = _as_optional_int("num_indices_to_merge", self.num_indices_to_merge)
        threshold = _as_optional_int("min_unindexed_rows", self.min_unindexed_rows) or 0
        retrain = _as_bool("retrain", self.retrain)
        names = None if self.index_names is None else list(self.index_names)
        self.hook.check_writable(self.uri)
        ds = self.hook.get_dataset(self.uri)
        read_version = ds.version
        before, _ = self._state(ds, names)
        optimized = retrain or any(rows > threshold for rows in before.values())
        if optimized:
            ds.optimize_indices(num_indices_to_merge=merge, index_names=names, retrain=retrain)
            optimized = ds.version != read_version
        after, segments = self._state(ds, names)
        self.log.info("%s %s: unindexed rows per index %s -> %s, segments %s (version %d -> %d)", ds.uri,
                      "indices optimized" if optimized else f"indices left alone (threshold {threshold} rows)",
                      before, after, segments, read_version, ds.version)
        summary = {"uri": ds.uri, "version": ds.version, "read_version": read_version, "optimized": optimized,
                   "unindexed_rows_before": before, "unindexed_rows_after": after, "num_segments": segments}
        return self._emit(context, summary) if optimized else summary


class LanceCreateTagOperator(_LanceMaintenanceOperator):
    """Create a tag (or move an existing one) on a version of a Lance dataset.

    :param uri: the dataset (URI, local path, ``lance+`` asset URI or name below the
        connection's root). (templated)
    :param tag: the tag name. (templated)
    :param version: the version to tag (default: the latest). (templated)
    :param update_existing: move the tag when it exists already (default: fail). (templated)
    :param lance_conn_id: the ``lance`` connection.

    Returns ``{"uri", "tag", "version", "previous_version"}`` (``previous_version`` is the
    version the tag pointed at before, or None).
    """

    template_fields: Sequence[str] = ("uri", "tag", "version", "update_existing")

    def __init__(
        self,
        *,
        uri: str,
        tag: str,
        version: int | str | None = None,
        update_existing: bool | str = False,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(uri=uri, lance_conn_id=lance_conn_id, **kwargs)
        self.tag = tag
        self.version = version
        self.update_existing = update_existing

    def execute(self, context: Context) -> dict[str, Any]:
        self.hook.check_writable(self.uri)
        ds = self.hook.get_dataset(self.uri)
        version = _as_optional_int("version", self.version)
        version = ds.version if version is None else version
        previous = ds.tags.list().get(self.tag)
        previous_version = previous["version"] if previous is not None else None
        if previous is not None and _as_bool("update_existing", self.update_existing):
            ds.tags.update(self.tag, version)
            self.log.info("Moved tag %r of %s from version %d to version %d", self.tag, ds.uri,
                          previous_version, version)
        else:
            ds.tags.create(self.tag, version)
            self.log.info("Tagged version %d of %s as %r", version, ds.uri, self.tag)
        return self._emit(context, {"uri": ds.uri, "tag": self.tag, "version": version,
                                    "previous_version": previous_version})


class LanceDeleteTagOperator(_LanceMaintenanceOperator):
    """Delete a tag of a Lance dataset (its version becomes eligible for cleanup).

    :param uri: the dataset (URI, local path, ``lance+`` asset URI or name below the
        connection's root). (templated)
    :param tag: the tag name. (templated)
    :param missing_ok: succeed when the tag does not exist (default: fail). (templated)
    :param lance_conn_id: the ``lance`` connection.

    Returns ``{"uri", "tag", "version"}`` (the version the tag pointed at; None if missing).
    """

    template_fields: Sequence[str] = ("uri", "tag", "missing_ok")

    def __init__(
        self,
        *,
        uri: str,
        tag: str,
        missing_ok: bool | str = False,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(uri=uri, lance_conn_id=lance_conn_id, **kwargs)
        self.tag = tag
        self.missing_ok = missing_ok

    def execute(self, context: Context) -> dict[str, Any]:
        self.hook.check_writable(self.uri)
        ds = self.hook.get_dataset(self.uri)
        entry = ds.tags.list().get(self.tag)
        if entry is None:
            if _as_bool("missing_ok", self.missing_ok):
                self.log.info("Tag %r of %s does not exist; nothing to delete", self.tag, ds.uri)
                return {"uri": ds.uri, "tag": self.tag, "version": None}
            raise lance.TagNotFoundError(f"tag {self.tag!r} does not exist in {ds.uri}")
        ds.tags.delete(self.tag)
        self.log.info("Deleted tag %r (version %d) of %s", self.tag, entry["version"], ds.uri)
        return self._emit(context, {"uri": ds.uri, "tag": self.tag, "version": entry["version"]})


class LanceRestoreOperator(_LanceMaintenanceOperator):
    """Make an old version (or a tagged one) the latest version, as a new commit.

    :param uri: the dataset (URI, local path, ``lance+`` asset URI or name below the
        connection's root). (templated)
    :param version: the version number or tag to restore. (templated)
    :param lance_conn_id: the ``lance`` connection.

    Returns ``{"uri", "version", "restored_version", "read_version", "num_rows"}``
    (``version`` is the new version) and sets it as the extra of the dataset's asset event.
    """

    template_fields: Sequence[str] = ("uri", "version")
    creates_version = True

    def __init__(
        self,
        *,
        uri: str,
        version: int | str,
        lance_conn_id: str | None = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(uri=uri, lance_conn_id=lance_conn_id, **kwargs)
        self.version = version

    def execute(self, context: Context) -> dict[str, Any]:
        target: int | str = self.version
        if isinstance(target, str) and target.strip().isdigit():
            target = int(target)
        self.hook.check_writable(self.uri)
        ds = self.hook.get_dataset(self.uri, target)
        restored, read_version = ds.version, ds.latest_version
        ds.restore()  # the handle moves to the new version
        num_rows = ds.count_rows()
        self.log.info("Restored %s to version %d (%s) as new version %d (read version %d): %d rows", ds.uri,
                      restored, target, ds.version, read_version, num_rows)
        return self._emit(context, {"uri": ds.uri, "version": ds.version, "restored_version": restored,
                                    "read_version": read_version, "num_rows": num_rows})
