"""Nightly maintenance of a Lance dataset: stats -> compact if needed -> cleanup old versions.

The ready-made task group (:func:`airflow_lance.task_groups.maintenance.lance_maintenance_task_group`)
reads the dataset's stats, compacts small fragments and materialises deletions only when the
compaction plan has work and enough small fragments or deleted rows have piled up, then removes
versions older than the ``older_than_days`` param (tagged versions are kept; a tagged old
version fails the cleanup unless ``error_if_tagged_old_versions`` is off). Set the
``dry_run`` param to see what cleanup would remove first. A ``release`` tag is moved to the
maintained version at the end, so consumers can pin it.

Runs as written (``airflow dags test example_lance_maintenance``) given a ``lance_default``
connection holding the dataset root, e.g.
``AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "file:///tmp/lance-example"}'``,
and a dataset ``readings.lance`` below it (``example_lance_ingest`` writes one).
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.common.compat.sdk import DAG, AssetAlias, Param

from airflow_lance.operators.maintenance import LanceCreateTagOperator
from airflow_lance.task_groups.maintenance import lance_maintenance_task_group

DATASET = "readings.lance"  # below the lance_default connection's dataset root

# [START example_lance_maintenance]
with DAG(
    dag_id="example_lance_maintenance",
    schedule="@daily",
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,
    params={
        "target_rows_per_fragment": Param(1_048_576, type="integer", minimum=1),
        "older_than_days": Param(7, type="number", minimum=0),
        "dry_run": Param(False, type="boolean"),
    },
    tags=["example", "lance", "maintenance"],
) as dag:
    maintenance = lance_maintenance_task_group(
        uri=DATASET,
        compaction_options={
            "target_rows_per_fragment": "{{ params.target_rows_per_fragment }}",
            "materialize_deletions_threshold": 0.1,
        },
        min_small_fragments=2,
        min_deleted_row_ratio=0.1,
        cleanup_older_than="{{ params.older_than_days }}",
        dry_run="{{ params.dry_run }}",
        outlets=[AssetAlias("lance-example-readings")],
    )

    tag_release = LanceCreateTagOperator(
        task_id="tag_release",
        uri=DATASET,
        tag="release",
        update_existing=True,
        trigger_rule="none_failed",
    )

    maintenance >> tag_release
# [END example_lance_maintenance]
