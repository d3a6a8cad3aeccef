"""The ``add_columns`` task job spec: what the operator may send the job, checked on both sides."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_lance.spark.spec import JobSpecError
from airflow_lance.spark.task_spec import TaskJobSpec, decode_schema, encode_schema


def _spec(tasks=({"fragment_id": 0},), **params):  # type: ignore[no-untyped-def]
    return TaskJobSpec(kind="add_columns", uri="/tmp/x.lance", tasks=tuple(tasks), staging_root="/tmp/x.lance",
                       staging_name="_airflow_staging/a.json", storage_options={"secret": "s"},
                       params={"read_version": 3, **params})


def test_a_valid_spec_round_trips_and_its_digest_ignores_credentials() -> None:
    ordered = _spec(expressions=[["b", "x + 1"], ["a", "y"]])
    assert TaskJobSpec.from_json(ordered.to_json()).params["expressions"] == [["b", "x + 1"], ["a", "y"]]
    schema = pa.schema([("e", pa.list_(pa.float32(), 4))])
    spec = _spec(function="m:f", output_schema=encode_schema(schema), input_columns=["a"])
    again = TaskJobSpec.from_json(spec.to_json())
    assert again == spec and decode_schema(again.params["output_schema"]) == schema
    assert "secret" not in spec.describe() and "function m:f" in spec.describe()
    assert TaskJobSpec.from_json(spec.to_json().replace('"s"', '"other"')).digest() == spec.digest()
    assert "2 Spark SQL expressions" in _spec(expressions=[["b", "x + 1"], ["a", "y"]]).describe()


@pytest.mark.parametrize(("tasks", "params", "words"), [
    ([{"fragment": 0}], {"function": "m:f"}, "fragment_id"),
    ([{"fragment_id": 0}], {"function": "m:f", "expressions": [["a", "1"]]}, "exactly one"),
    ([{"fragment_id": 0}], {}, "exactly one"),
    ([{"fragment_id": 0}], {"function": "no_colon"}, "package.module:function"),
    ([{"fragment_id": 0}], {"expressions": [["a", " "]]}, "Spark SQL"),
    ([{"fragment_id": 0}], {"expressions": {"a": "1"}}, "pairs"),
    ([{"fragment_id": 0}], {"function": "m:f", "input_columns": "a"}, "input_columns"),
    ([{"fragment_id": 0}], {"function": "m:f", "function_input": "polars"}, "function_input"),
    ([{"fragment_id": 0}], {"function": "m:f", "output_schema": "not a schema"}, "schema is malformed"),
    ([{"fragment_id": 0}], {"function": "m:f", "read_version": 0}, "read_version"),
])
def test_malformed_specs_are_refused(tasks, params, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(JobSpecError, match=words):
        _spec(tasks, **params)
