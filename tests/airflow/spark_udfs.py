"""Batch functions for the add-columns operator tests (shipped to the Spark job with ``py_files``;
the tests call the same functions through pylance's ``add_columns`` as the oracle)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DIM = 8


def embed(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A deterministic ``DIM``-float embedding of ``id`` and the length of ``label``."""
    ids = batch.column("id").to_numpy().astype(np.float32)
    lengths = pc.utf8_length(batch.column("label")).to_numpy(zero_copy_only=False).astype(np.float32)
    values = np.outer(ids, np.arange(1, DIM + 1, dtype=np.float32)) + lengths[:, None]
    return pa.record_batch({"embedding": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), DIM)})


def score(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``score = id * 0.5`` (float64)."""
    return pa.record_batch({"score": pc.multiply(batch.column("id").cast(pa.float64()), 0.5)})


def score_pandas(frame):  # type: ignore[no-untyped-def]
    """``score`` from a pandas DataFrame (``function_input="pandas"``)."""
    import pandas as pd

    return pd.DataFrame({"score": frame["id"].astype("float64") * 0.5})


def fails_on_late_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Fails on a batch holding an id of 300 or more (a later fragment), after earlier ones succeeded."""
    if pc.max(batch.column("id")).as_py() >= 300:
        raise ValueError("injected failure of the add-columns function")
    return score(batch)
