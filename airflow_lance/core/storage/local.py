"""Local-disk object store: atomic create through a hard link, as Lance does."""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import uuid
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa

from airflow_lance.core.errors import InvalidInputError, StorageError, StoragePermissionError
from airflow_lance.core.storage.base import FileInfo, ObjectStore
from airflow_lance.core.storage.direct import DIRECT_AFTER_BYTES, MODES, DirectFileWriter, use_direct_io


def _temp_name(path: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, f".tmp-{name}-{uuid.uuid4().hex}")


def _translate(exc: OSError, uri: str, path: str) -> Exception:
    """FileNotFoundError as is; anything else a StorageError (StoragePermissionError when refused)
    naming the dataset URI first, then the file."""
    if isinstance(exc, FileNotFoundError):
        return exc
    cls = StoragePermissionError if isinstance(exc, PermissionError) else StorageError
    return cls(f"{uri}: {exc.strerror or exc} ({path})")


class LocalStore(ObjectStore):
    """Files under a local directory.

    ``put_if_not_exists`` writes a temporary file and ``os.link``s it to the
    final name: the link fails with EEXIST when the name is taken, so an
    existing manifest is never overwritten. File systems without hard links
    fall back to ``O_CREAT | O_EXCL`` (atomic creation, non-atomic content).

    Files longer than one buffer (8 MiB, ``storage.direct.BUFFER_BYTES``: data files) are
    written with direct I/O when ``direct_io`` allows it (storage option ``direct_io``:
    ``auto``, the default, on ext4/xfs/btrfs; ``true``; ``false``).
    """

    writes_version_hint = True

    def __init__(self, uri: str, root: str, *, direct_io: str = "auto") -> None:
        if direct_io not in MODES:
            raise InvalidInputError(f"storage option direct_io must be one of {', '.join(MODES)}, not {direct_io!r}")
        self.uri = uri
        self.root = os.path.abspath(root)
        self.direct_io = direct_io
        self._direct: bool | None = None  # decided at the first write

    def _abs(self, path: str) -> str:
        return os.path.join(self.root, path)

    def read(self, path: str) -> bytes:
        try:
            with open(self._abs(path), "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise _translate(exc, self.uri, path) from exc

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            with open(self._abs(path), "rb") as handle:
                handle.seek(offset)
                return handle.read(length)
        except OSError as exc:
            raise _translate(exc, self.uri, path) from exc

    def open_input(self, path: str) -> pa.NativeFile:
        try:
            return pa.OSFile(self._abs(path), "rb")
        except FileNotFoundError:
            raise
        except OSError as exc:  # pyarrow raises FileNotFoundError for missing files
            raise _translate(exc, self.uri, path) from exc

    def size(self, path: str) -> int:
        try:
            return os.stat(self._abs(path)).st_size
        except OSError as exc:
            raise _translate(exc, self.uri, path) from exc

    def write(self, path: str, data: bytes) -> None:
        with self.open_output(path) as handle:
            handle.write(data)

    @contextlib.contextmanager
    def open_output(self, path: str) -> Iterator[BinaryIO]:
        final = self._abs(path)
        temp = _temp_name(final)
        try:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            if self._direct is None:
                self._direct = use_direct_io(self.direct_io, self.root)
            if self._direct:
                handle = DirectFileWriter(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644),
                                          direct_after=DIRECT_AFTER_BYTES)
            else:
                handle = open(temp, "wb")
        except OSError as exc:
            raise _translate(exc, self.uri, path) from exc
        try:
            with handle:
                yield handle
            os.replace(temp, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def put_if_not_exists(self, path: str, data: bytes) -> bool:
        final = self._abs(path)
        temp = _temp_name(final)
        try:
            os.makedirs(os.path.dirname(final), exist_ok=True)
            with open(temp, "wb") as handle:
                handle.write(data)
            try:
                os.link(temp, final)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                return self._create_exclusive(final, data)
            return True
        except OSError as exc:
            raise _translate(exc, self.uri, path) from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp)

    @staticmethod
    def _create_exclusive(final: str, data: bytes) -> bool:
        try:
            fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return True

    def exists(self, path: str) -> bool:
        return os.path.exists(self._abs(path))

    def write_hint(self, path: str, data: bytes) -> None:
        """Overwrite a small advisory file in place (no temp file: readers tolerate garbage)."""
        try:
            fd = os.open(self._abs(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            raise _translate(exc, self.uri, path) from exc

    def list(self, prefix: str) -> list[FileInfo]:
        base = self._abs(prefix)
        found: list[FileInfo] = []
        stack = [base]
        while stack:
            directory = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _translate(exc, self.uri, prefix) from exc
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                found.append(FileInfo(os.path.relpath(entry.path, self.root), stat.st_size, stat.st_mtime))
        return found

    def list_names(self, prefix: str) -> builtins.list[str]:
        """Names of the files directly inside directory ``prefix`` (cheap: no stat calls)."""
        try:
            with os.scandir(self._abs(prefix)) as entries:
                return [entry.name for entry in entries if not entry.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _translate(exc, self.uri, prefix) from exc

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._abs(path))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _translate(exc, self.uri, path) from exc
