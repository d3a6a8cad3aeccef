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
* **pylance option names** (``aws_endpoint``, ``aws_region``, ...: every name
  ``core/storage/options.py`` knows) as top-level keys of the extra, passed through too.

Keys may carry Airflow's legacy ``extra__lance__`` prefix. Any other key, in the extra or in
``storage_options``, is a :class:`LanceConnectionError` naming the nearest valid key, and so is
one option given twice with different values: a typo never falls back to a default endpoint.
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

def _conn_field(label: str, description: str, schema: dict[str, Any], example: str | None = None) -> dict[str, Any]:
    """One declarative form field; an example becomes the schema's ``examples`` (Airflow 3's form
    offers them as suggestions) and ends the description."""
    if example is not None:
        schema = {**schema, "examples": [example]}
        description = f"{description} Example: {example}"
    return {"label": label, "description": description, "schema": schema}


_TEXT: dict[str, Any] = {"type": ["string", "null"]}

#: Declarative form fields (provider info ``conn-fields``); values live in ``Connection.extra``.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "region": _conn_field("Region", "Object store region (S3: aws_region).", _TEXT, "us-east-1"),
    "endpoint": _conn_field(
        "Endpoint URL", "Custom endpoint of an S3-compatible or Azure service (aws_endpoint / azure_storage_endpoint).",
        _TEXT, "http://127.0.0.1:9000",
    ),
    "session_token": _conn_field(
        "Session token", "Temporary credentials' session token (aws_session_token).",
        {"type": ["string", "null"], "format": "password"},
    ),
    "allow_http": _conn_field(
        "Allow HTTP", "Allow a plain-HTTP endpoint (allow_http).", {"type": ["boolean", "null"], "default": False}
    ),
    "dynamodb_table_name": _conn_field(
        "DynamoDB commit table",
        "Commit through a DynamoDB external manifest store (pylance's s3+ddb://...?ddbTableName=).",
        _TEXT, "lance-manifests",
    ),
    "dynamodb_endpoint": _conn_field(
        "DynamoDB endpoint", "Custom DynamoDB endpoint for the commit store (dynamodb_endpoint).",
        _TEXT, "http://127.0.0.1:8000",
    ),
    "storage_options": _conn_field(
        "Storage options (JSON)", "Further pylance storage options as a JSON object (pylance's names).",
        {"type": ["string", "null"], "format": "json"}, '{"aws_virtual_hosted_style_request": "true"}',
    ),
}

#: Declarative UI behaviour (provider info ``ui-field-behaviour``). Airflow 3's form shows the
#: placeholders of the standard fields; extra fields show their schema's ``examples``.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port", "extra"],
    "relabeling": {
        "host": "Dataset root URI",
        "login": "Access key id / account name",
        "password": "Secret access key / account key",
    },
    "placeholders": {
        "host": "s3://bucket/prefix or file:///data/lance",
        "login": "AKIAIOSFODNN7EXAMPLE (S3) or storage account name (Azure)",
        **{name: spec["schema"]["examples"][0] for name, spec in CONN_FIELDS.items() if "examples" in spec["schema"]},
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


_LEGACY_PREFIX = f"extra__{CONN_TYPE}__"


def _split_extra(extra: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The extra's form fields and its pylance storage options given as top-level keys.

    Keys may carry Airflow's legacy ``extra__lance__`` prefix. Any other key is a
    :class:`LanceConnectionError` naming the nearest valid key: a misspelt ``endpoint`` must never
    leave requests going to the default AWS endpoint.
    """
    from airflow_lance.core.storage import options as opts

    fields: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for raw_key, value in extra.items():
        key = str(raw_key)
        legacy = key.lower().startswith(_LEGACY_PREFIX)
        name = (key[len(_LEGACY_PREFIX):] if legacy else key).lower()
        if name in CONN_FIELDS:
            if value not in (None, "") and (not legacy or name not in fields):
                fields[name] = value
        elif name in opts.KNOWN_OPTIONS:
            if value not in (None, ""):
                options[name] = value
        else:
            problem = opts.unknown_key_message(name, [*CONN_FIELDS, *opts.KNOWN_OPTIONS], "key")
            raise LanceConnectionError(
                f"{problem} in the connection extra: use a form field ({', '.join(CONN_FIELDS)}) or a pylance "
                "storage option name (aws_endpoint, aws_region, azure_storage_account_name, ...; the README lists them)"
            )
    return {name: fields.get(name) for name in CONN_FIELDS}, options


def _option_text(value: Any) -> str:
    return "true" if value is True else "false" if value is False else str(value)


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
    from airflow_lance.core.storage import options as opts

    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise LanceConnectionError(f"connection field 'storage_options' is not JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise LanceConnectionError("connection field 'storage_options' must be a JSON object")
    for key in value:
        if str(key).lower() not in opts.KNOWN_OPTIONS:
            problem = opts.unknown_key_message(str(key), opts.KNOWN_OPTIONS)
            raise LanceConnectionError(f"{problem} in the connection field 'storage_options': use pylance's names")
    return {str(k): _option_text(v) for k, v in value.items()}


def _merge(scheme: str, *sources: Mapping[str, str]) -> dict[str, str]:
    """One dict of storage options; the same option given twice with different values (say ``region``
    and ``aws_region``) is an error rather than a silent choice."""
    from airflow_lance.core.storage import options as opts

    backend = opts.backend_of_scheme(scheme)
    merged: dict[str, str] = {}
    given_as: dict[str, str] = {}
    for source in sources:
        for key, value in source.items():
            canonical = opts.canonical_name(key, backend)
            if canonical not in given_as:
                given_as[canonical] = key
                merged[key] = value
            elif merged[given_as[canonical]] != value:
                raise LanceConnectionError(
                    f"the connection sets storage option {canonical!r} twice with different values "
                    f"(as {given_as[canonical]!r} and as {key!r}): keep one"
                )
    return merged


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
    fields, top_level = _split_extra(_extra_dict(extra))
    root = host.strip().rstrip("/") or "/" if host and host.strip() else None
    scheme = _scheme(root) if root else ""
    options = _scheme_options(scheme, login, password, fields)
    if fields["allow_http"] is not None:
        options["allow_http"] = _as_bool_text("allow_http", fields["allow_http"])
    if fields["dynamodb_endpoint"]:
        options["dynamodb_endpoint"] = str(fields["dynamodb_endpoint"])
    pylance_names = {key: _option_text(value) for key, value in top_level.items()}
    options = _merge(scheme, options, pylance_names, _json_options(fields["storage_options"]))
    table = fields["dynamodb_table_name"]
    if table and scheme not in ("s3", "s3+ddb"):
        raise LanceConnectionError("'dynamodb_table_name' needs an s3:// dataset root")
    return LanceConnectionConfig(root, options, str(table) if table else None)
