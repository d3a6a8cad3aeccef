"""Blob values: bytes stored elsewhere in a data file, found by (file position, size) descriptions.

Shared by the 2.0 reader (blob columns are pages of packed descriptions), the 2.1 reader (blob
pages) and blob v2 columns (inline values in the data file, packed values in sidecar files).
Values close together are fetched with one read, scattered ones with one read each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.file.v21.util import exclusive_cumsum, take_ranges

if TYPE_CHECKING:  # pragma: no cover
    from airflow_lance.core.file.reader import LanceFileReader


def gather_blobs(reader: LanceFileReader, position: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values ``size[i]`` bytes at ``position[i]`` of the file, back to back: (bytes, offsets)."""
    return gather_ranges(lambda offset, length: reader._read_range(offset, length), reader.file_size,
                         reader.path, position, size)


def gather_ranges(read_range: Callable[[int, int], Any], limit: int | None, path: str, position: np.ndarray,
                  size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values ``size[i]`` bytes at ``position[i]`` of an object read with ``read_range(offset,
    length)`` (of ``limit`` bytes, if known), back to back: (bytes, offsets)."""
    position = np.asarray(position, dtype=np.uint64)
    size = np.asarray(size, dtype=np.uint64)
    present = np.flatnonzero(size > 0)
    data = np.zeros(0, dtype=np.uint8)
    starts = np.zeros(len(size), dtype=np.int64)
    if len(present):
        ends = position[present] + size[present]
        if bool(np.any(ends < position[present])) or (limit is not None and int(ends.max()) > limit):
            raise CorruptFileError(path, "blob outside the file")
        low, high = int(position[present].min()), int(ends.max())
        if high - low <= 2 * int(size.sum()) + (1 << 20):
            data = _read_exactly(read_range, path, low, high - low)
            starts[present] = position[present].astype(np.int64) - low
        else:  # scattered blobs: one read each
            pieces = [_read_exactly(read_range, path, int(p), int(n))
                      for p, n in zip(position[present].tolist(), size[present].tolist())]
            data = np.concatenate(pieces)
            starts[present] = exclusive_cumsum(size[present].astype(np.int64))[:-1]
    lengths = size.astype(np.int64)
    return take_ranges(data, starts, lengths), exclusive_cumsum(lengths)


def _read_exactly(read_range: Callable[[int, int], Any], path: str, offset: int, length: int) -> np.ndarray:
    data = np.frombuffer(read_range(offset, length), dtype=np.uint8)
    if len(data) != length:
        raise CorruptFileError(path, f"blob outside the file: wanted {length} bytes at {offset}, got {len(data)}")
    return data
