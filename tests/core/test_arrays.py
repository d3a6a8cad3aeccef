"""core.arrays.sorted_unique equals np.unique, and the package never calls NumPy's hash-based unique."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

from airflow_lance.core.arrays import sorted_unique

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "airflow_lance"


@pytest.mark.parametrize("values", [
    np.array([], dtype=np.int64),
    np.array([7], dtype=np.int32),
    np.array([3, 3, 3], dtype=np.uint8),
    np.random.default_rng(1).integers(-50, 50, 10_000),
    np.random.default_rng(2).integers(0, 2**62, 50_000, dtype=np.int64),
    np.arange(12).reshape(3, 4) % 5,
])
def test_sorted_unique_equals_numpy_unique(values: np.ndarray) -> None:
    ours = sorted_unique(values)
    assert ours.dtype == values.dtype and np.array_equal(ours, np.unique(values))


def test_the_package_calls_numpy_unique_only_with_return_arguments() -> None:
    """A plain ``np.unique(x)`` takes NumPy 2.3+'s hash path (seconds on 10^6 integers here): use
    ``sorted_unique``. With ``return_index``/``return_inverse``/``return_counts`` NumPy sorts."""
    plain = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if "np.unique(" not in text and "numpy.unique(" not in text:
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "unique"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy")
                    and not any((k.arg or "").startswith("return_") for k in node.keywords)):
                plain.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert plain == []


def test_uint32_array_holds_the_values_pyroaring_takes_in_bulk() -> None:
    import pyroaring

    from airflow_lance.core.arrays import uint32_array

    values = np.array([0, 5, 2**32 - 1, 70_000], dtype=np.int64)
    out = uint32_array(values)
    assert out.typecode == "I" and out.tolist() == values.tolist()
    assert list(pyroaring.BitMap(out)) == sorted(values.tolist())
