"""Sort order of scalar index keys, as Lance's training sort (DataFusion) orders them.

Ascending, nulls first; floats in IEEE total order (``-NaN < -inf < ... < -0.0 < 0.0 < ... <
inf < NaN``, Rust's ``total_cmp``); strings and binaries bytewise. Ties are broken by row address
(Lance leaves their order unspecified; readers do not depend on it).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_TOTAL_ORDER_INT = {2: (np.int16, np.uint16), 4: (np.int32, np.uint32), 8: (np.int64, np.uint64)}


def _float_key(values: pa.Array) -> pa.Array:
    """Signed integers ordered as the floats' total order (nulls kept)."""
    width = values.type.byte_width
    signed, _ = _TOTAL_ORDER_INT[width]
    raw = np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False)).view(signed)
    bits = width * 8 - 1
    key = raw ^ ((raw >> bits).astype(signed) & signed(np.iinfo(signed).max))
    return pa.array(key, mask=values.is_null().to_numpy(zero_copy_only=False) if values.null_count else None)


def sort_key(values: pa.Array) -> pa.Array:
    """An array whose ascending order and equality are the index's (floats: total order)."""
    key = _float_key(values) if pa.types.is_floating(values.type) else values
    return key.dictionary_decode() if pa.types.is_dictionary(key.type) else key


def sort_order(values: pa.Array, row_addrs: np.ndarray) -> np.ndarray:
    """Positions of ``values`` in index order (nulls first, then by value, then by row address)."""
    key = sort_key(values)
    table = pa.table({"k": key, "r": pa.array(row_addrs, pa.uint64())})
    return pc.sort_indices(table, sort_keys=[("k", "ascending", "at_start"), ("r", "ascending", "at_start")]).to_numpy()
