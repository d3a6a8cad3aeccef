"""Test DAG of the maintenance task group on a dataset other processes write all the while: stats ->
compact if needed -> optimize indices -> cleanup, then the ``release`` tag moves to the maintained
version, as a nightly DAG of a dataset that pylance jobs keep writing would be set up.

The dataset comes from the ``uri`` param, the compaction target from ``target_rows_per_fragment``, the
cleanup's age limit from ``older_than_seconds``; every task retries (a commit that lost to a concurrent
writer's is a retryable conflict). Connection ``lance_default``."""

from __future__ import annotations

import datetime as dt

from airflow.providers.common.compat.sdk import DAG, Param

from airflow_lance.operators.maintenance import LanceCreateTagOperator
from airflow_lance.task_groups.maintenance import lance_maintenance_task_group

with DAG(
    "lance_test_maintenance_beside_writers",
    schedule="@daily",
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={"uri": Param("", type="string"), "target_rows_per_fragment": Param(1000, type="integer", minimum=1),
            "older_than_seconds": Param(8, type="number", minimum=0)},
    default_args={"retries": 30, "retry_delay": dt.timedelta(seconds=1)},
) as dag:
    maintenance = lance_maintenance_task_group(
        uri="{{ params.uri }}",
        compaction_options={"target_rows_per_fragment": "{{ params.target_rows_per_fragment }}"},
        min_unindexed_rows=0,
        cleanup_older_than="{{ params.older_than_seconds / 86400 }}",
        error_if_tagged_old_versions=False,
    )
    tag_release = LanceCreateTagOperator(task_id="tag_release", uri="{{ params.uri }}", tag="release",
                                         update_existing=True, trigger_rule="none_failed")
    maintenance >> tag_release
