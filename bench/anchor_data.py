"""The benchmark table of ../shared/performance-anchors.md, built vectorised with a fixed seed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

SEED = 20240601
CATEGORIES = [f"category_{i:02d}" for i in range(12)]
TAGS = [f"tag_{i:02d}" for i in range(50)]
_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)


def _strings(rng: np.random.Generator, n: int, low: int, high: int) -> pa.Array:
    lengths = rng.integers(low, high + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = _ALPHABET[rng.integers(0, len(_ALPHABET), int(offsets[-1]))]
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data)).cast(pa.string())


def anchor_table(rows: int, wide: bool) -> pa.Table:
    """id, ts, category, text, score (~5% null), tags (0-3), and embedding (128-d) when wide."""
    rng = np.random.default_rng(SEED)
    ts = np.cumsum(rng.integers(1, 1_000_000, rows)) + 1_700_000_000_000_000
    score = rng.normal(50, 10, rows)
    tag_counts = rng.integers(0, 4, rows)
    tag_offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(tag_counts, out=tag_offsets[1:])
    tag_values = pa.array(TAGS).take(pa.array(rng.integers(0, len(TAGS), int(tag_offsets[-1]))))
    columns = {
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "ts": pa.array(ts.astype("datetime64[us]")),
        "category": pa.array(CATEGORIES).take(pa.array(rng.integers(0, len(CATEGORIES), rows))),
        "text": _strings(rng, rows, 20, 80),
        "score": pa.array(score, mask=rng.random(rows) < 0.05),
        "tags": pa.ListArray.from_arrays(pa.array(tag_offsets), tag_values),
    }
    if wide:
        values = pa.array(rng.standard_normal(rows * 128, dtype=np.float32))
        columns["embedding"] = pa.FixedSizeListArray.from_arrays(values, 128)
    return pa.table(columns)
