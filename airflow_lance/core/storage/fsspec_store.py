"""Object store over any fsspec filesystem.

Commits need an atomic put-if-not-exists. This backend provides it only where
it can be proven: the in-process ``memory://`` filesystem (under a lock).
Other protocols refuse to commit with :class:`UnsupportedFeatureError`
rather than risk silently overwriting a concurrent writer's manifest.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any, BinaryIO

import fsspec
import pyarrow as pa

from airflow_lance.core.errors import StorageError, UnsupportedFeatureError
from airflow_lance.core.storage.base import FileInfo, ObjectStore

_MEMORY_LOCK = threading.Lock()


def _mtime(info: dict[str, Any]) -> float:
    value = info.get("mtime", info.get("LastModified", info.get("created", 0.0)))
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0


class FsspecStore(ObjectStore):
    """Files under ``root`` of an fsspec filesystem."""

    def __init__(self, uri: str, fs: fsspec.AbstractFileSystem, root: str) -> None:
        self.uri = uri
        self.fs = fs
        self.root = root.rstrip("/")

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def _call(self, path: str, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:
            raise StorageError(f"{path}: {exc}") from exc

    def read(self, path: str) -> bytes:
        return self._call(path, self.fs.cat_file, self._abs(path))

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return self._call(path, self.fs.cat_file, self._abs(path), start=offset, end=offset + length)

    def open_input(self, path: str) -> pa.NativeFile:
        handle = self._call(path, self.fs.open, self._abs(path), "rb")
        return pa.PythonFile(handle, mode="r")

    def size(self, path: str) -> int:
        return int(self._call(path, self.fs.size, self._abs(path)))

    def write(self, path: str, data: bytes) -> None:
        self._call(path, self.fs.pipe_file, self._abs(path), data)

    @contextlib.contextmanager
    def open_output(self, path: str) -> Iterator[BinaryIO]:
        # Object stores publish an object only when the upload completes.
        target = self._abs(path)
        temp = f"{target}.tmp-{uuid.uuid4().hex}" if self.fs.protocol in ("memory",) else target
        handle = self._call(path, self.fs.open, temp, "wb")
        try:
            with handle:
                yield handle
            if temp != target:
                self._call(path, self.fs.mv, temp, target)
        except BaseException:
            if temp != target:
                with contextlib.suppress(Exception):
                    self.fs.rm_file(temp)
            raise

    def put_if_not_exists(self, path: str, data: bytes) -> bool:
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        if "memory" in protocols:
            with _MEMORY_LOCK:
                if self.fs.exists(self._abs(path)):
                    return False
                self.fs.pipe_file(self._abs(path), data)
                return True
        raise UnsupportedFeatureError(
            f"cannot commit to {self.uri!r}: protocol {protocols[0]!r} has no atomic put-if-not-exists "
            "in this version; use a local path"
        )

    def list(self, prefix: str) -> list[FileInfo]:
        base = self._abs(prefix)
        try:
            found = self.fs.find(base, detail=True)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageError(f"{prefix}: {exc}") from exc
        strip = len(self.root) + 1
        return [
            FileInfo(name[strip:], int(info.get("size") or 0), _mtime(info))
            for name, info in found.items()
            if info.get("type", "file") != "directory"
        ]

    def delete(self, path: str) -> None:
        try:
            self.fs.rm_file(self._abs(path))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"{path}: {exc}") from exc
