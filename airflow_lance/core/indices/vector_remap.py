"""Remapping IVF_FLAT, IVF_PQ and IVF_SQ indices when compaction moves rows, as pylance 14 does.

pylance 14 (without ``defer_index_remap``) writes the remapped index under a new uuid with the
same two files: ``index.idx`` unchanged (centroids, k-means loss, metadata), and
``auxiliary.idx`` with every partition's rows filtered (rows deleted before the compaction
leave) and their ``_rowid`` mapped old -> new, in the old order; the ``IVF`` buffer gets the
new partition offsets and lengths, the PQ codebook and the schema metadata are kept (PQ codes
are re-transposed per partition, 4-bit ones as packed bytes, see :mod:`.pq`; SQ codes are rows
like the others). Details and ``index_version`` stay.

On datasets with stable row ids the vector index holds stable row ids, which compaction keeps:
pylance 14 leaves the index files (and uuid) alone and only moves its fragment bitmap.

Only indices whose details are IVF_FLAT/IVF_PQ, or SQ alone (not HNSW, whose graphs of partition
positions would need rebuilding, nor RaBitQ, whose codes are laid out in blocks of their own),
``index_version`` 1 and exactly these two files are remapped here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.unknown_fields import UnknownFieldSet

from airflow_lance.core._proto import index_pb2, table_pb2
from airflow_lance.core.arrays import empty_table, sorted_unique
from airflow_lance.core.bases import index_file_location
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.indices import ivf, pq
from airflow_lance.core.indices.files import IndexFileData
from airflow_lance.core.indices.metadata import index_uuid
from airflow_lance.core.storage import ObjectStore

if TYPE_CHECKING:
    from airflow_lance.core.indices.remap import AddressMap

FILES = frozenset((ivf.INDEX_NAME, ivf.AUXILIARY_NAME))


#: The ``VectorIndexDetails`` field of the scalar quantizer, which this proto does not declare
#: (pylance 14; HNSW is field 3, RaBitQ field 6: not remapped here).
SQ_FIELD = 5


def _quantizer(index: table_pb2.IndexMetadata) -> str | None:
    """"flat", "pq" or "sq" for an IVF index of that kind alone (no HNSW, no RaBitQ), ``index_version``
    1 and the two files as pylance 14 writes them; else None."""
    if index.index_details.type_url != ivf.TYPE_URL or index.index_version != ivf.INDEX_VERSION:
        return None
    if {f.path for f in index.files} != FILES:
        return None
    details = index_pb2.VectorIndexDetails()
    try:
        details.ParseFromString(index.index_details.value)
    except Exception:  # protobuf's DecodeError: not ours to touch
        return None
    unknown = {field.field_number for field in UnknownFieldSet(details)}
    known = details.WhichOneof("compression")
    if known in ("flat", "pq"):
        return known if not unknown else None
    return "sq" if unknown == {SQ_FIELD} else None


def is_flat_or_pq(index: table_pb2.IndexMetadata) -> bool:
    """Whether ``index`` is an IVF_FLAT/IVF_PQ index this package also builds and optimizes."""
    return _quantizer(index) in ("flat", "pq")


def can_remap(index: table_pb2.IndexMetadata) -> bool:
    """Whether ``index`` is an IVF_FLAT, IVF_PQ or IVF_SQ index (files as pylance 14 writes them),
    whose partitions' rows this module remaps."""
    return _quantizer(index) is not None


def _reader(store: ObjectStore, index: table_pb2.IndexMetadata, name: str) -> LanceFileReader:
    source, path = index_file_location(store, index, index_uuid(index), name)
    return LanceFileReader(source.open_input(path), path=path)


def _file(reader: LanceFileReader, rows: bool = True) -> tuple[pa.Table, dict[str, str], list[bytes]]:
    """(rows (none unless ``rows``), schema metadata, global buffers 1..) of an index file."""
    metadata = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in (reader.schema.metadata or {}).items()}
    buffers = [reader.global_buffer(i) for i in range(1, reader._footer.num_global_buffers)]
    schema = reader.schema.to_arrow() if hasattr(reader.schema, "to_arrow") else None
    if rows or schema is None:
        return reader.read(), metadata, buffers
    return empty_table(schema), metadata, buffers


def _untranspose(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pq.transpose_partitions`: stored codes -> row-major codes (n x m)."""
    m = codes.shape[1]
    flat = codes.reshape(-1)
    out = np.empty_like(codes)
    start = 0
    for length in lengths.tolist():  # one block per partition
        end = start + length
        out[start:end] = flat[start * m:end * m].reshape(m, length).T
        start = end
    return out


def fragments_held(store: ObjectStore, index: table_pb2.IndexMetadata) -> frozenset[int]:
    """The fragments the IVF index ``index`` (row addresses) holds rows of, its bitmap aside (reads
    only the ``_rowid`` column)."""
    reader = _reader(store, index, ivf.AUXILIARY_NAME)
    row_ids = reader.read(reader.schema.project(["_rowid"])).column("_rowid").to_numpy()
    return frozenset(sorted_unique(row_ids >> np.uint64(32)).tolist())


def remap_files(store: ObjectStore, index: table_pb2.IndexMetadata, mapping: AddressMap
                ) -> dict[str, IndexFileData]:
    """The files of the IVF index ``index`` with its row addresses remapped."""
    table, metadata, buffers = _file(_reader(store, index, ivf.AUXILIARY_NAME))
    ivf_at = int(metadata.get("lance:ivf", "1"))
    message = index_pb2.IVF()
    message.ParseFromString(buffers[ivf_at - 1])
    lengths = np.asarray(message.lengths, np.int64)
    if int(lengths.sum()) != table.num_rows:
        raise CorruptFileError(f"{index_uuid(index)}/{ivf.AUXILIARY_NAME}",
                               f"partitions hold {int(lengths.sum())} rows, the file {table.num_rows}")
    partition = np.repeat(np.arange(lengths.size), lengths)
    keep, ids = mapping.apply(table.column("_rowid").to_numpy())
    new_lengths = np.bincount(partition[keep], minlength=lengths.size).astype(np.int64)
    mask = pa.array(keep)
    columns = [pa.array(ids, pa.uint64())]
    for name in table.schema.names[1:]:
        column = table.column(name).combine_chunks()
        if name == "__pq_code":
            m = column.type.list_size
            codes = pc.list_flatten(column).to_numpy(zero_copy_only=False).reshape(-1, m)
            codes = pq.transpose_partitions(_untranspose(codes, lengths)[keep], new_lengths)
            column = pa.FixedSizeListArray.from_arrays(pa.array(codes.reshape(-1), column.type.value_type), m)
        else:
            column = column.filter(mask)
        columns.append(column)
    auxiliary = pa.Table.from_arrays(columns, schema=table.schema.remove_metadata())
    del message.offsets[:]
    del message.lengths[:]
    message.lengths.extend(new_lengths.tolist())
    message.offsets.extend(np.concatenate([[0], np.cumsum(new_lengths)[:-1]]).tolist())
    buffers[ivf_at - 1] = message.SerializeToString()
    marker, index_metadata, index_buffers = _file(_reader(store, index, ivf.INDEX_NAME))
    return {
        ivf.AUXILIARY_NAME: IndexFileData(auxiliary, metadata, buffers),
        ivf.INDEX_NAME: IndexFileData(marker.replace_schema_metadata(None), index_metadata, index_buffers),
    }
