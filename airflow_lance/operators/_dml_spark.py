"""Running a Spark ``update`` / ``delete`` task job for the DML operators: one Spark task per group
of fragments, each writing its part of the operation; the operator commits the union."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import airflow_lance.core as lance
from airflow_lance.operators._spark_submit import LanceStagedResultError, SparkJobRunner
from airflow_lance.spark.spec import missing_fragment_files, staging_location
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec, split_evenly

log = logging.getLogger(__name__)


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
    staged = reusable_result(spec, storage_options)
    if staged is None:
        runner.run(spec.to_json(), f"lance-{kind}-{spec.digest()[:12]}.json", what)
        staged = TaskJobResult.load(staging_root, staging_name, storage_options)
    else:
        log.info("Reusing the Spark %s staged by an earlier try of this task (Spark job not run)", kind)
    if staged is None or staged.spec_digest != spec.digest() or len(staged.results) != len(spec.tasks):
        raise LanceStagedResultError(f"{what} finished without staging its result")
    return list(staged.results), (staging_root, staging_name)


def reusable_result(spec: TaskJobSpec, storage_options: Mapping[str, str]) -> TaskJobResult | None:
    """The result an earlier try staged for this very job (same key, same spec: the same read
    version, fragments and parameters) if it is complete and all its files are there: a try killed
    between the job's end and the commit leaves it, and the retry commits it instead of running
    the job again."""
    staged = TaskJobResult.load(spec.staging_root, spec.staging_name, storage_options)
    if staged is None or staged.spec_digest != spec.digest() or len(staged.results) != len(spec.tasks):
        return None
    fragments = [lance.FragmentMetadata.from_json(f) for r in staged.results
                 for f in (*r["new_fragments"], *r["updated_fragments"])]
    missing = missing_fragment_files(spec.uri, storage_options, fragments)
    if missing:
        log.warning("Not reusing the staged result of an earlier try: %d files are missing", len(missing))
        return None
    return staged
