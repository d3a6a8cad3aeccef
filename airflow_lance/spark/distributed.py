"""Running Python functions on the executors with DataFrame APIs only (classic Spark and Spark Connect).

A Spark Connect session has no ``SparkContext``: no ``parallelize``, no RDDs, no
``defaultParallelism``, no ``SparkFiles``. The jobs distribute their work through these helpers
instead, which work the same in both:

* :func:`map_tasks`: ``function(item)`` for every item, one Spark task each, results in item
  order (``spark.range(n, numPartitions=n)``: partition ``i`` holds exactly the id ``i``, and
  ``mapInArrow`` runs the function on the item of that id; results travel back as JSON);
* :func:`map_task_partitions`: the same with ``function(iterator of items) -> iterator of
  results`` per partition (one item per partition; several results each). Under a
  ``SparkContext`` the tasks are ``parallelize(range(n), n).mapPartitions`` (an RDD job: no SQL
  plan to analyse, no Arrow conversion of the ids and results; about half the fixed cost of the
  ``mapInArrow`` job, which Spark Connect runs);
* :func:`map_groups`: ``function(iterator of items)`` over ``n`` contiguous groups of the items,
  one Spark task per group (``parallelize(items, n).mapPartitions(function)``);
* :func:`rows_per_partition`: a DataFrame whose partition ``i`` holds the rows of group ``i``;
* :func:`default_parallelism`: the session's task slots;
* :func:`share` / :func:`unshare`: a value every task reads as ``.value`` (a broadcast variable
  under a ``SparkContext``; on Spark Connect the value itself, pickled with the function);
* :func:`task_context`: where the calling function runs (its Spark task, its process).

The items and the function travel inside the pickled ``mapInArrow`` function (as they did in
``parallelize``'s closures), never in a plan's text or a log line.
"""

from __future__ import annotations

import functools
import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The Spark schema of a task's results.
_RESULT_DDL = "task long, result binary"
_RESULT_SCHEMA = pa.schema([("task", pa.int64()), ("result", pa.binary())])


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: SparkSession) -> int:
    """The session's task slots: ``defaultParallelism`` of its ``SparkContext``; on Spark Connect
    ``spark.default.parallelism`` if set, else the partitions of ``spark.range`` (which Spark
    sizes to the slots), counted with one small job."""
    if not is_connect(spark):
        return max(int(spark.sparkContext.defaultParallelism), 1)
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured:
        return max(int(configured), 1)
    from pyspark.sql import functions as F

    return max(int(spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).distinct().count()), 1)


def _one_id_per_partition(spark: SparkSession, count: int) -> DataFrame:
    return spark.range(0, count, 1, count)


def _run_items(batches: Iterator[pa.RecordBatch], *, items: Sequence[Any],
               function: Callable[[Iterator[Any]], Iterable[Any]]) -> Iterator[pa.RecordBatch]:
    """Executor side: the results of ``function`` over the items of this partition's ids."""
    for batch in batches:
        for task in batch.column(0).to_pylist():  # one id per partition: not a loop over data
            results = [pickle.dumps(result) for result in function(iter([items[task]]))]
            yield pa.RecordBatch.from_arrays([pa.array([task] * len(results), pa.int64()),
                                              pa.array(results, pa.binary())], schema=_RESULT_SCHEMA)


def _run_rdd_items(tasks: Iterator[int], *, items: Sequence[Any],
                   function: Callable[[Iterator[Any]], Iterable[Any]]) -> Iterator[Any]:
    """Executor side (RDD): the results of ``function`` over the items of this partition's ids."""
    for task in tasks:  # one id per partition: not a loop over data
        yield from function(iter([items[task]]))


def _each(items: Iterator[Any], *, function: Callable[[Any], Any]) -> Iterator[Any]:
    for item in items:
        yield function(item)


def map_task_partitions(spark: SparkSession, items: Sequence[Any],
                        function: Callable[[Iterator[Any]], Iterable[Any]]) -> list[Any]:
    """``function`` over an iterator of one item, one Spark task per item; all results in item
    order. An empty ``items`` runs nothing."""
    items = list(items)
    if not items:
        return []
    if not is_connect(spark):
        run_rdd = functools.partial(_run_rdd_items, items=items, function=function)
        return spark.sparkContext.parallelize(range(len(items)), len(items)).mapPartitions(run_rdd).collect()
    run = functools.partial(_run_items, items=items, function=function)
    rows = _one_id_per_partition(spark, len(items)).mapInArrow(run, _RESULT_DDL).collect()
    ordered = sorted(((row["task"], i, row["result"]) for i, row in enumerate(rows)), key=lambda r: (r[0], r[1]))
    return [pickle.loads(result) for _, _, result in ordered]  # noqa: S301 - our executors' output


def map_tasks(spark: SparkSession, items: Sequence[Any], function: Callable[[Any], Any]) -> list[Any]:
    """``function(item)`` for every item, one Spark task each; the results in item order."""
    return map_task_partitions(spark, items, functools.partial(_each, function=function))


def _group_rows(batches: Iterator[pa.RecordBatch], *, groups: Sequence[Sequence[tuple]],
                schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for group in batch.column(0).to_pylist():
            rows = groups[group]
            yield pa.RecordBatch.from_arrays(
                [pa.array([row[i] for row in rows], schema.field(i).type) for i in range(len(schema))], schema=schema)


def _each_group(groups: Iterator[Sequence[Any]], *,
                function: Callable[[Iterator[Any]], Iterable[Any]]) -> Iterator[Any]:
    for group in groups:
        yield from function(iter(group))


def map_groups(spark: SparkSession, items: Sequence[Any], tasks: int,
               function: Callable[[Iterator[Any]], Iterable[Any]]) -> list[Any]:
    """``function`` over an iterator of the items of each of ``tasks`` contiguous groups (as
    ``parallelize(items, tasks)`` slices them), one Spark task per group; all results in order."""
    items = list(items)
    tasks = max(1, min(int(tasks), len(items)))
    groups = [items[i * len(items) // tasks:(i + 1) * len(items) // tasks] for i in range(tasks)]
    return map_task_partitions(spark, groups, functools.partial(_each_group, function=function))


class Inline:
    """A shared value carried inside the pickled function (Spark Connect has no broadcast
    variables); ``.value`` as a broadcast variable's."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def destroy(self) -> None:
        self.value = None


def share(spark: SparkSession, value: Any) -> Any:
    """``value`` for every task of the next jobs, read as ``.value``: a broadcast variable under a
    ``SparkContext``; on Spark Connect an :class:`Inline` pickled with the function that uses it
    (the plan carrying it is bounded by the server's ``spark.connect.grpc.maxInboundMessageSize``,
    128 MiB by default). Release it with :func:`unshare`."""
    if is_connect(spark):
        return Inline(value)
    return spark.sparkContext.broadcast(value)


def unshare(shared: Any) -> None:
    """Release what :func:`share` gave."""
    shared.destroy()


def task_context() -> dict[str, int | None]:
    """Where the caller runs: the stage, partition and attempt of its Spark task (None outside a
    task, e.g. on the driver) and the pid of its process."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return {"stage": None, "partition": None, "attempt": None, "pid": os.getpid()}
    return {"stage": context.stageId(), "partition": context.partitionId(), "attempt": context.attemptNumber(),
            "pid": os.getpid()}


def to_ipc(table: pa.Table) -> bytes:
    """``table`` as one Arrow IPC stream (a task's result or a shared value)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    """The table of an Arrow IPC stream written by :func:`to_ipc`."""
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def rows_per_partition(spark: SparkSession, groups: Sequence[Sequence[tuple]], ddl: str,
                       schema: pa.Schema) -> DataFrame:
    """A DataFrame of ``ddl`` whose partition ``i`` holds the rows (tuples) of ``groups[i]``
    (``schema`` is its Arrow schema). For small task lists (a read plan), not for data."""
    groups = [list(group) for group in groups]
    make = functools.partial(_group_rows, groups=groups, schema=schema)
    return _one_id_per_partition(spark, len(groups)).mapInArrow(make, ddl)
