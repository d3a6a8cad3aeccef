"""``LanceDataset.delete``: evaluate a predicate per fragment and write deletion vectors."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core.deletion import deletion_path, keep_mask, read_deletion_vector, write_deletion_vector
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.scan import apply_filter, read_fragment
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.transaction import LanceOperation, Transaction

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset


_OFFSET_COLUMN = "__airflow_lance_row_offset"


def _matching_offsets(
    store: ObjectStore, fragment: FragmentMetadata, projection: LanceSchema, expression: pc.Expression
) -> np.ndarray:
    """Row offsets (physical, deletions ignored) where the predicate is true (null is false)."""
    offsets = pa.array(np.arange(fragment.physical_rows, dtype=np.uint32))
    if projection.top_level():
        table = read_fragment(store, fragment, projection, with_deletions=False).append_column(_OFFSET_COLUMN, offsets)
    else:
        table = pa.table({_OFFSET_COLUMN: offsets})
    return apply_filter(table, expression).column(_OFFSET_COLUMN).to_numpy()


def plan_delete(
    store: ObjectStore,
    fragments: Sequence[FragmentMetadata],
    schema: LanceSchema,
    predicate: str | pc.Expression,
    read_version: int,
) -> tuple[LanceOperation.Delete, int]:
    """Write deletion vectors for ``predicate``; return (the Delete operation, rows deleted).

    A predicate matching no row still gives a Delete (of nothing), which pylance commits too.
    """
    from airflow_lance.core.filter import referenced_columns, to_expression  # sqlglot is slow to import

    arrow_schema = schema.to_arrow()
    expression = to_expression(predicate, arrow_schema)
    projection = schema.project(referenced_columns(predicate, arrow_schema))
    updated: list[FragmentMetadata] = []
    removed: list[int] = []
    total = 0
    for fragment in fragments:
        hits = _matching_offsets(store, fragment, projection, expression).astype(np.uint32)
        if fragment.deletion_file is not None:
            existing = read_deletion_vector(store, fragment.id, fragment.deletion_file)
            path = deletion_path(fragment.id, fragment.deletion_file)
            deleted = ~keep_mask(fragment.physical_rows, existing, path)
            new = hits[~deleted[hits]]
            deleted[new] = True
            merged = np.flatnonzero(deleted).astype(np.uint32)
        else:
            new = merged = hits  # row offsets come out of the filter ascending and unique
        if not new.size:
            continue
        total += int(new.size)
        if merged.size >= fragment.physical_rows:
            removed.append(fragment.id)
            continue
        deletion = write_deletion_vector(store, fragment.id, read_version, merged.astype(np.uint32))
        updated.append(dataclasses.replace(fragment, deletion_file=deletion))
    text = predicate if isinstance(predicate, str) else str(predicate)
    return LanceOperation.Delete(updated, removed, text), total


def delete_uncommitted(
    dataset: LanceDataset, predicate: str | pc.Expression, *, fragment_ids: Iterable[int] | None = None
) -> tuple[Transaction, int]:
    """``dataset.delete(predicate)`` without the commit: write the deletion vectors, return (the
    Transaction on the handle's version, rows deleted). With ``fragment_ids``, only those
    fragments (``[]`` only validates the predicate)."""
    from airflow_lance.core.update import _chosen_fragments

    fragments = _chosen_fragments(dataset, fragment_ids)
    operation, count = plan_delete(dataset.store, fragments, dataset.lance_schema, predicate, dataset.version)
    return Transaction(read_version=dataset.version, operation=operation), count
