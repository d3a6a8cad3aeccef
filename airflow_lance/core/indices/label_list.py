"""LABEL_LIST scalar index files (list columns), as pylance 14 writes them.

A BITMAP (:mod:`.bitmap`) over the list *elements*: one ``keys`` row per distinct element (a null
element included, as key null), its bitmap the rows whose list holds it (once, however often it
repeats). Same file (``bitmap_page_lookup.lance``) and ``lance:index_stats``. The rows whose list
is null are global buffer 1 of the file (written before the data, at offset 0), serialized as the
bitmaps are (an empty map is the 4 bytes ``00000000``); the schema metadata
``lance:label_list_nulls`` = "1" is that buffer's index. Empty lists are in no bitmap. Details:
``/lance.table.LabelListIndexDetails`` (empty); ``index_version`` 1.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core.indices import bitmap
from airflow_lance.core.indices.files import IndexFileData

LOOKUP_NAME = bitmap.LOOKUP_NAME
TYPE_URL = "/lance.table.LabelListIndexDetails"
INDEX_VERSION = 1


def build(values: pa.Array, row_addrs: np.ndarray) -> dict[str, IndexFileData]:
    """The file of a LABEL_LIST over the list array ``values`` at ``row_addrs``."""
    addrs = np.asarray(row_addrs, dtype=np.uint64)
    parents = pc.list_parent_indices(values).to_numpy(zero_copy_only=False)
    elements = pc.list_flatten(values)
    lookup = bitmap.build(elements, addrs[parents])[LOOKUP_NAME]
    null_rows = addrs[values.is_null().to_numpy(zero_copy_only=False)] if values.null_count else addrs[:0]
    return {LOOKUP_NAME: IndexFileData(lookup.table, {"lance:label_list_nulls": "1", **lookup.metadata},
                                       [bitmap.serialize_row_addrs(np.sort(null_rows))])}
