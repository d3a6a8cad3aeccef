"""Update and delete on Spark: the executor side of the ``update`` and ``delete`` task jobs.

Each Spark task gets a group of fragment ids of the dataset at the job's read version and
runs the core's ``update_uncommitted`` / ``delete_uncommitted`` on just those fragments: it
reads the rows matching the predicate with their physical offsets, evaluates the SET
expressions (update), writes the rewritten rows as new fragments (rows keep their stable row
ids) and the fragments' new deletion vectors. Its result is its part of the operation:

``{"num_rows", "new_fragments", "updated_fragments", "removed_fragment_ids"}`` (fragments as
pylance's JSON). The parts touch disjoint fragments, so the operator commits their union as
one ``Update`` / ``Delete``. Nothing is committed here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_lance.core import dataset, delete_uncommitted, update_uncommitted
from airflow_lance.spark.distributed import map_tasks
from airflow_lance.spark.task_spec import TaskJobSpec
from airflow_lance.spark.worker import bulk_write

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def operation_part(operation: Any, num_rows: int) -> dict[str, Any]:
    """A task's part of an ``Update`` / ``Delete`` as JSON."""
    removed = getattr(operation, "removed_fragment_ids", None)
    if removed is None:
        removed = operation.deleted_fragment_ids
    return {
        "num_rows": int(num_rows),
        "new_fragments": [f.to_json() for f in getattr(operation, "new_fragments", ())],
        "updated_fragments": [f.to_json() for f in operation.updated_fragments],
        "removed_fragment_ids": [int(i) for i in removed],
    }


def execute_dml_task(fragment_ids: Sequence[int], *, kind: str, uri: str, storage_options: Mapping[str, str],
                     params: Mapping[str, Any]) -> dict[str, Any]:
    """Executor side: update or delete in the fragments ``fragment_ids`` at the read version."""
    ds = dataset(uri, int(params["read_version"]), storage_options=dict(storage_options))
    with bulk_write():
        if kind == "update":
            transaction, count = update_uncommitted(ds, params["updates"], params.get("where"),
                                                    fragment_ids=list(fragment_ids))
        else:
            transaction, count = delete_uncommitted(ds, params["predicate"], fragment_ids=list(fragment_ids))
    return operation_part(transaction.operation, count)


def _run(spark: SparkSession, spec: TaskJobSpec) -> tuple[list[Any], dict[str, Any]]:
    # the driver validates the expressions before any executor writes (a bad one fails the job here)
    ds = dataset(spec.uri, int(spec.params["read_version"]), storage_options=dict(spec.storage_options))
    if spec.kind == "update":
        update_uncommitted(ds, spec.params["updates"], spec.params.get("where"), fragment_ids=[])
    else:
        delete_uncommitted(ds, spec.params["predicate"], fragment_ids=[])
    execute = functools.partial(execute_dml_task, kind=spec.kind, uri=spec.uri,
                                storage_options=dict(spec.storage_options), params=dict(spec.params))
    tasks = [list(t) for t in spec.tasks]
    return map_tasks(spark, tasks, execute), {}


def run_update(spark: SparkSession, spec: TaskJobSpec) -> tuple[list[Any], dict[str, Any]]:
    """Update the rows of every task's fragments on the executors."""
    return _run(spark, spec)


def run_delete(spark: SparkSession, spec: TaskJobSpec) -> tuple[list[Any], dict[str, Any]]:
    """Delete the matching rows of every task's fragments on the executors."""
    return _run(spark, spec)
