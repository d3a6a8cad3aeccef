"""Random nested Arrow columns whose leaves look like real data, for round trips with pylance.

:mod:`random_nested` covers nesting shapes with tiny values; the encoders' choices depend on the
values too. Here every leaf draws a profile that steers them: strings short, long (full-zip pages
of 2.1+), very long, low-cardinality (dictionaries), constant or mixed, random bytes or text;
integers in a small or the full range of their type, constant, sorted or in runs; floats, booleans,
fixed-size binaries, timestamps, dates and dictionary arrays. Lists may be mostly empty, fixed-size
lists hold up to 128 items (vectors, whose items may all be null), and nulls appear at every level
at 0-100%. Built with numpy, no per-row Python.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_WORDS = np.array([f"word{i}-{'x' * (i % 7)}" for i in range(200)])
_TEXT = np.frombuffer(b"abcdefghij klmnop", dtype=np.uint8)
_STRING_LENGTHS = {"short": (0, 10), "medium": (20, 80), "long": (200, 600), "very long": (1000, 5000),
                   "empty": (0, 0), "mixed": (0, 3000)}
_BINARY_TYPES = {"string": pa.string(), "large_string": pa.large_string(), "binary": pa.binary(),
                 "large_binary": pa.large_binary()}
LEAVES = ("int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float32", "float64", "bool",
          *_BINARY_TYPES, "fixed_size_binary", "timestamp", "date32", "dictionary")
#: A column's shape: a leaf (as often as all the nested shapes together), or nested.
_SHAPES = ("leaf", "leaf", "leaf", "leaf", "struct", "list", "large_list", "fixed_size_list")
#: Leaf values per column at most: the very long strings of a long list stay a few megabytes.
MAX_VALUES = 200_000


def _strings(rng: np.random.Generator, n: int, name: str) -> pa.Array:
    profile = str(rng.choice(["lowcard", "const", *_STRING_LENGTHS]))
    if profile == "lowcard":
        return pa.array(_WORDS[rng.integers(0, int(rng.integers(1, 60)), n)]).cast(_BINARY_TYPES[name])
    if profile == "const":
        return pa.array(np.full(n, "constant-value")).cast(_BINARY_TYPES[name])
    low, high = _STRING_LENGTHS[profile]
    lengths = rng.integers(low, high + 1, n)
    if profile == "mixed":
        lengths = np.where(rng.random(n) < 0.9, lengths % 20, lengths)
    lengths = np.minimum(lengths, max(0, 8 * MAX_VALUES // max(n, 1)))  # a column stays small
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    text = name.endswith("string") or rng.random() < 0.7
    alphabet = _TEXT if text else np.arange(256, dtype=np.uint8)
    data = alphabet[rng.integers(0, len(alphabet), int(offsets[-1]))]
    large = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return large.cast(_BINARY_TYPES[name])


def _integers(rng: np.random.Generator, n: int, dtype: np.dtype) -> pa.Array:
    info = np.iinfo(dtype)
    profile = str(rng.choice(["small", "full", "const", "sorted", "runs", "wide"]))
    top = int(info.max)
    if profile == "small":
        values = rng.integers(max(int(info.min), -100), min(top, 100) + 1, n)
    elif profile == "full":
        values = rng.integers(int(info.min), top, n, endpoint=True, dtype=np.int64 if info.min < 0 else np.uint64)
    elif profile == "const":
        values = np.full(n, top, dtype=dtype)
    elif profile == "sorted":
        values = np.sort(rng.integers(0, min(top, 10**6), n))
    elif profile == "runs":
        values = np.repeat(rng.integers(0, min(top, 1000), n // 50 + 1), 50)[:n]
    else:
        values = rng.integers(0, min(top, 2**40), n)
    return pa.array(np.asarray(values).astype(dtype))


def leaf(rng: np.random.Generator, n: int, name: str) -> pa.Array:
    """``n`` values of the leaf type ``name`` (one of :data:`LEAVES`), no nulls."""
    if name in _BINARY_TYPES:
        return _strings(rng, n, name)
    if name == "dictionary":
        return _strings(rng, n, "string").dictionary_encode()
    if name == "bool":
        return pa.array(rng.random(n) < rng.random())
    if name in ("float32", "float64"):
        profile = str(rng.choice(["normal", "const", "integral"]))
        values = {"normal": lambda: rng.standard_normal(n), "const": lambda: np.full(n, 1.5),
                  "integral": lambda: rng.integers(0, 100, n)}[profile]()
        return pa.array(values.astype(name))
    if name == "fixed_size_binary":
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(rng.bytes(16 * n))])
    if name == "timestamp":
        return _integers(rng, n, np.dtype(np.int64)).cast(pa.timestamp("us"))
    if name == "date32":
        return pa.array(rng.integers(0, 20000, n).astype(np.int32)).cast(pa.date32())
    return _integers(rng, n, np.dtype(name))


def _null_mask(rng: np.random.Generator, n: int, rate: float) -> np.ndarray | None:
    return None if rate == 0 else rng.random(n) < rate


def _with_nulls(values: pa.Array, mask: np.ndarray | None) -> pa.Array:
    return values if mask is None else pc.if_else(pa.array(mask), pa.nulls(len(values), values.type), values)


def column(rng: np.random.Generator, n: int, depth: int = 0) -> pa.Array:
    """``n`` values of a random type: a leaf, or (down to depth 3) a struct, list, large list or fixed-size list."""
    choice = str(rng.choice(_SHAPES)) if depth < 3 else "leaf"
    mask = _null_mask(rng, n, float(rng.choice([0, 0, 0.05, 0.5, 1.0])))
    arrow_mask = None if mask is None else pa.array(mask)
    if choice == "leaf":
        return _with_nulls(leaf(rng, n, str(rng.choice(LEAVES))), mask)
    if choice == "struct":
        children = [column(rng, n, depth + 1) for _ in range(int(rng.integers(1, 4)))]
        return pa.StructArray.from_arrays(children, [f"f{i}" for i in range(len(children))], mask=arrow_mask)
    if choice in ("list", "large_list"):
        lengths = rng.integers(0, int(rng.choice([1, 3, 20])) + 1, n)
        if rng.random() < 0.3:
            lengths[rng.random(n) < 0.8] = 0  # mostly empty
        if mask is not None:
            lengths[mask] = 0
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if offsets[-1] > MAX_VALUES:
            lengths[:] = 0
            offsets[:] = 0
        items = column(rng, int(offsets[-1]), depth + 1)
        if choice == "large_list":
            return pa.LargeListArray.from_arrays(pa.array(offsets), items, mask=arrow_mask)
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), items, mask=arrow_mask)
    size = int(rng.choice([1, 2, 3, 16, 128]))
    while size > 1 and n * size > MAX_VALUES:
        size //= 2
    items = leaf(rng, n * size, str(rng.choice(["float32", "float64", "int64", "uint8"])))
    items = _with_nulls(items, _null_mask(rng, n * size, float(rng.choice([0, 0, 0.1, 1.0]))))
    return pa.FixedSizeListArray.from_arrays(items, size, mask=arrow_mask)


def realistic_table(seed: int, rows: int) -> pa.Table:
    """1-3 random columns of ``rows`` rows (see :func:`column`)."""
    rng = np.random.default_rng(seed)
    return pa.table({f"c{i}": column(rng, rows) for i in range(int(rng.integers(1, 4)))})
