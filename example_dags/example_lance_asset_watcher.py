"""Schedule a DAG on new versions of a Lance dataset (event-driven, through an AssetWatcher).

The asset ``lance+file:///.../readings.lance`` carries a watcher whose
``LanceVersionTrigger`` polls the dataset in the triggerer; each new data-changing
version (compaction's rewrites do not count) creates an asset event and a run of this
DAG. The task reads the version named in the triggering event (or the latest one when the
DAG is run by hand) through ``LanceHook``.

Set ``AIRFLOW_LANCE_EXAMPLE_DATASET`` to the dataset (default
``/tmp/lance-example/readings.lance``, the dataset ``example_lance_ingest`` writes under
the root ``file:///tmp/lance-example``).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.providers.common.compat.sdk import DAG, task
from airflow.sdk import AssetWatcher  # Airflow 3 only: event-driven scheduling

from airflow_lance.assets.lance import create_asset
from airflow_lance.hooks.lance import LanceHook
from airflow_lance.triggers.version import LanceVersionTrigger

DATASET_URI = os.environ.get("AIRFLOW_LANCE_EXAMPLE_DATASET", "/tmp/lance-example/readings.lance")

# [START example_lance_asset_watcher]
readings = create_asset(
    uri=DATASET_URI,
    name="lance_example_readings",
    watchers=[
        AssetWatcher(
            name="lance_example_readings_new_version",
            trigger=LanceVersionTrigger(uri=DATASET_URI, data_changes_only=True, poll_interval=30),
        )
    ],
)

with DAG(
    dag_id="example_lance_asset_watcher",
    schedule=[readings],
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    tags=["example", "lance"],
) as dag:

    @task
    def read_new_version(triggering_asset_events: Any = None) -> dict[str, Any]:
        """Open the version the watcher saw (the latest one when run by hand) and count its rows."""
        events = list((triggering_asset_events or {}).get(readings, []))
        version = events[-1].extra["payload"]["info"]["version"] if events else None
        ds = LanceHook().get_dataset(DATASET_URI, version)
        print(f"{ds.uri} version {ds.version}: {ds.count_rows()} rows")
        return {"uri": ds.uri, "version": ds.version, "num_rows": ds.count_rows()}

    read_new_version()
# [END example_lance_asset_watcher]
