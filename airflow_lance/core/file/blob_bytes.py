"""Blob values: bytes stored elsewhere in a data file, found by (file position, size) descriptions.

Shared by the 2.0 reader (blob columns are pages of packed descriptions) and the 2.1 reader (blob
pages). Values close together are fetched with one read, scattered ones with one read each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.file.v21.util import exclusive_cumsum, take_ranges

if TYPE_CHECKING:  # pragma: no cover
    from airflow_lance.core.file.reader import LanceFileReader


def gather_blobs(reader: LanceFileReader, position: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The values ``size[i]`` bytes at ``position[i]`` of the file, back to back: (bytes, offsets)."""
    position = np.asarray(position, dtype=np.uint64)
    size = np.asarray(size, dtype=np.uint64)
    present = np.flatnonzero(size > 0)
    data = np.zeros(0, dtype=np.uint8)
    starts = np.zeros(len(size), dtype=np.int64)
    if len(present):
        ends = position[present] + size[present]
        if bool(np.any(ends < position[present])) or int(ends.max()) > reader.file_size:
            raise CorruptFileError(reader.path, "blob outside the file")
        low, high = int(position[present].min()), int(ends.max())
        if high - low <= 2 * int(size.sum()) + (1 << 20):
            data = np.frombuffer(reader._read_range(low, high - low), dtype=np.uint8)
            starts[present] = position[present].astype(np.int64) - low
        else:  # scattered blobs: one read each
            pieces = [np.frombuffer(reader._read_range(int(p), int(n)), dtype=np.uint8)
                      for p, n in zip(position[present].tolist(), size[present].tolist())]
            data = np.concatenate(pieces)
            starts[present] = exclusive_cumsum(size[present].astype(np.int64))[:-1]
    lengths = size.astype(np.int64)
    return take_ranges(data, starts, lengths), exclusive_cumsum(lengths)
