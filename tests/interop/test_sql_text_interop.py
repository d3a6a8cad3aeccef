"""concat(), ``||`` and float -> string casts in the SQL expression language, side by side with
pylance (DataFusion): add_columns, update and filters give the same values on identical copies."""

from __future__ import annotations

import math
import os
import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours
from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.filter_functions import format_floats

FLOATS = [2.0, 0.1, -0.0, 1e21, 1e-7, 123456789.125, math.nan, math.inf, -math.inf, None, 1.5e300, 1e16, 1e15,
          5e-324, 0.30000000000000004, 1e-5, 1e-6, 1.5e-5, 1e13, 1e12, 9999999999999998.0, 1.0000000000000001e23,
          3.4028234663852886e38, -123.456, 0.00015000000000000001]


def _table() -> pa.Table:
    n = len(FLOATS)
    return pa.table({
        "i": pa.array(range(n), pa.int64()),
        "x": pa.array(FLOATS, pa.float64()),
        "f": pa.array(FLOATS, pa.float32()),
        "s": pa.array([None if k % 4 == 0 else f"s{k}" for k in range(n)]),
        "b": pa.array([k % 3 == 0 for k in range(n)]),
        "d": pa.array(range(n), pa.int32()).cast(pa.date32()),
        "l": pa.array([[k] for k in range(n)]),
    })


@pytest.fixture
def copies(tmp_path):
    oracle, mine = str(tmp_path / "oracle.lance"), str(tmp_path / "ours.lance")
    pylance.write_dataset(_table(), oracle, max_rows_per_file=10)
    shutil.copytree(oracle, mine)
    return oracle, mine


EXPRESSIONS = {
    "float64 cast": "CAST(x AS STRING)",
    "float32 cast": "CAST(f AS STRING)",
    "float literal cast": "CAST(1.5 AS STRING)",
    "concat with nulls and ints": "concat(s, i)",
    "|| with nulls and ints": "s || i",
    "concat of floats": "concat(s, '-', x)",
    "|| chain of float32": "s || '-' || f",
    "concat of one": "concat(s)",
    "concat with NULL": "concat(s, NULL)",
    "concat of booleans and dates": "concat(b, '/', d)",
    "|| of dates": "d || s",
    "|| of a string and an int column": "s || i || 'z'",
    "|| with NULL": "s || NULL",
    "literals": "'a' || 'b'",
    "concat of a float literal": "concat(1.0, 'x')",
    "nested in a function": "upper(s || 'x')",
}


@pytest.mark.parametrize("name", list(EXPRESSIONS))
def test_add_columns_text_expression_as_pylance(copies, name):
    oracle, mine = copies
    sql = EXPRESSIONS[name]
    pylance.dataset(oracle).add_columns({"z": sql})
    ours.dataset(mine).add_columns({"z": sql})
    theirs = pylance.dataset(oracle).to_table(columns=["z"])
    assert pylance.dataset(mine).to_table(columns=["z"]).equals(theirs)
    assert ours.dataset(mine).to_table(columns=["z"]).equals(theirs)
    assert pylance.dataset(mine).schema.field("z").type == pa.string()


@pytest.mark.parametrize("where", ["s || 'x' = 's1x'", "concat(s, i) = '0'", "CAST(x AS STRING) = '2.0'",
                                   "CAST(f AS STRING) IN ('1e15', '123456790.0', 'NaN')",
                                   "concat(i, '') LIKE '1%'"])
def test_filters_and_update_as_pylance(copies, where):
    oracle, mine = copies
    theirs = pylance.dataset(oracle).to_table(filter=where, columns=["i"])
    assert ours.dataset(mine).to_table(filter=where, columns=["i"]).equals(theirs)
    assert theirs.num_rows
    update = {"s": "concat(s, '+', x)"}
    assert ours.dataset(mine).update(update, where=where) == pylance.dataset(oracle).update(update, where=where)
    rows = [repr(pylance.dataset(uri).to_table().sort_by("i").to_pydict()) for uri in (mine, oracle)]  # NaN-safe
    assert rows[0] == rows[1]


def test_format_floats_matches_pylance_on_random_values(tmp_path):
    rng = np.random.default_rng(3)
    values = np.concatenate([
        rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 30, 2000),
        rng.integers(-10**6, 10**6, 500).astype(np.float64),
        np.floor(rng.random(500) * 10.0 ** (scale := rng.integers(0, 8, 500))) / 10.0 ** scale,
    ])
    table = pa.table({"x": values, "f": values.astype(np.float32)})
    uri = str(tmp_path / "floats.lance")
    pylance.write_dataset(table, uri)
    pylance.dataset(uri).add_columns({"sx": "CAST(x AS STRING)", "sf": "CAST(f AS STRING)"})
    theirs = pylance.dataset(uri).to_table()
    assert format_floats(table.column("x").combine_chunks()).to_pylist() == theirs.column("sx").to_pylist()
    assert format_floats(table.column("f").combine_chunks()).to_pylist() == theirs.column("sf").to_pylist()


@pytest.mark.parametrize("sql", ["concat()", "concat(l, s)", "s || l", "i || 'x'", "s || 5", "i || x", "NULL || NULL"])
def test_unsupported_concat_is_a_typed_error_and_nothing_changes(copies, sql):
    oracle, mine = copies
    if sql not in ("concat(l, s)", "s || l"):  # pylance stringifies lists ("[1, 2]"); the rest it refuses too
        with pytest.raises(OSError):
            pylance.dataset(oracle).add_columns({"z": sql})
    before = sorted(os.listdir(mine))
    version = ours.dataset(mine).version
    with pytest.raises(InvalidInputError):
        ours.dataset(mine).add_columns({"z": sql})
    with pytest.raises(InvalidInputError):
        ours.dataset(mine).to_table(filter=f"{sql} = 'x'")
    assert ours.dataset(mine).version == version and sorted(os.listdir(mine)) == before


NULLABILITY = ["n + 1", "n * 2 + n", "n % 3", "-n", "CAST(n AS STRING)", "n > 1", "n = 1 AND b", "NOT b",
               "b OR x > 1", "x + n", "m || 'x'", "concat(m, m)", "upper(m)", "length(m)", "abs(n)", "x IS NULL",
               "n IN (1, 2)", "n BETWEEN 1 AND 2", "m LIKE 'a%'", "st.a + 1", "st.c", "st['a']", "st['c']", "l[1]",
               "array_has_any(l, [1])", "cardinality(l)", "starts_with(m, 'a')", "ends_with(m, 'a')",
               "regexp_like(m, 'a')", "n + NULL", "1 + 1", "'a'", "CAST(1.5 AS STRING)", "x"]


@pytest.mark.parametrize("sql", NULLABILITY)
def test_new_column_nullability_as_pylance(tmp_path, sql):
    """DataFusion's inference: non-null columns and literals through null-preserving operators
    give a non-nullable column; functions (concat, upper, abs, list functions) a nullable one."""
    schema = pa.schema([
        pa.field("n", pa.int64(), False), pa.field("m", pa.string(), False), pa.field("x", pa.float64()),
        pa.field("b", pa.bool_(), False), pa.field("l", pa.list_(pa.int64()), False),
        pa.field("st", pa.struct([pa.field("a", pa.int64(), False), pa.field("c", pa.int64())]), False)])
    table = pa.table({"n": [1, 2], "m": ["a", "b"], "x": [1.0, None], "b": [True, False], "l": [[1], [2]],
                      "st": [{"a": 1, "c": None}, {"a": 2, "c": 3}]}, schema=schema)
    oracle, mine = str(tmp_path / "oracle.lance"), str(tmp_path / "ours.lance")
    pylance.write_dataset(table, oracle)
    shutil.copytree(oracle, mine)
    pylance.dataset(oracle).add_columns({"z": sql})
    ours.dataset(mine).add_columns({"z": sql})
    assert pylance.dataset(mine).schema.field("z") == pylance.dataset(oracle).schema.field("z")
    assert pylance.dataset(mine).to_table().equals(pylance.dataset(oracle).to_table())


def _times() -> pa.Table:
    import datetime as dt

    rows = [dt.datetime(2023, 1, 2, 3, 4, 5, 600), dt.datetime(2023, 1, 2, 3, 4, 5), None,
            dt.datetime(2023, 1, 2, 3, 4, 5, 120000), dt.datetime(1969, 12, 31, 23, 59, 59, 500000),
            dt.datetime(1900, 1, 1, 0, 0, 0, 1)]
    columns = {unit: pa.array(rows, pa.timestamp(unit)) for unit in ("s", "ms", "us", "ns")}
    columns["utc"] = pa.array(rows, pa.timestamp("us", "UTC"))
    columns["d64"] = pa.array([1, 2, None, 3, -5, 86400000 * 365], pa.int64()).cast(pa.date64())
    columns["m"] = pa.array(list("abcdef"))
    return pa.table(columns)


@pytest.mark.parametrize("column", ["s", "ms", "us", "ns", "utc", "d64"])
def test_timestamps_as_text_as_pylance(tmp_path, column):
    """DataFusion's RFC 3339 text: a T, fractions of 3/6/9 digits (none when zero), Z for UTC."""
    oracle, mine = str(tmp_path / "oracle.lance"), str(tmp_path / "ours.lance")
    pylance.write_dataset(_times(), oracle)
    shutil.copytree(oracle, mine)
    columns = {"c": f"CAST({column} AS STRING)", "k": f"concat(m, {column})", "p": f"m || {column}"}
    pylance.dataset(oracle).add_columns(columns)
    ours.dataset(mine).add_columns(columns)
    assert pylance.dataset(mine).to_table().equals(pylance.dataset(oracle).to_table())
    where = f"CAST({column} AS STRING) LIKE '%.5%' OR m || {column} = 'b2023-01-02T03:04:05'"
    assert ours.dataset(mine).to_table(filter=where).equals(pylance.dataset(oracle).to_table(filter=where))
