"""Test DAGs of the maintenance operators and task group. The dataset comes from the ``uri``
param (``dag.test(run_conf={"uri": ...})``); the connection is ``lance_default``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.providers.common.compat.sdk import DAG, AssetAlias

from airflow_lance.operators.maintenance import (
    LanceCleanupOldVersionsOperator,
    LanceCompactFilesOperator,
    LanceCreateTagOperator,
    LanceDatasetStatsOperator,
    LanceDeleteTagOperator,
    LanceOptimizeIndicesOperator,
    LanceRestoreOperator,
)
from airflow_lance.task_groups.maintenance import lance_maintenance_task_group
from dml_faults import failing_first_try_after

ARGS: dict[str, Any] = {"start_date": dt.datetime(2025, 1, 1), "schedule": None, "catchup": False,
                        "params": {"uri": "", "target": 100, "dry_run": False, "version": 1}}
URI = "{{ params.uri }}"
ALIAS = AssetAlias("lance-test-maintenance")

with DAG("lance_test_compact", **ARGS) as compact_dag:
    stats = LanceDatasetStatsOperator(task_id="stats", uri=URI,
                                      compaction_options={"target_rows_per_fragment": "{{ params.target }}"})
    compact = LanceCompactFilesOperator(task_id="compact", uri=URI, outlets=[ALIAS],
                                        compaction_options={"target_rows_per_fragment": "{{ params.target }}"})
    stats >> compact

with DAG("lance_test_compact_no_skip", **ARGS) as compact_no_skip_dag:
    LanceCompactFilesOperator(task_id="compact", uri=URI, skip_when_nothing_to_compact=False,
                              compaction_options={"target_rows_per_fragment": "{{ params.target }}"})

with DAG("lance_test_cleanup", **ARGS) as cleanup_dag:
    LanceCleanupOldVersionsOperator(task_id="cleanup", uri=URI, older_than=0, dry_run="{{ params.dry_run }}",
                                    delete_unverified=True, error_if_tagged_old_versions=False)

with DAG("lance_test_cleanup_tagged", **ARGS) as cleanup_tagged_dag:
    LanceCleanupOldVersionsOperator(task_id="cleanup", uri=URI, older_than=0)

with DAG("lance_test_tags_restore", **ARGS) as tags_restore_dag:
    tag = LanceCreateTagOperator(task_id="tag", uri=URI, tag="first", version="{{ params.version }}")
    move = LanceCreateTagOperator(task_id="move_tag", uri=URI, tag="first", version=2, update_existing=True)
    restore = LanceRestoreOperator(task_id="restore", uri=URI, version="first", outlets=[ALIAS])
    untag = LanceDeleteTagOperator(task_id="untag", uri=URI, tag="first")
    untag_again = LanceDeleteTagOperator(task_id="untag_again", uri=URI, tag="first", missing_ok=True)
    tag >> move >> restore >> untag >> untag_again

with DAG("lance_test_maintenance_group", **ARGS) as maintenance_group_dag:
    lance_maintenance_task_group(uri=URI, compaction_options={"target_rows_per_fragment": "{{ params.target }}"},
                                 cleanup_older_than=0, delete_unverified=True, outlets=[ALIAS])

with DAG("lance_test_index_group", **{**ARGS, "params": {**ARGS["params"], "min_unindexed": 50}}) as index_group_dag:
    lance_maintenance_task_group(uri=URI, compaction_options={"target_rows_per_fragment": "{{ params.target }}"},
                                 cleanup_older_than=0, delete_unverified=True,
                                 min_unindexed_rows="{{ params.min_unindexed }}")

with DAG("lance_test_optimize_indices", **ARGS) as optimize_indices_dag:
    LanceOptimizeIndicesOperator(task_id="optimize", uri=URI, num_indices_to_merge=0, outlets=[ALIAS])

# The compaction of ``uri`` fails its first try after the Spark job staged its result (the retry commits
# that result without running Spark); the job compacting ``broken_uri`` fails.
SPARK_COMPACTION: dict[str, Any] = {
    "mode": "spark", "compaction_options": {"target_rows_per_fragment": "{{ params.target }}"},
    "conf": {"spark.ui.enabled": "false", "spark.log.level": "WARN"}}
with DAG("lance_test_compact_spark", **{**ARGS, "params": {**ARGS["params"], "broken_uri": ""}}) as compact_spark_dag:
    failing_first_try_after(LanceCompactFilesOperator, "_rewrite_on_spark")(
        task_id="compact", uri=URI, outlets=[ALIAS], retries=1, retry_delay=dt.timedelta(0), **SPARK_COMPACTION,
    ) >> LanceCompactFilesOperator(task_id="compact_broken", uri="{{ params.broken_uri }}", trigger_rule="all_done",
                                   **SPARK_COMPACTION)
