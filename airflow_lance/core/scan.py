"""Reading fragments: data files -> projected columns -> deletions -> filter."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core import layout
from airflow_lance.core.bases import data_file_location
from airflow_lance.core.deletion import deletion_path, keep_mask, read_deletion_vector
from airflow_lance.core.errors import (
    CorruptFileError,
    DataFileNotFoundError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.file.blob_v2 import read_sidecars
from airflow_lance.core.file.format import LEGACY_VERSIONS
from airflow_lance.core.fragment import DataFile, FragmentMetadata
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.split_structs import read_split, split_fields
from airflow_lance.core.storage import ObjectStore


#: DataFile (major, minor) pairs we read: legacy (0.1/0.2 files), 2.0 (also written as 0.3), 2.1, 2.2.
READABLE_DATA_FILE_VERSIONS = ((0, 0), (0, 1), (0, 2), (0, 3), (2, 0), (2, 1), (2, 2))


def _check_data_file(data_file: DataFile, path: str) -> None:
    version = (data_file.file_major_version, data_file.file_minor_version)
    if version not in READABLE_DATA_FILE_VERSIONS:
        raise UnsupportedFeatureError(
            f"{path}: data file version {version[0]}.{version[1]} is not supported for reading "
            "(supported: legacy 0.1, 2.0, 2.1, 2.2)"
        )


def _column_index(data_file: DataFile) -> dict[int, int]:
    if data_file.is_legacy:
        return {field_id: field_id for field_id in data_file.fields if field_id >= 0}
    return {field_id: column for field_id, column in zip(data_file.fields, data_file.column_indices) if field_id >= 0}


class FragmentReader:
    """The data files of one fragment opened once for any number of reads of rows or columns.

    ::

        with FragmentReader(store, fragment) as reader:
            reader.read(projection)                    # every physical row
            reader.read(projection, rows=offsets)      # physical offsets, in that order

    Deletions are not applied (``read_fragment`` does that). A row read decodes
    only the pages (2.1+: chunks) holding the rows; legacy files are read whole
    once per projection and then taken from.
    """

    def __init__(self, store: ObjectStore, fragment: FragmentMetadata) -> None:
        self.store = store
        self.fragment = fragment
        self._open: dict[int, tuple[pa.NativeFile, LanceFileReader]] = {}
        self._legacy_cache: dict[tuple[int, tuple[int, ...]], pa.Table] = {}

    def __enter__(self) -> FragmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for source, _ in self._open.values():
            source.close()
        self._open.clear()
        self._legacy_cache.clear()

    def data_file_rows(self) -> list[int]:
        """The row count of each data file (from its footer), in the fragment's order."""
        return [self._reader(n, data_file).num_rows for n, data_file in enumerate(self.fragment.files)]

    def _reader(self, number: int, data_file: DataFile) -> LanceFileReader:
        opened = self._open.get(number)
        if opened is not None:
            return opened[1]
        store, path = data_file_location(self.store, data_file)
        try:
            source = store.open_input(path)
        except FileNotFoundError as exc:
            raise DataFileNotFoundError(path, f"data file is missing from dataset {self.store.uri}"
                                        + (f" (base path {store.uri})" if store is not self.store else "")) from exc
        try:
            reader = LanceFileReader(source, path=path, file_size=data_file.file_size_bytes,
                                     blob_sidecars=read_sidecars(store, path.removesuffix(".lance"), path))
        except BaseException:
            source.close()
            raise
        self._open[number] = (source, reader)
        return reader

    def _read_data_file(
        self, number: int, data_file: DataFile, projection: LanceSchema, done: Collection[int], rows: np.ndarray | None
    ) -> dict[int, pa.ChunkedArray | pa.Array]:
        """The top-level fields of ``projection`` stored in ``data_file`` (except those in ``done``), by id."""
        path = layout.data_file_path(data_file.path)
        _check_data_file(data_file, path)
        column_index = _column_index(data_file)
        # 2.1+ files list only leaf fields: a top-level field is stored if any field below it is
        wanted = [f for f in projection.top_level()
                  if f.id not in done and any(i in column_index for i in projection.subtree_ids(f.id))]
        if not wanted:
            return {}
        sub = projection.project([f.name for f in wanted])
        reader = self._reader(number, data_file)
        if rows is not None and reader.version in LEGACY_VERSIONS:
            key = (number, tuple(f.id for f in wanted))
            table = self._legacy_cache.get(key)
            if table is None:
                table = self._legacy_cache[key] = reader.read(sub, column_index=column_index)
            table = table.take(pa.array(rows))
        else:
            table = reader.read(sub, column_index=column_index, rows=rows)
        return {field.id: table.column(i) for i, field in enumerate(wanted)}

    def _split_structs(self, projection: LanceSchema, rows: np.ndarray | None) -> dict[int, pa.Array]:
        """Structs whose children are in several files (a nested cast), merged (core/split_structs.py)."""
        if len(self.fragment.files) < 2:
            return {}
        stored = [_column_index(f) for f in self.fragment.files]
        files = self.fragment.files
        return {
            field_id: read_split(projection, field_id, numbers, stored,
                                 lambda n, sub, fid=field_id: self._read_data_file(n, files[n], sub, (), rows)[fid])
            for field_id, numbers in split_fields(projection, stored).items()
        }

    def read(self, projection: LanceSchema, rows: np.ndarray | None = None) -> pa.Table:
        """Physical rows (all, or those at ``rows``) of the top-level fields of ``projection``.

        Fields missing from every data file of the fragment read as nulls.
        """
        fragment = self.fragment
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64)
            if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= fragment.physical_rows):
                raise InvalidInputError(f"row offsets outside fragment {fragment.id}'s {fragment.physical_rows} rows")
        count = fragment.physical_rows if rows is None else len(rows)
        columns: dict[int, pa.ChunkedArray | pa.Array] = self._split_structs(projection, rows)
        for number, data_file in enumerate(fragment.files):
            # a field id in two files (0.10-era add/drop columns reused ids): the first file's values, as
            # Lance reads them (Lance's commit-time ``fix_schema`` then renumbers the later copy)
            columns.update(self._read_data_file(number, data_file, projection, columns.keys(), rows))
        arrow_schema = projection.to_arrow()
        arrays = []
        for field, arrow_field in zip(projection.top_level(), arrow_schema):
            column = columns.get(field.id)
            if column is None:
                column = pa.nulls(count, arrow_field.type)
            elif len(column) != count:
                raise CorruptFileError(
                    layout.data_file_path(fragment.files[0].path),
                    f"field {field.name!r} has {len(column)} rows, fragment {fragment.id} expects {count}",
                )
            arrays.append(column)
        if arrays:
            return pa.Table.from_arrays(arrays, schema=arrow_schema)
        return pa.table({"_": pa.nulls(count)}).drop_columns(["_"])


def read_fragment(
    store: ObjectStore,
    fragment: FragmentMetadata,
    projection: LanceSchema,
    *,
    with_deletions: bool = True,
    rows: np.ndarray | None = None,
) -> pa.Table:
    """The rows of one fragment for the top-level fields of ``projection``.

    ``rows``: physical offsets to read (in that order; deletions are then not
    applied), decoding only the pages holding them. Fields missing from every
    data file of the fragment read as nulls.
    """
    with FragmentReader(store, fragment) as reader:
        table = reader.read(projection, rows)
    if rows is None and with_deletions and fragment.deletion_file is not None:
        deleted = read_deletion_vector(store, fragment.id, fragment.deletion_file)
        mask = keep_mask(fragment.physical_rows, deleted, deletion_path(fragment.id, fragment.deletion_file))
        table = table.filter(pa.array(mask)) if table.num_columns else table.slice(0, int(mask.sum()))
    return table


def apply_filter(table: pa.Table, expression: pc.Expression) -> pa.Table:
    """Filter ``table``; evaluation errors (division by zero, bad casts) become InvalidInputError."""
    try:
        return table.filter(expression)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidInputError(f"filter {expression} cannot be evaluated: {exc}") from exc


def scan_fragments(
    store: ObjectStore,
    fragments: Sequence[FragmentMetadata],
    schema: LanceSchema,
    columns: Sequence[str] | None,
    filter_expr: pc.Expression | None,
    filter_columns: Sequence[str],
) -> Iterator[pa.Table]:
    """Yield one table per fragment: projected, deletions applied, filtered."""
    out_names = list(columns) if columns is not None else [f.name for f in schema.top_level()]
    read_names = out_names + [name for name in filter_columns if name not in out_names]
    projection = schema.project(read_names)
    for fragment in fragments:
        table = read_fragment(store, fragment, projection)
        if filter_expr is not None:
            table = apply_filter(table, filter_expr)
        if read_names != out_names:
            table = table.select(out_names)
        yield table
