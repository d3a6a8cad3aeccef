"""A toy embedding model for ``example_lance_add_columns`` (shipped to Spark with ``py_files``).

``embed`` maps a RecordBatch with a ``name`` column to a ``fixed_size_list<float32>[16]`` column
``embedding``: character trigram hashes folded into 16 buckets and normalised, vectorised with
NumPy. A real pipeline would load a model once per Python worker (a module-level cache) and
call it here.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

DIM = 16


def embed(batch: pa.RecordBatch) -> pa.RecordBatch:
    names = batch.column("name").to_numpy(zero_copy_only=False).astype(str)
    codes = np.char.encode(np.char.ljust(names, 3), "utf-8")
    width = max(len(c) for c in codes) if len(codes) else 3
    raw = np.frombuffer(np.array(codes, dtype=f"S{width}").tobytes(), dtype=np.uint8).reshape(len(codes), width)
    raw = raw.astype(np.int64)
    trigrams = raw[:, :-2] * 65_599 + raw[:, 1:-1] * 257 + raw[:, 2:]
    valid = (raw[:, 2:] != 0)
    buckets = np.where(valid, trigrams % DIM, DIM)
    counts = np.zeros((len(names), DIM + 1), dtype=np.float32)
    np.add.at(counts, (np.repeat(np.arange(len(names)), buckets.shape[1]), buckets.ravel()), 1.0)
    vectors = counts[:, :DIM]
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-6)
    return pa.record_batch({"embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM)})
