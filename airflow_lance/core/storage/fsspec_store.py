"""Object store over any fsspec filesystem.

Commits need an atomic put-if-not-exists. The cloud backends (:mod:`.s3`,
:mod:`.gcs`, :mod:`.azure`) subclass this store and implement it with the
service's conditional write. This generic class provides it only for the
in-process ``memory://`` filesystem (under a lock). Any other protocol refuses
to commit with :class:`UnsupportedFeatureError`, unless the user opted in with
``allow_unsafe_commit`` (a warning is logged), rather than risk silently
overwriting a concurrent writer's manifest.

Stores keep only the URI and the storage options and create the filesystem
lazily, so they pickle (Spark executors receive them) and survive ``fork``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO, TypeVar

import fsspec
import pyarrow as pa

from airflow_lance.core.errors import (
    InvalidInputError,
    LanceError,
    StorageError,
    StoragePermissionError,
    UnsupportedFeatureError,
)
from airflow_lance.core.storage import options as opts
from airflow_lance.core.storage.base import FileInfo, ObjectStore

log = logging.getLogger(__name__)

_MEMORY_LOCK = threading.Lock()
_T = TypeVar("_T")
#: Read-ahead for random-access data file reads (Lance pages are small and mostly read in order).
READ_BLOCK_SIZE = 4 * 2**20


def _mtime(info: dict[str, Any]) -> float:
    value = info.get("mtime", info.get("LastModified", info.get("last_modified", info.get("updated", 0.0))))
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _is_permission_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) says the request was refused: PermissionError, HTTP 401/403."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PermissionError):
            return True
        status = getattr(current, "status_code", None) or getattr(current, "code", None)
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", status)
        if status in (401, 403):
            return True
        current = current.__cause__ or current.__context__
    return False


def unsafe_commit_message(uri: str, protocol: str) -> str:
    """The refusal text: names both ways out."""
    return (
        f"cannot commit to {uri!r}: fsspec protocol {protocol!r} has no atomic put-if-not-exists, so concurrent "
        "writers could silently overwrite each other's versions. Either use a store with conditional writes "
        "(a local path, s3://, gs://, az://), commit through an external manifest store "
        "(s3+ddb://bucket/path?ddbTableName=TABLE for S3-compatible storage), or opt in explicitly with "
        "storage option allow_unsafe_commit='true' if only one writer can ever commit (a warning is logged)"
    )


class FsspecStore(ObjectStore):
    """Files under ``root`` of an fsspec filesystem.

    ``target`` is the fsspec URL of the dataset root (for ``s3+ddb://`` it is
    the ``s3://`` URL); ``options`` are the user's storage options.
    """

    #: Whether this backend implements ``_create`` with a server-side condition.
    conditional_put = False

    def __init__(self, uri: str, target: str, options: Mapping[str, Any] | None = None) -> None:
        self.uri = uri
        self._target = target
        self._options = dict(options or {})
        self._secrets = opts.secret_values(self._options)
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root = ""
        self._pid = 0
        self._warned_unsafe = False
        self.unsafe_commit = opts.is_true(self._options.get("allow_unsafe_commit", "false"))
        self._validate()

    # -- construction, pickling -------------------------------------------------
    def _validate(self) -> None:
        """Check the URI and options eagerly (subclasses translate the options here)."""
        protocol = self._target_protocol()
        try:
            fsspec.get_filesystem_class(protocol)
        except ImportError as exc:
            raise UnsupportedFeatureError(
                f"{protocol}:// needs an fsspec backend that is not installed: {exc}"
            ) from None
        except ValueError:
            raise InvalidInputError(f"unknown protocol {protocol!r} in {self.uri!r}") from None
        if protocol != "memory":  # like a local path, memory:// ignores the cloud stores' options
            opts.check_options_apply(self.uri, protocol, self._options)

    def _target_protocol(self) -> str:
        return fsspec.core.split_protocol(self._target)[0] or "file"

    def _make_fs(self) -> tuple[fsspec.AbstractFileSystem, str]:
        """Create the filesystem and the root path inside it (pylance's options are not fsspec's)."""
        return fsspec.core.url_to_fs(self._target, **opts.fsspec_passthrough(self._options))

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None or self._pid != os.getpid():
            fs, root = self._call("", self._make_fs)
            self._fs, self._root, self._pid = fs, root.rstrip("/"), os.getpid()
        return self._fs

    @property
    def root(self) -> str:
        _ = self.fs
        return self._root

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_fs=None, _root="", _pid=0)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"  # never the options: they hold credentials

    # -- error translation --------------------------------------------------------
    def _backend_errors(self) -> tuple[type[BaseException], ...]:
        """Exception classes of the backend's SDK that mean "the request failed"."""
        return (OSError, ValueError)

    def _error(self, path: str, exc: BaseException) -> StorageError:
        """The dataset URI, the cause and the file: a :class:`StoragePermissionError` when the store
        refused the request (wrong or missing credentials, no permission)."""
        where = f" ({path})" if path else ""
        cause = self._cause(exc).rstrip(".")
        if _is_permission_error(exc):
            message = (f"{self.uri}: access denied{where}: {cause}. "
                       f"Check the credentials in the storage options ({self._credential_hint()})")
            return StoragePermissionError(opts.redact(message, self._secrets))
        return StorageError(opts.redact(f"{self.uri}: {cause}{where}", self._secrets))

    def _cause(self, exc: BaseException) -> str:
        """What went wrong, in the backend's words."""
        return f"{type(exc).__name__}: {exc}"

    def _credential_hint(self) -> str:
        """The storage options that hold this store's credentials (for messages)."""
        return "the fsspec credential arguments"

    def _leaks(self, exc: BaseException) -> bool:
        text = str(exc)
        return any(secret in text for secret in self._secrets)

    def _call(self, path: str, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return func(*args, **kwargs)
        except (FileNotFoundError, FileExistsError, LanceError):
            raise
        except Exception as exc:
            if not isinstance(exc, self._backend_errors()):
                raise
            error = self._error(path, exc)
            # Keep the backend's exception as the cause unless its text carries a credential.
            raise error from (None if self._leaks(exc) else exc)

    def _abs(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    # -- reads --------------------------------------------------------------------
    def read(self, path: str) -> bytes:
        return self._call(path, self.fs.cat_file, self._abs(path))

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return self._call(path, self.fs.cat_file, self._abs(path), start=offset, end=offset + length)

    def open_input(self, path: str) -> pa.NativeFile:
        handle = self._call(
            path, self.fs.open, self._abs(path), "rb", block_size=READ_BLOCK_SIZE, cache_type="readahead"
        )
        return pa.PythonFile(handle, mode="r")

    def size(self, path: str) -> int:
        return int(self._call(path, self.fs.size, self._abs(path)))

    def exists(self, path: str) -> bool:
        try:
            self.size(path)
        except FileNotFoundError:
            return False
        return True

    # -- writes -------------------------------------------------------------------
    def write(self, path: str, data: bytes) -> None:
        self._call(path, self.fs.pipe_file, self._abs(path), data)

    @contextlib.contextmanager
    def open_output(self, path: str) -> Iterator[BinaryIO]:
        """Object stores publish an object only when its upload completes; on error it is abandoned."""
        if self._is_memory():
            with self._memory_output(path) as handle:
                yield handle
            return
        handle = self._call(path, self.fs.open, self._abs(path), "wb")
        try:
            yield handle
        except BaseException:
            with contextlib.suppress(Exception):
                handle.discard()  # s3fs: abort the multipart upload
            handle.closed = True  # closing would upload what was buffered
            raise
        self._call(path, handle.close)

    @contextlib.contextmanager
    def _memory_output(self, path: str) -> Iterator[BinaryIO]:
        """memory:// stores a file when it is closed, even on error: write a temp name, move on success."""
        target = self._abs(path)
        temp = f"{target}.tmp-{uuid.uuid4().hex}"
        try:
            with self.fs.open(temp, "wb") as handle:
                yield handle
            self.fs.mv(temp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(temp)

    def copy(self, source: str, target: str) -> None:
        self._call(source, self.fs.copy, self._abs(source), self._abs(target))

    def ensure_committable(self) -> None:
        """Decided from the URI alone: no connection is made (an ftp:// or hdfs:// filesystem connects
        when it is created)."""
        if self.conditional_put or self.unsafe_commit or self._target_protocol() == "memory":
            return
        raise UnsupportedFeatureError(unsafe_commit_message(self.uri, self._target_protocol()))

    def put_if_not_exists(self, path: str, data: bytes) -> bool:
        if self._is_memory():
            with _MEMORY_LOCK:
                if self.fs.exists(self._abs(path)):
                    return False
                self.fs.pipe_file(self._abs(path), data)
                return True
        if self.conditional_put:
            return self._conditional_put(path, data)
        self.ensure_committable()
        return self._unsafe_put(path, data)

    def _conditional_put(self, path: str, data: bytes) -> bool:
        try:
            self._call(path, self._create, self._abs(path), data)
            return True
        except FileExistsError:
            # A retried request whose first attempt landed also reports "exists": is it ours?
            try:
                return self.read(path) == data
            except FileNotFoundError:
                return False

    def _create(self, abs_path: str, data: bytes) -> None:
        """Create ``abs_path`` with a server-side condition; FileExistsError if it exists."""
        raise NotImplementedError

    def _unsafe_put(self, path: str, data: bytes) -> bool:
        if not self._warned_unsafe:
            log.warning(
                "committing to %s WITHOUT an atomic put-if-not-exists (allow_unsafe_commit): a concurrent "
                "writer can silently overwrite this version", self.uri,
            )
            self._warned_unsafe = True
        if self.exists(path):
            return False
        self.write(path, data)
        return True

    # -- listing, deleting ----------------------------------------------------------
    def list(self, prefix: str) -> list[FileInfo]:
        base = self._abs(prefix)
        try:
            found = self._call(prefix, self.fs.find, base, detail=True)
        except FileNotFoundError:
            return []
        strip = len(self.root) + 1
        return [
            FileInfo(name[strip:], int(info.get("size") or 0), _mtime(info))
            for name, info in found.items()
            if info.get("type", "file") != "directory"
        ]

    def delete(self, path: str) -> None:
        try:
            self._call(path, self.fs.rm_file, self._abs(path))
        except FileNotFoundError:
            pass

    # -- helpers ------------------------------------------------------------------------
    def _is_memory(self) -> bool:
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        return "memory" in protocols
