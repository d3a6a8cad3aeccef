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

from airflow_lance.core.indices.files import IndexFileData
from airflow_lance.core.indices.sort import sort_key, sort_order

LOOKUP_NAME = "bitmap_page_lookup.lance"
TYPE_URL = "/lance.table.BitmapIndexDetails"
INDEX_VERSION = 0


def serialize_row_addrs(row_addrs: np.ndarray) -> bytes:
    """Lance's ``RowAddrTreeMap::serialize_into`` of sorted row addresses."""
    if not len(row_addrs):
        return struct.pack("<I", 0)
    fragments = (row_addrs >> np.uint64(32)).astype(np.uint32)
    offsets = (row_addrs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    bounds = np.flatnonzero(np.diff(fragments)) + 1
    starts = np.concatenate([[0], bounds]).astype(np.int64)
    ends = np.concatenate([bounds, [len(row_addrs)]]).astype(np.int64)
    parts = [struct.pack("<I", len(starts))]
    for start, end in zip(starts, ends):  # one entry per fragment, not per row
        data = pyroaring.BitMap(offsets[start:end]).serialize()
        parts.append(struct.pack("<II", int(fragments[start]), len(data)))
        parts.append(data)
    return b"".join(parts)


def build(values: pa.Array, row_addrs: np.ndarray) -> dict[str, IndexFileData]:
    """The file of a BITMAP over ``values`` at ``row_addrs``: name -> (table, schema metadata)."""
    order = sort_order(values, row_addrs)
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
    bitmaps = [serialize_row_addrs(addrs[s:e]) for s, e in zip(starts, ends)]  # one per distinct value
    table = pa.table(
        {"keys": sorted_values.take(pa.array(starts)), "bitmaps": pa.array(bitmaps, pa.binary())},
        schema=pa.schema([pa.field("keys", values.type), pa.field("bitmaps", pa.binary())]),
    )
    stats = json.dumps({"num_bitmaps": len(bitmaps)}, separators=(",", ":"))
    return {LOOKUP_NAME: IndexFileData(table, {"lance:index_stats": stats})}
