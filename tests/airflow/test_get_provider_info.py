"""Provider discovery: the entry point, Airflow's schema, the providers manager and the CLI."""

from __future__ import annotations

import importlib.metadata
import json
import pathlib
import subprocess
import sys

import jsonschema
import pytest

from airflow_lance.assets.lance import ASSET_SCHEMES
from airflow_lance.connection import CONN_FIELDS
from airflow_lance.get_provider_info import get_provider_info


def test_entry_point_loads_the_provider_info() -> None:
    (entry,) = [e for e in importlib.metadata.entry_points(group="apache_airflow_provider")
                if e.value.startswith("airflow_lance.")]
    assert entry.name == "provider_info"
    assert entry.load() is get_provider_info
    assert get_provider_info()["package-name"] == entry.dist.name == "airflow-lance"


def test_provider_info_validates_against_airflows_schema() -> None:
    import airflow

    schema = json.loads((pathlib.Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_every_listed_module_and_class_imports() -> None:
    from airflow.providers.common.compat.sdk import BaseHook, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    info = get_provider_info()
    kinds = {"hooks": BaseHook, "operators": BaseOperator, "sensors": BaseSensorOperator, "triggers": BaseTrigger}
    for key, base in kinds.items():
        for module_name in info[key][0]["python-modules"]:
            module = importlib.import_module(module_name)
            assert any(isinstance(v, type) and issubclass(v, base) and v.__module__ == module_name
                       for v in vars(module).values()), module_name
    (conn,) = info["connection-types"]
    module_name, _, class_name = conn["hook-class-name"].rpartition(".")
    assert getattr(importlib.import_module(module_name), class_name).conn_type == conn["connection-type"]


def test_providers_managers_register_the_hook_connection_form_and_asset_schemes() -> None:
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    runtime = ProvidersManagerTaskRuntime()
    assert runtime.providers["airflow-lance"].data["name"] == "Lance"
    hook = runtime.hooks["lance"]
    assert hook is not None
    assert (hook.hook_class_name, hook.connection_id_attribute_name) == (
        "airflow_lance.hooks.lance.LanceHook", "lance_conn_id")
    assert set(ASSET_SCHEMES) <= set(runtime.asset_uri_handlers)
    ui = ProvidersManager()  # the API server's view: the declarative connection form
    widgets = ui.connection_form_widgets
    assert {f"extra__lance__{name}" for name in CONN_FIELDS} <= set(widgets)
    assert widgets["extra__lance__session_token"].is_sensitive
    assert not widgets["extra__lance__region"].is_sensitive
    assert ui.field_behaviours["lance"]["hidden_fields"] == ["schema", "port", "extra"]


def test_airflow_cli_lists_the_provider_and_its_connection_type() -> None:
    providers = subprocess.run([sys.executable, "-m", "airflow", "providers", "list", "-o", "json"],
                               capture_output=True, text=True, check=True).stdout
    assert any(p["package_name"] == "airflow-lance" for p in json.loads(providers[providers.index("["):]))
    hooks = subprocess.run([sys.executable, "-m", "airflow", "providers", "hooks", "-o", "json"],
                           capture_output=True, text=True, check=True).stdout
    rows = json.loads(hooks[hooks.index("["):])
    assert any(r["connection_type"] == "lance" and r["class"] == "airflow_lance.hooks.lance.LanceHook" for r in rows)


def test_the_api_servers_form_metadata_carries_the_placeholders_and_examples() -> None:
    """What Airflow 3's connection form receives (``GET /ui/connections/hook_meta``): the standard
    fields' placeholders and relabels, and each extra field's schema with its ``examples`` (the
    form's suggestions; it shows no placeholder of an extra field otherwise)."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
    from airflow.providers_manager import ProvidersManager

    from airflow_lance.connection import UI_FIELD_BEHAVIOUR

    behaviour = ProvidersManager().field_behaviours["lance"]
    widgets = ProvidersManager().connection_form_widgets
    for key in behaviour["placeholders"]:  # every declared placeholder names a field of the form
        assert key in {"host", "login", "password"} or key in widgets, key
    (meta,) = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "lance"]
    assert meta.standard_fields is not None and meta.standard_fields.host is not None
    assert meta.standard_fields.host.placeholder == UI_FIELD_BEHAVIOUR["placeholders"]["host"]
    assert meta.standard_fields.host.title == "Dataset root URI"
    assert meta.standard_fields.login.placeholder == UI_FIELD_BEHAVIOUR["placeholders"]["login"]
    assert meta.standard_fields.port.hidden
    extra = meta.extra_fields
    assert set(extra) == set(CONN_FIELDS)
    assert extra["region"]["schema"]["examples"] == ["us-east-1"]
    assert extra["endpoint"]["schema"]["examples"] == ["http://127.0.0.1:9000"]
    assert extra["storage_options"]["schema"]["examples"] == ['{"aws_virtual_hosted_style_request": "true"}']
    assert extra["region"]["schema"]["title"] == "Region"
    assert "Example: us-east-1" in extra["region"]["description"]
    assert "examples" not in extra["session_token"]["schema"]


def test_assets_of_unsupported_stores_are_refused_by_airflow_itself() -> None:
    from airflow.sdk import Asset
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    import airflow_lance.core as lance
    from airflow_lance.assets.lance import REFUSED_ASSET_SCHEMES

    assert set(REFUSED_ASSET_SCHEMES) <= set(ProvidersManagerTaskRuntime().asset_uri_handlers)
    for uri in ("lance+ftp://files.example/lake/ds.lance", "lance+https://files.example/ds.lance",
                "lance+hdfs://namenode:8020/ds.lance"):
        with pytest.raises(lance.UnsupportedFeatureError, match="is not a store the provider writes Lance"):
            Asset(uri)
    assert Asset("lance+s3://bucket/ds.lance").uri == "lance+s3://bucket/ds.lance"
