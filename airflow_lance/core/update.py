"""``LanceDataset.update``: rewrite the rows matching a predicate with new column values.

As in Lance (``REWRITE_ROWS``): the rewritten rows go to new fragments, the old rows get
deletion vectors (a fragment whose every row is gone is removed), and one ``Update`` is
committed. On datasets with stable row ids the moved rows keep their row ids (the new
fragments carry them; the commit gives them the new last-updated version, see
``rowids.stamp_new_fragments``).

The helpers ``live_rows``, ``delete_offsets`` and ``write_rows`` are shared with
``merge_insert``. Everything is evaluated before anything is written, so a bad expression
or a value that does not cast leaves the dataset's directory untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core import rowids
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.arrays import arrow_dataset, empty_table
from airflow_lance.core.deletion import deletion_path, keep_mask, read_deletion_vector, write_deletion_vector
from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.scan import FragmentReader, apply_filter, read_fragment
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.transaction import LanceOperation, Transaction
from airflow_lance.core.write import write_data_files

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

OFFSET = "__airflow_lance_offset"
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def live_rows(store: ObjectStore, fragment: FragmentMetadata, projection: LanceSchema) -> pa.Table:
    """The fragment's live rows for ``projection``, with their physical offsets in ``OFFSET``."""
    offsets = pa.array(np.arange(fragment.physical_rows, dtype=np.uint32))
    if projection.top_level():
        table = read_fragment(store, fragment, projection, with_deletions=False).append_column(OFFSET, offsets)
    else:  # a predicate that reads no column ("true")
        table = pa.table({OFFSET: offsets})
    if fragment.deletion_file is None:
        return table
    deleted = read_deletion_vector(store, fragment.id, fragment.deletion_file)
    return table.filter(pa.array(keep_mask(fragment.physical_rows, deleted, deletion_path(fragment.id, fragment.deletion_file))))


def read_rows(store: ObjectStore, fragment: FragmentMetadata, projection: LanceSchema, offsets: np.ndarray) -> pa.Table:
    """The rows at physical ``offsets`` of a fragment for ``projection`` (deletions not applied);
    only the pages (2.1+: chunks) holding them are decoded."""
    with FragmentReader(store, fragment) as reader:
        return reader.read(projection, rows=np.asarray(offsets))


def delete_offsets(
    store: ObjectStore, fragments: Iterable[FragmentMetadata], hits: Mapping[int, np.ndarray], read_version: int
) -> tuple[list[FragmentMetadata], list[int]]:
    """Delete the (live, unique) row offsets ``hits[fragment id]``: (updated fragments, removed ids)."""
    updated: list[FragmentMetadata] = []
    removed: list[int] = []
    for fragment in fragments:
        new = hits.get(fragment.id)
        if new is None or not new.size:
            continue
        deleted = np.zeros(fragment.physical_rows, dtype=bool)
        if fragment.deletion_file is not None:
            deleted = ~keep_mask(fragment.physical_rows, read_deletion_vector(store, fragment.id, fragment.deletion_file))
        deleted[new] = True
        if deleted.all():
            removed.append(fragment.id)
            continue
        deletion = write_deletion_vector(store, fragment.id, read_version, np.flatnonzero(deleted).astype(np.uint32))
        updated.append(dataclasses.replace(fragment, deletion_file=deletion))
    return updated, removed


def moved_row_ids(store: ObjectStore, fragment: FragmentMetadata, offsets: np.ndarray) -> np.ndarray:
    """(row id, created-at version) of the rows at ``offsets`` of a fragment of a dataset with
    stable row ids: a (2, n) uint64 array."""
    pb = fragment.to_pb()
    data = rowids.sequence_bytes(store, pb, rowids.ROW_ID_FIELDS)
    if data is None:
        raise InvalidInputError(f"fragment {fragment.id} of a dataset with stable row ids has no row id sequence")
    ids = rowids.decode_row_ids(data, f"fragment {fragment.id} row ids")
    return np.stack((ids[offsets], rowids.created_versions(store, pb)[offsets]))


def write_rows(
    store: ObjectStore,
    tables: Sequence[pa.Table],
    schema: LanceSchema,
    storage_version: str,
    carried: np.ndarray | None,
) -> list[FragmentMetadata]:
    """Write rows (already aligned to ``schema``) as new fragments.

    With ``carried`` (stable row ids: a (2, n) array of row ids and created-at versions, see
    :func:`moved_row_ids`) the first n rows keep those ids: each new fragment carries the ids
    of its leading moved rows, as pylance's do; the rows after them (inserted rows) get fresh
    ids at commit (``rowids.stamp_new_fragment``).
    """
    batches = (batch for table in tables for batch in table.to_batches())
    fragments = write_data_files(store, batches, schema, data_storage_version=storage_version)
    return carry_row_ids(fragments, carried)


def carry_row_ids(fragments: Sequence[FragmentMetadata], carried: np.ndarray | None) -> list[FragmentMetadata]:
    """New ``fragments`` (written in order) whose first rows are moved rows: attach ``carried``
    (a (2, n) array of row ids and created-at versions, see :func:`moved_row_ids`) to them, the
    first n rows keeping those ids (the rest get fresh ids at commit)."""
    if carried is None or not carried.shape[1]:
        return list(fragments)
    out = []
    start = 0
    for fragment in fragments:
        ids, created = carried[:, start:start + fragment.physical_rows]
        start += ids.size
        if ids.size:
            pb = table_pb2.DataFragment()
            if fragment.extra:
                pb.ParseFromString(fragment.extra)
            pb.inline_row_ids = rowids.encode_row_ids(ids)
            pb.created_at_version_inline = rowids.encode_versions(created)
            pb.ClearField("id")
            fragment = dataclasses.replace(fragment, extra=pb.SerializeToString())
        out.append(fragment)
    return out


def _compile_updates(updates: Mapping[str, str], schema: LanceSchema) -> tuple[dict[str, pc.Expression], list[str]]:
    from airflow_lance.core.filter import value_expression  # sqlglot is slow to import

    if not isinstance(updates, Mapping):
        raise InvalidInputError(f"updates must be a dict of column name to SQL expression, not {type(updates).__name__}")
    if not updates:
        raise InvalidInputError("No updates provided")
    arrow = schema.to_arrow()
    expressions: dict[str, pc.Expression] = {}
    read: list[str] = []
    for name, sql in updates.items():
        if not isinstance(name, str) or name not in arrow.names:
            raise InvalidInputError(f"Column {name!r} does not exist in dataset schema (columns: {arrow.names})")
        expression, needed = value_expression(sql, arrow)
        target = arrow.field(name).type
        empty = empty_table(pa.schema([arrow.field(c) for c in needed]))
        try:
            result_type = arrow_dataset().dataset(empty).to_table(columns={"v": expression}).schema.field(0).type
            if result_type != target:
                expression = expression.cast(target, safe=False)
                arrow_dataset().dataset(empty).to_table(columns={"v": expression})
        except _ARROW_ERRORS as error:
            raise InvalidInputError(
                f"cannot assign {sql!r} ({result_type}) to column {name!r} ({target}): {str(error).splitlines()[0]}"
            ) from None
        expressions[name] = expression
        read += [c for c in needed if c not in read]
    return expressions, read


def evaluate(table: pa.Table, columns: Mapping[str, pc.Expression], what: str) -> pa.Table:
    """``table`` projected to ``columns`` (name -> Expression); evaluation errors are InvalidInputError."""
    try:
        return arrow_dataset().dataset(table).to_table(columns=dict(columns))
    except _ARROW_ERRORS as error:
        raise InvalidInputError(f"{what} cannot be evaluated: {str(error).splitlines()[0]}") from None


def plan_update(
    store: ObjectStore,
    fragments: Sequence[FragmentMetadata],
    schema: LanceSchema,
    updates: Mapping[str, str],
    where: str | pc.Expression | None,
    read_version: int,
    storage_version: str,
    stable_row_ids: bool,
) -> tuple[LanceOperation.Update, int]:
    """Rewrite the rows matching ``where``: (the Update operation, rows updated)."""
    from airflow_lance.core.filter import referenced_columns, to_expression

    expressions, needed = _compile_updates(updates, schema)
    arrow = schema.to_arrow()
    predicate = to_expression(where, arrow) if where is not None else None
    filter_names = referenced_columns(where, arrow) if where is not None else []
    # the old values of a column are read only if it is kept or an update expression reads it
    read_names = [f.name for f in arrow if f.name not in expressions or f.name in needed]
    rest = schema.project([n for n in read_names if n not in filter_names])
    filtered = schema.project(filter_names)
    projection = {f.name: (expressions[f.name] if f.name in expressions else pc.field(f.name)) for f in arrow}
    projection[OFFSET] = pc.field(OFFSET)
    rewritten: list[pa.Table] = []
    hits: dict[int, np.ndarray] = {}
    carried: list[np.ndarray] = []
    for fragment in fragments:
        if predicate is None:
            rows = live_rows(store, fragment, schema.project(read_names))
        else:  # the predicate's columns first; the other columns only of the matching rows
            rows = apply_filter(live_rows(store, fragment, filtered), predicate)
            if not rows.num_rows:
                continue
            if rest.top_level():
                others = read_rows(store, fragment, rest, rows.column(OFFSET).to_numpy())
                for name, column in zip(others.column_names, others.columns):
                    rows = rows.append_column(others.schema.field(name), column)
        if not rows.num_rows:
            continue
        new = evaluate(rows, projection, "update")
        offsets = new.column(OFFSET).to_numpy()
        hits[fragment.id] = offsets
        rewritten.append(schema.align(new.drop_columns([OFFSET])))
        if stable_row_ids:
            carried.append(moved_row_ids(store, fragment, offsets))
    # the updated fields and the fields below them, as pylance lists them (also when nothing matched)
    modified = [i for f in schema.top_level() if f.name in expressions for i in schema.subtree_ids(f.id)]
    total = sum(t.num_rows for t in rewritten)
    if not total:
        return LanceOperation.Update(fields_for_preserving_frag_bitmap=modified), 0
    # Everything evaluated: now write the new rows and the deletion vectors.
    moved = np.concatenate(carried, axis=1) if stable_row_ids else None
    new_fragments = write_rows(store, rewritten, schema, storage_version, moved)
    updated, removed = delete_offsets(store, fragments, hits, read_version)
    operation = LanceOperation.Update(
        removed_fragment_ids=removed,
        updated_fragments=updated,
        new_fragments=new_fragments,
        fields_for_preserving_frag_bitmap=modified,
    )
    return operation, total


def update_uncommitted(
    dataset: LanceDataset,
    updates: Mapping[str, str],
    where: str | pc.Expression | None = None,
    *,
    fragment_ids: Iterable[int] | None = None,
) -> tuple[Transaction, int]:
    """``dataset.update(updates, where)`` without the commit: write the new rows and deletion
    vectors, return (the Transaction on the handle's version, rows updated). With
    ``fragment_ids``, only those fragments are updated (a part of the dataset, e.g. one Spark
    task's; ``[]`` only validates ``updates`` and ``where``). Commit with
    ``LanceDataset.commit(uri, transaction.operation, transaction.read_version)``."""
    from airflow_lance.core.write import resolve_storage_version

    fragments = _chosen_fragments(dataset, fragment_ids)
    storage_version = resolve_storage_version(None, dataset.manifest_file)
    operation, count = plan_update(dataset.store, fragments, dataset.lance_schema, updates, where, dataset.version,
                                   storage_version, dataset._stable_row_ids)
    return Transaction(read_version=dataset.version, operation=operation), count


def _chosen_fragments(dataset: LanceDataset, fragment_ids: Iterable[int] | None) -> list[FragmentMetadata]:
    """The dataset's fragments, or those of ``fragment_ids`` (InvalidInputError for an unknown id)."""
    fragments = dataset._fragments
    if fragment_ids is None:
        return list(fragments)
    by_id = {f.id: f for f in fragments}
    wanted = list(fragment_ids)
    unknown = [i for i in wanted if i not in by_id]
    if unknown:
        raise InvalidInputError(f"fragment(s) {unknown} are not in version {dataset.version} of {dataset.uri}")
    return [by_id[i] for i in wanted]
