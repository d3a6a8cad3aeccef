"""Running a Spark ``update`` / ``delete`` task job for the DML operators: one Spark task per group
of fragments, each writing its part of the operation; the operator commits the union."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import airflow_lance.core as lance
from airflow_lance.operators._spark_submit import LanceStagedResultError, SparkJobRunner, run_task_job
from airflow_lance.spark.spec import staging_location
from airflow_lance.spark.task_spec import TaskJobSpec, split_evenly


def written_fragments(result: Mapping[str, Any]) -> Iterator[lance.FragmentMetadata]:
    """The fragments one update / delete task wrote: new ones and those with a new deletion vector."""
    for fragment in (*result["new_fragments"], *result["updated_fragments"]):
        yield lance.FragmentMetadata.from_json(fragment)


def run_fragment_job(runner: SparkJobRunner, ds: lance.LanceDataset, *, kind: str, key: str,
                     params: Mapping[str, Any], storage_options: Mapping[str, str], num_tasks: int | None,
                     staging_uri: str | None) -> tuple[list[Any], tuple[str, str]]:
    """Run the ``kind`` job over every fragment of ``ds`` (at its version), or reuse the result an
    earlier try staged for it; (the task results, the staging location of the result, to remove
    after the commit)."""
    ids = [f.fragment_id for f in ds.get_fragments()]
    staging_root, staging_name = staging_location(ds.uri, f"{kind}/{key}", staging_uri)
    spec = TaskJobSpec(kind=kind, uri=ds.uri, tasks=tuple(tuple(g) for g in split_evenly(ids, num_tasks)),
                       staging_root=staging_root, staging_name=staging_name, storage_options=storage_options,
                       params={"read_version": ds.version, **params})
    what = f"the Spark {kind} job for {ds.uri}"
    staged = run_task_job(runner, spec, what, written_fragments)
    if len(staged.results) != len(spec.tasks):
        raise LanceStagedResultError(f"{what} staged {len(staged.results)} results for {len(spec.tasks)} tasks")
    return list(staged.results), (staging_root, staging_name)
