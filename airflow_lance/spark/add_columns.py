"""The ``add_columns`` task job: new columns for Lance fragments computed on the executors.

The driver opens the dataset at the spec's read version and plans with the core's
:class:`~airflow_lance.core.column_files.AddColumnsPlan` (new field ids, or the fragments lacking
the columns with ``only_missing``); each fragment becomes one Spark task that writes one data file
covering the fragment's physical rows. Nothing is committed here: the staged results are the
fragments' metadata (in task order) and ``info["plan"]``, from which the operator commits once.

Two ways to compute:

* ``function`` (``"module:function"``, shipped with ``py_files``): each task reads the fragment's
  input columns with the core and calls the function on batches of live rows, as pylance's
  ``add_columns`` calls a UDF (``function_input="pandas"`` hands it pandas DataFrames). Without
  an ``output_schema`` the driver infers it by calling the function on the first row, as
  pylance does. Everything runs in the executors' Python workers.
* ``expressions`` (``[name, Spark SQL expression]`` pairs): a DataFrame with one partition per fragment
  (a narrow plan, no shuffle): ``mapInArrow`` reads each fragment's live rows with the fragment id
  and row ordinal, Spark evaluates ``selectExpr``, and a second ``mapInArrow`` in the same
  partition writes the file. The writer checks that its partition holds exactly its fragment's
  rows 0..n-1 in order, so an expression that would move rows between partitions (an aggregate,
  a window) fails the job instead of writing misplaced values. Spark analyses the expressions on
  the driver before any task runs: an unknown column or function fails the job, nothing written.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_lance.core import dataset
from airflow_lance.core.arrays import empty_table
from airflow_lance.core.column_files import AddColumnsPlan
from airflow_lance.core.evolution import plan_compute
from airflow_lance.core.scan import read_fragment
from airflow_lance.spark.distributed import map_tasks, rows_per_partition
from airflow_lance.spark.spec import JobSpecError
from airflow_lance.spark.task_spec import TaskJobSpec, decode_schema
from airflow_lance.spark.worker import bulk_write

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FRAGMENT_COLUMN, ROW_COLUMN = "__lance_fragment", "__lance_row"
FUNCTION_INPUTS = ("arrow", "pandas")


def load_function(name: str, function_input: str = "arrow") -> Callable[[pa.RecordBatch], Any]:
    """``module:function`` imported; with ``function_input="pandas"`` it is given pandas DataFrames."""
    module_name, _, function_name = name.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise JobSpecError(f"cannot import function {name!r}: {exc}") from exc
    if not callable(function):
        raise JobSpecError(f"{name!r} is not callable")
    if function_input == "pandas":
        return lambda batch: function(batch.to_pandas())
    return function


# -- function: one core task per fragment ---------------------------------------------------------


def write_with_function(task: Mapping[str, Any], *, uri: str, storage_options: Mapping[str, str], plan: dict,
                        function: str, function_input: str, batch_size: int | None) -> dict:
    """Executor side: compute and write one fragment's columns; the fragment's JSON."""
    with bulk_write():
        planned = AddColumnsPlan.from_json(plan)
        ds = dataset(uri, planned.read_version, storage_options=dict(storage_options))
        func = load_function(function, function_input)
        return planned.write_fragment(ds, int(task["fragment_id"]), func, batch_size).to_json()


def _run_function(spark: SparkSession, spec: TaskJobSpec, ds: Any, ids: list[int]) -> tuple[list[Any], dict]:
    params = spec.params
    inputs = list(params.get("input_columns") or ds.schema.names)
    function_input = params.get("function_input") or "arrow"
    if params.get("output_schema"):
        output = decode_schema(params["output_schema"])
    else:  # infer from the first row, as pylance does (a bad function fails here, before any write)
        func = load_function(params["function"], function_input)
        output = plan_compute(ds, func, inputs, None).output
    plan = AddColumnsPlan.plan(ds, output, inputs, only_missing=bool(params.get("only_missing")), fragment_ids=ids)
    write = functools.partial(write_with_function, uri=spec.uri, storage_options=dict(spec.storage_options),
                              plan=plan.to_json(), function=params["function"], function_input=function_input,
                              batch_size=params.get("batch_size"))
    results = map_tasks(spark, spec.tasks, write)
    return results, {"plan": plan.to_json()}


# -- Spark SQL expressions: one partition per fragment, read -> selectExpr -> write ----------------


def read_inputs(seeds: Iterator[pa.RecordBatch], *, uri: str, storage_options: Mapping[str, str], version: int,
                columns: Sequence[str], spark_arrow: bytes) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over the fragment ids: the live rows of each fragment's input columns, with
    the fragment id and the row ordinal, as the Arrow types Spark expects."""
    target = pa.ipc.read_schema(pa.py_buffer(spark_arrow))
    ds = dataset(uri, version, storage_options=dict(storage_options))
    by_id = {f.id: f for f in ds._fragments}
    projection = ds.lance_schema.project(list(columns))
    for seed in seeds:
        for fragment_id in seed.column(0).to_pylist():
            table = read_fragment(ds.store, by_id[fragment_id], projection)
            rows = table.num_rows
            table = table.append_column(FRAGMENT_COLUMN, pa.array(np.full(rows, fragment_id, np.int64)))
            table = table.append_column(ROW_COLUMN, pa.array(np.arange(rows, dtype=np.int64)))
            yield from table.select(target.names).cast(target).to_batches(max_chunksize=65536)


def write_values(batches: Iterator[pa.RecordBatch], *, ids: Sequence[int], uri: str,
                 storage_options: Mapping[str, str], plan: dict) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` after ``selectExpr``: this partition's fragment (by partition index) gets
    its file; exactly its rows 0..n-1 in order, else the task fails."""
    from pyspark import TaskContext

    fragment_id = int(ids[TaskContext.get().partitionId()])
    with bulk_write():
        received = list(batches)
        planned = AddColumnsPlan.from_json(plan)
        table = pa.Table.from_batches(received) if received else None
        if table is not None and table.num_rows:
            fragments = table.column(FRAGMENT_COLUMN).to_numpy()
            rows = table.column(ROW_COLUMN).to_numpy()
            if (fragments != fragment_id).any() or not np.array_equal(rows, np.arange(len(rows))):
                raise JobSpecError(
                    f"the expressions moved rows of fragment {fragment_id} (an aggregate or window expression?): "
                    "each new value must come from its own row")
        ds = dataset(uri, planned.read_version, storage_options=dict(storage_options))
        values = empty_table(planned.output_schema) if table is None else table.drop_columns(
            [FRAGMENT_COLUMN, ROW_COLUMN])
        written = planned.write_fragment_values(ds, fragment_id, values)
    yield pa.record_batch({"fragment": [json.dumps(written.to_json())]})


def _plain_types(schema: pa.Schema) -> pa.Schema:
    """Spark's large string/binary/list Arrow types as the plain ones (what pylance's SQL makes)."""
    def plain(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t):
            return pa.string()
        if pa.types.is_large_binary(t):
            return pa.binary()
        if pa.types.is_large_list(t) or pa.types.is_list(t):
            return pa.list_(pa.field(t.value_field.name, plain(t.value_type), t.value_field.nullable))
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(plain(f.type)) for f in t])
        return t
    return pa.schema([f.with_type(plain(f.type)) for f in schema])


def _run_expressions(spark: SparkSession, spec: TaskJobSpec, ds: Any, ids: list[int]) -> tuple[list[Any], dict]:
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    params = spec.params
    expressions = {name: expression for name, expression in params["expressions"]}
    inputs = AddColumnsPlan.check_input_columns(ds, list(params.get("input_columns") or ds.schema.names))
    arrow_inputs = pa.schema([ds.schema.field(c) for c in inputs] +
                             [pa.field(FRAGMENT_COLUMN, pa.int64(), False), pa.field(ROW_COLUMN, pa.int64(), False)])
    spark_schema = from_arrow_schema(arrow_inputs)
    spark_arrow = to_arrow_schema(spark_schema, prefers_large_types=_large_types(spark))
    seeds = rows_per_partition(spark, [[(i,)] for i in ids], "fragment_id long",
                               pa.schema([("fragment_id", pa.int64())]))
    read = functools.partial(read_inputs, uri=spec.uri, storage_options=dict(spec.storage_options),
                             version=ds.version, columns=list(inputs),
                             spark_arrow=spark_arrow.serialize().to_pybytes())
    frame: DataFrame = seeds.mapInArrow(read, spark_schema)
    computed = frame.selectExpr(FRAGMENT_COLUMN, ROW_COLUMN,
                                *[f"{expression} AS `{name.replace('`', '``')}`"
                                  for name, expression in expressions.items()])
    output = _plain_types(to_arrow_schema(computed.schema))  # Spark analyses the expressions here
    output = pa.schema([output.field(name) for name in expressions])
    if params.get("only_missing"):  # backfilled values are cast to the columns' types (e.g. a decimal to double)
        output = AddColumnsPlan.existing_fields(ds, list(expressions)).to_arrow()
    plan = AddColumnsPlan.plan(ds, output, inputs, only_missing=bool(params.get("only_missing")), fragment_ids=ids)
    write = functools.partial(write_values, ids=ids, uri=spec.uri, storage_options=dict(spec.storage_options),
                              plan=plan.to_json())
    rows = computed.mapInArrow(write, "fragment string").collect()
    return [json.loads(row["fragment"]) for row in rows], {"plan": plan.to_json()}


def _large_types(spark: SparkSession) -> bool:
    return str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"


def run_add_columns(spark: SparkSession, spec: TaskJobSpec) -> tuple[list[Any], dict[str, Any]]:
    """Plan at the read version on the driver, write every fragment's file on the executors."""
    ds = dataset(spec.uri, int(spec.params["read_version"]), storage_options=dict(spec.storage_options))
    ids = [int(task["fragment_id"]) for task in spec.tasks]
    if spec.params.get("expressions"):
        return _run_expressions(spark, spec, ds, ids)
    return _run_function(spark, spec, ds, ids)
