"""pylance's NGRAM index (``ngram_postings.lance``): for each n-gram token (u32; the null token 0
for null values), a posting list of the row addresses holding it, as a portable 64-bit roaring
bitmap (CRoaring's ``Roaring64Map``: u64 count, then a u32 high key and a 32-bit bitmap each).

Compaction remaps the posting lists as pylance 14 does: every token is kept, also one whose rows
are all gone (an empty posting list).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyroaring

from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.indices.files import IndexFileData

TYPE_URL = "/lance.table.NGramIndexDetails"
POSTINGS_NAME = "ngram_postings.lance"


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
        postings.append(pyroaring.BitMap64(np.sort(moved).tolist()).serialize())
    out = table.set_column(1, table.schema.field(1), pa.array(postings, table.schema.field(1).type))
    metadata = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in (reader.schema.metadata or {}).items()} if reader.schema is not None else {}
    return {POSTINGS_NAME: IndexFileData(out, metadata)}
