"""The ``lance`` Airflow connection: its form fields, and how a connection becomes a
dataset root plus pylance ``storage_options``.

Pure Python, no Airflow import: ``get_provider_info`` reads the form definition from
here, the hook parses connections with it, and both stay in step.

A connection holds

* **host**: the dataset root (``file:///data/lance``, ``/data/lance``,
  ``s3://bucket/prefix``, ``az://container/prefix``, ``gs://bucket/prefix``, ...).
  Dataset names given to operators are resolved below it.
* **login / password**: credentials, mapped by the root's scheme to pylance's keys
  (S3: ``aws_access_key_id`` / ``aws_secret_access_key``; Azure:
  ``azure_storage_account_name`` / ``azure_storage_account_key``; GCS: the password is
  ``google_service_account_key``).
* **extra fields** (see :data:`CONN_FIELDS`): region, endpoint, session token,
  allow_http, the DynamoDB commit store (table name and endpoint), and a JSON object of
  any further pylance storage options, passed through verbatim.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

CONN_TYPE = "lance"
HOOK_NAME = "Lance"
DEFAULT_CONN_ID = "lance_default"
HOOK_CLASS = "airflow_lance.hooks.lance.LanceHook"

#: Declarative form fields (provider info ``conn-fields``); values live in ``Connection.extra``.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "region": {
        "label": "Region",
        "description": "Object store region (S3: aws_region).",
        "schema": {"type": ["string", "null"]},
    },
    "endpoint": {
        "label": "Endpoint URL",
        "description": "Custom endpoint of an S3-compatible or Azure service (aws_endpoint / azure_storage_endpoint).",
        "schema": {"type": ["string", "null"]},
    },
    "session_token": {
        "label": "Session token",
        "description": "Temporary credentials' session token (aws_session_token).",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "allow_http": {
        "label": "Allow HTTP",
        "description": "Allow a plain-HTTP endpoint (allow_http).",
        "schema": {"type": ["boolean", "null"], "default": False},
    },
    "dynamodb_table_name": {
        "label": "DynamoDB commit table",
        "description": "Commit through a DynamoDB external manifest store (pylance's s3+ddb://...?ddbTableName=).",
        "schema": {"type": ["string", "null"]},
    },
    "dynamodb_endpoint": {
        "label": "DynamoDB endpoint",
        "description": "Custom DynamoDB endpoint for the commit store (dynamodb_endpoint).",
        "schema": {"type": ["string", "null"]},
    },
    "storage_options": {
        "label": "Storage options (JSON)",
        "description": "Further pylance storage options as a JSON object, "
        "e.g. {\"aws_virtual_hosted_style_request\": \"true\"}.",
        "schema": {"type": ["string", "null"], "format": "json"},
    },
}

#: Declarative UI behaviour (provider info ``ui-field-behaviour``).
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port", "extra"],
    "relabeling": {
        "host": "Dataset root URI",
        "login": "Access key id / account name",
        "password": "Secret access key / account key",
    },
    "placeholders": {
        "host": "s3://bucket/prefix or file:///data/lance",
        "region": "us-east-1",
        "endpoint": "http://127.0.0.1:9000",
        "storage_options": '{"aws_virtual_hosted_style_request": "true"}',
    },
}

_S3 = frozenset({"s3", "s3a", "s3+ddb"})
_AZURE = frozenset({"az", "abfs", "abfss", "adl"})
_GCS = frozenset({"gs", "gcs"})

#: Credential options (pylance names): their values are masked and never logged.
SECRET_OPTION_KEYS = frozenset({
    "aws_secret_access_key", "secret_access_key", "aws_session_token", "session_token", "aws_token", "token",
    "azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key", "account_key",
    "access_key", "master_key", "azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token",
    "azure_storage_client_secret", "azure_client_secret", "client_secret", "azure_storage_token",
    "bearer_token", "google_service_account_key", "service_account_key", "google_storage_token",
})


class LanceConnectionError(ValueError):
    """The ``lance`` connection is malformed (the message names the field)."""


def is_secret_option(key: str) -> bool:
    """Whether a storage option carries a credential."""
    lowered = key.lower()
    return lowered in SECRET_OPTION_KEYS or any(word in lowered for word in ("secret", "password", "token"))


def legacy_ui_field_behaviour() -> dict[str, Any]:
    """:data:`UI_FIELD_BEHAVIOUR` in the shape of ``BaseHook.get_ui_field_behaviour()``."""
    return {
        "hidden_fields": list(UI_FIELD_BEHAVIOUR["hidden-fields"]),
        "relabeling": dict(UI_FIELD_BEHAVIOUR["relabeling"]),
        "placeholders": dict(UI_FIELD_BEHAVIOUR["placeholders"]),
    }


def _scheme(uri: str) -> str:
    scheme = urlsplit(uri).scheme.lower()
    return "" if len(scheme) == 1 else scheme  # a Windows drive letter is not a scheme


@dataclasses.dataclass(frozen=True)
class LanceConnectionConfig:
    """A parsed connection: the dataset root (or None) and pylance storage options."""

    root: str | None
    storage_options: dict[str, str]
    dynamodb_table_name: str | None = None

    def __repr__(self) -> str:  # never show credential values
        keys = ", ".join(sorted(self.storage_options))
        return f"LanceConnectionConfig(root={self.root!r}, storage_options=<{keys}>)"

    @property
    def secret_values(self) -> list[str]:
        """Values of the credential options (to register with Airflow's secrets masker)."""
        return [v for k, v in self.storage_options.items() if is_secret_option(k) and v]

    def resolve(self, uri_or_name: str) -> str:
        """The full dataset URI of ``uri_or_name``: absolute URIs and paths are kept,
        names are joined to the root; a ``lance+`` asset scheme prefix is dropped."""
        text = str(uri_or_name).strip()
        if not text:
            raise LanceConnectionError("dataset URI or name is empty")
        if text.lower().startswith("lance+"):
            text = text[len("lance+"):]
        if _scheme(text) or os.path.isabs(text):
            return self._with_commit_store(text)
        if self.root is None:
            raise LanceConnectionError(
                f"dataset {text!r} is a relative name but the connection has no dataset root (host)"
            )
        parts = urlsplit(self.root)
        if parts.scheme and len(parts.scheme) > 1:
            path = posixpath.join(parts.path.rstrip("/") or "/", text) if parts.path else "/" + text
            return self._with_commit_store(urlunsplit(parts._replace(path=path)))
        return self._with_commit_store(os.path.join(self.root, text))

    def _with_commit_store(self, uri: str) -> str:
        if not self.dynamodb_table_name:
            return uri
        parts = urlsplit(uri)
        if parts.scheme.lower() == "s3+ddb":
            return uri
        if parts.scheme.lower() != "s3":
            raise LanceConnectionError(f"a DynamoDB commit table needs an s3:// dataset, not {uri!r}")
        return urlunsplit(parts._replace(scheme="s3+ddb", query=f"ddbTableName={self.dynamodb_table_name}"))


def _extra_dict(extra: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if extra is None or extra == "":
        return {}
    if isinstance(extra, Mapping):
        return dict(extra)
    try:
        value = json.loads(extra)
    except ValueError as exc:
        raise LanceConnectionError(f"connection extra is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise LanceConnectionError("connection extra must be a JSON object")
    return value


def _field(extra: Mapping[str, Any], name: str) -> Any:
    """A form field from extra (also under Airflow's legacy ``extra__lance__<name>`` key)."""
    value = extra.get(name, extra.get(f"extra__{CONN_TYPE}__{name}"))
    return None if value == "" else value


def _as_bool_text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return "true"
    if text in ("false", "0", "no", "off"):
        return "false"
    raise LanceConnectionError(f"connection field {name!r} must be a boolean, not {value!r}")


def _json_options(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise LanceConnectionError(f"connection field 'storage_options' is not JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise LanceConnectionError("connection field 'storage_options' must be a JSON object")
    return {str(k): ("true" if v is True else "false" if v is False else str(v)) for k, v in value.items()}


def _scheme_options(scheme: str, login: str | None, password: str | None, fields: Mapping[str, Any]) -> dict[str, str]:
    """Credentials and typed fields under the pylance names of the root's store."""
    options: dict[str, str] = {}
    region, endpoint, token = fields.get("region"), fields.get("endpoint"), fields.get("session_token")
    if scheme in _S3 or (not scheme and (region or token)):
        names = {"login": "aws_access_key_id", "password": "aws_secret_access_key", "region": "aws_region",
                 "endpoint": "aws_endpoint", "session_token": "aws_session_token"}
    elif scheme in _AZURE:
        names = {"login": "azure_storage_account_name", "password": "azure_storage_account_key",
                 "endpoint": "azure_storage_endpoint"}
    elif scheme in _GCS:
        names = {"password": "google_service_account_key"}
    else:
        names = {}
    given = {"login": login, "password": password, "region": region, "endpoint": endpoint, "session_token": token}
    for field, value in given.items():
        if value in (None, ""):
            continue
        if field not in names:
            where = f"{scheme}://" if scheme else "a local"
            raise LanceConnectionError(f"connection field {field!r} does not apply to {where} dataset root")
        options[names[field]] = str(value)
    return options


def parse_connection(
    host: str | None,
    login: str | None = None,
    password: str | None = None,
    extra: str | Mapping[str, Any] | None = None,
) -> LanceConnectionConfig:
    """Turn connection fields into a :class:`LanceConnectionConfig` (LanceConnectionError if malformed)."""
    extra_fields = _extra_dict(extra)
    fields = {name: _field(extra_fields, name) for name in CONN_FIELDS}
    root = host.strip().rstrip("/") or "/" if host and host.strip() else None
    scheme = _scheme(root) if root else ""
    options = _scheme_options(scheme, login, password, fields)
    if fields["allow_http"] is not None:
        options["allow_http"] = _as_bool_text("allow_http", fields["allow_http"])
    if fields["dynamodb_endpoint"]:
        options["dynamodb_endpoint"] = str(fields["dynamodb_endpoint"])
    for key, value in _json_options(fields["storage_options"]).items():
        options.setdefault(key, value)
    table = fields["dynamodb_table_name"]
    if table and scheme not in ("s3", "s3+ddb"):
        raise LanceConnectionError("'dynamodb_table_name' needs an s3:// dataset root")
    return LanceConnectionConfig(root, options, str(table) if table else None)
