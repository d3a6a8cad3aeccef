"""Struct fields whose children live in different data files of one fragment.

pylance's ``alter_columns({"path": "s.a", "data_type": ...})`` (2.1+ files) gives the leaf a new
field id and writes, per fragment, a file holding only that leaf (with the struct's validity in
its levels); the struct's other children stay in the old file. A read of ``s`` then takes each
child from the file that stores its leaves and the struct's validity from the first of them.
A field id stored in two files (0.10-era add/drop columns) is not a split: the first file wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from airflow_lance.core.schema import LanceSchema


def _leaves(schema: LanceSchema, field_id: int) -> list[int]:
    return [i for i in schema.subtree_ids(field_id) if not schema.children(i)]


def split_fields(schema: LanceSchema, stored: Sequence[Mapping[int, int]]) -> dict[int, list[int]]:
    """{top-level struct field id: the numbers of the files holding some of its leaves}, for the
    structs whose leaves are spread over files (``stored[n]``: file n's field id -> column)."""
    out: dict[int, list[int]] = {}
    for field in schema.top_level():
        if not schema.children(field.id):
            continue
        leaves = _leaves(schema, field.id)
        present = [(n, frozenset(i for i in leaves if i in ids)) for n, ids in enumerate(stored)]
        present = [(n, ids) for n, ids in present if ids]
        if len(present) > 1 and any(ids - present[0][1] for _, ids in present[1:]):
            out[field.id] = [n for n, _ in present]
    return out


def merge_split(
    schema: LanceSchema, field_id: int, parts: Sequence[tuple[pa.Array | pa.ChunkedArray, frozenset[int]]]
) -> pa.Array:
    """One struct array from the same struct read from several files (each with the leaf ids it
    stores): every child from the first file storing its leaves, validity from the first file."""
    arrays = [(a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a, ids) for a, ids in parts]
    return _merge(schema, field_id, arrays)


def _merge(schema: LanceSchema, field_id: int, parts: list[tuple[pa.StructArray, frozenset[int]]]) -> pa.Array:
    first = parts[0][0]
    children, fields = [], []
    for child in schema.children(field_id):
        arrow_field = schema.arrow_field(child.id)
        leaves = set(_leaves(schema, child.id)) or {child.id}
        holders = [(a.field(child.name), ids) for a, ids in parts if ids & leaves]
        if not holders:
            children.append(pa.nulls(len(first), arrow_field.type))
        elif len(holders) > 1 and schema.children(child.id) and pa.types.is_struct(arrow_field.type):
            children.append(_merge(schema, child.id, holders))
        else:
            children.append(holders[0][0])
        fields.append(arrow_field)
    mask = np.asarray(first.is_null()) if first.null_count else None
    return pa.StructArray.from_arrays(children, fields=fields, mask=pa.array(mask) if mask is not None else None)


def read_split(schema: LanceSchema, field_id: int, numbers: Sequence[int], stored: Sequence[Mapping[int, int]],
               read: Callable[[int, LanceSchema], pa.Array | pa.ChunkedArray]) -> pa.Array:
    """Read struct ``field_id`` from each of the files ``numbers`` (``read(number, projection)``)
    and merge the parts."""
    name = schema.field(field_id).name
    projection = schema.project([name])
    leaves = _leaves(schema, field_id)
    parts = [(read(n, projection), frozenset(i for i in leaves if i in stored[n])) for n in numbers]
    return merge_split(schema, field_id, parts)
