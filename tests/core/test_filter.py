"""The filter language: SQL -> pyarrow Expression, checked against pylance and pyarrow."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.filter import referenced_columns, to_expression

ROWS = 1_000
WORDS = ["ab", "abc", "b", "Abc", "héllo", "日本", "a_b", "a%b", "", "xyz", "zz top", "A"]


def _with_nulls(values: list, mask: np.ndarray) -> list:
    return [None if null else value for value, null in zip(values, mask, strict=True)]


def _make_table(rows: int = ROWS, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)

    def nulls() -> np.ndarray:
        return rng.random(rows) < 0.1

    day0, noon = dt.date(2023, 12, 1), dt.datetime(2024, 1, 1)
    days = [day0 + dt.timedelta(days=int(k)) for k in rng.integers(0, 90, rows)]
    times = [noon + dt.timedelta(seconds=int(k)) for k in rng.integers(-86_400, 86_400, rows)]
    cents = [decimal.Decimal(int(k)).scaleb(-2) for k in rng.integers(-10_000, 10_000, rows)]
    tags = [[int(v) for v in rng.integers(0, 5, k)] for k in rng.integers(0, 4, rows)]
    scores = np.where(rng.random(rows) < 0.05, np.nan, np.round(rng.random(rows) * 100, 1))
    categories = rng.choice(["a", "b", "c", "d"], rows)
    struct = pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 10, rows)), pa.array(rng.choice(["p", "q"], rows))],
        names=["a", "b"],
    )
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "x": pa.array(rng.integers(-5, 6, rows), pa.int64(), mask=nulls()),
            "i32": pa.array(rng.integers(-100, 100, rows), pa.int32()),
            "u8": pa.array(rng.integers(0, 256, rows), pa.uint8()),
            "score": pa.array(scores, pa.float64(), mask=nulls()),  # NaN and NULL
            "f32": pa.array(rng.choice([1.1, 2.2, 3.3], rows), pa.float32()),
            "category": pa.array(categories),
            "cat_dict": pa.array(categories).dictionary_encode(),
            "name": pa.array(_with_nulls([WORDS[i] for i in rng.integers(0, len(WORDS), rows)], nulls())),
            "flag": pa.array(rng.random(rows) < 0.5, mask=nulls()),
            "d": pa.array(days, pa.date32()),
            "ts": pa.array(times, pa.timestamp("us")),
            "tsz": pa.array(times, pa.timestamp("us", "UTC")),
            "amount": pa.array(_with_nulls(cents, nulls()), pa.decimal128(10, 2)),
            "s": struct,
            "tags": pa.array(_with_nulls(tags, nulls()), pa.list_(pa.int64())),
            "sp ace": pa.array(rng.integers(0, 3, rows)),
        }
    )


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return _make_table()


@pytest.fixture(scope="module")
def oracle(table, tmp_path_factory):
    """The same table written by pylance, the reference implementation."""
    lance = pytest.importorskip("lance")
    uri = str(tmp_path_factory.mktemp("filter") / "oracle.lance")
    lance.write_dataset(table, uri, data_storage_version="2.0")
    return lance.dataset(uri)


def _comparable(rows: pa.Table) -> pa.Table:
    """Sorted by id, floats as text: Table.equals would find NaN != NaN."""
    rows = rows.sort_by("id")
    for index, field in enumerate(rows.schema):
        if pa.types.is_floating(field.type):
            rows = rows.set_column(index, field.name, rows[field.name].cast(pa.string()))
    return rows


def _ours(table: pa.Table, predicate) -> pa.Table:
    return _comparable(table.filter(to_expression(predicate, table.schema)))


SQL_PREDICATES = [
    # comparisons, logic, three-valued logic
    "id % 10 = 0 AND category IN ('a','b')",
    "x > 1",
    "NOT (x > 1)",
    "x <> 0 AND x != 1",
    "x <= -2 OR x >= 4",
    "x = NULL",
    "NOT (x = NULL)",
    "x = 1 OR NULL",
    "x = 1 AND NULL",
    "x IS NULL",
    "x IS NOT NULL AND NOT x = 0",
    "flag",
    "NOT flag",
    "flag AND x > 1",
    "flag IS TRUE",
    "flag IS NOT TRUE",
    "flag IS FALSE",
    "flag IS NOT FALSE",
    "(x = 1) = true",
    "x IS DISTINCT FROM 1",
    "x IS NOT DISTINCT FROM NULL",
    "1 = 1",
    "true",
    # numbers: mixed types, literal casts, arithmetic on both sides
    "score > 50.5 OR score IS NULL",
    "score > 50",
    "NOT (score <= 50)",
    "score <> score",
    "score = CAST('NaN' AS DOUBLE)",
    "score >= 99 OR score < 0.5",
    "score > 9.5e1",
    "f32 = 1.1",
    "u8 > 200",
    "u8 + 100 > 300",
    "i32 BETWEEN -10 AND 10",
    "x BETWEEN 1 AND 3",
    "x NOT BETWEEN 1 AND 3",
    "x + 1 > id / 100",
    "x * 2 = i32 - 3",
    "-x > 2",
    "x = -1",
    "id / 3 = 2",
    "x % 3 = -1",
    "x % -3 = 1",
    "score % 7 > 3",
    "score / 0 > 1",
    "amount > 10",
    "amount * 2 > 10 OR amount IS NULL",
    "amount > x",
    "abs(x) = 2",
    # IN lists
    "x IN (1, NULL)",
    "x NOT IN (1, NULL)",
    "x NOT IN (1, 2)",
    "NOT (name IN ('ab', NULL))",
    "name IN ('ab', 'héllo', '日本')",
    "cat_dict IN ('a', 'c')",
    "s.a IN (1, 2)",
    # strings, LIKE and friends
    "name = 'héllo'",
    "name = '日本'",
    "name = ''",
    "name > 'b'",
    'name = "ab"',
    "name LIKE 'ab%'",
    "name NOT LIKE 'ab%'",
    "name NOT LIKE '%a%' OR name IS NULL",
    "name LIKE 'a\\_b'",
    "name LIKE 'a\\%b'",
    "name LIKE '_'",
    "name ILIKE 'ab%'",
    "name ILIKE 'hÉ%'",
    "name NOT ILIKE '%B%'",
    "lower(name) = 'abc'",
    "upper(name) = 'HÉLLO'",
    "length(name) = 2",
    "char_length(name) > 3",
    "starts_with(name, 'a')",
    "ends_with(name, 'b')",
    "contains(name, 'b')",
    "regexp_match(name, '^a')",
    "regexp_match(name, '^A', 'i')",
    "regexp_like(name, 'b$')",
    "cat_dict = 'b' OR cat_dict LIKE 'c%'",
    # dates and timestamps
    "d = date '2024-01-01'",
    "d > date '2024-01-15' AND d < date '2024-02-01'",
    "d BETWEEN date '2024-01-01' AND date '2024-01-31'",
    "d > timestamp '2024-01-01 12:00:00'",
    "d = timestamp '2024-01-01 00:00:00'",
    "ts > timestamp '2024-01-01 12:00:00'",
    "ts >= date '2024-01-01'",
    "ts > timestamp '2024-01-01T12:00:00+02:00'",
    "tsz > timestamp '2024-01-01 12:00:00'",
    "tsz <= timestamp '2024-01-01T12:00:00+02:00'",
    "tsz > timestamp '2024-01-01 12:00:00Z'",
    # casts
    "CAST(x AS DOUBLE) > 1.5",
    "CAST(i32 * 1.5 AS BIGINT) = -7",
    "CAST(x AS STRING) = '1'",
    "CAST(x AS BOOLEAN)",
    "CAST(x AS DECIMAL(10,2)) = 1",
    "CAST(u8 AS TINYINT UNSIGNED) = 5",
    "CAST(x AS TIMESTAMP) = timestamp '1970-01-01 00:00:00.000001'",
    "CAST(x AS TIMESTAMP(3)) = timestamp '1970-01-01 00:00:00.001'",
    "CAST('2024-01-01' AS DATE) = d",
    "x::BIGINT = 1",
    # nested fields, quoting, identifier case
    "s.a = 3",
    "s.b = 'p' AND s.a > 5",
    "`s`.`a` = 3",
    "`sp ace` = 1",
    "ID = 1",
    "tags IS NULL",
]


@pytest.mark.interop
@pytest.mark.parametrize("predicate", SQL_PREDICATES)
def test_selects_the_rows_pylance_selects(table, oracle, predicate):
    expected = _comparable(oracle.to_table(filter=predicate))
    assert _ours(table, predicate).equals(expected)


def test_the_suite_selects_neither_nothing_nor_everything(table):
    counts = [_ours(table, predicate).num_rows for predicate in SQL_PREDICATES]
    assert sum(0 < count < ROWS for count in counts) >= 0.9 * len(counts)


PYARROW_EQUIVALENTS = [
    (
        "id % 10 = 0 AND category IN ('a','b')",
        (pc.field("id") - pc.divide(pc.field("id"), 10) * 10 == 0) & pc.field("category").isin(["a", "b"]),
    ),
    ("x BETWEEN 1 AND 3", (pc.field("x") >= 1) & (pc.field("x") <= 3)),
    ("name LIKE 'ab%'", pc.match_like(pc.field("name"), "ab%")),
    ("name NOT LIKE 'ab%'", ~pc.match_like(pc.field("name"), "ab%")),
    ("name IS NULL", pc.field("name").is_null()),
    # NaN sorts above every number, as in DataFusion:
    (
        "score > 50.5 OR score IS NULL",
        (pc.field("score") > 50.5) | pc.field("score").is_nan() | pc.field("score").is_null(),
    ),
    ("NOT (x > 1)", ~(pc.field("x") > 1)),
    ("s.a = 3", pc.field("s", "a") == 3),
    ("d = date '2024-01-01'", pc.field("d") == pa.scalar(dt.date(2024, 1, 1))),
    (
        "tsz > timestamp '2024-01-01 12:00:00'",
        pc.field("tsz") > pa.scalar(dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC), pa.timestamp("us", "UTC")),
    ),
    ("x + 1 > id / 100", pc.field("x") + 1 > pc.divide(pc.field("id"), 100)),
    ("amount > 10", pc.field("amount") > pa.scalar(decimal.Decimal("10.00"), pa.decimal128(10, 2))),
    # accepted here, refused by pylance (literals it will not convert):
    ("x > 1.5", pc.field("x") > 1.5),
    ("x IN (1, 2.0)", pc.field("x").isin([1, 2])),
    ("d > '2024-01-15'", pc.field("d") > pa.scalar(dt.date(2024, 1, 15))),
    ("amount = 10.5", pc.field("amount") == pa.scalar(decimal.Decimal("10.50"), pa.decimal128(10, 2))),
    ("name LIKE 'a!_b' ESCAPE '!'", pc.field("name") == "a_b"),
    ("x <=> 1", pc.coalesce(pc.field("x") == 1, False)),
]


@pytest.mark.parametrize(("predicate", "expression"), PYARROW_EQUIVALENTS, ids=[p for p, _ in PYARROW_EQUIVALENTS])
def test_selects_the_rows_of_the_hand_written_expression(table, predicate, expression):
    assert _ours(table, predicate).equals(_comparable(table.filter(expression)))


def test_not_of_a_null_comparison_selects_nothing(table):
    selected = _ours(table, "NOT (x > 1)")
    assert selected.num_rows > 0
    assert selected["x"].null_count == 0


def test_a_long_in_list_is_one_hash_lookup(table):
    ids = list(range(0, ROWS, 3))
    predicate = f"id IN ({', '.join(map(str, ids))})"
    assert "is_in" in str(to_expression(predicate, table.schema))
    assert _ours(table, predicate)["id"].to_pylist() == ids


def test_a_long_generated_or_chain_translates(table):
    ids = list(range(0, ROWS, 2))
    predicate = " OR ".join(f"id = {i}" for i in ids)
    assert _ours(table, predicate)["id"].to_pylist() == ids


@pytest.mark.parametrize(
    ("predicate", "message"),
    [
        ("x = 1 AND", r"malformed filter .* line 1, column 9"),
        ("(x = 1", r"malformed filter .*Expecting \)"),
        ("x = 1 x", r"malformed filter .*column 7"),
        ("name = 'abc", r"malformed filter"),
        ("  ", r"empty"),
        ("nope = 1", r"unknown column 'nope'.*available columns: id, x, i32"),
        ("`ID` = 1", r"unknown column 'ID'"),
        ("s.zz = 1", r"s \(struct<a: int64, b: string>\) has no field 'zz'"),
        ("x.a = 1", r"x \(int64\) has no field 'a'"),
        ("name = 5", r"cannot evaluate name = 5 \(name is string, 5 is int64\)"),
        ("x = 'abc'", r"x is int64, 'abc' is string"),
        ("flag = 1", r"flag is bool"),
        ("s = 1", r"s is struct"),
        ("x LIKE 'a%'", r"x is int64"),
        ("u8 = 300", r"300 is out of the range of u8 \(uint8\)"),
        ("id = 9223372036854775808", r"out of the range of id \(int64\)"),
        ("d = 'not a date'", r"cannot read 'not a date' as date32"),
        ("ts > timestamp '2024-01-01 00:00:00.000000001'", r"cannot read .* as timestamp\[us\]"),
        ("-u8 < 0", r"u8 is uint8"),
        ("x", r"x is int64, not a boolean condition"),
        ("NOT x", r"x is int64, not a boolean condition"),
        ("NULL", r"NULL is null, not a boolean condition"),
        ("foo(x) = 1", r"unsupported .*function foo\(\)"),
        ("array_has_any(tags, ['a'])", r"cannot look for string values in a list of int64"),
        ("array_has_any(x, [1])", r"needs a list column, but x is int64"),
        ("array_has_all(tags, x)", r"second argument must be a list literal"),
        ("array_has_any(tags, [x])", r"values to look for must be literals"),
        ("x = X'0'", r"malformed hex binary literal"),
        ("TRY_CAST(x AS INT) = 1", r"unsupported .*TRY_CAST"),
        ("x IN (SELECT 1)", r"unsupported .*subquery"),
        ("sum(x) > 1", r"unsupported .*aggregate function SUM\(\)"),
        ("tags[name] = 2", r"a list index must be an integer, not string"),
        ("x[1] = 2", r"x\[1\] needs a list column"),
        ("name LIKE x", r"LIKE pattern must be a string literal, not x"),
        ("name LIKE 'a' ESCAPE '!!'", r"ESCAPE needs LIKE and one character"),
        ("x IN ()", r"empty IN list"),
        ("CAST(x AS DECIMAL) = 1", r"DECIMAL needs a precision and a scale"),
        ("CAST(x AS TIMESTAMP(4)) IS NULL", r"precision must be 0, 3, 6 or 9"),
        ("CAST(x AS TIME) IS NULL", r"unsupported type in CAST: TIME"),
        ("regexp_match(name, '(')", r"REGEXP_MATCH\(name, '\('\).*regular expression"),
        ("regexp_match(name, 'a', 'x')", r"unsupported regex flags 'x'"),
        ("(" * 3000 + "x = 1" + ")" * 3000, r"nested too deeply"),
    ],
)
def test_bad_sql_raises_invalid_input_naming_the_problem(table, predicate, message):
    with pytest.raises(InvalidInputError, match=message):
        to_expression(predicate, table.schema)


def test_a_pyarrow_expression_is_validated_and_returned(table):
    expression = (pc.field("x") > 1) & pc.field("s", "a").isin([1, 2])
    assert to_expression(expression, table.schema).equals(expression)
    with pytest.raises(InvalidInputError, match=r"nope.*available columns: id"):
        to_expression(pc.field("nope") > 1, table.schema)
    with pytest.raises(InvalidInputError, match="not a boolean"):
        to_expression(pc.field("x") + 1, table.schema)
    with pytest.raises(InvalidInputError, match="not int"):
        to_expression(5, table.schema)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("predicate", "columns"),
    [
        ("s.a = 3 AND x > id OR `sp ace` IS NULL AND x < 0", ["s", "x", "id", "sp ace"]),
        ("ID = 1", ["id"]),
        ("1 = 1", []),
        ((pc.field("s", "a") == 3) & (pc.field("x") > pc.field("id")), ["id", "x", "s"]),
        (pc.field("tags").is_null(), ["tags"]),
        (pc.scalar(True), []),
    ],
)
def test_referenced_columns(table, predicate, columns):
    assert referenced_columns(predicate, table.schema) == columns


def test_referenced_columns_validates_the_predicate(table):
    with pytest.raises(InvalidInputError, match="unknown column 'nope'"):
        referenced_columns("x = 1 OR nope = 2", table.schema)
    with pytest.raises(InvalidInputError, match="nope"):
        referenced_columns(pc.field("nope") == 2, table.schema)
