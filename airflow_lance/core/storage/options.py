"""Storage options: pylance's key names, translated to fsspec arguments in this one place.

The same ``storage_options`` dict works for pylance (Rust ``object_store``)
and for us. Keys are case-insensitive and accept object_store's aliases
(``aws_region`` / ``region``, ...). Keys meant for another backend are ignored
(one dict can serve several stores, as in Lance); keys no backend knows are
an :class:`InvalidInputError`, so a misspelt endpoint never silently talks to
the wrong service.

Our own keys (pylance ignores them):

* ``allow_unsafe_commit="true"``: commit on a store without atomic
  put-if-not-exists, accepting that concurrent writers may overwrite each
  other's versions (a warning is logged).
* ``direct_io="auto" | "true" | "false"``: how local data files are written
  (see ``storage.direct``): ``auto`` (default) uses direct I/O on ext4, xfs
  and btrfs for files longer than 8 MiB.

Lance keys handled beyond object_store's: ``dynamodb_endpoint`` (for
``s3+ddb://``), ``google_storage_token``, ``client_max_retries``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_lance.core.errors import InvalidInputError

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}


def _aliases(*groups: tuple[str, ...]) -> dict[str, str]:
    """Map every alias to the canonical (first) name of its group."""
    return {alias: group[0] for group in groups for alias in group}


_S3 = _aliases(
    ("aws_access_key_id", "access_key_id"),
    ("aws_secret_access_key", "secret_access_key"),
    ("aws_session_token", "aws_token", "session_token", "token"),
    ("aws_region", "region", "aws_default_region", "default_region"),
    ("aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url"),
    ("aws_virtual_hosted_style_request", "virtual_hosted_style_request"),
    ("aws_skip_signature", "skip_signature"),
    ("aws_server_side_encryption",),
    ("aws_sse_kms_key_id",),
    ("aws_sse_bucket_key_enabled",),
    ("aws_request_payer", "request_payer"),
    ("aws_conditional_put", "conditional_put"),
    # Accepted for compatibility, no fsspec equivalent needed:
    ("aws_bucket", "aws_bucket_name", "bucket", "bucket_name"),
    ("aws_checksum_algorithm", "checksum_algorithm"),
    ("aws_unsigned_payload", "unsigned_payload"),
    ("aws_imdsv1_fallback", "imdsv1_fallback"),
    ("aws_metadata_endpoint", "metadata_endpoint"),
    ("aws_container_credentials_relative_uri",),
    ("aws_disable_tagging", "disable_tagging"),
    ("aws_copy_if_not_exists", "copy_if_not_exists"),
    ("aws_s3_express", "s3_express"),
    ("dynamodb_endpoint",),
)

_AZURE = _aliases(
    ("azure_storage_account_name", "account_name"),
    (
        "azure_storage_account_key", "azure_storage_access_key", "azure_storage_master_key",
        "master_key", "account_key", "access_key",
    ),
    ("azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token"),
    ("azure_storage_client_id", "azure_client_id", "client_id"),
    ("azure_storage_client_secret", "azure_client_secret", "client_secret"),
    (
        "azure_storage_tenant_id", "azure_storage_authority_id", "azure_tenant_id", "azure_authority_id",
        "tenant_id", "authority_id",
    ),
    ("azure_storage_token", "bearer_token", "token"),
    ("azure_storage_use_emulator", "use_emulator"),
    ("azure_storage_endpoint", "azure_endpoint", "endpoint"),
    ("azure_skip_signature", "skip_signature"),
    ("azure_container_name", "container_name"),
    ("azure_use_fabric_endpoint", "use_fabric_endpoint"),
    ("azure_msi_endpoint", "azure_identity_endpoint", "identity_endpoint", "msi_endpoint"),
    ("azure_object_id", "object_id"),
    ("azure_msi_resource_id", "msi_resource_id"),
    ("azure_federated_token_file", "federated_token_file"),
    ("azure_use_azure_cli", "use_azure_cli"),
    ("azure_disable_tagging", "disable_tagging"),
)

_GCS = _aliases(
    (
        "google_service_account", "service_account", "google_service_account_path", "service_account_path",
        "google_application_credentials",
    ),
    ("google_service_account_key", "service_account_key"),
    ("google_storage_token",),
    ("google_skip_signature", "skip_signature"),
    ("google_bucket", "google_bucket_name", "bucket", "bucket_name"),
)

# object_store client options and Lance's own knobs: valid for every backend.
_COMMON = _aliases(
    ("allow_http",),
    ("allow_invalid_certificates",),
    ("connect_timeout",),
    ("timeout",),
    ("client_max_retries",),
    ("allow_unsafe_commit",),
    ("direct_io",),
    # Accepted, nothing to translate:
    ("user_agent",), ("proxy_url",), ("proxy_ca_certificate",), ("proxy_excludes",), ("pool_idle_timeout",),
    ("pool_max_idle_per_host",), ("http1_only",), ("http2_only",), ("http2_keep_alive_interval",),
    ("http2_keep_alive_timeout",), ("http2_keep_alive_while_idle",), ("default_content_type",),
    ("randomize_addresses",), ("client_retry_timeout",), ("download_retry_count",), ("use_opendal",),
    ("expires_at_millis",), ("use_constant_size_upload_parts",), ("block_size",),
)

_BACKENDS = {"s3": _S3, "azure": _AZURE, "gcs": _GCS}

#: Canonical names whose values are credentials: never logged, scrubbed from error messages.
SECRET_KEYS = frozenset({
    "aws_secret_access_key", "aws_session_token", "azure_storage_account_key", "azure_storage_sas_key",
    "azure_storage_client_secret", "azure_storage_token", "google_service_account_key", "google_storage_token",
})

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def is_true(value: object) -> bool:
    return str(value).strip().lower() in TRUE


def _duration_s(key: str, value: str) -> float:
    match = _DURATION.match(str(value))
    if not match:
        raise InvalidInputError(f"storage option {key!r} must be a duration such as '30s'")
    number, unit = float(match.group(1)), match.group(2) or "s"
    return number * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]


@dataclasses.dataclass(frozen=True)
class Resolved:
    """Options of one backend under canonical names, plus the common ones."""

    backend: str
    values: dict[str, str]

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def flag(self, key: str) -> bool:
        return is_true(self.values.get(key, "false"))


#: Every option name (canonical or alias) some backend, or every backend, knows.
KNOWN_OPTIONS = frozenset(_COMMON).union(*(set(t) for t in _BACKENDS.values()))
_SCHEME_BACKENDS = {"s3": "s3", "s3a": "s3", "s3+ddb": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure",
                    "abfs": "azure", "abfss": "azure", "adl": "azure"}
_BACKEND_NAMES = {"s3": "S3", "azure": "Azure", "gcs": "GCS"}


def backend_of_scheme(scheme: str) -> str:
    """The option backend ("s3", "azure", "gcs") of a URI scheme, "other" for the rest."""
    return _SCHEME_BACKENDS.get(scheme.lower(), "other")


def canonical_name(key: str, backend: str = "other") -> str:
    """The canonical name of option ``key`` for ``backend`` (lower-cased ``key`` if it has none)."""
    lowered = key.lower()
    return {**_COMMON, **_BACKENDS.get(backend, {})}.get(lowered, lowered)


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to a misspelt ``name`` (difflib), or None when none is close."""
    found = difflib.get_close_matches(name.lower(), sorted(set(candidates)), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_key_message(key: str, candidates: Iterable[str], what: str = "storage option") -> str:
    """``unknown <what> 'key'``, with the nearest valid name when one is close (never the value)."""
    suggestion = closest(key, candidates)
    hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
    return f"unknown {what} {key!r}{hint}"


def foreign_backend_keys(options: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """Backend -> the keys of ``options`` only that backend knows (S3, Azure or GCS options)."""
    found: dict[str, list[str]] = {}
    for raw_key in options or {}:
        key = str(raw_key).lower()
        if key in _COMMON:
            continue
        owners = [name for name, table in _BACKENDS.items() if key in table]
        if len(owners) == 1:
            found.setdefault(owners[0], []).append(str(raw_key))
    return found


def check_options_apply(uri: str, scheme: str, options: Mapping[str, Any] | None) -> None:
    """InvalidInputError when a store that is no cloud backend gets a cloud backend's options
    (S3 credentials for an ``http://`` URI would otherwise reach the HTTP client as arguments)."""
    for backend, keys in foreign_backend_keys(options).items():
        name = _BACKEND_NAMES[backend]
        hint = ""
        if backend == "s3" and scheme in ("http", "https"):
            hint = f" For an S3-compatible server use s3://BUCKET/path with aws_endpoint='{scheme}://HOST:PORT'"
            hint += " and allow_http='true'." if scheme == "http" else "."
        raise InvalidInputError(
            f"{uri}: storage option(s) {sorted(keys)} are {name} options and do not apply to the {scheme}:// "
            f"dataset; {name} datasets have {_scheme_list(backend)} URIs.{hint}"
        )


def _scheme_list(backend: str) -> str:
    return ", ".join(f"{s}://" for s, b in _SCHEME_BACKENDS.items() if b == backend)


def fsspec_passthrough(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options a generic fsspec filesystem receives: those pylance does not know."""
    return {k: v for k, v in (options or {}).items() if str(k).lower() not in KNOWN_OPTIONS}


def resolve(backend: str, options: Mapping[str, Any] | None) -> Resolved:
    """Canonicalize ``options`` for ``backend`` ("s3", "azure", "gcs" or "other")."""
    table = {**_COMMON, **_BACKENDS.get(backend, {})}
    values: dict[str, str] = {}
    unknown = []
    for raw_key, value in (options or {}).items():
        key = str(raw_key).lower()
        if key in table:
            values[table[key]] = str(value)
        elif key not in KNOWN_OPTIONS:
            unknown.append(str(raw_key))
    if unknown:
        problems = "; ".join(unknown_key_message(key, table) for key in sorted(unknown))
        raise InvalidInputError(
            f"{problems}: use pylance's names, e.g. aws_access_key_id, aws_endpoint, allow_http, "
            "azure_storage_account_name, google_service_account"
        )
    return Resolved(backend, values)


def local_direct_io(options: Mapping[str, Any] | None) -> str:
    """The ``direct_io`` option of a local dataset, normalised to ``auto``/``true``/``false``."""
    for key, value in (options or {}).items():
        if str(key).lower() == "direct_io":
            text = str(value).strip().lower()
            if text == "auto":
                return text
            if text in TRUE or text in FALSE:
                return "true" if text in TRUE else "false"
            raise InvalidInputError(f"storage option direct_io must be auto, true or false, not {value!r}")
    return "auto"


def secret_values(options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Values of every credential option (for scrubbing messages), longest first."""
    found = []
    for backend in ("s3", "azure", "gcs"):
        table = {**_COMMON, **_BACKENDS[backend]}
        for raw_key, value in (options or {}).items():
            if table.get(str(raw_key).lower()) in SECRET_KEYS and len(str(value)) >= 4:
                found.append(str(value))
    return tuple(sorted(set(found), key=len, reverse=True))


_SAS_PARAM = re.compile(r"([?&](?:sig|x-amz-signature|x-amz-security-token|signature)=)[^&\s'\"]+", re.I)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value and URL signature replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return _SAS_PARAM.sub(r"\1***", text)


def _check_http(endpoint: str, resolved: Resolved) -> None:
    if endpoint.lower().startswith("http://") and not resolved.flag("allow_http"):
        raise InvalidInputError(
            f"endpoint {endpoint!r} uses plain HTTP: set storage option allow_http='true' (as pylance requires)"
        )


def s3_kwargs(resolved: Resolved) -> dict[str, Any]:
    """s3fs ``S3FileSystem`` keyword arguments."""
    get = resolved.get
    kwargs: dict[str, Any] = {"use_listings_cache": False}
    client: dict[str, Any] = {}
    config: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if get("aws_access_key_id"):
        kwargs["key"] = get("aws_access_key_id")
    if get("aws_secret_access_key"):
        kwargs["secret"] = get("aws_secret_access_key")
    if get("aws_session_token"):
        kwargs["token"] = get("aws_session_token")
    endpoint = get("aws_endpoint")
    if endpoint:
        _check_http(endpoint, resolved)
        kwargs["endpoint_url"] = endpoint
    if get("aws_region"):
        client["region_name"] = get("aws_region")
    if "aws_virtual_hosted_style_request" in resolved.values:
        style = "virtual" if resolved.flag("aws_virtual_hosted_style_request") else "path"
        config["s3"] = {"addressing_style": style}
    elif endpoint:
        config["s3"] = {"addressing_style": "path"}  # object_store's default for custom endpoints
    if resolved.flag("aws_skip_signature"):
        kwargs["anon"] = True
    if get("aws_server_side_encryption"):
        extra["ServerSideEncryption"] = get("aws_server_side_encryption")
    if get("aws_sse_kms_key_id"):
        extra["SSEKMSKeyId"] = get("aws_sse_kms_key_id")
    if get("aws_sse_bucket_key_enabled"):
        extra["BucketKeyEnabled"] = resolved.flag("aws_sse_bucket_key_enabled")
    if resolved.flag("aws_request_payer"):
        kwargs["requester_pays"] = True
    if resolved.flag("allow_invalid_certificates"):
        client["verify"] = False
    if get("connect_timeout"):
        config["connect_timeout"] = _duration_s("connect_timeout", get("connect_timeout") or "")
    if get("timeout"):
        config["read_timeout"] = _duration_s("timeout", get("timeout") or "")
    if get("client_max_retries"):
        kwargs["retries"] = _int("client_max_retries", get("client_max_retries"))
    for name, value in (("client_kwargs", client), ("config_kwargs", config), ("s3_additional_kwargs", extra)):
        if value:
            kwargs[name] = value
    return kwargs


def _int(key: str, value: str | None) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise InvalidInputError(f"storage option {key!r} must be an integer") from None


AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="  # public


def azure_kwargs(resolved: Resolved) -> dict[str, Any]:
    """adlfs ``AzureBlobFileSystem`` keyword arguments."""
    get = resolved.get
    kwargs: dict[str, Any] = {"use_listings_cache": False}
    account = get("azure_storage_account_name")
    key = get("azure_storage_account_key")
    sas = get("azure_storage_sas_key")
    endpoint = get("azure_storage_endpoint")
    if resolved.flag("azure_storage_use_emulator"):
        account = account or AZURITE_ACCOUNT
        key = key or (None if sas else AZURITE_KEY)
        base = os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000").rstrip("/")
        endpoint = endpoint or f"{base}/{account}"
        if not get("allow_http"):
            resolved = Resolved(resolved.backend, {**resolved.values, "allow_http": "true"})
    if endpoint:
        _check_http(endpoint, resolved)
        if not (key or sas):
            raise InvalidInputError("a custom Azure endpoint needs azure_storage_account_key or azure_storage_sas_key")
        parts = [f"DefaultEndpointsProtocol={endpoint.split(':', 1)[0]}", f"BlobEndpoint={endpoint}"]
        if account:
            parts.append(f"AccountName={account}")
        parts.append(f"AccountKey={key}" if key else f"SharedAccessSignature={sas.lstrip('?') if sas else ''}")
        kwargs["connection_string"] = ";".join(parts) + ";"
        return kwargs
    if account:
        kwargs["account_name"] = account
    if key:
        kwargs["account_key"] = key
    if sas:
        kwargs["sas_token"] = sas
    for option, name in (
        ("azure_storage_client_id", "client_id"),
        ("azure_storage_client_secret", "client_secret"),
        ("azure_storage_tenant_id", "tenant_id"),
    ):
        if get(option):
            kwargs[name] = get(option)
    if get("azure_storage_token"):
        kwargs["credential"] = StaticAzureToken(get("azure_storage_token") or "")
    if resolved.flag("azure_skip_signature"):
        kwargs["anon"] = True
    return kwargs


class StaticAzureToken:
    """A fixed bearer token as an azure-core credential (picklable, unlike SDK credentials)."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __repr__(self) -> str:
        return "StaticAzureToken(***)"

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self._token, 2**31 - 1)

    async def close(self) -> None:
        """Nothing to release (async credential protocol)."""

    async def __aenter__(self) -> StaticAzureToken:
        return self

    async def __aexit__(self, *args: object) -> None:
        return None


def _service_account_json(resolved: Resolved) -> dict[str, Any] | None:
    text = resolved.get("google_service_account_key")
    path = resolved.get("google_service_account")
    try:
        if text:
            return dict(json.loads(text))
        if path:
            with open(os.path.expanduser(path), encoding="utf-8") as handle:
                return dict(json.load(handle))
    except (OSError, ValueError, TypeError) as exc:
        what = "google_service_account_key" if text else f"google_service_account file {path!r}"
        raise InvalidInputError(f"{what} is not a readable service account JSON ({type(exc).__name__})") from None
    return None


def gcs_kwargs(resolved: Resolved) -> dict[str, Any]:
    """gcsfs ``GCSFileSystem`` keyword arguments.

    object_store's test extension of the service-account JSON is honoured:
    ``gcs_base_url`` is the endpoint (e.g. fake-gcs-server), ``disable_oauth``
    sends no credentials.
    """
    kwargs: dict[str, Any] = {"use_listings_cache": False}
    account = _service_account_json(resolved)
    if account is not None:
        base_url = account.get("gcs_base_url")
        if base_url:
            _check_http(str(base_url), resolved)
            kwargs["endpoint_url"] = str(base_url).rstrip("/")
        if account.get("disable_oauth"):
            kwargs["token"] = "anon"
        elif account.get("type"):
            kwargs["token"] = account
    token = resolved.get("google_storage_token")
    if token:
        from google.oauth2.credentials import Credentials

        kwargs["token"] = Credentials(token=token)
    if resolved.flag("google_skip_signature"):
        kwargs["token"] = "anon"
    return kwargs
