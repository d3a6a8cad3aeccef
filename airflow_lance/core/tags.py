"""Tags: named references to versions, stored as ``_refs/tags/{name}.json``.

The JSON layout is pylance's (camelCase keys, ``version`` and
``manifestSize`` required) so both implementations read each other's tags.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from airflow_lance.core import layout
from airflow_lance.core.errors import (
    CorruptFileError,
    InvalidInputError,
    TagAlreadyExistsError,
    TagNotFoundError,
)
from airflow_lance.core.manifest import read_manifest
from airflow_lance.core.storage import ObjectStore


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Tags:
    """Tag operations of one dataset (``LanceDataset.tags``)."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store

    def _path(self, tag: str) -> str:
        if not isinstance(tag, str) or not layout.is_valid_tag_name(tag):
            raise InvalidInputError(f"invalid tag name {tag!r}")
        return layout.tag_path(tag)

    def _read(self, tag: str) -> dict[str, Any]:
        path = self._path(tag)
        try:
            data = self._store.read(path)
        except FileNotFoundError:
            raise TagNotFoundError(f"tag {tag!r} does not exist in {self._store.uri}") from None
        try:
            content = json.loads(data)
            int(content["version"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptFileError(path, f"malformed tag file: {exc!r}") from exc
        return content

    def _content(self, version: int, created_at: str | None = None) -> bytes:
        manifest = read_manifest(self._store, version)
        now = _now()
        body = {
            "branch": None,
            "version": version,
            "createdAt": created_at or now,
            "updatedAt": now,
            "manifestSize": manifest.size,
            "metadata": {},
        }
        return json.dumps(body, indent=2).encode()

    def list(self) -> dict[str, dict[str, Any]]:
        """All tags: name -> {version, manifest_size, created_at, updated_at}."""
        result = {}
        for name in sorted(self._store.list_names(layout.TAGS_DIR)):
            if name.endswith(".json"):
                tag = name[: -len(".json")]
                content = self._read(tag)
                result[tag] = {
                    "version": int(content["version"]),
                    "manifest_size": content.get("manifestSize"),
                    "created_at": content.get("createdAt"),
                    "updated_at": content.get("updatedAt"),
                }
        return result

    def get_version(self, tag: str) -> int:
        """The version ``tag`` points to."""
        return int(self._read(tag)["version"])

    def create(self, tag: str, version: int) -> None:
        """Create ``tag`` for an existing ``version``; TagAlreadyExistsError if taken."""
        path = self._path(tag)
        if not self._store.put_if_not_exists(path, self._content(version)):
            raise TagAlreadyExistsError(f"tag {tag!r} already exists in {self._store.uri}")

    def update(self, tag: str, version: int) -> None:
        """Point an existing ``tag`` at another existing ``version``."""
        content = self._read(tag)
        self._store.write(self._path(tag), self._content(version, content.get("createdAt")))

    def delete(self, tag: str) -> None:
        """Remove ``tag``; TagNotFoundError if it does not exist."""
        self._read(tag)
        self._store.delete(self._path(tag))
