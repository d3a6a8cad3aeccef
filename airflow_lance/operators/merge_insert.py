"""``LanceSparkMergeInsertOperator``: upsert a Spark source into a Lance dataset, committed once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import airflow_lance.core as lance
from airflow_lance.operators._lineage import LineageDataset, spark_source_datasets
from airflow_lance.operators._dml import LanceDmlOperator, Planned
from airflow_lance.operators._log_format import human_bytes
from airflow_lance.operators._spark_submit import LanceStagedResultError
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from airflow_lance.spark.merge_insert_spec import MergeInsertJobResult, MergeInsertJobSpec
from airflow_lance.spark.spec import MAX_BYTES_PER_FILE, MAX_ROWS_PER_FILE, SourceSpec, staging_location

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class LanceSparkMergeInsertOperator(LanceDmlOperator):
    """Pylance's ``merge_insert`` of a Spark source, run on Spark, as one idempotent ``Update`` commit.

    ``ds.merge_insert(on).when_matched_update_all(condition).when_not_matched_insert_all()
    .when_not_matched_by_source_delete(expr).execute(source)``: the executors read the dataset's
    key columns with their row addresses, join them with the source on ``on`` (a null key
    matches nothing), write the inserted and updated rows as new fragments and the replaced and
    deleted rows' deletion vectors; the worker commits one ``Update`` at the version the job
    read (:mod:`airflow_lance.spark.merge_insert`). On datasets with stable row ids updated rows
    keep their row ids. A target row matched by two source rows fails the task
    (``AmbiguousMergeInsertError``, as pylance's) before anything is written.

    Conflicts follow Lance: appends committed while the job ran are kept (the commit rebases
    over them, also over deletes of other rows); when a concurrent writer changed the same
    rows, the job runs again on the latest version (``conflict_retries`` times, as pylance
    retries its merge insert), then the task fails having committed nothing. The commit
    carries the task instance's idempotency key: a retry after it landed commits nothing and
    returns the landed counts. A failed job commits nothing (its files are left for version
    cleanup).

    :param uri: the dataset (URI, path, ``lance+`` asset URI or name below the connection's
        root); it must exist. (templated)
    :param on: key column(s). (templated)
    :param source_path, source_format, source_options, source_sql, source_callable, source_lance_uri:
        the source, exactly one of them, as for
        :class:`~airflow_lance.operators.spark_write.LanceSparkWriteOperator`; a Lance source
        (``read_lance`` on the executors) also takes ``source_lance_version``,
        ``source_lance_columns``, ``source_lance_filter``, ``source_lance_since_version`` (only the
        rows inserted or updated since then: an incremental upsert) and ``source_lance_conn_id``.
        Its columns must be the dataset's (a subset holding the keys: updated rows keep the
        others, inserted rows get nulls). (templated)
    :param when_matched_update_all: replace matched rows by the source's (default True).
    :param when_matched_update_all_condition: only where this SQL condition over ``source.x`` and
        ``target.x`` holds. (templated)
    :param when_not_matched_insert_all: insert source rows matching no target row (default True).
    :param when_not_matched_by_source_delete: delete target rows matching no source row (default False).
    :param when_not_matched_by_source_delete_expr: only those matching this SQL predicate. (templated)
    :param num_partitions: Spark tasks writing the new rows and deletion vectors (default: by row count).
    :param max_rows_per_file, max_bytes_per_file: data file sizes of the new fragments.
    :param conflict_retries: runs the job again this many times after a retryable commit conflict.
    :param idempotency_key, commit_message, staging_uri, lance_conn_id, spark_conn_id, conf,
        py_files, spark_binary, spark_submit_kwargs, spark_log_level, python_env_archive: as for the update
        operator.

    Returns ``{"uri", "version", "read_version", "num_inserted_rows", "num_updated_rows",
    "num_deleted_rows", "num_fragments", "bytes_written"}`` (pylance's counts) and sets it as the
    extra of the dataset's asset event.
    """

    template_fields: Sequence[str] = (
        *LanceDmlOperator.template_fields, "on", "source_path", "source_format", "source_options", "source_sql",
        "source_callable", "source_lance_uri", "source_lance_version", "source_lance_columns", "source_lance_filter",
        "source_lance_since_version", "when_matched_update_all_condition", "when_not_matched_by_source_delete_expr")
    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "source_sql": "sql", "conf": "json", "source_options": "json"}
    count_names = ("num_inserted_rows", "num_updated_rows", "num_deleted_rows")
    what = "merge insert"
    ui_color = "#e4f0e8"

    def __init__(
        self,
        *,
        uri: str,
        on: str | Sequence[str],
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
        when_matched_update_all: bool = True,
        when_matched_update_all_condition: str | None = None,
        when_not_matched_insert_all: bool = True,
        when_not_matched_by_source_delete: bool = False,
        when_not_matched_by_source_delete_expr: str | None = None,
        num_partitions: int | None = None,
        max_rows_per_file: int = MAX_ROWS_PER_FILE,
        max_bytes_per_file: int = MAX_BYTES_PER_FILE,
        conflict_retries: int = 3,
        **kwargs: Any,
    ) -> None:
        super().__init__(uri=uri, conflict_retries=conflict_retries, **kwargs)
        self.on = on
        self.source_path = source_path
        self.source_format = source_format
        self.source_options = dict(source_options or {})
        self.source_sql = source_sql
        self.source_callable = source_callable
        self.source_lance_uri, self.source_lance_version = source_lance_uri, source_lance_version
        self.source_lance_columns, self.source_lance_filter = source_lance_columns, source_lance_filter
        self.source_lance_since_version, self.source_lance_conn_id = source_lance_since_version, source_lance_conn_id
        self.when_matched_update_all = when_matched_update_all
        self.when_matched_update_all_condition = when_matched_update_all_condition
        self.when_not_matched_insert_all = when_not_matched_insert_all
        self.when_not_matched_by_source_delete = when_not_matched_by_source_delete
        self.when_not_matched_by_source_delete_expr = when_not_matched_by_source_delete_expr
        self.num_partitions = num_partitions
        self.max_rows_per_file = max_rows_per_file
        self.max_bytes_per_file = max_bytes_per_file
        sources = [s for s in (source_path, source_sql, source_callable, source_lance_uri) if s not in (None, "", [], ())]
        if len(sources) != 1:
            raise ValueError(f"{self.task_id}: give exactly one of source_path, source_sql, source_callable "
                             "and source_lance_uri")
        if not (when_matched_update_all or when_not_matched_insert_all or when_not_matched_by_source_delete):
            raise ValueError(f"{self.task_id}: the merge insert is not configured to change the data in any way")

    def _keys(self) -> tuple[str, ...]:
        return (self.on,) if isinstance(self.on, str) else tuple(self.on)

    def describe(self) -> str:
        return f"on {list(self._keys())}"

    def _spec(self, ds: lance.LanceDataset, key: str) -> MergeInsertJobSpec:
        names = ds.schema.names
        missing = [k for k in self._keys() if k not in names]
        if missing:  # before Spark runs (the job checks the source's columns)
            raise lance.InvalidInputError(f"Merge insert key column(s) {missing} do not exist in schema "
                                          f"(columns: {names})")
        staging_root, staging_name = staging_location(ds.uri, f"merge_insert/{key}", self.staging_uri)
        return MergeInsertJobSpec(
            uri=ds.uri,
            read_version=ds.version,
            source=self._source(),
            on=self._keys(),
            staging_root=staging_root,
            staging_name=staging_name,
            storage_options=self.hook.storage_options,
            when_matched_update_all=bool(self.when_matched_update_all),
            matched_condition=self.when_matched_update_all_condition or None,
            when_not_matched_insert_all=bool(self.when_not_matched_insert_all),
            when_not_matched_by_source_delete=bool(self.when_not_matched_by_source_delete),
            by_source_expr=self.when_not_matched_by_source_delete_expr or None,
            num_partitions=self.num_partitions,
            max_rows_per_file=self.max_rows_per_file,
            max_bytes_per_file=self.max_bytes_per_file,
        )

    # the Lance source pinned to its version and checked before Spark runs, as the write operator does
    _lance_source = LanceSparkWriteOperator._lance_source
    _lineage_source = LanceSparkWriteOperator._lineage_source
    _pinned_source: SourceSpec | None = None

    def _source(self) -> SourceSpec:
        self._pinned_source = SourceSpec.from_fields(
            path=self.source_path, format=self.source_format, options=self.source_options, sql=self.source_sql,
            callable=self.source_callable, lance=self._lance_source())
        return self._pinned_source

    def lineage_sources(self) -> list[LineageDataset]:
        return spark_source_datasets(self._lineage_source())

    def _reusable_result(self, spec: MergeInsertJobSpec) -> MergeInsertJobResult | None:
        """The result an earlier try staged for this very job (same key, same spec: the same read
        version and source), if all its files are there: a try killed between the job's end and the
        commit leaves it, and the retry commits it instead of running the job again."""
        staged = MergeInsertJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
        if staged is None or staged.spec_digest != spec.digest():
            return None
        missing = staged.missing_files(spec.uri, spec.storage_options)
        if missing:
            self.log.warning("Not reusing the staged result of an earlier try: %d files are missing", len(missing))
            return None
        self.log.info("Reusing the Spark merge insert staged by an earlier try of this task (Spark job not run)")
        return staged

    def plan(self, ds: lance.LanceDataset, key: str, context: Context) -> Planned:
        spec = self._spec(ds, key)
        staged = self._reusable_result(spec)
        if staged is None:
            self.log.info("Spark job: %s", spec.describe())
            self.spark_runner().run(spec.to_json(), f"lance-merge-insert-{spec.digest()[:12]}.json",
                                    f"the Spark merge insert job for {ds.uri}")
            staged = MergeInsertJobResult.load(spec.staging_root, spec.staging_name, spec.storage_options)
        if staged is None or staged.spec_digest != spec.digest():
            raise LanceStagedResultError(f"the Spark merge insert job for {ds.uri} finished without staging its result")
        self.log.info("Spark job %.2f s: %d new fragments (%s), %d deletion vectors, %d fragments removed",
                      staged.elapsed_seconds, len(staged.new_fragments), human_bytes(staged.bytes_written),
                      len(staged.updated_fragments), len(staged.removed_fragment_ids))
        operation = lance.LanceOperation.Update(
            removed_fragment_ids=list(staged.removed_fragment_ids),
            updated_fragments=list(staged.updated_fragments),
            new_fragments=list(staged.new_fragments),
            fields_for_preserving_frag_bitmap=list(staged.fields_for_preserving_frag_bitmap),
        )
        return Planned(operation, staged.counts,
                       {"num_fragments": len(staged.new_fragments), "bytes_written": staged.bytes_written},
                       staged=(spec.staging_root, spec.staging_name))
