"""Array helpers shared by the core's vectorised paths."""

from __future__ import annotations

import array
import types

import numpy as np
import pyarrow as pa


def arrow_dataset() -> types.ModuleType:
    """``pyarrow.dataset``, imported on first use: only expression evaluation (filters, SQL
    projections and updates) needs it, and importing it imports pandas, about 0.4 s of every
    process that imports the core (an Airflow task, a Spark job's driver)."""
    import pyarrow.dataset

    return pyarrow.dataset


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending: what ``np.unique(values)`` returns.

    By one sort and a neighbour comparison. NumPy 2.3+ answers a plain ``np.unique`` from a hash
    table, which took 4-9 s for 1.5 million int64 values on the test machine (the sort: 0.04 s).
    """
    ordered = np.sort(np.asarray(values).ravel())
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def uint32_array(values: np.ndarray) -> array.array:
    """``values`` as an ``array.array('I')``, which pyroaring adds in bulk (a numpy array it
    iterates element by element, about 10x slower)."""
    out = array.array("I")
    out.frombytes(np.ascontiguousarray(values, np.uint32).tobytes())
    return out


def empty_table(schema: pa.Schema) -> pa.Table:
    """``schema.empty_table()``, which pyarrow cannot build for some extension types (a tensor with
    a permutation, as pylance stores them): the columns are cast from empty arrays of their storage."""
    try:
        return schema.empty_table()
    except (NotImplementedError, pa.ArrowNotImplementedError):
        from airflow_lance.core.schema import storage_type

        return pa.Table.from_arrays([pa.array([], storage_type(f.type)).cast(f.type) for f in schema], schema=schema)
