"""Running a Spark ``update`` / ``delete`` task job for the DML operators: one Spark task per group
of fragments, each writing its part of the operation; the operator commits the union."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import airflow_lance.core as lance
from airflow_lance.operators._spark_submit import LanceStagedResultError, SparkJobRunner
from airflow_lance.spark.spec import staging_location
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec, split_evenly


def run_fragment_job(runner: SparkJobRunner, ds: lance.LanceDataset, *, kind: str, key: str,
                     params: Mapping[str, Any], storage_options: Mapping[str, str], num_tasks: int | None,
                     staging_uri: str | None) -> tuple[list[Any], tuple[str, str]]:
    """Run the ``kind`` job over every fragment of ``ds`` (at its version); (the task results, the
    staging location of the result, to remove after the commit)."""
    ids = [f.fragment_id for f in ds.get_fragments()]
    staging_root, staging_name = staging_location(ds.uri, f"{kind}/{key}", staging_uri)
    spec = TaskJobSpec(kind=kind, uri=ds.uri, tasks=tuple(tuple(g) for g in split_evenly(ids, num_tasks)),
                       staging_root=staging_root, staging_name=staging_name, storage_options=storage_options,
                       params={"read_version": ds.version, **params})
    what = f"the Spark {kind} job for {ds.uri}"
    runner.run(spec.to_json(), f"lance-{kind}-{spec.digest()[:12]}.json", what)
    staged = TaskJobResult.load(staging_root, staging_name, storage_options)
    if staged is None or staged.spec_digest != spec.digest() or len(staged.results) != len(spec.tasks):
        raise LanceStagedResultError(f"{what} finished without staging its result")
    return list(staged.results), (staging_root, staging_name)
