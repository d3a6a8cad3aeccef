"""Lance datasets as Airflow assets: the ``lance+<store>://`` URI form.

The asset of the dataset at ``s3://bucket/path/ds.lance`` is
``lance+s3://bucket/path/ds.lance``; a local dataset ``/data/ds.lance`` (or
``file:///data/ds.lance``) is ``lance+file:///data/ds.lance``. The ``lance+``
prefix keeps Lance datasets apart from the plain files other providers own
(Airflow has one URI handler per scheme), and dropping it gives back the storage URI
(:func:`to_dataset_uri`). Storage query strings are kept (``s3+ddb://...?ddbTableName=T``).

Assets exist only for the stores in :data:`STORAGE_SCHEMES`: a dataset URI on any other store
(``ftp://``, ``http(s)://``, ``hdfs://``, ...) is refused when the DAG is parsed
(:func:`create_asset`, the operators' automatic outlets, and Airflow's handler of the
``lance+<scheme>`` schemes in :data:`REFUSED_ASSET_SCHEMES`).

Producers set the committed version in the asset event's extra
(``{"version": ..., "read_version": ..., "num_rows": ...}``) so consumers can pin
``dataset(uri, version=extra["version"])``.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.providers.common.compat.sdk import Asset

PREFIX = "lance+"
#: Storage schemes Lance datasets live on; each gets a registered ``lance+<scheme>`` asset scheme.
STORAGE_SCHEMES = ("file", "s3", "s3a", "s3+ddb", "gs", "gcs", "az", "abfs", "abfss", "memory")
ASSET_SCHEMES = tuple(PREFIX + scheme for scheme in STORAGE_SCHEMES)
_BUCKETED = frozenset(STORAGE_SCHEMES) - {"file", "memory"}
#: Stores the provider cannot commit to atomically: their ``lance+`` schemes are registered with a
#: handler that refuses them, so ``Asset("lance+ftp://...")`` fails when the DAG is parsed.
REFUSED_STORAGE_SCHEMES = ("ftp", "sftp", "ssh", "http", "https", "hdfs", "webhdfs", "viewfs", "s3n")
REFUSED_ASSET_SCHEMES = tuple(PREFIX + scheme for scheme in REFUSED_STORAGE_SCHEMES)

# urlunsplit() drops an empty "//" authority unless the scheme is listed here, which would turn
# lance+file:///data/ds.lance into lance+file:/data/ds.lance when Airflow normalizes the URI.
for _scheme in ASSET_SCHEMES + REFUSED_ASSET_SCHEMES:
    if _scheme not in urllib.parse.uses_netloc:
        urllib.parse.uses_netloc.append(_scheme)


def to_asset_uri(dataset_uri: str | os.PathLike[str]) -> str:
    """The asset URI of a dataset URI or local path (an asset URI is returned unchanged)."""
    text = os.fspath(dataset_uri).strip()
    if not text:
        raise ValueError("dataset URI is empty")
    if text.lower().startswith(PREFIX):
        return text
    scheme = urlsplit(text).scheme
    if not scheme or len(scheme) == 1:  # a plain (possibly Windows) path
        return f"{PREFIX}file://{os.path.abspath(text)}"
    return PREFIX + text


def to_dataset_uri(asset_uri: str) -> str:
    """The storage URI of a ``lance+`` asset URI (``file://`` URIs become plain paths)."""
    if not asset_uri.lower().startswith(PREFIX):
        raise ValueError(f"not a Lance asset URI (expected {PREFIX}<scheme>://...): {asset_uri!r}")
    uri = asset_uri[len(PREFIX):]
    parts = urlsplit(uri)
    return parts.path if parts.scheme == "file" and not parts.netloc else uri


def _storage_scheme(asset_uri: str) -> str:
    scheme = urlsplit(asset_uri).scheme.lower()
    return scheme[len(PREFIX):] if scheme.startswith(PREFIX) else scheme


def check_asset_scheme(asset_uri: str) -> None:
    """Raise the core's ``UnsupportedFeatureError`` unless the ``lance+`` asset URI's store is one
    the provider writes to (:data:`STORAGE_SCHEMES`)."""
    storage = _storage_scheme(asset_uri)
    if storage in STORAGE_SCHEMES:
        return
    from airflow_lance.core import UnsupportedFeatureError

    raise UnsupportedFeatureError(
        f"no Lance asset for {asset_uri!r}: {storage}:// is not a store the provider writes Lance datasets to "
        f"(no atomic commit). Assets exist for {', '.join(s + '://' for s in STORAGE_SCHEMES)} datasets; "
        "for an S3-compatible server use s3:// with the connection's endpoint"
    )


def refuse_uri(uri: SplitResult) -> SplitResult:
    """Airflow's URI handler for the ``lance+`` schemes of unsupported stores: always refuses."""
    check_asset_scheme(urlunsplit(uri))
    return uri


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's URI handler for the ``lance+*`` schemes: reject URIs that name no dataset."""
    storage = uri.scheme[len(PREFIX):]
    if storage in _BUCKETED and not uri.netloc:
        raise ValueError(f"a {uri.scheme}:// asset URI needs a bucket or container: {urlunsplit(uri)!r}")
    if storage == "file" and (uri.netloc or not uri.path.startswith("/") or uri.path == "/"):
        raise ValueError(f"a lance+file asset URI needs an absolute dataset path: {urlunsplit(uri)!r}")
    return uri


def create_asset(
    *,
    uri: str | os.PathLike[str],
    name: str | None = None,
    group: str = "lance",
    extra: dict[str, Any] | None = None,
    watchers: Sequence[Any] = (),
) -> Asset:
    """An Airflow ``Asset`` for the Lance dataset at ``uri`` (a storage URI, local path or asset URI);
    ``UnsupportedFeatureError`` for a store the provider does not write to (see :func:`check_asset_scheme`)."""
    from airflow.providers.common.compat.sdk import Asset

    asset_uri = to_asset_uri(uri)
    check_asset_scheme(asset_uri)
    kwargs: dict[str, Any] = {"uri": asset_uri, "group": group, "extra": extra or {}}
    if name is not None:
        kwargs["name"] = name
    if watchers:
        kwargs["watchers"] = list(watchers)
    return Asset(**kwargs)


def is_static_dataset_uri(uri: Any) -> bool:
    """True for an absolute path or URI that is not a template (known when the DAG is parsed)."""
    if not isinstance(uri, str) or "{{" in uri or "{%" in uri:
        return False
    return "://" in uri or os.path.isabs(uri)


def with_dataset_outlet(uri: Any, kwargs: dict[str, Any]) -> None:
    """Add the asset of a static absolute dataset ``uri`` to ``kwargs["outlets"]`` (once); a dataset
    on a store the provider does not write to fails here, when the DAG is parsed."""
    if is_static_dataset_uri(uri):
        outlets = list(kwargs.get("outlets") or [])
        asset = create_asset(uri=uri)
        if all(getattr(o, "uri", None) != asset.uri for o in outlets):
            outlets.append(asset)
        kwargs["outlets"] = outlets


def emit_dataset_event(outlets: Sequence[Any] | None, outlet_events: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """Put ``summary`` (it has the dataset's ``uri``) into the extra of the dataset's outlet events:
    an outlet asset with the dataset's URI gets it as its extra, each outlet ``AssetAlias`` gets
    an event of the dataset's asset with it. Returns ``summary``."""
    from airflow.providers.common.compat.sdk import AssetAlias

    asset_uri = to_asset_uri(summary["uri"])
    for outlet in outlets or []:
        if isinstance(outlet, AssetAlias):
            if _storage_scheme(asset_uri) in STORAGE_SCHEMES:  # no asset of other stores, even after a commit
                outlet_events[outlet].add(create_asset(uri=asset_uri), extra=dict(summary))
        elif getattr(outlet, "uri", None) == asset_uri:
            outlet_events[outlet].extra = dict(summary)
    return summary
