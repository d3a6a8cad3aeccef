"""Random nested Arrow columns (structs, lists, fixed-size lists, nulls, empties) for round-trip tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_LEAVES = [pa.int32(), pa.int64(), pa.string(), pa.float64(), pa.bool_(), pa.int8(), pa.large_string()]


def random_type(rng: np.random.Generator, depth: int = 0) -> pa.DataType:
    choice = int(rng.integers(0, 6 if depth < 3 else 1))
    if choice == 0 or depth >= 3:
        return _LEAVES[int(rng.integers(0, len(_LEAVES)))]
    if choice in (1, 2):
        fields = [pa.field(f"f{i}", random_type(rng, depth + 1)) for i in range(int(rng.integers(1, 4)))]
        return pa.struct(fields)
    if choice == 3:
        return pa.list_(random_type(rng, depth + 1))
    if choice == 4:
        return pa.large_list(random_type(rng, depth + 1))
    return pa.list_(_LEAVES[int(rng.integers(0, 2))], int(rng.integers(1, 4)))


def random_value(rng: np.random.Generator, dtype: pa.DataType, null_rate: float):
    if rng.random() < null_rate:
        return None
    if pa.types.is_struct(dtype):
        return {f.name: random_value(rng, f.type, null_rate) for f in dtype}
    if pa.types.is_fixed_size_list(dtype):
        return [random_value(rng, dtype.value_type, null_rate) for _ in range(dtype.list_size)]
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [random_value(rng, dtype.value_type, null_rate) for _ in range(int(rng.integers(0, 4)))]
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "s" * int(rng.integers(0, 6))
    if pa.types.is_boolean(dtype):
        return bool(rng.random() < 0.5)
    if pa.types.is_floating(dtype):
        return float(rng.standard_normal())
    return int(rng.integers(-100, 100))


def random_table(seed: int, rows: int, columns: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    out = {}
    for c in range(columns):
        dtype = random_type(rng)
        null_rate = float(rng.choice([0.0, 0.1, 0.4]))
        out[f"c{c}"] = pa.array([random_value(rng, dtype, null_rate) for _ in range(rows)], dtype)
    return pa.table(out)
