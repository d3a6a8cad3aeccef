"""Writing data: ``write_fragments`` (data files only) and ``write_dataset``.

Input is streamed batch by batch: memory stays bounded by roughly one page
per column, not by the size of the input.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, Union

import pyarrow as pa

from airflow_lance.core import layout
from airflow_lance.core.errors import (
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from airflow_lance.core.file import LanceFileWriter, blob_v2
from airflow_lance.core.file.legacy_writer import (
    GROUP_ROWS,
    LegacyFileWriter,
    check_dictionaries,
    check_legacy_layouts,
)
from airflow_lance.core.file.writer import check_supported_layouts
from airflow_lance.core.fragment import DataFile, FragmentMetadata
from airflow_lance.core.inputs import coerce_data
from airflow_lance.core.manifest import (
    LEGACY_STORAGE_VERSION,
    ManifestFile,
    data_storage_version,
    read_latest_manifest,
)
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore, open_store

#: Also pandas DataFrames, dicts of columns, lists of dicts, Lance datasets (see ``core.inputs``).
DataLike = Union[pa.Table, pa.RecordBatch, pa.RecordBatchReader, Iterable[pa.RecordBatch], Mapping, Any]
WriteMode = Literal["create", "append", "overwrite"]

MAX_ROWS_PER_FILE = 1024 * 1024
MAX_BYTES_PER_FILE = 90 * 1024**3
SUPPORTED_STORAGE_VERSIONS = ("0.1", "2.0", "2.1", "2.2")
#: Data storage version of new datasets when none is requested.
DEFAULT_STORAGE_VERSION = "2.2"
_VERSION_ALIASES = {"stable": "2.2", "next": "2.3", "legacy": "0.1"}


def resolve_storage_version(requested: str | None, existing: ManifestFile | None) -> str:
    """The data storage version to write: the dataset's own, else the request, else the default."""
    if existing is not None:
        version = data_storage_version(existing.manifest)
        wanted = _VERSION_ALIASES.get(requested, requested) if requested else version
        if wanted != version:
            raise InvalidInputError(
                f"dataset uses data storage version {version}; cannot write {wanted} files into it"
            )
    else:
        version = _VERSION_ALIASES.get(requested, requested) if requested else DEFAULT_STORAGE_VERSION
    if version not in SUPPORTED_STORAGE_VERSIONS:
        raise UnsupportedFeatureError(
            f"data storage version {version} is not supported for writing (supported: "
            f"{', '.join(SUPPORTED_STORAGE_VERSIONS)})"
        )
    return version


def as_batches(data: DataLike, schema: pa.Schema | None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """Normalise supported inputs into (schema, stream of record batches)."""
    data = coerce_data(data, schema)
    if isinstance(data, pa.Table):
        table = data if schema is None or data.schema.equals(schema) else data.cast(schema)
        return table.schema, iter(table.to_batches())
    if isinstance(data, pa.RecordBatch):
        batch = data if schema is None or data.schema.equals(schema) else data.cast(schema)
        return batch.schema, iter([batch])
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        iterator = iter(data)
        if schema is None:
            try:
                first = next(iterator)
            except StopIteration:
                raise InvalidInputError("an empty iterable of batches needs an explicit schema") from None
            if not isinstance(first, pa.RecordBatch):
                raise InvalidInputError(f"expected pyarrow RecordBatches, got {type(first).__name__}")

            def chained() -> Iterator[pa.RecordBatch]:
                yield first
                yield from iterator

            return first.schema, chained()
        return schema, _cast_batches(iterator, schema)
    raise InvalidInputError(f"cannot write data of type {type(data).__name__}")


def _cast_batches(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Batches given with an explicit ``schema``, cast to it as pylance does (safe casts only:
    ``int32`` to ``int64`` or ``1.0`` to ``1`` pass, ``1.5`` to an integer does not). A batch that
    does not cast is passed on as it is: checking it against the dataset's schema names the field."""
    names = set(schema.names)
    for batch in batches:
        if not isinstance(batch, pa.RecordBatch):
            raise InvalidInputError(f"expected pyarrow RecordBatches, got {type(batch).__name__}")
        if batch.schema.equals(schema) or set(batch.schema.names) != names:
            yield batch
            continue
        try:
            yield batch.select(schema.names).cast(schema, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
            yield batch


def _conform(batches: Iterator[pa.RecordBatch], schema: LanceSchema) -> Iterator[pa.RecordBatch]:
    """Check each batch against the target schema; give it the target's column order and types."""
    for batch in batches:
        if not isinstance(batch, pa.RecordBatch):
            raise InvalidInputError(f"expected pyarrow RecordBatches, got {type(batch).__name__}")
        yield schema.align(batch)


class _FragmentSink:
    """Writes consecutive data files, one fragment each, cutting at the size limits.

    Legacy files (``version="0.1"``) share one dictionary per column: ``dictionaries``
    (the dataset's, checked against the first batch as pylance does), else the first batch's.
    Their rows are stored in batches of ``min(1024, max_rows)``; a file ends at exactly
    ``max_rows`` rows (pylance ends it after the batch that reaches it: the same files when
    ``max_rows`` is at most 1024 or a multiple of it, as its default is).
    """

    def __init__(self, store: ObjectStore, schema: LanceSchema, max_rows: int, max_bytes: int, version: str,
                 dictionaries: Mapping[int, pa.Array] | None = None, group_rows: int = GROUP_ROWS) -> None:
        self.store = store
        self.group_rows = group_rows
        self.schema = schema
        self.version = version
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.dictionaries = dict(dictionaries or {})
        self.fragments: list[FragmentMetadata] = []
        self._stack: contextlib.ExitStack | None = None
        self._writer: LanceFileWriter | LegacyFileWriter | None = None
        self._sidecars: blob_v2.SidecarWriter | None = None
        self._name = ""

    def _open(self) -> LanceFileWriter | LegacyFileWriter:
        self._name = layout.new_data_file_name()
        self._stack = contextlib.ExitStack()
        sink = self._stack.enter_context(self.store.open_output(layout.data_file_path(self._name)))
        self._sidecars = None
        if any(blob_v2.is_blob_v2(field.metadata) for field in self.schema.top_level()):
            self._sidecars = blob_v2.SidecarWriter(self.store, layout.data_file_path(self._name).removesuffix(".lance"))
            self._stack.callback(self._sidecars.abort)  # drops an open pack file on abort (finish closed it)
        if self.version == LEGACY_STORAGE_VERSION:
            self._writer = LegacyFileWriter(sink, self.schema, dictionaries=self.dictionaries,
                                            group_rows=min(self.group_rows, self.max_rows))
        else:
            self._writer = LanceFileWriter(sink, self.schema, version=self.version, blob_sidecars=self._sidecars)
        return self._writer

    def _close(self) -> None:
        writer, stack = self._writer, self._stack
        assert writer is not None and stack is not None
        with stack:
            size = writer.finish()
        if isinstance(writer, LegacyFileWriter):
            self.dictionaries = writer.dictionaries  # the next files of this write use the same values
        data_file = DataFile(self._name, tuple(writer.field_ids), tuple(writer.column_indices),
                             *writer.file_version, size)
        self.fragments.append(FragmentMetadata(0, (data_file,), writer.num_rows))
        self._writer = self._stack = None

    def write(self, batch: pa.RecordBatch) -> None:
        if self.version == LEGACY_STORAGE_VERSION and not self.fragments and self._writer is None:
            check_dictionaries(batch, self.schema, self.dictionaries)  # before anything is written
        offset = 0
        while offset < batch.num_rows:
            writer = self._writer or self._open()
            take = min(batch.num_rows - offset, self.max_rows - writer.num_rows)
            writer.write_batch(batch.slice(offset, take))
            offset += take
            if writer.num_rows >= self.max_rows or writer.bytes_written >= self.max_bytes:
                self._close()

    def finish(self) -> list[FragmentMetadata]:
        if self._writer is not None:
            self._close()
        return self.fragments

    def abort(self) -> None:
        if self._stack is not None:
            self._stack.__exit__(RuntimeError, RuntimeError("aborted"), None)
            self._stack = None


def write_data_files(
    store: ObjectStore,
    batches: Iterator[pa.RecordBatch],
    schema: LanceSchema,
    *,
    max_rows_per_file: int = MAX_ROWS_PER_FILE,
    max_bytes_per_file: int = MAX_BYTES_PER_FILE,
    data_storage_version: str | None = None,
    max_rows_per_group: int = GROUP_ROWS,
) -> list[FragmentMetadata]:
    """Write batches as new fragments (ids 0, committed by nobody) and return them.

    The files get the dataset's data storage version (``store`` is asked when
    ``data_storage_version`` is None; a new dataset gets the default).
    ``max_rows_per_group`` sets the row groups of legacy (0.1) files; 2.x files have none.
    """
    check_write_limits(max_rows_per_file, max_bytes_per_file, max_rows_per_group)
    latest: ManifestFile | None | bool = False  # False: not read yet
    if data_storage_version is None:
        latest = _latest_or_none(store)
        data_storage_version = resolve_storage_version(None, latest)
    elif data_storage_version not in SUPPORTED_STORAGE_VERSIONS:
        data_storage_version = resolve_storage_version(data_storage_version, None)
    dictionaries = None
    if data_storage_version == LEGACY_STORAGE_VERSION:
        check_legacy_layouts(schema)  # before the sink creates anything
        dictionaries = _dataset_dictionaries(store, schema, _latest_or_none(store) if latest is False else latest)
    else:
        check_supported_layouts(schema, data_storage_version)  # before the sink creates anything
    sink = _FragmentSink(store, schema, max_rows_per_file, max_bytes_per_file, data_storage_version, dictionaries,
                         max_rows_per_group)
    try:
        for batch in batches:
            if batch.num_rows:
                sink.write(batch)
    except BaseException:
        sink.abort()
        raise
    return sink.finish()


def check_write_limits(max_rows_per_file: int, max_bytes_per_file: int, max_rows_per_group: int = GROUP_ROWS) -> None:
    """The size limits of a write are positive integers (checked before anything is written)."""
    for name, value in (("max_rows_per_file", max_rows_per_file), ("max_bytes_per_file", max_bytes_per_file),
                        ("max_rows_per_group", max_rows_per_group)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidInputError(f"{name} must be a positive integer, not {value!r}")


def _dataset_dictionaries(store: ObjectStore, schema: LanceSchema, latest: ManifestFile | None) -> dict[int, pa.Array]:
    """The dataset's dictionary values for the fields of ``schema`` that carry them (a schema
    taken from the dataset's manifest: appends, compaction); fields of a new schema get the data's."""
    wanted = {f.id: f.logical_type for f in schema.fields if f.HasField("dictionary") and f.dictionary.length}
    if not wanted:
        return {}
    known = latest.dictionaries if latest is not None else {}
    found = {}
    for field_id, logical_type in wanted.items():
        values = known.get(field_id)
        if values is None or values.logical_type != logical_type:
            raise UnsupportedFeatureError(
                f"the dictionary values of field {schema.field(field_id).name!r} of {store.uri} are not known: "
                "cannot write legacy data files for it")
        found[field_id] = values.to_arrow()
    return found


def _latest_or_none(store: ObjectStore) -> ManifestFile | None:
    try:
        return read_latest_manifest(store)
    except DatasetNotFoundError:
        return None


def _present_columns(target: LanceSchema, source: pa.Schema, version: str) -> LanceSchema:
    """As pylance 14: an append may leave out nullable top-level columns (its fragments store none
    of them and read them as null, until ``only_missing`` add-columns fills them); not with the
    legacy format, nor a non-nullable column (``check_compatible`` then names it missing)."""
    missing = [f for f in target.top_level() if f.name not in source.names]
    known = {f.name for f in target.top_level()}
    if not missing or version == LEGACY_STORAGE_VERSION or not all(f.nullable for f in missing) or not all(
            name in known for name in source.names):  # other problems: check_compatible names them all
        return target
    return target.project([f.name for f in target.top_level() if f.name in source.names])


def prepare_write(
    store: ObjectStore,
    data: DataLike,
    schema: pa.Schema | None,
    mode: str,
    data_storage_version: str | None,
) -> tuple[ManifestFile | None, LanceSchema, Iterator[pa.RecordBatch], str]:
    """Validate a write against the dataset.

    Returns (latest manifest, target schema, batches, data storage version):
    appends keep the dataset's version; overwrites and new datasets use the
    request or the default.
    """
    if mode not in ("create", "append", "overwrite"):
        raise InvalidInputError(f"mode must be 'create', 'append' or 'overwrite', not {mode!r}")
    existing = _latest_or_none(store)
    if mode == "create" and existing is not None:
        raise DatasetAlreadyExistsError(f"dataset {store.uri} already exists (use mode='append' or 'overwrite')")
    source_schema, batches = as_batches(data, schema)
    # Appends, and overwrites that do not ask for a version, keep the dataset's own version.
    keep = mode == "append" or (mode == "overwrite" and data_storage_version is None)
    version = resolve_storage_version(data_storage_version, existing if keep else None)
    appending = mode == "append" and existing is not None
    if version == "2.2":  # 'lance-encoding:blob' fields are blob v2 columns in 2.2, as pylance 14 stores them
        dataset_types = None
        if appending:
            dataset_types = {f.name: f.type for f in LanceSchema.from_fields(list(existing.manifest.fields), {}
                                                                             ).to_arrow()}
        source_schema, batches = blob_v2.convert_v1(source_schema, batches, dataset_types)
    if appending:
        target = LanceSchema.from_fields(list(existing.manifest.fields), dict(existing.manifest.schema_metadata))
        target = _present_columns(target, source_schema, version)
        target.check_compatible(source_schema)
    else:
        target = LanceSchema.from_arrow(source_schema)
    return existing, target, _conform(batches, target), version


def write_fragments(
    data: DataLike,
    dataset_uri: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    *,
    mode: WriteMode = "append",
    max_rows_per_file: int = MAX_ROWS_PER_FILE,
    max_bytes_per_file: int = MAX_BYTES_PER_FILE,
    data_storage_version: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> list[FragmentMetadata]:
    """Write data files under ``dataset_uri`` without committing anything.

    For ``mode="append"`` to an existing dataset the data must match its schema
    and the field ids of the dataset are used; otherwise the fragments carry a
    fresh schema (commit them with ``LanceOperation.Overwrite``). Returns the
    fragments with id 0 ("assign at commit").
    """
    store = open_store(dataset_uri, storage_options)
    _existing, target, batches, version = prepare_write(store, data, schema, mode, data_storage_version)
    return write_data_files(
        store, batches, target, max_rows_per_file=max_rows_per_file, max_bytes_per_file=max_bytes_per_file,
        data_storage_version=version,
    )
