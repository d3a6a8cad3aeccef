"""pylance's NGRAM index (``ngram_postings.lance``): for each n-gram token (u32; the null token 0
for null values), a posting list of the row addresses holding it, as a portable 64-bit roaring
bitmap (CRoaring's ``Roaring64Map``: u64 count, then a u32 high key and a 32-bit bitmap each).

Compaction remaps the posting lists as pylance 14 does: every token is kept, also one whose rows
are all gone (an empty posting list).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyroaring

from airflow_lance.core.arrays import uint32_array
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.indices.files import IndexFileData

TYPE_URL = "/lance.table.NGramIndexDetails"
POSTINGS_NAME = "ngram_postings.lance"


def serialize_treemap(addrs: np.ndarray) -> bytes:
    """The portable 64-bit roaring bitmap of sorted row addresses (a 32-bit bitmap per fragment),
    built from numpy arrays (``pyroaring.BitMap64`` takes Python ints one by one)."""
    high = (addrs >> np.uint64(32)).astype(np.uint32)
    cuts = np.flatnonzero(np.diff(high)) + 1
    starts = np.concatenate([[0], cuts]).astype(np.int64) if len(addrs) else np.zeros(0, np.int64)
    ends = np.concatenate([cuts, [len(addrs)]]).astype(np.int64) if len(addrs) else np.zeros(0, np.int64)
    parts = [struct.pack("<Q", len(starts))]
    for start, end in zip(starts.tolist(), ends.tolist()):  # one per fragment
        low = uint32_array((addrs[start:end] & np.uint64(0xFFFFFFFF)).astype(np.uint32))
        parts += [struct.pack("<I", int(high[start])), pyroaring.BitMap(low).serialize()]
    return b"".join(parts)


def remap(reader: LanceFileReader, apply) -> dict[str, IndexFileData]:
    """The postings file with each row address moved by ``apply(addrs) -> (kept mask, new addrs)``."""
    table = reader.read()
    if table.schema.names != ["tokens", "posting_list"]:
        raise CorruptFileError(reader.path, f"unexpected NGRAM postings schema {table.schema}")
    postings = []
    for data in table.column("posting_list").to_pylist():  # one per token (the vocabulary, not rows)
        try:
            addrs = np.asarray(pyroaring.BitMap64.deserialize(data).to_array(), dtype=np.uint64)
        except (ValueError, OverflowError) as exc:
            raise CorruptFileError(reader.path, f"posting list is not a 64-bit roaring bitmap: {exc}") from exc
        _, moved = apply(addrs)
        postings.append(serialize_treemap(np.sort(moved)))
    out = table.set_column(1, table.schema.field(1), pa.array(postings, table.schema.field(1).type))
    metadata = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in (reader.schema.metadata or {}).items()} if reader.schema is not None else {}
    return {POSTINGS_NAME: IndexFileData(out, metadata)}
