"""What LanceSparkAddColumnsOperator checks before Spark runs (no Spark needed): the columns Spark
SQL expressions read, output schemas, and its arguments."""

from __future__ import annotations

import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.operators.spark_add_columns import (
    LanceSparkAddColumnsOperator,
    expression_columns,
    output_schema_of,
)

COLUMNS = ["id", "Label", "vector"]


def test_expression_columns_are_the_dataset_columns_the_expressions_read() -> None:
    found = expression_columns({"a": "id * 2", "b": "upper(label) || CAST(id AS STRING)",
                                "c": "aggregate(vector, 0D, (acc, v) -> acc + v)",
                                "d": "transform(vector, x -> x + 1)"},
                               COLUMNS)
    assert found == ["id", "Label", "vector"]  # case-insensitive as Spark, lambda variables are not columns
    assert expression_columns({"k": "42"}, COLUMNS) == []


@pytest.mark.parametrize(("expressions", "error", "words"), [
    ({"a": "missing + 1"}, lance.SchemaEvolutionError, "does not have"),
    ({"a": "id +* 2"}, lance.SchemaEvolutionError, "not Spark SQL"),
    ({"a": ""}, lance.InvalidTransformError, "Spark SQL"),
])
def test_bad_expressions_are_typed_errors(expressions, error, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=words):
        expression_columns(expressions, COLUMNS)


def test_output_schema_accepts_type_names() -> None:
    schema = output_schema_of({"e": "fixed_size_list<float32>[128]", "s": "float64"})
    assert schema == pa.schema([("e", pa.list_(pa.float32(), 128)), ("s", pa.float64())])
    assert output_schema_of(schema) is schema and output_schema_of(None) is None
    with pytest.raises(lance.InvalidTransformError):
        output_schema_of(["e"])


def test_exactly_one_way_to_compute() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        LanceSparkAddColumnsOperator(task_id="t", uri="/tmp/x.lance")
    with pytest.raises(ValueError, match="exactly one"):
        LanceSparkAddColumnsOperator(task_id="t", uri="/tmp/x.lance", expressions={"a": "1"}, function="m:f")
    with pytest.raises(ValueError, match="function_input"):
        LanceSparkAddColumnsOperator(task_id="t", uri="/tmp/x.lance", function="m:f", function_input="polars")
