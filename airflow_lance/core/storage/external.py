"""External manifest store: commits decided by a table, not by the object store.

Lance's protocol (``ExternalManifestCommitHandler``), so that pylance and we
can commit to the same dataset through the same table:

1. write the manifest to a staging object ``_versions/{final-name}-{uuid}``;
2. conditionally insert (version -> staging path) into the table: the
   commit point. Losing this insert is a commit conflict;
3. copy the staging object to the final name;
4. update the row to the final path (only if the row exists);
5. delete the staging object.

Steps 3-5 may be done by anyone: a reader that finds a row still pointing at
a staging object finishes them (:func:`finalize`), so a writer dying after
step 2 loses nothing. Paths are relative to the dataset root here; the table
implementation maps them to its own convention.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import uuid

from airflow_lance.core import layout
from airflow_lance.core.errors import CorruptFileError, StorageError
from airflow_lance.core.storage.base import ObjectStore

log = logging.getLogger(__name__)

_MANIFEST_SUFFIX = ".manifest"
_UUID_LENGTH = 36


@dataclasses.dataclass(frozen=True)
class ManifestEntry:
    """One row of the table: a committed version and where its manifest is."""

    version: int
    path: str  # relative to the dataset root: final or staging name under _versions/
    size: int | None = None


class ExternalManifestStore(abc.ABC):
    """The table of committed versions of one dataset."""

    @abc.abstractmethod
    def get(self, version: int) -> ManifestEntry | None:
        """The row of ``version`` (consistent read), or None."""

    @abc.abstractmethod
    def latest(self) -> ManifestEntry | None:
        """The row with the highest version (consistent read), or None if the table has none."""

    @abc.abstractmethod
    def put_if_not_exists(self, entry: ManifestEntry) -> bool:
        """Insert ``entry``; False if its version already has a row (someone else's)."""

    @abc.abstractmethod
    def put_if_exists(self, entry: ManifestEntry) -> None:
        """Replace the existing row of ``entry.version`` (used to point it at the final name)."""


def staging_path(final: str) -> str:
    """``_versions/{final-name}-{uuid}``, as Lance names it."""
    return f"{final}-{uuid.uuid4()}"


def final_path(path: str) -> str:
    """The final manifest path for a final or staging path."""
    if path.endswith(_MANIFEST_SUFFIX):
        return path
    head, sep, tail = path.rpartition(_MANIFEST_SUFFIX + "-")
    if not sep or len(tail) != _UUID_LENGTH:
        raise CorruptFileError(path, "external manifest store row names no manifest file")
    return head + _MANIFEST_SUFFIX


def scheme_of(path: str) -> layout.ManifestNamingScheme:
    parsed = layout.parse_manifest_name(final_path(path).rsplit("/", 1)[-1])
    if parsed is None:
        raise CorruptFileError(path, "external manifest store row names no manifest file")
    return parsed[1]


def finalize(store: ObjectStore, table: ExternalManifestStore, entry: ManifestEntry) -> str:
    """Finish steps 3-5 for ``entry`` if it still points at a staging object; return the final path."""
    final = final_path(entry.path)
    if entry.path == final:
        return final
    try:
        store.copy(entry.path, final)
    except FileNotFoundError:
        # Someone else finished (and deleted the staging object): the final object must exist.
        if not store.exists(final):
            raise StorageError(f"version {entry.version}: neither {entry.path} nor {final} exists") from None
        return final
    size = entry.size if entry.size is not None else store.size(final)
    table.put_if_exists(ManifestEntry(entry.version, final, size))
    store.delete(entry.path)
    return final


def resolve_latest(store: ObjectStore, table: ExternalManifestStore) -> tuple[int, layout.ManifestNamingScheme] | None:
    """The latest version according to the table (finishing it if half done), or None if it has no rows."""
    entry = table.latest()
    if entry is None:
        return None
    return entry.version, scheme_of(finalize(store, table, entry))


def resolve_version(
    store: ObjectStore, table: ExternalManifestStore, version: int
) -> layout.ManifestNamingScheme | None:
    """Finish ``version`` if the table has it; its naming scheme, or None if the table has no row."""
    entry = table.get(version)
    if entry is None:
        return None
    return scheme_of(finalize(store, table, entry))


def _discard(store: ObjectStore, staging: str) -> None:
    try:
        store.delete(staging)
    except StorageError as exc:
        log.debug("could not delete staging manifest %s: %s", staging, exc)


def commit(store: ObjectStore, table: ExternalManifestStore, version: int, path: str, data: bytes) -> bool:
    """Commit manifest ``data`` as ``version`` at final ``path``; False if the version was taken."""
    staging = staging_path(path)
    store.write(staging, data)
    try:
        won = table.put_if_not_exists(ManifestEntry(version, staging, len(data)))
    except StorageError:
        _discard(store, staging)  # the table refused the insert: nothing was committed
        raise
    if not won:
        _discard(store, staging)
        return False
    try:
        finalize(store, table, ManifestEntry(version, staging, len(data)))
    except StorageError as exc:
        # Committed at the table insert: readers finish the move.
        log.warning("version %d is committed; moving its manifest to the final name failed: %s", version, exc)
    return True
