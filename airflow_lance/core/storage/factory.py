"""Pick the object store for a dataset URI."""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse

import fsspec

from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.storage.base import ObjectStore
from airflow_lance.core.storage.fsspec_store import FsspecStore
from airflow_lance.core.storage.local import LocalStore


def normalize_uri(uri: str | os.PathLike[str]) -> str:
    """Strip trailing slashes; plain paths stay plain."""
    text = os.fspath(uri)
    if not text:
        raise InvalidInputError("dataset URI is empty")
    return text.rstrip("/") or "/"


def open_store(uri: str | os.PathLike[str], storage_options: Mapping[str, str] | None = None) -> ObjectStore:
    """Return the store for a dataset root: a local path, ``file://`` URI or any fsspec URI."""
    text = normalize_uri(uri)
    parsed = urlparse(text)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = parsed.path if parsed.scheme == "file" else text
        return LocalStore(text, os.path.expanduser(path))
    try:
        fs, root = fsspec.core.url_to_fs(text, **dict(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise InvalidInputError(f"cannot open {text!r}: {exc}") from exc
    return FsspecStore(text, fs, root)
