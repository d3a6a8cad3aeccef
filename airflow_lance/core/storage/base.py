"""The object store contract every backend implements."""

from __future__ import annotations

import abc
import builtins
import contextlib
import dataclasses
import types
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa

if TYPE_CHECKING:
    from airflow_lance.core.bases import BasePath
    from airflow_lance.core.storage.external import ExternalManifestStore


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """One listed object: path relative to the store root, size, mtime (epoch seconds)."""

    path: str
    size: int
    mtime: float


class ObjectStore(abc.ABC):
    """Byte access to the files of one dataset, addressed relative to its root.

    Implementations must be picklable (Spark executors receive them) and raise
    ``FileNotFoundError`` for missing objects and
    :class:`~airflow_lance.core.errors.StorageError` for other failures.
    """

    #: The dataset root URI as given by the user.
    uri: str
    #: Whether commits refresh ``_versions/latest_version_hint.json`` (Lance does on local disk).
    writes_version_hint: bool = False
    #: Whether listings come back in lexical order page by page (S3, GCS, Azure): the first
    #: V2-named manifest of ``_versions/`` is then the latest version, found without listing all.
    lexically_ordered: bool = False
    #: Where commits are decided when the store itself cannot (``s3+ddb://``), else None.
    external_manifests: ExternalManifestStore | None = None
    #: The options the store was opened with (``open_store`` sets them): other base paths of the
    #: dataset are opened with them, as pylance opens them with the dataset's.
    storage_options: Mapping[str, Any] = types.MappingProxyType({})
    #: The dataset's other base paths by id, from the manifests read (``core.bases.register``),
    #: and the stores opened for them. Both are replaced, never mutated in place.
    base_paths: Mapping[int, BasePath] = types.MappingProxyType({})
    base_stores: Mapping[int, ObjectStore] = types.MappingProxyType({})

    @abc.abstractmethod
    def read(self, path: str) -> bytes:
        """Whole object."""

    @abc.abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer only at end of object)."""

    @abc.abstractmethod
    def open_input(self, path: str) -> pa.NativeFile:
        """A random-access pyarrow file for ranged reads of one object."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Object size in bytes."""

    @abc.abstractmethod
    def write(self, path: str, data: bytes) -> None:
        """Create or replace an object; readers see the old or the new bytes, never a part."""

    @abc.abstractmethod
    @contextlib.contextmanager
    def open_output(self, path: str) -> Iterator[BinaryIO]:
        """Stream an object; it becomes visible only when the block exits cleanly."""

    @abc.abstractmethod
    def put_if_not_exists(self, path: str, data: bytes) -> bool:
        """Atomically create ``path``; return False (writing nothing) if it exists."""

    @abc.abstractmethod
    def list(self, prefix: str) -> list[FileInfo]:
        """Objects under the directory ``prefix`` (recursive), any order."""

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Remove an object; a missing object is not an error."""

    def list_names(self, prefix: str) -> builtins.list[str]:
        """Names of the objects directly inside directory ``prefix``."""
        base = prefix.rstrip("/") + "/"
        return [info.path[len(base):] for info in self.list(prefix) if "/" not in info.path[len(base):]]

    def iter_sorted_names(self, prefix: str) -> Iterator[str]:
        """Names directly inside directory ``prefix`` in lexical order.

        Stores with ordered, paginated listings yield page by page, so a
        caller that stops early does not list the whole directory.
        """
        yield from sorted(self.list_names(prefix))

    def copy(self, source: str, target: str) -> None:
        """Copy an object (server-side where the store can); FileNotFoundError if ``source`` is missing."""
        self.write(target, self.read(source))

    def ensure_committable(self) -> None:  # noqa: B027 (a hook: most stores can always commit)
        """Raise UnsupportedFeatureError if commits to this store could not be made atomic."""

    def write_hint(self, path: str, data: bytes) -> None:
        """Write an advisory file (the version hint); atomicity not required."""
        self.write(path, data)

    def exists(self, path: str) -> bool:
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True
