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


def _parse_time(text: str | None) -> dt.datetime | None:
    """An RFC 3339 time of a tag file (any fraction of a second) as a UTC datetime."""
    if not text:
        return None
    main, _, frac = text.rstrip("Z").partition(".")
    parsed = dt.datetime.fromisoformat(main.split("+")[0]).replace(tzinfo=dt.timezone.utc)
    digits = "".join(c for c in frac if c.isdigit())
    return parsed.replace(microsecond=int((digits + "000000")[:6])) if digits else parsed


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

    def list_ordered(self, order: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """All tags as (name, contents) by version, newest first (``order="desc"``, the default)
        or oldest first (``"asc"``), then by name; contents as pylance's: ``branch``, ``version``,
        ``created_at``/``updated_at`` (UTC datetimes), ``manifest_size``, ``metadata``."""
        if order not in (None, "asc", "desc"):
            raise InvalidInputError(f"Invalid sort order {order!r}. Valid values are: asc, desc")
        tags = []
        for name in self._store.list_names(layout.TAGS_DIR):
            if name.endswith(".json"):
                tag = name[: -len(".json")]
                content = self._read(tag)
                tags.append((tag, {
                    "branch": content.get("branch"),
                    "version": int(content["version"]),
                    "created_at": _parse_time(content.get("createdAt")),
                    "updated_at": _parse_time(content.get("updatedAt")),
                    "manifest_size": content.get("manifestSize"),
                    "metadata": dict(content.get("metadata") or {}),
                }))
        sign = 1 if order == "asc" else -1
        return sorted(tags, key=lambda item: (sign * item[1]["version"], item[0]))

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
