"""The Spark task job: independent tasks of one core operation, run on the executors.

Each task of a :class:`~airflow_lance.spark.task_spec.TaskJobSpec` becomes one Spark task
(one Spark partition, :mod:`airflow_lance.spark.distributed`); the driver collects the JSON results in task order and the caller
stages them. Nothing is committed here.

* ``compaction``: ``CompactionTask.execute`` against the plan's read version; results are
  ``RewriteResult`` JSON.
* ``kartothek_import``: the driver plans the import again (validating the source, as the
  operator did) and checks that it is the import the operator planned; the executors run
  ``write_kartothek_partitions`` for their partition labels; results are
  ``PartitionsWritten`` JSON. If the driver finds the import already committed, nothing is
  written and ``info["already_imported_version"]`` says where it landed.
* ``update`` / ``delete``: :mod:`airflow_lance.spark.dml_tasks`.
* ``create_index``: :mod:`airflow_lance.spark.create_index`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_lance.core import (
    CompactionTask,
    KartothekImportPlan,
    KartothekImportResult,
    plan_kartothek_import,
    write_kartothek_partitions,
)
from airflow_lance.spark.add_columns import run_add_columns
from airflow_lance.spark.create_index import run_create_index
from airflow_lance.spark.distributed import map_task_partitions, map_tasks
from airflow_lance.spark.dml_tasks import run_delete, run_update
from airflow_lance.spark.spec import JobSpecError
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec
from airflow_lance.spark.worker import bulk_write

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def execute_compaction_task(task: Mapping[str, Any], *, uri: str, storage_options: Mapping[str, str]) -> dict:
    """Executor side of ``compaction``: rewrite one bin of fragments; the ``RewriteResult`` JSON."""
    with bulk_write():
        return CompactionTask.from_json(task).execute(uri, storage_options).to_json()


def write_partition_group(labels: Iterator[Sequence[str]], *, plan: KartothekImportPlan) -> Iterator[dict]:
    """Executor side of ``kartothek_import``: write the partitions of one Spark partition's
    label groups; one ``PartitionsWritten`` JSON per group."""
    for group in labels:
        with bulk_write():
            written = write_kartothek_partitions(plan, list(group)).to_json()
        yield written


def _run_on_executors(spark: SparkSession, tasks: Sequence[Any], function: Callable[[Any], Any]) -> list[Any]:
    """``function`` over ``tasks``, one Spark task each; results in task order."""
    return map_tasks(spark, tasks, function)


def run_compaction(spark: SparkSession, spec: TaskJobSpec) -> tuple[list[Any], dict[str, Any]]:
    """Rewrite every compaction task on the executors."""
    execute = functools.partial(execute_compaction_task, uri=spec.uri, storage_options=dict(spec.storage_options))
    return _run_on_executors(spark, spec.tasks, execute), {}


def plan_import(spec: TaskJobSpec) -> KartothekImportPlan | KartothekImportResult:
    """The import the spec describes, planned here; JobSpecError if it is not the operator's."""
    params = spec.params
    planned = plan_kartothek_import(
        params["store_uri"],
        params["dataset_uuid"],
        params["table"],
        spec.uri,
        mode=params["mode"],
        partition_columns=params["partition_columns"],
        max_rows_per_file=int(params["max_rows_per_file"]),
        max_bytes_per_file=int(params["max_bytes_per_file"]),
        storage_options=dict(spec.source_storage_options) or None,
        target_storage_options=dict(spec.storage_options),
    )
    if isinstance(planned, KartothekImportResult):
        return planned
    if planned.idempotency_key != params["idempotency_key"]:
        raise JobSpecError(
            f"Kartothek dataset {params['dataset_uuid']!r} changed after the operator planned its import "
            "(its metadata file differs); nothing was written, run the task again"
        )
    labels = [label for group in spec.tasks for label in group]
    known = [partition.label for partition in planned.source.partitions]
    if sorted(labels) != sorted(known):
        raise JobSpecError(f"the job's {len(labels)} partition labels are not the source's {len(known)} partitions")
    return planned


def run_kartothek_import(spark: SparkSession, spec: TaskJobSpec) -> tuple[list[Any], dict[str, Any]]:
    """Write every group of Kartothek partitions on the executors (unless already imported)."""
    planned = plan_import(spec)
    if isinstance(planned, KartothekImportResult):
        return [], {"already_imported_version": planned.version}
    write = functools.partial(write_partition_group, plan=planned)
    groups = [list(group) for group in spec.tasks]
    results = map_task_partitions(spark, groups, write)
    return results, {}


RUNNERS: dict[str, Callable[[SparkSession, TaskJobSpec], tuple[list[Any], dict[str, Any]]]] = {
    "compaction": run_compaction,
    "kartothek_import": run_kartothek_import,
    "add_columns": run_add_columns,
    "update": run_update,
    "delete": run_delete,
    "create_index": run_create_index,
}


def run_task_job(spark: SparkSession, spec: TaskJobSpec) -> TaskJobResult:
    """Run the spec's tasks, stage the result at the spec's staging location, and return it."""
    start = time.monotonic()
    results, info = RUNNERS[spec.kind](spark, spec)
    result = TaskJobResult(spec.digest(), tuple(results), time.monotonic() - start, info)
    result.save(spec.staging_root, spec.staging_name, spec.storage_options)
    return result
