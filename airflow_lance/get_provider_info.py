"""Provider metadata read by Airflow's providers manager (entry point ``apache_airflow_provider``).

Pure: no Airflow import, so discovering the provider imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

from airflow_lance.assets.lance import ASSET_SCHEMES, REFUSED_ASSET_SCHEMES
from airflow_lance.connection import CONN_FIELDS, CONN_TYPE, HOOK_CLASS, HOOK_NAME, UI_FIELD_BEHAVIOUR

PACKAGE_NAME = "airflow-lance"
INTEGRATION = "Lance"


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata (validated by Airflow against ``provider_info.schema.json``)."""
    asset_uris = [
        {
            "schemes": list(ASSET_SCHEMES),
            "handler": "airflow_lance.assets.lance.sanitize_uri",
            "factory": "airflow_lance.assets.lance.create_asset",
        },
        # Stores without an atomic commit: their lance+ assets are refused when a DAG is parsed.
        {"schemes": list(REFUSED_ASSET_SCHEMES), "handler": "airflow_lance.assets.lance.refuse_uri"},
    ]
    return {
        "package-name": PACKAGE_NAME,
        "name": "Lance",
        "description": "Lance datasets in Airflow: PySpark writes with idempotent commits, version sensors "
        "and triggers, assets. Built on a pure-Python Lance format core.",
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://lancedb.github.io/lance/",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_lance.hooks.lance"]}],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_lance.operators.spark_write", "airflow_lance.operators.kartothek",
                                   "airflow_lance.operators.maintenance",
                                   "airflow_lance.operators.spark_add_columns", "airflow_lance.operators.merge_insert",
                                   "airflow_lance.operators.update", "airflow_lance.operators.delete",
                                   "airflow_lance.operators.create_index"],
            }
        ],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["airflow_lance.sensors.version"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["airflow_lance.triggers.version"]}],
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": HOOK_CLASS,
                "hook-name": HOOK_NAME,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
                "conn-fields": CONN_FIELDS,
            }
        ],
        "asset-uris": asset_uris,
        # Airflow 2.x reads the pre-3.0 key.
        "dataset-uris": asset_uris,
    }
