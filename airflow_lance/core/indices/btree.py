"""BTREE scalar index files, as pylance 14 writes them.

``page_data.lance``: every indexed row as ``values`` (the column's type, nullable) and ``ids``
(uint64, not null: the row *address* ``fragment_id << 32 | offset``, also on datasets with
stable row ids), sorted by value with nulls first (:mod:`.sort`), deleted rows left out.
``page_lookup.lance``: one row per page of ``batch_size`` (4096) rows of page_data: ``min`` =
the page's first value, ``max`` = its last (null when that is null), ``null_count`` (uint32)
and ``page_idx`` (uint32); schema metadata ``batch_size`` = "4096", ``range_partitioned`` =
"false". Details: ``/lance.table.BTreeIndexDetails`` with an empty value; ``index_version`` 0,
1 on datasets with stable row ids.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from airflow_lance.core.indices.files import IndexFileData
from airflow_lance.core.indices.sort import sort_order

PAGES_NAME = "page_data.lance"
LOOKUP_NAME = "page_lookup.lance"
BATCH_SIZE = 4096
TYPE_URL = "/lance.table.BTreeIndexDetails"


def index_version(stable_row_ids: bool) -> int:
    return 1 if stable_row_ids else 0


def build(values: pa.Array, row_addrs: np.ndarray, batch_size: int = BATCH_SIZE,
          order: np.ndarray | None = None) -> dict[str, IndexFileData]:
    """The files of a BTREE over ``values`` at ``row_addrs``: name -> (table, schema metadata).
    ``order``: their positions in index order when known (:func:`.sort.merge_order`)."""
    order = sort_order(values, row_addrs) if order is None else order
    sorted_values = values.take(pa.array(order))
    ids = pa.array(np.asarray(row_addrs, dtype=np.uint64)[order], pa.uint64())
    pages = pa.table({"values": sorted_values, "ids": ids},
                     schema=pa.schema([pa.field("values", values.type), pa.field("ids", pa.uint64(), False)]))
    n = len(order)
    starts = np.arange(0, n, batch_size, dtype=np.int64)
    ends = np.minimum(starts + batch_size, n)
    nulls = sorted_values.null_count  # all first, in index order: a page's nulls are the part of them in it
    lookup = pa.table(
        {
            "min": sorted_values.take(pa.array(starts)),
            "max": sorted_values.take(pa.array(ends - 1)),
            "null_count": pa.array(np.clip(nulls - starts, 0, ends - starts), pa.uint32()),
            "page_idx": pa.array(np.arange(len(starts)), pa.uint32()),
        },
        schema=pa.schema([
            pa.field("min", values.type), pa.field("max", values.type),
            pa.field("null_count", pa.uint32(), False), pa.field("page_idx", pa.uint32(), False),
        ]),
    )
    return {
        PAGES_NAME: IndexFileData(pages),
        LOOKUP_NAME: IndexFileData(lookup, {"range_partitioned": "false", "batch_size": str(batch_size)}),
    }
