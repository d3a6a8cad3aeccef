"""``LanceDataset``: an immutable handle on one version of a dataset, and the
module-level entry points ``dataset`` and ``write_dataset`` (pylance's names)."""

from __future__ import annotations

import datetime as dt
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core import auto_cleanup, bases, feature_flags, metadata
from airflow_lance.core.arrays import arrow_dataset, empty_table
from airflow_lance.core.file.legacy_writer import GROUP_ROWS
from airflow_lance.core.layout import ManifestNamingScheme
from airflow_lance.core.commit import DEFAULT_IDEMPOTENCY_LOOKBACK, commit_transaction
from airflow_lance.core.delete import plan_delete
from airflow_lance.core.errors import (
    CommitConflictError,
    IncompatibleTransactionError,
    InvalidInputError,
    VersionNotFoundError,
)
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.manifest import (
    ManifestFile,
    data_storage_version,
    latest_version,
    list_versions,
    probe_newer,
    read_latest_manifest,
    read_manifest,
)
from airflow_lance.core.fragment_ops import create_fragment, delete_from_fragment
from airflow_lance.core.manifest_paths import migrate_manifest_paths_v2
from airflow_lance.core.scan import apply_filter, read_fragment, scan_fragments
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore, open_store
from airflow_lance.core.tags import Tags
from airflow_lance.core.transaction import (
    LanceOperation,
    Transaction,
    build_properties,
    read_transaction_file,
)
from airflow_lance.core.write import (
    MAX_BYTES_PER_FILE,
    MAX_ROWS_PER_FILE,
    DataLike,
    WriteMode,
    check_write_limits,
    prepare_write,
    write_data_files,
)

if TYPE_CHECKING:
    from airflow_lance.core.blobs import BlobFile
    from airflow_lance.core.cleanup import CleanupStats
    from airflow_lance.core.merge_insert import MergeInsertBuilder
    from airflow_lance.core.scanner import LanceScanner
    from airflow_lance.core.optimize import DatasetOptimizer

FilterLike = str | pc.Expression | None
#: A projection: column names, or pylance's {output name: SQL expression}.
ColumnsLike = Sequence[str] | Mapping[str, str] | None


def _compile_filter(filter: FilterLike, schema: pa.Schema) -> tuple[pc.Expression | None, list[str]]:
    if filter is None:
        return None, []
    from airflow_lance.core.filter import referenced_columns, to_expression  # sqlglot is slow to import

    expression = to_expression(filter, schema)
    return expression, referenced_columns(filter, schema)


def _compile_projections(
    columns: Mapping[str, str], schema: pa.Schema
) -> tuple[dict[str, pc.Expression], list[str]]:
    """pylance's ``columns={name: SQL}``: the Expressions and the columns they read."""
    from airflow_lance.core.filter import value_expression

    projections: dict[str, pc.Expression] = {}
    read: list[str] = []
    for name, sql in columns.items():
        if not isinstance(name, str):
            raise InvalidInputError(f"projection names must be strings, not {name!r}")
        projections[name], needed = value_expression(sql, schema)
        read += [column for column in needed if column not in read]
    return projections, read


def _project(table: pa.Table, projections: Mapping[str, pc.Expression]) -> pa.Table:
    return arrow_dataset().dataset(table).to_table(columns=dict(projections))


def version_summary(manifest: Any) -> dict[str, str]:
    """pylance's per-version statistics, computed from the manifest alone."""
    fragments = manifest.fragments
    data_files = sum(len(f.files) for f in fragments)
    physical = sum(f.physical_rows for f in fragments)
    deleted = sum(f.deletion_file.num_deleted_rows for f in fragments if f.HasField("deletion_file"))
    return {
        "total_data_file_rows": str(physical),
        "total_data_files": str(data_files),
        "total_deletion_file_rows": str(deleted),
        "total_deletion_files": str(sum(1 for f in fragments if f.HasField("deletion_file"))),
        "total_files_size": str(sum(d.file_size_bytes for f in fragments for d in f.files)),
        "total_fragments": str(len(fragments)),
        "total_rows": str(physical - deleted),
    }


def _version_datetime(ts_nanos: int) -> dt.datetime:
    """Naive local datetime of a commit, computed exactly as pylance does (float arithmetic
    included), so that ``versions()`` of both libraries compare equal."""
    return dt.datetime.fromtimestamp(ts_nanos // 1e9) + dt.timedelta(microseconds=(ts_nanos % 1e9) // 1e3)


class LanceFragment:
    """One fragment of a dataset version."""

    def __init__(self, dataset: LanceDataset, metadata: FragmentMetadata) -> None:
        self._dataset = dataset
        self.metadata = metadata

    @property
    def fragment_id(self) -> int:
        return self.metadata.id

    @staticmethod
    def create(
        dataset_uri: str | os.PathLike[str],
        data: DataLike,
        fragment_id: int | None = None,
        schema: pa.Schema | None = None,
        max_rows_per_group: int = GROUP_ROWS,
        progress: Any = None,
        mode: str = "append",
        *,
        data_storage_version: str | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> FragmentMetadata:
        """Write ``data`` as one new fragment; commit nothing (pylance's ``LanceFragment.create``)."""
        return create_fragment(dataset_uri, data, fragment_id, schema, max_rows_per_group, progress, mode,
                               data_storage_version=data_storage_version, storage_options=storage_options)

    def count_rows(self, filter: FilterLike = None) -> int:
        """Rows of the fragment (deletions applied), or those matching ``filter``."""
        if filter is None:
            return self.metadata.num_rows
        return self._dataset._count_matching([self.metadata], filter)

    @property
    def num_deletions(self) -> int:
        return self.metadata.num_deletions

    def delete(self, predicate: str) -> FragmentMetadata | None:
        """This fragment with the rows matching ``predicate`` deleted, or None when none is left;
        writes the deletion file, commits nothing (commit with ``LanceOperation.Delete``)."""
        return delete_from_fragment(self._dataset.store, self.metadata, self._dataset.lance_schema, predicate,
                                    self._dataset.version)

    @property
    def physical_rows(self) -> int:
        return self.metadata.physical_rows

    def data_files(self) -> tuple[Any, ...]:
        return self.metadata.files

    def deletion_file(self) -> Any:
        return self.metadata.deletion_file

    def to_table(
        self, columns: ColumnsLike = None, filter: FilterLike = None, limit: int | None = None,
        offset: int | None = None,
    ) -> pa.Table:
        """The fragment's rows (deletions applied), projected, filtered, then ``offset``/``limit``."""
        for name, value in (("limit", limit), ("offset", offset)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidInputError(f"{name} must be a non-negative int, not {value!r}")
        if limit is None and not offset:
            return self._dataset._scan_table([self.metadata], columns, filter)
        # only the rows up to the limit are read (see core.scanner)
        return self._dataset.scanner(columns, filter, limit, offset, fragments=[self]).to_table()

    def merge_columns(self, value_func: Any, columns: Sequence[str] | None = None, batch_size: int | None = None,
                      reader_schema: pa.Schema | None = None) -> tuple[FragmentMetadata, LanceSchema]:
        """Write new columns for this fragment (as ``add_columns``); commit nothing. Returns the
        fragment with the new data file and the new schema, for ``LanceOperation.Merge``."""
        from airflow_lance.core import evolution

        return evolution.merge_columns(self._dataset, self.metadata, value_func, columns, batch_size, reader_schema)

    def __repr__(self) -> str:
        return f"LanceFragment(id={self.fragment_id}, physical_rows={self.physical_rows})"


class LanceDataset:
    """A Lance dataset at one version.

    As in pylance, the handle's own write operations (``delete``, ``restore``,
    ``optimize.compact_files``) move it to the version they committed;
    ``checkout_version`` returns a new handle.
    """

    def __init__(self, store: ObjectStore, manifest_file: ManifestFile) -> None:
        self._store = store
        self._load(manifest_file)

    def _load(self, manifest_file: ManifestFile) -> None:
        feature_flags.check_readable(manifest_file.manifest, self._store.uri)
        bases.register(self._store, manifest_file.manifest)
        self._manifest_file = manifest_file
        self._manifest = manifest_file.manifest
        self._schema = LanceSchema.from_fields(list(self._manifest.fields), dict(self._manifest.schema_metadata))
        self.__dict__.pop("_fragments", None)

    def _advance(self, committed: LanceDataset) -> LanceDataset:
        """Move this handle to the version ``committed`` (of the same dataset); return it."""
        self._load(committed.manifest_file)
        return self

    @functools.cached_property
    def _fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_pb(f) for f in self._manifest.fragments]

    # -- identity -------------------------------------------------------------
    @property
    def uri(self) -> str:
        return self._store.uri

    @property
    def version(self) -> int:
        return self._manifest.version

    @property
    def latest_version(self) -> int:
        return probe_newer(self._store, self.version, self._manifest_file.scheme)[0]

    @property
    def schema(self) -> pa.Schema:
        return self._schema.to_arrow()

    @property
    def lance_schema(self) -> LanceSchema:
        return self._schema

    @property
    def data_storage_version(self) -> str:
        return data_storage_version(self._manifest)

    @property
    def max_field_id(self) -> int:
        return self._schema.max_field_id()

    @property
    def manifest_file(self) -> ManifestFile:
        return self._manifest_file

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def tags(self) -> Tags:
        """Create, list, update and delete tags of this dataset."""
        return Tags(self._store)

    @property
    def timestamp(self) -> dt.datetime:
        return self._manifest.timestamp.ToDatetime()

    def __repr__(self) -> str:
        return f"LanceDataset(uri={self.uri!r}, version={self.version})"

    # -- versions -------------------------------------------------------------
    def versions(self) -> list[dict[str, Any]]:
        """Every committed version: ``version``, ``timestamp`` (naive local time), ``metadata``."""
        result = []
        for version, scheme in sorted(list_versions(self._store).items()):
            manifest = read_manifest(self._store, version, scheme).manifest
            result.append(
                {
                    "version": version,
                    "timestamp": _version_datetime(manifest.timestamp.seconds * 10**9 + manifest.timestamp.nanos),
                    "metadata": version_summary(manifest),
                }
            )
        return result

    def checkout_version(self, version: int | str) -> LanceDataset:
        """A new handle on ``version`` (a number or a tag name)."""
        return _open_version(self._store, version)

    def shallow_clone(self, target_path: str | os.PathLike[str], reference: int | str | tuple[str | None, int | None],
                      storage_options: Mapping[str, str] | None = None) -> LanceDataset:
        """A new dataset at ``target_path`` that references version ``reference`` (a number, a tag,
        or ``(branch, version)`` on main) of this one without copying data (core/clone.py)."""
        from airflow_lance.core.clone import shallow_clone

        return shallow_clone(self, target_path, reference, storage_options)

    def read_transaction(self, version: int | None = None) -> Transaction | None:
        """The transaction that made ``version`` (default: this handle's version), or None
        when that version has no transaction file (pylance's name)."""
        if version is None or version == self.version:
            name = self._manifest.transaction_file
        else:
            name = read_manifest(self._store, version).manifest.transaction_file
        if not name:
            return None
        try:
            return read_transaction_file(self._store, name)
        except FileNotFoundError:
            return None

    # -- reading --------------------------------------------------------------
    def get_fragments(self) -> list[LanceFragment]:
        return [LanceFragment(self, f) for f in self._fragments]

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        return next((LanceFragment(self, f) for f in self._fragments if f.id == fragment_id), None)

    def count_rows(self, filter: FilterLike = None, **kwargs: Any) -> int:
        """Row count from metadata alone, or of the rows matching ``filter``. Other keywords
        are accepted and ignored, as pylance 14 does (``scanner(...).count_rows()`` uses them)."""
        if filter is None:
            return sum(
                f.physical_rows - (f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0)
                for f in self._manifest.fragments
            )
        return self._count_matching(self._fragments, filter)

    def _count_matching(self, fragments: Sequence[FragmentMetadata], filter: FilterLike) -> int:
        expression, needed = _compile_filter(filter, self.schema)
        projection = self._schema.project(needed)
        return sum(apply_filter(read_fragment(self._store, f, projection), expression).num_rows for f in fragments)

    def _scan(
        self, fragments: Sequence[FragmentMetadata], columns: ColumnsLike, filter: FilterLike
    ) -> Iterator[pa.Table]:
        expression, needed = _compile_filter(filter, self.schema)
        if isinstance(columns, Mapping):
            projections, read = _compile_projections(columns, self.schema)
            tables = scan_fragments(self._store, fragments, self._schema, read, expression, needed)
            return (_project(table, projections) for table in tables)
        if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
            raise InvalidInputError("columns must be a list of column names or a dict of SQL expressions")
        return scan_fragments(self._store, fragments, self._schema, columns, expression, needed)

    def _scan_table(self, fragments: Sequence[FragmentMetadata], columns: ColumnsLike, filter: FilterLike) -> pa.Table:
        tables = list(self._scan(fragments, columns, filter))
        if tables:
            return pa.concat_tables(tables)
        if isinstance(columns, Mapping):
            return _project(empty_table(self.schema), _compile_projections(columns, self.schema)[0])
        return empty_table(self._schema.project(list(columns)).to_arrow() if columns is not None else self.schema)

    def scanner(
        self,
        columns: ColumnsLike = None,
        filter: FilterLike = None,
        limit: int | None = None,
        offset: int | None = None,
        nearest: Any = None,
        batch_size: int | None = None,
        batch_size_bytes: int | None = None,
        batch_readahead: int | None = None,
        fragment_readahead: int | None = None,
        scan_in_order: bool | None = None,
        fragments: Sequence[LanceFragment] | None = None,
        *,
        with_row_id: bool | None = None,
        with_row_address: bool | None = None,
        **options: Any,
    ) -> LanceScanner:
        """A scanner with pylance's options (see ``core.scanner``); readahead and
        ordering hints are accepted and change nothing (we always scan in order)."""
        from airflow_lance.core.scanner import LanceScanner, check_no_vector_search

        check_no_vector_search(nearest, **options)
        return LanceScanner(self, columns, filter, limit, offset, batch_size, fragments, with_row_id, with_row_address)

    def to_table(
        self,
        columns: ColumnsLike = None,
        filter: FilterLike = None,
        limit: int | None = None,
        offset: int | None = None,
        nearest: Any = None,
        batch_size: int | None = None,
        batch_size_bytes: int | None = None,
        batch_readahead: int | None = None,
        fragment_readahead: int | None = None,
        scan_in_order: bool | None = None,
        **options: Any,
    ) -> pa.Table:
        """Read the version into one table, optionally projected (a list of column names, or
        pylance's ``{name: SQL expression}``), filtered, limited; ``scanner``'s keywords."""
        return self.scanner(columns, filter, limit, offset, nearest, batch_size, **options).to_table()

    def to_batches(
        self,
        columns: ColumnsLike = None,
        filter: FilterLike = None,
        limit: int | None = None,
        offset: int | None = None,
        nearest: Any = None,
        batch_size: int | None = None,
        batch_size_bytes: int | None = None,
        batch_readahead: int | None = None,
        fragment_readahead: int | None = None,
        scan_in_order: bool | None = None,
        **options: Any,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the version as record batches, one fragment at a time; ``scanner``'s keywords."""
        return self.scanner(columns, filter, limit, offset, nearest, batch_size, **options).to_batches()

    def head(self, num_rows: int, **options: Any) -> pa.Table:
        """The first ``num_rows`` rows (pylance's name); ``scanner``'s keywords."""
        options["limit"] = num_rows
        return self.scanner(**options).to_table()

    def slice(self, start: int, end: int, columns: ColumnsLike = None) -> pa.Table:
        """Rows ``start`` (inclusive) to ``end`` (exclusive) by position, as an offset/limit
        scan (pylance's name)."""
        if start < 0:
            raise InvalidInputError(f"start must be non-negative, got {start}")
        if end < start:
            raise InvalidInputError(f"end ({end}) must be >= start ({start})")
        return self.scanner(columns=columns, offset=start, limit=end - start).to_table()

    def take(self, indices: Sequence[int] | pa.Array, columns: ColumnsLike = None) -> pa.Table:
        """The rows at ``indices``: positions among the live rows (pylance's ``take``)."""
        from airflow_lance.core.scanner import take

        return take(self, indices, columns)

    def _take_rows(
        self, row_ids: Sequence[int] | pa.Array, columns: ColumnsLike = None, *, ignore_deletions: bool = False
    ) -> pa.Table:
        """The rows with ``row_ids`` (stable row ids, or row addresses), in request order;
        ids of deleted or missing rows are dropped (pylance's ``_take_rows``)."""
        from airflow_lance.core.scanner import take_rows

        return take_rows(self, row_ids, columns, ignore_deletions=ignore_deletions)

    def take_blobs(self, blob_column: str, ids: Sequence[int] | pa.Array | None = None,
                   addresses: Sequence[int] | pa.Array | None = None,
                   indices: Sequence[int] | pa.Array | None = None) -> list[BlobFile | None]:
        """The values of a blob column at the rows selected by exactly one of ``ids``, ``addresses``
        and ``indices``, as read-only binary files (None for nulls), as pylance's ``take_blobs``."""
        from airflow_lance.core.blobs import take_blobs

        return take_blobs(self, blob_column, ids=ids, addresses=addresses, indices=indices)

    # -- changing -------------------------------------------------------------
    def delete(self, predicate: str | pc.Expression, *, conflict_retries: int = 10) -> dict[str, int]:
        """Delete the rows matching ``predicate`` (SQL or pyarrow Expression).

        Planned on this handle's version; on a retryable conflict the dataset is
        re-read at its latest version and the delete redone (up to
        ``conflict_retries`` times). Returns ``num_deleted_rows`` and the
        resulting ``version``, and moves this handle to that version. A
        predicate that matches no row commits a version too, as in pylance.
        """
        current: LanceDataset = self
        for attempt in range(conflict_retries + 1):
            operation, deleted = plan_delete(
                current._store, current._fragments, current._schema, predicate, current.version
            )
            try:
                new = LanceDataset.commit(current, operation, current.version)
            except IncompatibleTransactionError:
                raise
            except CommitConflictError:
                if attempt == conflict_retries:
                    raise
                current = _open_version(self._store, None)
                continue
            self._advance(new)
            return {"num_deleted_rows": deleted, "version": new.version}
        raise AssertionError("unreachable")

    # -- config and metadata (core/metadata.py) --------------------------------
    def config(self) -> dict[str, str]:
        """The dataset's config (``lance.auto_cleanup.*`` and user keys)."""
        return dict(self._manifest.config)

    @property
    def metadata(self) -> dict[str, str]:
        """The table metadata (``update_metadata``)."""
        return dict(self._manifest.table_metadata)

    @property
    def schema_metadata(self) -> dict[str, str]:
        return metadata.decoded(self._schema.metadata)

    def _commit_update_config(self, operation: LanceOperation.UpdateConfig, retries: int = 10) -> LanceDataset:
        """Commit ``operation`` (independent of the data read) on the latest version; advance."""
        read_version = self.version
        for attempt in range(retries + 1):
            try:
                return self._advance(LanceDataset.commit(self, operation, read_version))
            except IncompatibleTransactionError:
                raise
            except CommitConflictError:
                if attempt == retries:
                    raise
                read_version = self.latest_version
        raise AssertionError("unreachable")

    def update_config(self, values: Mapping[str, str | None], *, replace: bool = False) -> dict[str, str]:
        """Set (str) or remove (None) config keys, or replace the config; returns the new config."""
        self._commit_update_config(LanceOperation.UpdateConfig(config_updates=metadata.update_map(
            values, replace, "config")))
        return self.config()

    def delete_config_keys(self, keys: Sequence[str]) -> None:
        """Remove config keys (absent ones are ignored)."""
        self._commit_update_config(LanceOperation.UpdateConfig(config_updates=metadata.delete_keys(keys)))

    def update_metadata(self, values: Mapping[str, str | None], *, replace: bool = False) -> dict[str, str]:
        """Set or remove table metadata keys (or replace all); returns the new table metadata."""
        self._commit_update_config(LanceOperation.UpdateConfig(table_metadata_updates=metadata.update_map(
            values, replace, "table metadata")))
        return self.metadata

    def update_schema_metadata(self, values: Mapping[str, str | None], *, replace: bool = False) -> dict[str, str]:
        """Set or remove schema metadata keys (or replace all); returns the new schema metadata."""
        self._commit_update_config(LanceOperation.UpdateConfig(schema_metadata_updates=metadata.update_map(
            values, replace, "schema metadata")))
        return self.schema_metadata

    def update_field_metadata(
        self, field_updates: Mapping[str, Mapping[str, str | None]], *, replace: bool = False
    ) -> None:
        """Set or remove metadata keys of fields named by (dotted) path."""
        self._commit_update_config(LanceOperation.UpdateConfig(
            field_metadata_updates=metadata.field_metadata_updates(self._schema, field_updates, replace)))

    def get_transactions(self, recent_transactions: int = 10) -> list[Transaction | None]:
        """The transactions of the latest ``recent_transactions`` versions up to this one, newest first."""
        return metadata.get_transactions(self, recent_transactions)

    def validate(self) -> None:
        """pylance's integrity checks of this version (fragment ids, data file lengths, deletion
        vectors, index segments); raises ``CorruptFileError`` naming the file (``core.validate``)."""
        from airflow_lance.core.validate import validate

        validate(self)

    @property
    def stats(self) -> metadata.LanceStats:
        """``ds.stats.dataset_stats()`` (pylance's name)."""
        return metadata.LanceStats(self)

    def migrate_manifest_paths_v2(self) -> None:
        """Rename V1 manifests to V2 names (idempotent; not while others commit)."""
        migrate_manifest_paths_v2(self._store)
        self._load(read_manifest(self._store, self.version))

    @property
    def _stable_row_ids(self) -> bool:
        return bool(self._manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)

    def _commit_planned(
        self,
        plan: Callable[[LanceDataset], tuple[LanceOperation.BaseOperation, Any]],
        conflict_retries: int,
        retry_timeout: dt.timedelta | None = None,
    ) -> Any:
        """Plan on this handle's version, commit, and on a retryable conflict re-plan on the
        latest version (at most ``conflict_retries`` times, within ``retry_timeout``); move the
        handle to the committed version and return what ``plan`` returned besides the operation."""
        current: LanceDataset = self
        deadline = time.monotonic() + retry_timeout.total_seconds() if retry_timeout is not None else None
        for attempt in range(conflict_retries + 1):
            operation, result = plan(current)
            try:
                new = LanceDataset.commit(current, operation, current.version)
            except IncompatibleTransactionError:
                raise
            except CommitConflictError:
                if attempt == conflict_retries or (deadline is not None and time.monotonic() > deadline):
                    raise
                current = _open_version(self._store, None)
                continue
            self._advance(new)
            return result
        raise AssertionError("unreachable")

    def update(
        self,
        updates: Mapping[str, str],
        where: str | pc.Expression | None = None,
        conflict_retries: int = 10,
        retry_timeout: dt.timedelta = dt.timedelta(seconds=30),
        data_storage_version: str | None = None,
    ) -> dict[str, int]:
        """Set ``updates`` ({column: SQL expression over the old row}) on the rows matching
        ``where`` (all rows when None); returns pylance's ``{"num_rows_updated": n}``. The rows
        are rewritten into new fragments (see ``core.update``); one ``Update`` commit, also
        when no row matches, as in pylance; the handle moves to it."""
        from airflow_lance.core.update import plan_update
        from airflow_lance.core.write import resolve_storage_version

        def plan(current: LanceDataset) -> tuple[LanceOperation.BaseOperation, dict[str, int]]:
            version = resolve_storage_version(data_storage_version, current.manifest_file)
            operation, count = plan_update(
                current._store, current._fragments, current._schema, updates, where, current.version, version,
                current._stable_row_ids,
            )
            return operation, {"num_rows_updated": count}

        return self._commit_planned(plan, conflict_retries, retry_timeout)

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsertBuilder:
        """pylance's merge-insert builder (``when_matched_update_all``, ``when_not_matched_insert_all``,
        ``when_not_matched_by_source_delete``, ``execute``); see ``core.merge_insert``."""
        from airflow_lance.core.merge_insert import MergeInsertBuilder

        return MergeInsertBuilder(self, on)

    def insert(self, data: DataLike, *, mode: WriteMode = "append", **kwargs: Any) -> None:
        """Write ``data`` into this dataset (pylance's ``insert``: ``write_dataset`` with
        ``mode="append"`` by default); the handle moves to the new version."""
        self._advance(write_dataset(data, self._store, mode=mode, **kwargs))

    # -- schema and data evolution (core/evolution.py) ---------------------------
    def add_columns(self, transforms: Any, read_columns: Sequence[str] | None = None,
                    reader_schema: pa.Schema | None = None, batch_size: int | None = None) -> None:
        """New columns from ``{name: SQL}``, a UDF (``batch_udf``) or all-null ``pa.Field``(s)/``pa.Schema``:
        one Merge commit; the handle moves to it."""
        from airflow_lance.core import evolution

        self._advance(evolution.add_columns(self, transforms, read_columns, reader_schema, batch_size))

    def drop_columns(self, columns: Sequence[str]) -> None:
        """Remove columns from the schema (a Project: metadata only)."""
        from airflow_lance.core import evolution

        self._advance(evolution.drop_columns(self, columns))

    def alter_columns(self, *alterations: Mapping[str, Any]) -> None:
        """Rename (``name``), relax or tighten (``nullable``) or cast (``data_type``) columns by ``path``."""
        from airflow_lance.core import evolution

        self._advance(evolution.alter_columns(self, alterations))

    def merge(self, data_obj: Any, left_on: str, right_on: str | None = None, schema: pa.Schema | None = None) -> None:
        """Add the columns of ``data_obj`` joined on ``data_obj[right_on] == self[left_on]`` (null where unmatched)."""
        from airflow_lance.core import evolution

        self._advance(evolution.merge(self, data_obj, left_on, right_on, schema))

    # -- maintenance ----------------------------------------------------------
    @property
    def optimize(self) -> DatasetOptimizer:
        """Compaction bound to this handle: ``ds.optimize.compact_files(...)`` (pylance's name)."""
        from airflow_lance.core.optimize import DatasetOptimizer

        return DatasetOptimizer(self)

    def list_indices(self) -> list[dict[str, Any]]:
        """pylance 14's ``list_indices()``: one dict per index entry of this version."""
        from airflow_lance.core.indices import list_indices

        return list_indices(self)

    def describe_indices(self) -> list[Any]:
        """pylance 14's ``describe_indices()``: one ``IndexDescription`` per index name."""
        from airflow_lance.core.indices import describe_indices

        return describe_indices(self)

    def create_scalar_index(
        self, column: str, index_type: str = "BTREE", name: str | None = None, *, replace: bool = True,
        train: bool = True,
    ) -> None:
        """Build a BTREE, BITMAP or LABEL_LIST index on ``column`` (see :mod:`airflow_lance.core.indices.create`;
        ``train=False``: an empty index, built by a later ``optimize_indices``)."""
        from airflow_lance.core.indices import create_scalar_index

        create_scalar_index(self, column, index_type, name, replace=replace, train=train)

    def create_index(
        self, column: str | list[str], index_type: str, name: str | None = None, metric: str = "L2",
        replace: bool = False, num_partitions: int | None = None, num_sub_vectors: int | None = None, *,
        target_partition_size: int | None = None, train: bool = True, **kwargs: Any,
    ) -> LanceDataset:
        """Build an IVF_FLAT or IVF_PQ vector index on ``column`` with pylance 14's parameters
        (see :mod:`airflow_lance.core.indices.vector`; ``train=False``: an empty index, built by a
        later ``optimize_indices``); returns this handle, moved to the new version."""
        from airflow_lance.core.indices import create_index

        create_index(self, column, index_type, name, metric, replace, num_partitions, num_sub_vectors,
                     target_partition_size=target_partition_size, train=train, **kwargs)
        return self

    def optimize_indices(self, *, num_indices_to_merge: int | None = None, index_names: Sequence[str] | None = None,
                         retrain: bool = False) -> None:
        """pylance 14's ``optimize_indices``: fold unindexed fragments into the scalar indices
        (``num_indices_to_merge`` 0: a delta segment; n: merge the n newest segments; default 1)."""
        from airflow_lance.core.indices import optimize_indices

        optimize_indices(self, num_indices_to_merge=num_indices_to_merge, index_names=index_names, retrain=retrain)

    def drop_index(self, name: str) -> None:
        """Drop every entry of the index ``name`` (one CreateIndex transaction, as pylance 14)."""
        from airflow_lance.core.indices import drop_index

        drop_index(self, name)

    def cleanup_old_versions(
        self,
        older_than: dt.timedelta | None = None,
        retain_versions: int | None = None,
        *,
        delete_unverified: bool = False,
        error_if_tagged_old_versions: bool = True,
        dry_run: bool = False,
    ) -> CleanupStats:
        """Remove versions older than this handle's that the policy lets go (see ``core.cleanup``)."""
        from airflow_lance.core.cleanup import cleanup_old_versions

        return cleanup_old_versions(
            self,
            older_than=older_than,
            retain_versions=retain_versions,
            delete_unverified=delete_unverified,
            error_if_tagged_old_versions=error_if_tagged_old_versions,
            dry_run=dry_run,
        )

    def restore(self) -> LanceDataset:
        """Make this handle's (old) version the latest one, as a new commit; the handle moves
        to the new version (pylance's behaviour) and is returned."""
        return self._advance(LanceDataset.commit(self, LanceOperation.Restore(self.version), self.latest_version))

    @staticmethod
    def commit(
        base_uri: str | os.PathLike[str] | LanceDataset,
        operation: LanceOperation.BaseOperation,
        read_version: int | None = None,
        *,
        storage_options: Mapping[str, str] | None = None,
        max_retries: int = 20,
        commit_message: str | None = None,
        transaction_properties: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        idempotency_lookback: int = DEFAULT_IDEMPOTENCY_LOOKBACK,
        create_only: bool = False,
    ) -> LanceDataset:
        """Commit ``operation`` planned against ``read_version``; return the new version.

        ``read_version`` may be omitted for an Overwrite or a Restore (they then
        apply on top of whatever is latest, as in pylance) and is required for
        other operations.
        With ``idempotency_key``, if a version committed with the same key is
        among the last ``idempotency_lookback`` versions, that version is
        returned and nothing is committed. With ``create_only`` the commit must
        create the dataset: DatasetAlreadyExistsError if it exists, also when a
        concurrent writer creates it first.
        """
        store = base_uri.store if isinstance(base_uri, LanceDataset) else open_store(base_uri, storage_options)
        if read_version is None:
            if not isinstance(operation, (LanceOperation.Overwrite, LanceOperation.Restore)):
                raise InvalidInputError(f"read_version is required to commit {type(operation).__name__}")
            found = latest_version(store)
            read_version = found[0] if found else 0
        transaction = Transaction(
            read_version=read_version,
            operation=operation,
            transaction_properties=build_properties(commit_message, transaction_properties, idempotency_key),
        )
        manifest_file = commit_transaction(
            store, transaction, max_retries=max_retries, idempotency_lookback=idempotency_lookback,
            create_only=create_only,
        )
        return LanceDataset(store, manifest_file)


def _open_version(store: ObjectStore, version: int | str | None) -> LanceDataset:
    if version is None:
        return LanceDataset(store, read_latest_manifest(store))
    if isinstance(version, bool) or not isinstance(version, (int, str)):
        raise InvalidInputError(f"version must be a number or a tag name, not {version!r}")
    if isinstance(version, str):
        version = Tags(store).get_version(version)
    if version < 1:
        raise VersionNotFoundError(f"version {version} of {store.uri} does not exist")
    return LanceDataset(store, read_manifest(store, version))


def dataset(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
) -> LanceDataset:
    """Open a dataset at its latest version, a version number, or a tag."""
    return _open_version(open_store(uri, storage_options), version)


def write_dataset(
    data: DataLike,
    uri: str | os.PathLike[str] | ObjectStore,
    schema: pa.Schema | None = None,
    mode: WriteMode = "create",
    *,
    max_rows_per_file: int = MAX_ROWS_PER_FILE,
    max_bytes_per_file: int = MAX_BYTES_PER_FILE,
    storage_options: Mapping[str, str] | None = None,
    data_storage_version: str | None = None,
    commit_message: str | None = None,
    transaction_properties: Mapping[str, str] | None = None,
    max_rows_per_group: int = GROUP_ROWS,
    enable_v2_manifest_paths: bool = True,
    enable_stable_row_ids: bool = False,
    auto_cleanup_options: Mapping[str, int] | None = None,
) -> LanceDataset:
    """Write ``data`` as a new dataset (``create``), a new version (``append``) or a
    replacement (``overwrite``), in one atomic commit.

    ``data`` is anything pylance accepts (Arrow tables, batches, readers, iterables of
    batches, pandas DataFrames, dicts of columns, lists of dicts, Lance datasets).
    When the write creates the dataset: ``enable_v2_manifest_paths=False`` names its
    manifests ``{version}.manifest`` (V1), ``enable_stable_row_ids`` gives its rows stable
    ids, and ``auto_cleanup_options`` (``{"interval": n, "older_than_seconds": s}``) sets
    its ``lance.auto_cleanup.*`` config; on an existing dataset the three are ignored, as
    in pylance. ``max_rows_per_group`` sets the row groups of legacy files.

    ``data_storage_version`` ("legacy"/"0.1", "2.0", "2.1", "2.2" or "stable") defaults to
    2.2 for new datasets; appends always use the dataset's own version.
    """
    store = uri if isinstance(uri, ObjectStore) else open_store(uri, storage_options)
    store.ensure_committable()  # before writing data files that could never be committed
    check_write_limits(max_rows_per_file, max_bytes_per_file, max_rows_per_group)
    cleanup_config = auto_cleanup.config_values(auto_cleanup_options) if auto_cleanup_options is not None else None
    existing, target, batches, version = prepare_write(store, data, schema, mode, data_storage_version)
    fragments = write_data_files(
        store, batches, target, max_rows_per_file=max_rows_per_file, max_bytes_per_file=max_bytes_per_file,
        data_storage_version=version, max_rows_per_group=max_rows_per_group,
    )
    operation: LanceOperation.BaseOperation
    if mode == "append" and existing is not None:
        operation = LanceOperation.Append(fragments)
    else:
        # pylance sets the auto-cleanup config only when the write creates the dataset
        operation = LanceOperation.Overwrite(target, fragments, cleanup_config if existing is None else None)
    transaction = Transaction(
        read_version=existing.version if existing is not None else 0,
        operation=operation,
        transaction_properties=build_properties(commit_message, transaction_properties),
    )
    manifest_file = commit_transaction(
        store, transaction, create_only=existing is None and mode in ("create", "append"), latest_known=existing,
        new_dataset_scheme=ManifestNamingScheme.V2 if enable_v2_manifest_paths else ManifestNamingScheme.V1,
        enable_stable_row_ids=bool(enable_stable_row_ids),
    )
    return LanceDataset(store, manifest_file)
