"""Tables exercising every column shape the 2.1/2.2 codec handles (shared by unit and interop tests).

Built vectorised with fixed seeds so failures reproduce; ``mixed_table(n)``
has one column per case (nulls, nested, empty lists, long strings, low and
high cardinality, sorted and random integers, vectors, ...).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

STRUCT = pa.struct([("a", pa.int32()), ("b", pa.string())])


def _strings(rng: np.random.Generator, n: int, low: int, high: int, alphabet: bytes = b"abcdefghij klmnop") -> pa.Array:
    lengths = rng.integers(low, high + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    letters = np.frombuffer(alphabet, dtype=np.uint8)
    data = letters[rng.integers(0, len(letters), int(offsets[-1]))]
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data)).cast(pa.string())


def _lists(rng: np.random.Generator, n: int, values: pa.Array, max_len: int, null_every: int,
           large: bool = False) -> pa.Array:
    """Lists of 0..max_len items of ``values`` (cycled); every ``null_every``-th list is null."""
    lengths = rng.integers(0, max_len + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    items = values.take(pa.array(np.arange(int(offsets[-1])) % len(values)))
    mask = pa.array(np.arange(n) % null_every == 0) if null_every else None
    if large:
        return pa.LargeListArray.from_arrays(pa.array(offsets), items, mask=mask)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), items, mask=mask)


def mixed_table(n: int, seed: int = 7) -> pa.Table:
    """One column per shape; ``n`` >= 100 recommended."""
    rng = np.random.default_rng(seed)
    nulls = rng.random(n) < 0.2
    idx = np.arange(n)
    words = pa.array(["apple", "banana", "cherry", "dürüm", "eggplant", "fig", "grape", "日本"])
    vectors = pa.array(rng.standard_normal(n * 8).astype(np.float32))
    item_nulls = rng.random(n * 4) < 0.1
    columns = {
        "sorted_i64": pa.array(np.cumsum(rng.integers(0, 1000, n))),
        "random_i64": pa.array(rng.integers(-2**62, 2**62, n)),
        "small_u16": pa.array(rng.integers(0, 300, n).astype(np.uint16)),
        "runs_i32": pa.array((idx // 37).astype(np.int32)),
        "lowcard_i64": pa.array(rng.integers(0, 5, n)),
        "const_i32": pa.array(np.full(n, 7, dtype=np.int32)),
        "nullable_i64": pa.array(rng.integers(0, 10**6, n), mask=nulls),
        "mostly_null_i32": pa.array(idx.astype(np.int32), mask=idx % 97 != 0),
        "i8": pa.array(rng.integers(-128, 128, n).astype(np.int8)),
        "f16": pa.array(rng.random(n).astype(np.float16)),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
        "f64_null": pa.array(rng.standard_normal(n), mask=nulls),
        "bool": pa.array(rng.random(n) < 0.5),
        "bool_null": pa.array(rng.random(n) < 0.5, mask=nulls),
        "ts_us": pa.array(1_700_000_000_000_000 + np.cumsum(rng.integers(1, 10**6, n)), pa.timestamp("us", "UTC")),
        "date32": pa.array((idx % 20000).astype(np.int32), pa.date32()),
        "dec128": pa.array(rng.integers(-10**9, 10**9, n)).cast(pa.decimal128(24, 3)),
        "fsb8": pa.array(list(rng.bytes(8 * n)[i * 8:(i + 1) * 8] for i in range(n)), pa.binary(8)),
        "str_low": words.take(pa.array(rng.integers(0, len(words), n))),
        "str_low_null": pa.array(words.take(pa.array(rng.integers(0, 3, n))).to_pylist(), pa.string(),
                                 mask=nulls),
        "str_high": _strings(rng, n, 5, 40),
        "str_empty": pa.array([""] * n),
        "str_unicode": pa.array(["ü€😀" * (i % 4) + chr(0x100 + i % 900) if i % 7 else None for i in range(n)]),
        "large_str": _strings(rng, n, 0, 20).cast(pa.large_string()),
        "binary": pa.array([rng.bytes(int(k)) for k in rng.integers(0, 24, n)], pa.binary()),
        "long_str": pa.array(["x" * int(k) + str(i) if i % 5 else None for i, k in enumerate(rng.integers(250, 700, n))]),
        "vec8": pa.FixedSizeListArray.from_arrays(vectors, 8),
        "vec_null": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4).astype(np.float32), mask=item_nulls),
                                                      4, mask=pa.array(nulls)),
        "vec128": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 128).astype(np.float32)), 128),
        "fsl_fsl": pa.array([[[i % 100, None, 3], [1, 2, 3]] if i % 3 else [None, [4, 5, 6]] for i in range(n)],
                            pa.list_(pa.list_(pa.int16(), 3), 2)),
        "list_i32": _lists(rng, n, pa.array(np.arange(1000, dtype=np.int32)), 4, 7),
        "list_str": _lists(rng, n, words, 3, 5),
        "large_list": _lists(rng, n, pa.array(idx, mask=idx % 3 == 0), 3, 0, large=True),
        "list_bool": _lists(rng, n, pa.array([True, None, False]), 3, 4),
        "list_list": pa.array([[[i % 100, None], [], None] if i % 4 else None for i in range(n)],
                              pa.list_(pa.list_(pa.int16()))),
        "list_struct": pa.array([[{"a": i, "b": str(i)}] * (i % 3) if i % 6 else None for i in range(n)],
                                pa.list_(STRUCT)),
        "struct": pa.array([{"a": i if i % 3 else None, "b": "x" * (i % 4)} if i % 11 else None for i in range(n)],
                           STRUCT),
        "struct_list": pa.array([{"x": [i] * (i % 3), "y": i} if i % 5 else None for i in range(n)],
                                pa.struct([("x", pa.list_(pa.int32())), ("y", pa.int64())])),
        "nested_struct": pa.array(
            [{"inner": {"v": i if i % 2 else None} if i % 3 else None} if i % 7 else None for i in range(n)],
            pa.struct([("inner", pa.struct([("v", pa.int32())]))])),
        "list_vec": pa.array([[[1.0, float(i)]] * (i % 3) for i in range(n)], pa.list_(pa.list_(pa.float32(), 2))),
        "dict": pa.array([("x", "y", None)[i % 3] for i in range(n)]).dictionary_encode(),
        "null": pa.nulls(n),
        "all_null_i32": pa.nulls(n, pa.int32()),
        "empty_lists": pa.array([[] if i % 2 else None for i in range(n)], pa.list_(pa.int32())),
    }
    return pa.table(columns)
