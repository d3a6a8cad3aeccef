"""Scans with pylance's options, ``take`` by position and by row id.

``LanceScanner`` (pylance's name) reads a dataset version with a projection
(column names or ``{name: SQL}``), a SQL filter, ``limit``/``offset`` applied
after the filter (reading stops once the limit is reached; with no filter,
fragments before the offset are skipped from metadata alone), ``batch_size``,
a subset of ``fragments`` and the ``_rowid``/``_rowaddr`` columns.

Row addresses are ``fragment_id << 32 | physical offset``. Row ids equal the
addresses unless the dataset has stable row ids; then they come from each
fragment's row id sequence (``core/rowids.py``).

``take`` (positions among the live rows) and ``take_rows`` (row ids) group the
requested rows by fragment with numpy and read only the fragments they touch.
"""

from __future__ import annotations

import collections
import itertools
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core import feature_flags, rowids
from airflow_lance.core.arrays import arrow_dataset, empty_table, sorted_unique
from airflow_lance.core.deletion import deletion_path, keep_mask, read_deletion_vector
from airflow_lance.core.errors import (
    CorruptFileError,
    InvalidInputError,
    NegativeIndexError,
    RowIndexError,
    UnsupportedFeatureError,
)
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.scan import FragmentReader, apply_filter, read_fragment
from airflow_lance.core.schema import LanceSchema

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

ROW_ID = "_rowid"
ROW_ADDR = "_rowaddr"
_SPECIAL = (ROW_ID, ROW_ADDR)
_OFFSET_MASK = np.uint64((1 << 32) - 1)
#: Rows of the first batch of a filtered scan with a limit; a batch without matches makes the next
#: BATCH_GROWTH times larger, one with matches sizes the next for the rows still wanted at the rate
#: seen; up to the maximum, carried on to the next fragment.
FIRST_BATCH_ROWS = 8192
BATCH_GROWTH = 4
MAX_BATCH_ROWS = 1 << 20
#: Threads decoding the fragments of a scan without limit/offset (1: in the calling thread).
READ_THREADS = min(os.cpu_count() or 1, 8)
#: A filtered scan reads the other columns row by row when fewer than 1 in this many rows match.
LATE_FRACTION = 8


def has_stable_row_ids(dataset: LanceDataset) -> bool:
    return bool(dataset.manifest_file.manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)


def live_offsets(dataset: LanceDataset, fragment: FragmentMetadata) -> np.ndarray | None:
    """Physical offsets of the rows of ``fragment`` that are not deleted; None when none is."""
    if fragment.deletion_file is None:
        return None
    deleted = read_deletion_vector(dataset.store, fragment.id, fragment.deletion_file)
    return np.flatnonzero(
        keep_mask(fragment.physical_rows, deleted, deletion_path(fragment.id, fragment.deletion_file))
    )


def fragment_row_ids(dataset: LanceDataset, fragment: FragmentMetadata) -> np.ndarray:
    """The stable row id of every physical row of ``fragment`` (uint64)."""
    what = f"fragment {fragment.id} row ids"
    data = rowids.sequence_bytes(dataset.store, fragment.to_pb(), rowids.ROW_ID_FIELDS)
    if data is None:
        raise CorruptFileError(what, "a fragment of a dataset with stable row ids has no row id sequence")
    ids = rowids.decode_row_ids(data, what)
    if ids.size != fragment.physical_rows:
        raise CorruptFileError(what, f"{ids.size} row ids for {fragment.physical_rows} rows")
    return ids


def _rows(table: pa.Table, count: int) -> pa.Table:
    """A table without columns but ``count`` rows."""
    return pa.table({"_": pa.nulls(count)}).drop_columns(["_"]) if table.num_columns == 0 else table


def _filter_mask(table: pa.Table, expression: pc.Expression) -> pa.ChunkedArray:
    """The filter evaluated over the filter's own columns only (nulls: not selected)."""
    try:
        return arrow_dataset().dataset(table).to_table(columns={"keep": expression}).column("keep")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidInputError(f"filter {expression} cannot be evaluated: {exc}") from exc


def _optional_count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InvalidInputError(f"{name} must be a non-negative integer, not {value!r}")
    return int(value)


class _Plan:
    """A compiled projection + filter: which columns to read, how to shape the output."""

    def __init__(
        self,
        dataset: LanceDataset,
        columns: Sequence[str] | Mapping[str, str] | None,
        filter: str | pc.Expression | None,
        with_row_id: bool,
        with_row_address: bool,
    ) -> None:
        from airflow_lance.core.dataset import _compile_filter, _compile_projections

        self.dataset = dataset
        schema = dataset.schema
        extended = schema
        for name in _SPECIAL:
            if name not in schema.names:
                extended = extended.append(pa.field(name, pa.uint64()))
        self.filter, filter_columns = _compile_filter(filter, extended)
        self.filter_columns = list(filter_columns)
        self.projections: dict[str, pc.Expression] | None = None
        if isinstance(columns, Mapping):
            self.projections, wanted = _compile_projections(columns, extended)
            self.out_names = list(self.projections)
        elif columns is None:
            wanted = self.out_names = list(schema.names)
        else:
            if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
                raise InvalidInputError("columns must be a list of column names or a dict of SQL expressions")
            wanted = self.out_names = list(columns)
        self.extra = [name for name, on in ((ROW_ID, with_row_id), (ROW_ADDR, with_row_address))
                      if on and name not in self.out_names]
        needed = [*wanted, *filter_columns, *self.extra]
        self.special = [name for name in _SPECIAL if name in needed and name not in schema.names]
        real = list(dict.fromkeys(name for name in needed if name not in self.special))
        self.projection = dataset.lance_schema.project(real)
        self.stable = has_stable_row_ids(dataset) if self.special else False
        self.batch_rows = FIRST_BATCH_ROWS  # rows of the next batch of a filtered scan with a limit

    # -- per fragment ----------------------------------------------------------------------------
    def _with_special(self, table: pa.Table, fragment: FragmentMetadata, offsets: np.ndarray) -> pa.Table:
        if not self.special:
            return table
        table = _rows(table, len(offsets))
        address = (np.uint64(fragment.id) << np.uint64(32)) | offsets.astype(np.uint64)
        for name in self.special:
            if name == ROW_ADDR:
                values = address
            else:
                values = fragment_row_ids(self.dataset, fragment)[offsets] if self.stable else address
            table = table.append_column(pa.field(name, pa.uint64()), pa.array(values, pa.uint64()))
        return table

    def _physical(self, fragment: FragmentMetadata) -> pa.Table:
        if not self.projection.top_level():
            return _rows(pa.table({}), fragment.physical_rows)
        return read_fragment(self.dataset.store, fragment, self.projection, with_deletions=False)

    def _select(self, table: pa.Table, fragment: FragmentMetadata, offsets: np.ndarray | None) -> pa.Table:
        """Rows at physical ``offsets`` (all when None) with the special columns."""
        if offsets is None:
            if not self.special:
                return table
            offsets = np.arange(fragment.physical_rows, dtype=np.uint64)
        elif table.num_columns:
            table = table.take(pa.array(offsets))
        else:
            table = _rows(table, len(offsets))
        return self._with_special(table, fragment, offsets)

    def _rows_at(self, reader: FragmentReader, fragment: FragmentMetadata, offsets: np.ndarray,
                 projection: LanceSchema | None = None) -> pa.Table:
        """The rows at physical ``offsets`` read from their pages only, with the special columns."""
        projection = self.projection if projection is None else projection
        if projection.top_level():
            table = reader.read(projection, offsets.astype(np.int64))
        else:
            table = _rows(pa.table({}), len(offsets))
        return self._with_special(table, fragment, offsets)

    def read(self, fragment: FragmentMetadata, stop: int | None = None, start: int = 0) -> pa.Table:
        """The live rows of ``fragment`` (columns read + special columns) that pass the filter;
        only the first ``stop`` of them when given: then the fragment is read in growing row
        batches (filter columns first, the others only for matching rows) until ``stop`` rows
        are found, or without a filter only the first ``stop`` live rows are read. ``start``
        (only without a filter): live rows before it are not read."""
        if start and self.filter is not None:
            raise InvalidInputError("a start row needs a scan without a filter")
        if (stop is not None or start) and (self.filter is None or self.filter_columns):
            return self._read_first(fragment, stop, start)
        if self.filter is not None and self.filter_columns and any(
                f.name not in self.filter_columns for f in self.projection.top_level()):
            return self._read_late(fragment)
        table = self._select(self._physical(fragment), fragment, live_offsets(self.dataset, fragment))
        if self.filter is not None:
            if not self.filter_columns:  # a constant filter
                table = apply_filter(table, self.filter)
            else:
                table = table.filter(_filter_mask(table.select(self.filter_columns), self.filter))
        return table if stop is None else table.slice(0, stop)

    def _read_late(self, fragment: FragmentMetadata) -> pa.Table:
        """A filtered read: the filter's columns first, then the other columns of the matching rows
        only (row reads when few match, one read of the fragment otherwise)."""
        live = live_offsets(self.dataset, fragment)
        offsets = np.arange(fragment.physical_rows, dtype=np.int64) if live is None else live.astype(np.int64)
        real = [name for name in self.filter_columns if name not in self.special]
        names = [f.name for f in self.projection.top_level()]
        others = [name for name in names if name not in real]
        with FragmentReader(self.dataset.store, fragment) as reader:
            filtered = self._rows_at(reader, fragment, offsets, self.dataset.lance_schema.project(real)) \
                if live is not None else self._with_special(
                    reader.read(self.dataset.lance_schema.project(real)) if real else
                    _rows(pa.table({}), fragment.physical_rows), fragment, offsets)
            mask = _filter_mask(filtered.select(self.filter_columns), self.filter)
            hits = np.flatnonzero(mask.fill_null(False).to_numpy(zero_copy_only=False))
            if hits.size * LATE_FRACTION <= offsets.size:
                return self._rows_at(reader, fragment, offsets[hits])
            rest = reader.read(self.dataset.lance_schema.project(others))
        if live is not None:
            rest = rest.take(pa.array(live))
        keep = pa.array(hits)
        rest, filtered = rest.take(keep), filtered.take(keep)
        columns = [filtered.column(name) if name in real else rest.column(name) for name in names]
        table = pa.Table.from_arrays(columns, schema=self.projection.to_arrow()) if columns else \
            _rows(pa.table({}), hits.size)
        return self._with_special(table, fragment, offsets[hits])

    def _read_first(self, fragment: FragmentMetadata, stop: int | None, start: int = 0) -> pa.Table:
        live = live_offsets(self.dataset, fragment)
        total = fragment.physical_rows if live is None else live.size
        stop = total if stop is None else stop

        def offsets(start: int, end: int) -> np.ndarray:
            return np.arange(start, end, dtype=np.int64) if live is None else live[start:end].astype(np.int64)

        with FragmentReader(self.dataset.store, fragment) as reader:
            if self.filter is None:
                return self._rows_at(reader, fragment, offsets(min(start, total), min(stop, total)))
            real = [name for name in self.filter_columns if name not in self.special]
            filter_projection = self.dataset.lance_schema.project(real)
            hits: list[np.ndarray] = []
            found, start, batch = 0, 0, self.batch_rows
            while start < total and found < stop:
                rows = offsets(start, min(start + batch, total))
                table = self._rows_at(reader, fragment, rows, filter_projection)
                mask = _filter_mask(table.select(self.filter_columns), self.filter)
                hit = np.flatnonzero(mask.fill_null(False).to_numpy(zero_copy_only=False))
                hits.append(rows[hit[: stop - found]])
                found += min(hit.size, stop - found)
                start += len(rows)
                if hit.size:  # enough rows for the rest at the rate seen, with a margin
                    batch = int((stop - found) * len(rows) / hit.size * 1.25) + 1
                    batch = min(max(batch, FIRST_BATCH_ROWS), MAX_BATCH_ROWS)
                else:
                    batch = min(batch * BATCH_GROWTH, MAX_BATCH_ROWS)
            self.batch_rows = batch  # the next fragment goes on from here
            chosen = np.concatenate(hits) if hits else np.zeros(0, dtype=np.int64)
            return self._rows_at(reader, fragment, chosen)

    def take(self, fragment: FragmentMetadata, offsets: np.ndarray) -> pa.Table:
        """The rows at physical ``offsets`` of ``fragment`` (columns read + special columns),
        decoding only the pages holding them."""
        with FragmentReader(self.dataset.store, fragment) as reader:
            return self._rows_at(reader, fragment, np.asarray(offsets))

    def finish(self, table: pa.Table) -> pa.Table:
        """Shape a table from ``read``/``take`` into the output columns."""
        if self.projections is not None:
            try:
                out = arrow_dataset().dataset(table).to_table(columns=dict(self.projections))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise InvalidInputError(f"projection cannot be evaluated: {exc}") from exc
            for name in self.extra:
                out = out.append_column(name, table.column(name))
            return out
        return table.select(self.out_names + self.extra)

    def empty(self) -> pa.Table:
        table = empty_table(self.projection.to_arrow())
        for name in self.special:
            table = table.append_column(pa.field(name, pa.uint64()), pa.array([], pa.uint64()))
        return self.finish(table)


class LanceScanner:
    """A configured scan of one dataset version (pylance's ``LanceScanner``)."""

    def __init__(
        self,
        dataset: LanceDataset,
        columns: Sequence[str] | Mapping[str, str] | None = None,
        filter: str | pc.Expression | None = None,
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int | None = None,
        fragments: Iterable[Any] | None = None,
        with_row_id: bool | None = None,
        with_row_address: bool | None = None,
    ) -> None:
        self._dataset = dataset
        self._limit = _optional_count(limit, "limit")
        self._offset = _optional_count(offset, "offset")
        self._batch_size = _optional_count(batch_size, "batch_size")
        if self._batch_size == 0:
            raise InvalidInputError("batch_size must be positive")
        self._fragments = self._resolve_fragments(fragments)
        self._filter = filter
        self._has_filter = filter is not None
        self._plan = _Plan(dataset, columns, filter, bool(with_row_id), bool(with_row_address))

    def _resolve_fragments(self, fragments: Iterable[Any] | None) -> list[FragmentMetadata]:
        if fragments is None:
            return list(self._dataset._fragments)
        resolved = []
        for fragment in fragments:
            metadata = getattr(fragment, "metadata", fragment)
            if not isinstance(metadata, FragmentMetadata):
                raise InvalidInputError(f"fragments must be LanceFragment or FragmentMetadata, not {fragment!r}")
            resolved.append(metadata)
        return resolved

    @property
    def projected_schema(self) -> pa.Schema:
        return self._plan.empty().schema

    @property
    def dataset_schema(self) -> pa.Schema:
        return self._dataset.schema

    def _tables(self) -> Iterator[pa.Table]:
        if self._limit is None and self._offset is None and READ_THREADS > 1 and len(self._fragments) > 1:
            yield from self._parallel_tables()
            return
        skip, remaining = self._offset or 0, self._limit
        for fragment in self._fragments:
            if remaining == 0:
                return
            if not self._has_filter and skip >= fragment.num_rows:  # skipped from metadata, not read
                skip -= fragment.num_rows
                continue
            if not self._has_filter:  # the rows before the offset are not read
                table = self._plan.read(fragment, None if remaining is None else skip + remaining, start=skip)
                skip = 0
            else:
                table = self._plan.read(fragment, None if remaining is None else skip + remaining)
            if skip:
                dropped = min(skip, table.num_rows)
                table, skip = table.slice(dropped), skip - dropped
            if remaining is not None:
                table = table.slice(0, remaining)
                remaining -= table.num_rows
            if table.num_rows:
                yield self._plan.finish(table)

    def _parallel_tables(self) -> Iterator[pa.Table]:
        """A scan without limit/offset: fragments decoded on READ_THREADS threads (numpy and
        pyarrow release the GIL in their loops), results in fragment order, at most one
        fragment per thread read ahead."""
        workers = min(READ_THREADS, len(self._fragments))
        fragments = iter(self._fragments)
        with ThreadPoolExecutor(workers, thread_name_prefix="lance-read") as pool:
            pending = collections.deque(pool.submit(self._plan.read, f) for f in itertools.islice(fragments, workers))
            while pending:
                table = pending.popleft().result()
                following = next(fragments, None)
                if following is not None:
                    pending.append(pool.submit(self._plan.read, following))
                if table.num_rows:
                    yield self._plan.finish(table)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for table in self._tables():
            yield from table.to_batches(max_chunksize=self._batch_size)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def to_table(self) -> pa.Table:
        tables = list(self._tables())
        if not tables:
            return self._plan.empty()
        return pa.concat_tables(tables)

    def head(self, num_rows: int) -> pa.Table:
        return self.to_table()[:num_rows]

    def count_rows(self) -> int:
        """Rows matching the filter; as in pylance, not with ``limit``/``offset``."""
        if self._limit is not None or self._offset is not None:
            raise InvalidInputError("Cannot use limit/offset with count_rows. Apply limit to the result instead.")
        if not self._has_filter:
            return sum(f.num_rows for f in self._fragments)
        counting = _Plan(self._dataset, [], self._filter, False, False)  # reads the filter's columns only
        return sum(counting.read(f).num_rows for f in self._fragments)


# -- take ----------------------------------------------------------------------------------------


def _gather(plan: _Plan, fragments: Sequence[FragmentMetadata], which: np.ndarray, offsets: np.ndarray) -> pa.Table:
    """Rows (``fragments[which[i]]``, physical ``offsets[i]``) in request order, one read per fragment."""
    if not which.size:
        return plan.empty()
    order = np.argsort(which, kind="stable")
    sorted_which = which[order]
    groups = np.split(order, np.flatnonzero(np.diff(sorted_which)) + 1)
    pieces = [plan.take(fragments[int(which[g[0]])], offsets[g]) for g in groups]
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    table = pa.concat_tables(pieces)
    return plan.finish(table.take(pa.array(inverse)) if table.num_columns else _rows(table, order.size))


def _as_uint_indices(indices: Any, what: str) -> np.ndarray:
    if isinstance(indices, (pa.Array, pa.ChunkedArray)):
        if indices.null_count:
            raise InvalidInputError(f"{what} must not contain nulls")
        indices = indices.to_numpy()
    array = np.asarray(indices)
    if array.size == 0:
        return np.empty(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise InvalidInputError(f"{what} must be a one-dimensional sequence of integers, not {array.dtype}")
    return array


def take(dataset: LanceDataset, indices: Any, columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
    """The rows at ``indices`` (positions among the live rows, in order of the fragments)."""
    positions = _as_uint_indices(indices, "indices")
    if positions.dtype.kind == "i" and positions.size and int(positions.min()) < 0:
        raise NegativeIndexError(f"take: negative index {int(positions.min())}")
    plan = _Plan(dataset, columns, None, False, False)
    fragments = dataset._fragments
    counts = np.array([f.num_rows for f in fragments], dtype=np.int64)
    ends = np.cumsum(counts)
    total = int(ends[-1]) if ends.size else 0
    if positions.size and int(positions.max()) >= total:
        raise RowIndexError(f"take: index {int(positions.max())} is out of range for a dataset of {total} rows")
    positions = positions.astype(np.int64)
    which = np.searchsorted(ends, positions, side="right")
    local = positions - (ends - counts)[which]
    offsets = local.astype(np.uint64)
    for k in sorted_unique(which).tolist():
        live = live_offsets(dataset, fragments[k])
        if live is not None:
            sel = which == k
            offsets[sel] = live[local[sel]].astype(np.uint64)
    return _gather(plan, fragments, which, offsets)


def take_rows(
    dataset: LanceDataset,
    row_ids: Any,
    columns: Sequence[str] | Mapping[str, str] | None = None,
    *,
    ignore_deletions: bool = False,
) -> pa.Table:
    """The rows with ``row_ids``, in request order; ids of deleted or absent rows are dropped
    (pylance's ``_take_rows``). Without stable row ids a row id is the row address."""
    ids = _as_uint_indices(row_ids, "row_ids")
    if ids.dtype.kind == "i" and ids.size and int(ids.min()) < 0:
        raise NegativeIndexError(f"row ids are unsigned: {int(ids.min())}")
    ids = ids.astype(np.uint64)
    plan = _Plan(dataset, columns, None, False, False)
    fragments = dataset._fragments
    if has_stable_row_ids(dataset):
        which, offsets, found = _locate_stable(dataset, fragments, ids, ignore_deletions)
    else:
        which, offsets, found = _locate_addresses(dataset, fragments, ids, ignore_deletions)
    return _gather(plan, fragments, which[found], offsets[found])


def take_addresses(dataset: LanceDataset, addresses: Any,
                   columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
    """The rows at row ``addresses`` (fragment id << 32 | offset), in request order; addresses of
    deleted rows are dropped, as ``take_rows`` drops their ids."""
    ids = _as_uint_indices(addresses, "addresses")
    if ids.dtype.kind == "i" and ids.size and int(ids.min()) < 0:
        raise NegativeIndexError(f"row addresses are unsigned: {int(ids.min())}")
    fragments = dataset._fragments
    which, offsets, found = _locate_addresses(dataset, fragments, ids.astype(np.uint64), False)
    return _gather(_Plan(dataset, columns, None, False, False), fragments, which[found], offsets[found])


def _locate_addresses(
    dataset: LanceDataset, fragments: Sequence[FragmentMetadata], ids: np.ndarray, ignore_deletions: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    fragment_ids = np.array([f.id for f in fragments], dtype=np.uint64)
    by_id = np.argsort(fragment_ids)
    wanted = ids >> np.uint64(32)
    offsets = ids & _OFFSET_MASK
    slot = np.minimum(np.searchsorted(fragment_ids[by_id], wanted), max(len(fragments) - 1, 0))
    which = by_id[slot] if len(fragments) else np.zeros(ids.size, dtype=np.int64)
    found = (fragment_ids[which] == wanted) if len(fragments) else np.zeros(ids.size, dtype=bool)
    physical = np.array([f.physical_rows for f in fragments], dtype=np.uint64)
    if len(fragments) and bool((found & (offsets >= physical[which])).any()):
        bad = int(ids[found & (offsets >= physical[which])][0])
        raise RowIndexError(f"row address {bad}: offset {bad & 0xFFFFFFFF} is past fragment {bad >> 32}'s rows")
    if not ignore_deletions:
        for k in sorted_unique(which[found]).tolist():
            live = live_offsets(dataset, fragments[k])
            if live is not None:
                sel = found & (which == k)
                found[sel] = np.isin(offsets[sel], live)
    return which, offsets, found


def _locate_stable(
    dataset: LanceDataset, fragments: Sequence[FragmentMetadata], ids: np.ndarray, ignore_deletions: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    all_ids, all_which, all_offsets = [], [], []
    for k, fragment in enumerate(fragments):
        sequence = fragment_row_ids(dataset, fragment)
        kept = live_offsets(dataset, fragment) if not ignore_deletions else None
        if kept is None:
            kept = np.arange(fragment.physical_rows)
        all_ids.append(sequence[kept])
        all_offsets.append(kept.astype(np.uint64))
        all_which.append(np.full(kept.size, k, dtype=np.int64))
    if not all_ids:
        empty = np.zeros(ids.size, dtype=np.int64)
        return empty, empty.astype(np.uint64), np.zeros(ids.size, dtype=bool)
    known = np.concatenate(all_ids)
    order = np.argsort(known, kind="stable")
    known = known[order]
    slot = np.minimum(np.searchsorted(known, ids), max(known.size - 1, 0))
    found = known[slot] == ids if known.size else np.zeros(ids.size, dtype=bool)
    rows = order[slot]
    return np.concatenate(all_which)[rows], np.concatenate(all_offsets)[rows], found


def check_no_vector_search(nearest: Any, **unsupported: Any) -> None:
    """pylance options we do not implement fail loudly instead of being ignored."""
    if nearest is not None:
        raise UnsupportedFeatureError("nearest (vector search) is not supported")
    for name, value in unsupported.items():
        if value is not None and value is not False:
            raise UnsupportedFeatureError(f"scan option {name} is not supported")
