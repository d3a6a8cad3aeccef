"""Reading part of one fragment: a range of physical rows or chosen physical offsets.

Distributed readers (``airflow_lance.spark.read``) split a dataset version into tasks of one
fragment, or a row range of a large fragment, or the rows of a fragment that changed since a
version (:mod:`airflow_lance.core.changes`). :func:`read_fragment_rows` reads such a task with
the scanner's projection, filter and ``_rowid``/``_rowaddr`` columns: deleted rows are left
out, the filter is applied after the selection, columns come in the scanner's order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.scan import apply_filter
from airflow_lance.core.scanner import _filter_mask, _Plan, _rows, live_offsets

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset


class SelectionReader:
    """A compiled projection + filter that reads selections of fragments of one dataset version."""

    def __init__(
        self,
        dataset: LanceDataset,
        columns: Sequence[str] | Mapping[str, str] | None = None,
        filter: str | pc.Expression | None = None,
        *,
        with_row_id: bool = False,
        with_row_address: bool = False,
    ) -> None:
        self.dataset = dataset
        self._plan = _Plan(dataset, columns, filter, with_row_id, with_row_address)

    @property
    def schema(self) -> pa.Schema:
        """The schema of what :meth:`read` returns."""
        return self._plan.empty().schema

    def read(
        self,
        fragment: FragmentMetadata,
        *,
        row_range: tuple[int, int] | None = None,
        offsets: np.ndarray | None = None,
    ) -> pa.Table:
        """The live rows of ``fragment`` that pass the filter: all of them, those whose physical
        offset is in ``row_range`` (``[start, stop)``), or those at the physical ``offsets``
        (sorted, unique), in physical order."""
        plan = self._plan
        if offsets is None and row_range is not None and int(row_range[0]) == 0 \
                and int(row_range[1]) >= fragment.physical_rows:
            row_range = None  # the whole fragment: one read of its pages, not a take of every row
        if row_range is None and offsets is None:
            return plan.finish(plan.read(fragment))
        live = live_offsets(self.dataset, fragment)
        selected = np.arange(fragment.physical_rows, dtype=np.int64) if live is None else live.astype(np.int64)
        if row_range is not None:
            start, stop = (int(v) for v in row_range)
            if not 0 <= start <= stop:
                raise InvalidInputError(f"row range {row_range!r} is not [start, stop) with 0 <= start <= stop")
            selected = selected[(selected >= start) & (selected < stop)]
        if offsets is not None:
            wanted = np.asarray(offsets, dtype=np.int64)
            if wanted.size and (wanted[0] < 0 or wanted[-1] >= fragment.physical_rows):
                raise InvalidInputError(
                    f"offsets outside fragment {fragment.id} ({fragment.physical_rows} physical rows)")
            selected = np.intersect1d(selected, wanted, assume_unique=True)
        if selected.size == 0:
            return plan.empty()
        table = plan.take(fragment, selected)  # decodes only the pages holding the selected rows
        if plan.filter is not None:
            if not plan.filter_columns:
                table = apply_filter(table, plan.filter)
            else:
                mask = _filter_mask(table.select(plan.filter_columns), plan.filter)
                table = table.filter(mask) if table.num_columns else _rows(
                    table, int(pc.sum(mask.fill_null(False)).as_py() or 0))
        return plan.finish(table)


def read_fragment_rows(
    dataset: LanceDataset,
    fragment: FragmentMetadata,
    *,
    columns: Sequence[str] | Mapping[str, str] | None = None,
    filter: str | pc.Expression | None = None,
    with_row_id: bool = False,
    with_row_address: bool = False,
    row_range: tuple[int, int] | None = None,
    offsets: np.ndarray | None = None,
) -> pa.Table:
    """:meth:`SelectionReader.read` for one selection (compiles the projection and filter)."""
    reader = SelectionReader(dataset, columns, filter, with_row_id=with_row_id, with_row_address=with_row_address)
    return reader.read(fragment, row_range=row_range, offsets=offsets)
