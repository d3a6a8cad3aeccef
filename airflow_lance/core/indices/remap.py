"""Remapping scalar indices when compaction moves rows (pylance 14, without ``defer_index_remap``).

pylance 14 compacts an indexed dataset in two versions: a ``ReserveFragments`` (ids for the new
fragments), then a ``Rewrite`` whose new fragments carry those ids and whose ``rewritten_indices``
hold, per index covering a rewritten fragment, ``RewrittenIndex{old_id, new_id, new_index_details,
new_index_version, new_index_files}``. The new index (``_indices/{new_id}/``) holds the same files
with every row address ``old -> new`` (rows deleted before the compaction are dropped); applying
the Rewrite gives the manifest entry the new uuid, files, details and version and replaces the
rewritten fragments' ids in its fragment bitmap with the new ones (name, fields,
``dataset_version`` and ``created_at`` are kept).

On datasets with stable row ids pylance 14 remaps only BTREE (its ``ids`` are row addresses
there too, ``index_version`` 1); BITMAP, LABEL_LIST and IVF_FLAT/IVF_PQ hold stable row ids,
which compaction keeps, so they keep their uuid and only their fragment bitmap moves to the new
fragments. Vector indices are remapped by :mod:`.vector_remap`.

Row addresses map by position: the live rows of a group's old fragments, in order, are the rows
of its new fragments, in order. The mapping is two sorted uint64 arrays and is applied with
``np.searchsorted``.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid as uuid_lib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyroaring

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.bases import index_file_location
from airflow_lance.core.deletion import keep_mask, read_deletion_vector
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.indices import bitmap, btree, ivf, label_list, ngram, vector_remap
from airflow_lance.core.indices.files import IndexFileData, write_index_file
from airflow_lance.core.indices.metadata import ROW_ID_TYPES, UNTOUCHED_BY_REWRITE, fragment_bitmap, index_uuid
from airflow_lance.core.storage import ObjectStore

#: Index types whose files this module can remap (``index_details`` type URL).
REMAPPABLE = (btree.TYPE_URL, bitmap.TYPE_URL, label_list.TYPE_URL, ngram.TYPE_URL)


def can_remap(index: table_pb2.IndexMetadata, stable_row_ids: bool = False) -> bool:
    """Whether compaction may rewrite fragments ``index`` covers (remapping it, or leaving it alone:
    with ``stable_row_ids`` every index holding row ids, FTS and HNSW ones included)."""
    if not index.fragment_bitmap:
        return False
    kind = index.index_details.type_url
    if stable_row_ids and kind in ROW_ID_TYPES:
        return True
    return kind in REMAPPABLE or kind in UNTOUCHED_BY_REWRITE or vector_remap.can_remap(index)


def needs_remap(index: table_pb2.IndexMetadata, stable_row_ids: bool) -> bool:
    """Whether compaction must rewrite the index (else only its fragment bitmap moves, or, for
    ``UNTOUCHED_BY_REWRITE`` types, nothing)."""
    kind = index.index_details.type_url
    return kind not in UNTOUCHED_BY_REWRITE and not (stable_row_ids and kind in ROW_ID_TYPES)


@dataclasses.dataclass
class AddressMap:
    """Sorted old row addresses of the rewritten live rows and the new address of each."""

    old: np.ndarray
    new: np.ndarray
    fragments: frozenset[int]  # ids of every rewritten old fragment

    @classmethod
    def build(cls, store: ObjectStore, groups: Sequence[tuple[Sequence[FragmentMetadata], Sequence[FragmentMetadata]]]
              ) -> AddressMap:
        """``groups``: (old fragments as the compaction read them, new fragments with their final ids)."""
        olds, news, ids = [], [], set()
        for old_fragments, new_fragments in groups:
            group_old = []
            for fragment in old_fragments:
                ids.add(fragment.id)
                offsets = np.arange(fragment.physical_rows, dtype=np.uint64)
                if fragment.deletion_file is not None:
                    deleted = read_deletion_vector(store, fragment.id, fragment.deletion_file)
                    offsets = offsets[keep_mask(fragment.physical_rows, deleted)]
                group_old.append((np.uint64(fragment.id) << np.uint64(32)) | offsets)
            group_new = [(np.uint64(f.id) << np.uint64(32)) | np.arange(f.physical_rows, dtype=np.uint64)
                         for f in new_fragments]
            old = np.concatenate(group_old) if group_old else np.zeros(0, np.uint64)
            new = np.concatenate(group_new) if group_new else np.zeros(0, np.uint64)
            if old.size != new.size:
                raise CorruptFileError("", f"a rewrite of {old.size} live rows wrote {new.size} rows")
            olds.append(old)
            news.append(new)
        old = np.concatenate(olds) if olds else np.zeros(0, np.uint64)
        new = np.concatenate(news) if news else np.zeros(0, np.uint64)
        order = np.argsort(old, kind="stable")
        return cls(old[order], new[order], frozenset(ids))

    def covering(self, index: table_pb2.IndexMetadata) -> AddressMap:
        """This map for ``index``: the rows of rewritten fragments its bitmap does not name are
        dropped, not moved. Such rows are stale: pylance's merge insert of some of the columns
        rewrites a fragment's values in place and takes it out of the bitmaps of the indices on
        them, which keep its old rows. pylance 14 moves them to the new fragments too, still
        outside the bitmap; once those fragments leave in turn, the index holds rows of removed
        fragments its bitmap lacks, which pylance's searches do not mask: they return fewer than
        k rows. An index without a bitmap (pylance < 0.8) keeps the whole map."""
        if not index.fragment_bitmap:
            return self
        outside = np.fromiter(self.fragments - set(fragment_bitmap(index)), np.uint64)
        if not outside.size:
            return self
        keep = ~np.isin(self.old >> np.uint64(32), outside)
        return AddressMap(self.old[keep], self.new[keep], self.fragments)

    def apply(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(kept mask, new addresses of the kept ones): rows of rewritten fragments move, deleted ones go."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        frags = (addrs >> np.uint64(32)).astype(np.int64)
        moved = np.isin(frags, np.fromiter(self.fragments, np.int64, len(self.fragments)))
        out = addrs.copy()
        keep = np.ones(addrs.size, bool)
        if moved.any() and self.old.size:
            pos = np.searchsorted(self.old, addrs[moved])
            pos_c = np.minimum(pos, self.old.size - 1)
            found = self.old[pos_c] == addrs[moved]
            keep[np.flatnonzero(moved)[~found]] = False
            out[np.flatnonzero(moved)[found]] = self.new[pos_c[found]]
        elif moved.any():
            keep[moved] = False
        return keep, out[keep]


def deserialize_row_addrs(data: bytes) -> np.ndarray:
    """Row addresses of Lance's ``RowAddrTreeMap`` serialization (:func:`bitmap.serialize_row_addrs`)."""
    (count,) = struct.unpack_from("<I", data, 0)
    offset, parts = 4, []
    for _ in range(count):
        fragment, length = struct.unpack_from("<II", data, offset)
        offset += 8
        if length == 0:  # a full fragment: Lance writes no bitmap; we never see one in index files
            raise CorruptFileError("", "row address map with a full-fragment entry")
        offsets = np.frombuffer(pyroaring.BitMap.deserialize(data[offset:offset + length]).to_array(), np.uint32)
        offset += length
        parts.append((np.uint64(fragment) << np.uint64(32)) | offsets.astype(np.uint64))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def _read(store: ObjectStore, index: table_pb2.IndexMetadata, name: str) -> LanceFileReader:
    source, path = index_file_location(store, index, index_uuid(index), name)
    return LanceFileReader(source.open_input(path), path=path)


def _bitmap_rows(table: pa.Table) -> tuple[pa.Array, np.ndarray]:
    """(key of each row entry, its address) of a bitmap lookup table: one decode per key."""
    keys = table.column("keys").combine_chunks()
    decoded = [deserialize_row_addrs(b) for b in table.column("bitmaps").to_pylist()]
    counts = np.fromiter((a.size for a in decoded), np.int64, len(decoded))
    addrs = np.concatenate(decoded) if decoded else np.zeros(0, np.uint64)
    return keys.take(pa.array(np.repeat(np.arange(len(decoded)), counts))), addrs


def remap_files(store: ObjectStore, index: table_pb2.IndexMetadata, mapping: AddressMap
                ) -> dict[str, IndexFileData]:
    """The files of ``index`` with its row addresses remapped (see :meth:`AddressMap.covering`)."""
    mapping = mapping.covering(index)
    kind = index.index_details.type_url
    if kind == ivf.TYPE_URL:
        return vector_remap.remap_files(store, index, mapping)
    if kind == ngram.TYPE_URL:
        return ngram.remap(_read(store, index, ngram.POSTINGS_NAME), mapping.apply)
    if kind == btree.TYPE_URL:
        lookup = _read(store, index, btree.LOOKUP_NAME)
        batch_size = int(dict(lookup.schema.metadata).get("batch_size", btree.BATCH_SIZE))
        pages = _read(store, index, btree.PAGES_NAME).read()
        keep, ids = mapping.apply(pages.column("ids").to_numpy())
        values = pages.column("values").combine_chunks().filter(pa.array(keep))
        return btree.build(values, ids, batch_size)
    reader = _read(store, index, bitmap.LOOKUP_NAME)
    keys, addrs = _bitmap_rows(reader.read())
    keep, addrs = mapping.apply(addrs)
    keys = keys.filter(pa.array(keep))
    if kind == bitmap.TYPE_URL:
        return bitmap.build(keys, addrs)
    lookup = bitmap.build(keys, addrs)[bitmap.LOOKUP_NAME]
    nulls_at = int(dict(reader.schema.metadata).get("lance:label_list_nulls", "1"))
    _, null_rows = mapping.apply(deserialize_row_addrs(reader.global_buffer(nulls_at)))
    return {label_list.LOOKUP_NAME: IndexFileData(
        lookup.table, {"lance:label_list_nulls": "1", **lookup.metadata},
        [bitmap.serialize_row_addrs(np.sort(null_rows))])}


def remap_index(store: ObjectStore, index: table_pb2.IndexMetadata, mapping: AddressMap, storage_version: str
                ) -> tuple[str, list[table_pb2.IndexFile]]:
    """Write the remapped index under a new uuid; returns (new uuid, its files)."""
    new_uuid = str(uuid_lib.uuid4())
    files = [write_index_file(store, new_uuid, name, data, storage_version)
             for name, data in remap_files(store, index, mapping).items()]
    return new_uuid, files
