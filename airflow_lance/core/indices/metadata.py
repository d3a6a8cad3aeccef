"""The manifest's index section as ``IndexMetadata`` messages, and what pylance derives from them.

An index is a directory ``_indices/{uuid}/`` plus one ``IndexMetadata`` in the manifest's
``IndexSection``: uuid, indexed field ids, name, the dataset version it was built on, the
covered fragments (a portable 32-bit roaring bitmap), ``index_details`` (an ``Any`` whose type
URL names the index type, e.g. ``/lance.table.BTreeIndexDetails`` with an empty value),
``index_version``, ``created_at`` (ms since the epoch) and the index's files with their sizes.
Several entries may share a name (delta indices): pylance calls them segments of one index.
"""

from __future__ import annotations

import uuid as uuid_lib

import pyroaring

from airflow_lance.core._proto import index_pb2, table_pb2
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.manifest import ManifestFile

#: ``index_details`` type URL -> the type name pylance 14's ``list_indices`` / ``describe_indices`` show.
TYPE_NAMES = {
    "/lance.table.BTreeIndexDetails": "BTree",
    "/lance.table.BitmapIndexDetails": "Bitmap",
    "/lance.table.LabelListIndexDetails": "LabelList",
    "/lance.table.InvertedIndexDetails": "Inverted",
    "/lance.table.NGramIndexDetails": "NGram",
    "/lance.table.ZoneMapIndexDetails": "ZoneMap",
    "/lance.table.BloomFilterIndexDetails": "BloomFilter",
    "/lance.index.pb.BloomFilterIndexDetails": "BloomFilter",
    "/lance.table.VectorIndexDetails": "Vector",
    "/lance.index.pb.VectorIndexDetails": "Vector",
    "/lance.table.FragmentReuseIndexDetails": "FragmentReuse",
    "/lance.table.MemWalIndexDetails": "MemWal",
}

VECTOR_DETAILS_URL = "/lance.index.pb.VectorIndexDetails"

#: Index types that hold stable row ids (not row addresses) on datasets with stable row ids (pylance 14):
#: compaction leaves their files alone there and moves only their fragment bitmap, whatever their
#: kind (full-text search, every IVF variant with HNSW or RaBitQ included), so it may rewrite the
#: fragments they cover even where it could not remap them (:func:`..remap.can_remap`).
ROW_ID_TYPES = ("/lance.table.BitmapIndexDetails", "/lance.table.LabelListIndexDetails",
                "/lance.table.NGramIndexDetails", "/lance.table.InvertedIndexDetails",
                "/lance.index.pb.VectorIndexDetails")

#: Index types compaction leaves as they are, as pylance 14 does: per-zone summaries of fragments
#: (ZONEMAP, BLOOMFILTER) that a rewrite makes stale, never wrong. Their fragment bitmap stays too,
#: except with stable row ids, where the rewritten fragments leave it (pylance 14 again).
UNTOUCHED_BY_REWRITE = ("/lance.table.ZoneMapIndexDetails", "/lance.index.pb.BloomFilterIndexDetails",
                        "/lance.table.BloomFilterIndexDetails")

#: System indices pylance keeps out of ``list_indices``/``describe_indices``.
SYSTEM_INDEX_NAMES = frozenset({"__lance_frag_reuse", "__lance_mem_wal"})


def type_name(type_url: str) -> str:
    """pylance's name of an index type, from its details' type URL."""
    if type_url in TYPE_NAMES:
        return TYPE_NAMES[type_url]
    short = type_url.rsplit(".", 1)[-1]
    return short.removesuffix("IndexDetails")


def vector_details(index: table_pb2.IndexMetadata) -> index_pb2.VectorIndexDetails | None:
    """The decoded ``/lance.index.pb.VectorIndexDetails`` of a vector index, else None."""
    if index.index_details.type_url != VECTOR_DETAILS_URL:
        return None
    details = index_pb2.VectorIndexDetails()
    try:
        details.ParseFromString(index.index_details.value)
    except Exception as exc:  # protobuf's DecodeError
        raise CorruptFileError("manifest", f"vector index details do not decode: {exc}") from exc
    return details


def index_type_name(index: table_pb2.IndexMetadata) -> str:
    """pylance 14's type of an index entry: ``IVF_FLAT``/``IVF_PQ``/... for vector indices with
    details, else the name of its details' type (:func:`type_name`)."""
    details = vector_details(index)
    if details is not None:
        compression = details.WhichOneof("compression")
        if compression is not None:
            return {"flat": "IVF_FLAT", "pq": "IVF_PQ"}.get(compression, compression.upper())
    return type_name(index.index_details.type_url)


def parse_section(manifest_file: ManifestFile) -> list[table_pb2.IndexMetadata]:
    """Every ``IndexMetadata`` of a version (system indices included), in manifest order."""
    if not manifest_file.index_section:
        return []
    section = table_pb2.IndexSection()
    try:
        section.ParseFromString(manifest_file.index_section)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise CorruptFileError(manifest_file.path, f"index section does not decode: {exc}") from exc
    return list(section.indices)


def user_indices(manifest_file: ManifestFile) -> list[table_pb2.IndexMetadata]:
    return [i for i in parse_section(manifest_file) if i.name not in SYSTEM_INDEX_NAMES]


def index_uuid(index: table_pb2.IndexMetadata) -> str:
    return str(uuid_lib.UUID(bytes=index.uuid.uuid))


def fragment_bitmap(index: table_pb2.IndexMetadata) -> pyroaring.BitMap:
    return pyroaring.BitMap.deserialize(index.fragment_bitmap) if index.fragment_bitmap else pyroaring.BitMap()
