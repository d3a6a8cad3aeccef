"""BITMAP scalar index files, as pylance 14 writes them.

``bitmap_page_lookup.lance``: one row per distinct value (nulls first, then ascending, as
:mod:`.sort`): ``keys`` (the column's type, nullable) and ``bitmaps`` (binary): the rows holding
that value as Lance's ``RowAddrTreeMap`` serialization: u32 LE number of fragments, then per
fragment (ascending) u32 LE fragment id, u32 LE byte length and the offsets in the fragment as a
portable 32-bit roaring bitmap. Schema metadata ``lance:index_stats`` =
``{"num_bitmaps":N}``. Details: ``/lance.table.BitmapIndexDetails`` (empty); ``index_version`` 0.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring

from airflow_lance.core.arrays import uint32_array
from airflow_lance.core.indices.files import IndexFileData
from airflow_lance.core.indices.sort import sort_key, sort_order

LOOKUP_NAME = "bitmap_page_lookup.lance"
TYPE_URL = "/lance.table.BitmapIndexDetails"
INDEX_VERSION = 0


def _serialize_groups(row_addrs: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[bytes]:
    """:func:`serialize_row_addrs` of each ``row_addrs[start:end]`` (sorted, non-empty), with the
    fragment ids and offsets split once over all rows (one roaring bitmap per group and fragment)."""
    fragments = (row_addrs >> np.uint64(32)).astype(np.uint32)
    offsets = (row_addrs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    cuts = np.zeros(len(row_addrs) + 1, bool)
    cuts[starts] = True
    cuts[ends] = True
    cuts[1:-1] |= fragments[1:] != fragments[:-1]
    bounds = np.flatnonzero(cuts)  # every group or fragment boundary, then per group its pieces
    first = np.searchsorted(bounds, starts)
    last = np.searchsorted(bounds, ends)
    bounds_list, fragment_list = bounds.tolist(), fragments[bounds[:-1]].tolist() if len(bounds) > 1 else []
    out = []
    for lo, hi in zip(first.tolist(), last.tolist()):  # one entry per group, pieces per fragment: not per row
        parts = [struct.pack("<I", hi - lo)]
        for piece in range(lo, hi):
            data = pyroaring.BitMap(uint32_array(offsets[bounds_list[piece]:bounds_list[piece + 1]])).serialize()
            parts.append(struct.pack("<II", fragment_list[piece], len(data)))
            parts.append(data)
        out.append(b"".join(parts))
    return out


def serialize_row_addrs(row_addrs: np.ndarray) -> bytes:
    """Lance's ``RowAddrTreeMap::serialize_into`` of sorted row addresses."""
    if not len(row_addrs):
        return struct.pack("<I", 0)
    addrs = np.asarray(row_addrs, np.uint64)
    return _serialize_groups(addrs, np.zeros(1, np.int64), np.array([len(addrs)], np.int64))[0]


def build(values: pa.Array, row_addrs: np.ndarray, order: np.ndarray | None = None) -> dict[str, IndexFileData]:
    """The file of a BITMAP over ``values`` at ``row_addrs``: name -> (table, schema metadata).
    ``order``: their positions in index order when known (:func:`.sort.merge_order`)."""
    order = sort_order(values, row_addrs) if order is None else order
    sorted_values = values.take(pa.array(order))
    addrs = np.asarray(row_addrs, dtype=np.uint64)[order]
    n = len(order)
    if n:
        valid = sorted_values.is_valid().to_numpy(zero_copy_only=False)
        key = sort_key(sorted_values)
        same = pc.equal(key.slice(1), key.slice(0, n - 1)).fill_null(False)
        same = same.to_numpy(zero_copy_only=False) | (~valid[1:] & ~valid[:-1])
        starts = np.concatenate([[0], np.flatnonzero(~same) + 1]).astype(np.int64)
    else:
        starts = np.zeros(0, np.int64)
    ends = np.concatenate([starts[1:], [n]]).astype(np.int64)
    bitmaps = _serialize_groups(addrs, starts, ends)  # one per distinct value
    table = pa.table(
        {"keys": sorted_values.take(pa.array(starts)), "bitmaps": pa.array(bitmaps, pa.binary())},
        schema=pa.schema([pa.field("keys", values.type), pa.field("bitmaps", pa.binary())]),
    )
    stats = json.dumps({"num_bitmaps": len(bitmaps)}, separators=(",", ":"))
    return {LOOKUP_NAME: IndexFileData(table, {"lance:index_stats": stats})}
