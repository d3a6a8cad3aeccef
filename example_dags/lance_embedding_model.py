"""A stand-in embedding model for the incremental embedding example
(``example_lance_incremental_embeddings``): shipped to Spark with ``py_files``.

:func:`embed` is a ``transform`` of ``LanceSparkWriteOperator``: it maps the DataFrame read from
the documents dataset to the rows written (the same columns plus ``embedding``), computed on the
executors batch by batch with ``mapInArrow``. :func:`embed_texts` is the "model": eight
vectorised text features (length, vowels, spaces, ...) scaled to unit length. A real pipeline
calls its model here (loaded once per Python worker) and ships it the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

DIMENSIONS = 8
_COUNTED = ("a", "e", "i", "o", "u", " ", "n")


def embed_texts(texts: pa.Array | pa.ChunkedArray) -> pa.FixedSizeListArray:
    """One unit-length ``float32`` vector of :data:`DIMENSIONS` features per text (vectorised)."""
    features = [pc.utf8_length(texts), *(pc.count_substring(texts, piece) for piece in _COUNTED)]
    matrix = np.stack([np.asarray(f.to_numpy(zero_copy_only=False), dtype=np.float32) for f in features], axis=1)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), np.float32(1e-6))
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel(), pa.float32()), DIMENSIONS)


def _embed_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        vectors = embed_texts(batch.column("text")).cast(pa.list_(pa.float32()))
        yield pa.RecordBatch.from_arrays([*batch.columns, vectors], names=[*batch.schema.names, "embedding"])


def embed(df: DataFrame) -> DataFrame:
    """``df`` with an ``embedding`` column computed from its ``text`` column on the executors."""
    from pyspark.sql.types import ArrayType, FloatType, StructField, StructType

    schema = StructType([*df.schema.fields, StructField("embedding", ArrayType(FloatType()))])
    return df.mapInArrow(_embed_batches, schema)
