"""``take_blobs``: blob values of selected rows as read-only binary files (pylance's name and shape).

Works on blob v2 columns (pylance 14's ``lance.blob.v2``: stored values, and references to external
objects, read from the referenced range when read) and on ``lance-encoding:blob`` columns of 2.0/2.1
files. One element per selected row; a null value gives None, an empty one a file of size 0.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_lance.core.errors import ColumnNotFoundError, InvalidInputError

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset
    from airflow_lance.core.storage import ObjectStore


class BlobFile(io.RawIOBase):
    """A blob value as a seekable, read-only binary file (pylance's ``BlobFile``)."""

    def __init__(self, read: Callable[[int, int], bytes], size: int) -> None:
        super().__init__()
        self._read = read
        self._size = size
        self._position = 0

    @classmethod
    def of_bytes(cls, data: bytes) -> BlobFile:
        view = memoryview(data)
        return cls(lambda offset, length: bytes(view[offset:offset + length]), len(data))

    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence}")
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._position = base + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        length = max(0, min(len(view), self._size - self._position))
        data = self.read_range(self._position, length) if length else b""
        view[:len(data)] = data
        self._position += len(data)
        return len(data)

    def read_range(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer at the end), without moving the position."""
        if offset < 0 or length < 0:
            raise ValueError("offset and length must not be negative")
        length = max(0, min(length, self._size - offset))
        return self._read(offset, length) if length else b""

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return [self.read_range(offset, length) for offset, length in ranges]


def _external(uri: str, position: int | None, size: int | None, store: ObjectStore,
              opened_stores: dict[str, ObjectStore]) -> BlobFile:
    """A file over (a range of) the object at ``uri``, opened with the dataset's storage options
    (one store per directory, kept in ``opened_stores``)."""
    from airflow_lance.core.storage import open_store

    parent, _, name = uri.rstrip("/").rpartition("/")
    if not name:
        raise InvalidInputError(f"external blob uri {uri!r} names no object")
    opened = opened_stores.get(parent)
    if opened is None:
        opened = opened_stores[parent] = open_store(parent, store.storage_options)
    start = position or 0
    length = size if size else opened.size(name) - start
    return BlobFile(lambda offset, count: opened.read_range(name, start + offset, count), length)


def take_blobs(dataset: LanceDataset, blob_column: str, ids: Any = None, addresses: Any = None,
               indices: Any = None) -> list[BlobFile | None]:
    """The ``blob_column`` values of the rows selected by exactly one of ``ids`` (row ids: stable
    ones, else addresses), ``addresses`` or ``indices`` (positions among the live rows)."""
    from airflow_lance.core.scanner import take, take_addresses, take_rows

    chosen = [name for name, value in (("ids", ids), ("addresses", addresses), ("indices", indices))
              if value is not None]
    if len(chosen) != 1:
        raise InvalidInputError(f"take_blobs needs exactly one of ids, addresses and indices, got {chosen or 'none'}")
    field = dataset.schema.field(blob_column) if blob_column in dataset.schema.names else None
    if field is None:
        raise ColumnNotFoundError(f"no column {blob_column!r} in the dataset")
    blob_v2 = (field.metadata or {}).get(b"ARROW:extension:name") == b"lance.blob.v2"
    if not blob_v2 and b"lance-encoding:blob" not in (field.metadata or {}):
        raise InvalidInputError(f"column {blob_column!r} is not a blob column")
    if indices is not None:
        table = take(dataset, indices, [blob_column])
    elif ids is not None:
        table = take_rows(dataset, ids, [blob_column])
    else:
        table = take_addresses(dataset, addresses, [blob_column])
    values = table.column(blob_column).combine_chunks()
    if not blob_v2:
        return [None if value is None else BlobFile.of_bytes(value) for value in values.to_pylist()]
    out: list[BlobFile | None] = []
    opened_stores: dict[str, ObjectStore] = {}
    for value in values.to_pylist():  # one file object per selected row: a loop over the selection
        if value is None:
            out.append(None)
        elif value["uri"] is not None:
            out.append(_external(value["uri"], value.get("position"), value.get("size"), dataset.store,
                                 opened_stores))
        else:
            out.append(BlobFile.of_bytes(value["data"]))
    return out

