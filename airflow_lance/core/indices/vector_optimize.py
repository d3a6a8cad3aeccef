"""``optimize_indices`` for IVF_FLAT and IVF_PQ indices, as pylance 14 does it.

The rows of the fragments no segment of the index covers (finite, non-null vectors; row ids as
the index holds them) are assigned to the existing IVF centroids (the first segment's; cosine:
normalized, l2 assignment, as at build) and, for IVF_PQ, encoded with its codebook (residuals
for l2/cosine). Then, with ``num_indices_to_merge`` (pylance 14 observed):

* ``0``: a *delta* segment over only those rows: same centroids, codebook, details and
  metadata, ``dataset_version`` the version it was built on;
* ``None`` (default): the same delta, unless some partition holds more than 4x the target
  partition size (IVF_FLAT 4096, IVF_PQ 8192 rows; stored rows of every segment, deleted ones
  included, plus the added rows): then every such partition is *split* into ceil(rows / target)
  by k-means over its live rows (cosine: normalized; dot: unit centroids), the first new centroid
  in its place, the others appended (split partitions in index order); its live rows go to the
  nearest of its new centroids and the unsplit ones of the 64 partitions nearest its old
  centroid (Lance's ``REASSIGN_RANGE``), and those neighbours are rebuilt from their live rows
  (deleted ones leave, PQ codes re-encoded, rows nearer a new centroid move there); rebuilt
  partitions hold their rows by row id, every segment
  is merged into one (``dataset_version`` of the oldest) and nothing is joined. Otherwise, where
  some partition holds fewer than 25% of the target
  partition size (IVF_FLAT 4096, IVF_PQ 8192) counting every segment's stored rows (deleted ones
  included) and the added rows: then those partitions are *joined*, one after the other,
  smallest first (sizes counted once, before any join): a partition's live rows (stored ones,
  then the added ones, then rows joined into it before) go, in that order, each to the nearest
  of the 64 remaining centroids nearest its own that holds fewer than 4x the target size (its
  count plus the rows moved in); a partition with a row that finds them all full stays, with
  every row it holds (the last one always stays). The joined centroids are dropped; a
  partition holds its own rows, then those moved in by the partition they come from (index
  order; PQ: encoded anew); every segment is merged into one (``dataset_version`` of the
  oldest). When no partition finds room: the delta as above;
* ``n > 0``: one segment with the rows of the ``n`` newest segments (kept as they are, rows
  deleted since included, except on datasets with stable row ids; partition by partition,
  oldest segment first) followed by the new rows; ``dataset_version`` of the oldest merged
  segment; the merged ones are removed. Its bitmap is the union of theirs (removed fragments
  included) and the new fragments; the rows of removed fragments, and of fragments a bitmap no
  longer names (updated in place), leave it, as in pylance 14;
* ``retrain=True``: the index is rebuilt over every fragment (same metric and PQ shape, the
  default partition count for the rows now there), replacing every segment.

An *empty* index (entries without files, as pylance 14 and :func:`.vector.create_index` commit
on too few rows) is built in full over every fragment whatever the options (still too few
vectors: a new empty entry), replacing it.

The ``index.idx`` loss is the new rows' assignment loss against the old centroids (also after
a split or join). ``num_indices_to_merge`` ``0`` or ``n`` never split nor join (pylance 14).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid as uuid_lib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring

from airflow_lance.core import feature_flags
from airflow_lance.core._proto import index_pb2, table_pb2
from airflow_lance.core.bases import index_file_location
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.indices import ivf, kmeans, pq, vector_remap
from airflow_lance.core.indices.files import IndexFileData, write_index_file
from airflow_lance.core.indices.metadata import fragment_bitmap, index_uuid
from airflow_lance.core.indices.vector import (
    MAX_PARTITIONS,
    TARGET_PARTITION_SIZE,
    build_vector_index,
    is_empty_index,
)

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Segment:
    """What one IVF segment holds, rows row-major (PQ codes untransposed)."""

    labels: np.ndarray
    ids: np.ndarray
    payload: np.ndarray  # n x dim vectors as stored (flat) or n x m uint8 (PQ codes)
    centroids: np.ndarray
    aux_metadata: dict[str, str]
    aux_buffers: list[bytes]
    index_metadata: dict[str, str]
    index_message: index_pb2.IVF
    aux_schema: pa.Schema


def _reader(store, index: table_pb2.IndexMetadata, name: str) -> LanceFileReader:
    source, path = index_file_location(store, index, index_uuid(index), name)
    return LanceFileReader(source.open_input(path), path=path)


def _load(store, index: table_pb2.IndexMetadata, rows: bool = True) -> _Segment:
    """A segment; without ``rows`` only its partitions' lengths (``labels``), ``ids``/``payload`` empty."""
    aux = _reader(store, index, ivf.AUXILIARY_NAME)
    table, aux_metadata, aux_buffers = vector_remap._file(aux, rows)
    marker = _reader(store, index, ivf.INDEX_NAME)
    _, index_metadata, index_buffers = vector_remap._file(marker)
    part = index_pb2.IVF()
    part.ParseFromString(aux_buffers[int(aux_metadata.get("lance:ivf", "1")) - 1])
    model = index_pb2.IVF()
    model.ParseFromString(index_buffers[int(index_metadata.get("lance:ivf", "1")) - 1])
    tensor = model.centroids_tensor
    centroids = ivf.tensor_array(tensor)  # in the compute dtype (float64 for float64 vectors, else float32)
    lengths = np.asarray(part.lengths, np.int64)
    column = table.schema.names[1]
    values = table.column(column).combine_chunks()
    width = values.type.list_size
    flat = pc.list_flatten(values).to_numpy(zero_copy_only=False).reshape(-1, width)
    if column == "__pq_code" and rows:  # codes n x num_sub_vectors (4-bit: unpacked)
        flat = pq.unpack(vector_remap._untranspose(flat, lengths), pq.storage_num_bits(aux_metadata))
    return _Segment(np.repeat(np.arange(lengths.size), lengths), table.column("_rowid").to_numpy(), flat,
                    centroids, aux_metadata, aux_buffers, index_metadata, model, table.schema)


def _covered_rows(part: tuple[np.ndarray, np.ndarray, np.ndarray], segment: table_pb2.IndexMetadata,
                  live: set[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels, row addresses, payload) of a merged segment with only the rows of ``live`` fragments its
    bitmap names, as pylance 14 merges. Rows of fragments the bitmap no longer names are stale
    (pylance's merge insert of some of the columns rewrites a fragment's values in place and takes it
    out of the bitmaps of the indices on them); the fragment's current rows join the merge as unindexed
    ones. Rows of removed fragments go (deleted rows of the others stay). A segment without a bitmap
    (pylance < 0.8) keeps the rows of every live fragment."""
    labels, ids, payload = part
    named = set(fragment_bitmap(segment)) & live if segment.fragment_bitmap else live
    keep = np.isin(ids >> np.uint64(32), np.fromiter(named, np.uint64, len(named)))
    return (labels, ids, payload) if keep.all() else (labels[keep], ids[keep], payload[keep])


def _value_type(segment: _Segment) -> str:
    """The vectors' value type (float16, float32 or float64): its centroids' tensor type."""
    return ivf.tensor_value_type(segment.index_message.centroids_tensor)


def _codebooks(segment: _Segment, m: int) -> np.ndarray:
    tensor = index_pb2.Tensor()
    tensor.ParseFromString(segment.aux_buffers[1])
    matrix = ivf.tensor_array(tensor)
    k, dim = matrix.shape
    return matrix.reshape(-1).reshape(m, k, dim // m)


def _new_rows(current: LanceDataset, column: str, fragment_ids: Sequence[int], dim: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """(finite non-null vectors in :func:`ivf.compute_dtype`, their row ids) of ``fragment_ids``, in scan order."""
    if not fragment_ids:
        value_type = current.schema.field(column).type.value_type.to_pandas_dtype().__name__
        return np.zeros((0, dim), ivf.compute_dtype(value_type)), np.zeros(0, np.uint64)
    table = current.scanner(columns=[column], with_row_id=True,
                            fragments=[current.get_fragment(i) for i in fragment_ids]).to_table()
    values = table.column(column).combine_chunks()
    valid = values.is_valid()
    ids = table.column("_rowid").combine_chunks().filter(valid).to_numpy(zero_copy_only=False).astype(np.uint64)
    values = values.filter(valid)
    flat = pc.list_flatten(values).to_numpy(zero_copy_only=False)
    vectors = flat.astype(ivf.compute_dtype(flat.dtype.name), copy=False).reshape(len(values), dim)
    finite = np.isfinite(vectors).all(axis=1)
    return vectors[finite], ids[finite]


def _row_ids(current: LanceDataset, fragment_ids: Sequence[int]) -> np.ndarray:
    """Row ids of the live rows of ``fragment_ids``."""
    if not fragment_ids:
        return np.zeros(0, np.uint64)
    table = current.scanner(columns=[], with_row_id=True,
                            fragments=[current.get_fragment(i) for i in fragment_ids]).to_table()
    return table.column("_rowid").to_numpy().astype(np.uint64, copy=False)


def _encode(segment: _Segment, details: index_pb2.VectorIndexDetails, metric: str, vectors: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, float]:
    """(partition, payload, loss) of new rows against the segment's centroids and codebook."""
    value_type = _value_type(segment)
    vectors = ivf.prepare(vectors, metric, value_type)
    if not len(vectors):
        width = details.pq.num_sub_vectors if details.WhichOneof("compression") == "pq" else vectors.shape[1]
        dtype = np.uint8 if details.WhichOneof("compression") == "pq" else vectors.dtype
        return np.zeros(0, np.int64), np.zeros((0, width), dtype), 0.0
    labels, dists = kmeans.assign(vectors, segment.centroids, "dot" if metric == "dot" else "l2")
    loss = float(np.asarray(dists, np.float64).sum())
    if details.WhichOneof("compression") != "pq":
        return labels, vectors, loss
    m = details.pq.num_sub_vectors
    codebooks = _codebooks(segment, m)
    if not pq.use_residual(metric):
        # pylance 14 encodes the rows it adds to a dot index by inner product (its build: by l2)
        codes, _ = kmeans.assign_batched(pq._split(vectors, m), codebooks, "dot")
        return labels, np.ascontiguousarray(codes.T, dtype=np.uint8), loss
    return labels, pq.encode(ivf.residuals(vectors, segment.centroids, labels, value_type), codebooks), loss


def _files(base: _Segment, labels: np.ndarray, ids: np.ndarray, payload: np.ndarray, loss: float,
           centroids: np.ndarray | None = None) -> dict[str, IndexFileData]:
    k = (base.centroids if centroids is None else centroids).shape[0]
    order = np.argsort(labels, kind="stable")
    lengths = np.bincount(labels, minlength=k).astype(np.uint32)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.uint64)[:-1]]).astype(np.uint64)
    column = base.aux_schema.field(1)
    if column.name == "__pq_code":
        data = pq.transpose_partitions(pq.pack(payload[order], pq.storage_num_bits(base.aux_metadata)), lengths)
    else:
        data = payload[order]
    value_type = column.type.value_type  # flat: the stored vectors' type (float16/32/64)
    data = data.astype(value_type.to_pandas_dtype(), copy=False)
    values = pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1), value_type), column.type.list_size)
    auxiliary = pa.Table.from_arrays([pa.array(np.asarray(ids, np.uint64)[order], pa.uint64()), values],
                                     schema=base.aux_schema.remove_metadata())
    aux_buffers = list(base.aux_buffers)
    aux_buffers[int(base.aux_metadata.get("lance:ivf", "1")) - 1] = ivf._ivf(offsets, lengths)
    model = index_pb2.IVF()
    model.CopyFrom(base.index_message)
    model.loss = loss
    index_metadata = base.index_metadata
    if centroids is not None:  # partitions joined: fewer centroids
        model.centroids_tensor.CopyFrom(ivf._tensor(centroids, _value_type(base)))
        del model.offsets[:]
        del model.lengths[:]
        model.offsets.extend([0] * k)
        model.lengths.extend([0] * k)
        index_metadata = {**index_metadata, "lance:flat": json.dumps([""] * k, separators=(",", ":"))}
    marker = pa.table({"__flat_marker": pa.array([], pa.uint64())},
                      schema=pa.schema([pa.field("__flat_marker", pa.uint64(), nullable=False)]))
    return {
        ivf.AUXILIARY_NAME: IndexFileData(auxiliary, base.aux_metadata, aux_buffers),
        ivf.INDEX_NAME: IndexFileData(marker, index_metadata, [model.SerializeToString()]),
    }


def _retrain(current: LanceDataset, column: str, field_id: int, dim: int,
             details: index_pb2.VectorIndexDetails, name: str) -> table_pb2.IndexMetadata:
    hints = dict(details.runtime_hints)
    is_pq = details.WhichOneof("compression") == "pq"
    kind = "IVF_PQ" if is_pq else "IVF_FLAT"
    # pylance 14 retrains with the default partition count for the rows now in the dataset
    partitions = min(max(1, current.count_rows() // TARGET_PARTITION_SIZE[kind]), MAX_PARTITIONS)
    params = ivf.VectorIndexParams(
        kind, _metric(details), partitions,
        details.pq.num_sub_vectors if is_pq else None, details.pq.num_bits if is_pq else pq.NUM_BITS,
        int(hints.get("lance.ivf.sample_rate", ivf.SAMPLE_RATE)), int(hints.get("lance.ivf.max_iters", 50)),
        current.schema.field(column).type.value_type.to_pandas_dtype().__name__)
    return build_vector_index(current, column, field_id, dim, params, name)[0]


def _metric(details: index_pb2.VectorIndexDetails) -> str:
    return {v: k for k, v in ivf.METRICS.items()}[details.metric_type]


#: pylance 14 joins a partition holding fewer rows than this percentage of the target partition size.
MIN_PARTITION_SIZE_PERCENT = 25
#: A joined partition's rows go to the nearest of this many centroids nearest to its own.
REASSIGN_RANGE = 64


def _small_partitions(loaded: Sequence[_Segment], new_labels: np.ndarray,
                      details: index_pb2.VectorIndexDetails) -> np.ndarray | None:
    """Mask of the partitions pylance 14 tries to join (stored rows of every segment, deleted
    ones included, plus the rows added, below a quarter of the target size), or None."""
    if loaded[0].centroids.shape[0] <= 1:
        return None
    counts = _counts(loaded, new_labels)
    kind = "IVF_PQ" if details.WhichOneof("compression") == "pq" else "IVF_FLAT"
    small = counts < MIN_PARTITION_SIZE_PERCENT * TARGET_PARTITION_SIZE[kind] // 100
    return small if small.any() else None


def _fill(dists: np.ndarray, room: np.ndarray) -> np.ndarray | None:
    """Candidate of each row (rows in order, each to its nearest candidate with room left, a
    candidate taking ``room`` rows at most), or None when some row finds every candidate full.
    Exact per-row sequential semantics, vectorised: one pass per candidate that fills up."""
    n, c = dists.shape
    chosen = np.full(n, -1, np.int64)
    room = room.astype(np.int64).copy()
    full = room <= 0
    start = 0
    while start < n:
        if full.all():
            return None
        choice = np.where(full[None, :], np.inf, dists[start:]).argmin(1)
        taken = np.zeros((choice.size, c), bool)
        taken[np.arange(choice.size), choice] = True
        seen = np.cumsum(taken, axis=0)  # rows sent to each candidate so far
        over = seen[np.arange(choice.size), choice] > room[choice]  # a row finding its choice full
        stop = int(np.argmax(over)) if over.any() else choice.size
        chosen[start:start + stop] = choice[:stop]
        room -= seen[stop - 1] if stop else 0
        full |= room <= 0
        start += stop
    return chosen


def _join(current: LanceDataset, column: str, segments: Sequence[table_pb2.IndexMetadata], base: _Segment,
          details: index_pb2.VectorIndexDetails, parts: list, new_vectors: np.ndarray, counts: np.ndarray,
          small: np.ndarray) -> tuple[list, np.ndarray] | None:
    """Join the small partitions as pylance 14 does, smallest first (counted once, before any
    join): a partition's live rows (stored ones segment by segment, then the added ones, then those joined
    into it before) go, in that order, each to the nearest of the 64 remaining centroids nearest
    its own that holds fewer than 4x the target size (counting as for the join and the rows
    moved in); when some row finds them all full the partition stays as it is (with the rows
    moved in). A partition holds its own rows, then those moved in, by the partition they come
    from (in index order).
    Returns None when nothing was joined."""
    metric = _metric(details)
    train_metric = "dot" if metric == "dot" else "l2"
    kind = "IVF_PQ" if details.WhichOneof("compression") == "pq" else "IVF_FLAT"
    capacity = MAX_PARTITION_SIZE_FACTOR * TARGET_PARTITION_SIZE[kind]
    old = base.centroids
    k = old.shape[0]
    live_fragments = sorted(set().union(*(fragment_bitmap(s) for s in segments)) & {f.id for f in current._fragments})
    all_vectors, all_ids = _new_rows(current, column, live_fragments, old.shape[1])
    order = np.argsort(all_ids)
    all_ids, all_vectors = all_ids[order], all_vectors[order]
    all_vectors = ivf.prepare(all_vectors, metric, _value_type(base))
    stored, added = parts[:-1], parts[-1]
    new_vectors = ivf.prepare(new_vectors, metric, _value_type(base))
    size = counts.astype(np.int64).copy()
    alive = np.ones(k, bool)
    # moved rows by the partition they come from: (ids, vectors, current partition)
    moved: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for p in np.flatnonzero(small)[np.argsort(counts[small], kind="stable")].tolist():
        stored_ids = np.concatenate([rid[lab == p] for lab, rid, _ in stored] or [np.zeros(0, np.uint64)])
        pos = np.minimum(np.searchsorted(all_ids, stored_ids), max(all_ids.size - 1, 0))
        found = all_ids[pos] == stored_ids if all_ids.size else np.zeros(stored_ids.size, bool)
        ids = np.concatenate([stored_ids[found], added[1][added[0] == p]])
        vectors = np.concatenate([all_vectors[pos[found]], new_vectors[added[0] == p]])
        came = {source: labels == p for source, (_, _, labels) in sorted(moved.items())}
        rows = np.concatenate([vectors, *(moved[source][1][mask] for source, mask in came.items())])
        others = np.flatnonzero(alive & (np.arange(k) != p))
        if not others.size:
            continue
        to_old = ((old[others] - old[p]) ** 2).sum(1) if train_metric == "l2" else -(old[others] @ old[p])
        candidates = others[np.argsort(to_old, kind="stable")[:REASSIGN_RANGE]]
        x, c = rows.astype(np.float64), old[candidates].astype(np.float64)
        dists = -(x @ c.T)  # n x candidates (n under a quarter of the target size, or what moved in)
        if train_metric == "l2":
            dists = np.maximum(2 * dists + np.einsum("nd,nd->n", x, x)[:, None] + np.einsum("kd,kd->k", c, c), 0)
        chosen = _fill(dists, capacity - size[candidates])
        if chosen is None:
            continue  # no room for every row: the partition stays
        alive[p] = False
        labels = candidates[chosen]
        np.add.at(size, labels, 1)
        moved[p] = (ids, vectors, labels[:len(ids)])
        at = len(ids)
        for source, mask in came.items():  # rows moved into p before move on
            moved[source][2][mask] = labels[at:at + int(mask.sum())]
            at += int(mask.sum())
    if alive.all():
        return None
    relabel = np.full(k, -1, np.int64)
    relabel[alive] = np.arange(int(alive.sum()))
    centroids = old[alive]
    out = [(relabel[lab[alive[lab]]], rid[alive[lab]], pay[alive[lab]]) for lab, rid, pay in stored]
    lab, rid, pay = added
    out.append((relabel[lab[alive[lab]]], rid[alive[lab]], pay[alive[lab]]))
    for _, (ids, vectors, labels) in sorted(moved.items()):
        if ids.size:
            final = relabel[labels]
            out.append((final, ids, _payload(base, details, metric, vectors, final, centroids)))
    return out, centroids


#: pylance 14 splits a partition holding more rows than this factor times the target partition size.
MAX_PARTITION_SIZE_FACTOR = 4
#: Rows per new centroid the split's k-means trains on at most.
SPLIT_SAMPLE_PER_CENTROID = 256


def _counts(loaded: Sequence[_Segment], new_labels: np.ndarray) -> np.ndarray:
    """Rows per partition: every segment's stored rows (deleted ones included) plus the added ones."""
    k = loaded[0].centroids.shape[0]
    counts = np.bincount(new_labels, minlength=k)
    for segment in loaded:
        counts = counts + np.bincount(segment.labels, minlength=k)
    return counts


def _large_partitions(loaded: Sequence[_Segment], new_labels: np.ndarray,
                      details: index_pb2.VectorIndexDetails) -> dict[int, int] | None:
    """{partition: ways} for every partition pylance 14 splits (more than 4x the target size,
    counted as for joins), split into ceil(rows / target) partitions; or None."""
    kind = "IVF_PQ" if details.WhichOneof("compression") == "pq" else "IVF_FLAT"
    target = TARGET_PARTITION_SIZE[kind]
    counts = _counts(loaded, new_labels)
    large = np.flatnonzero(counts > MAX_PARTITION_SIZE_FACTOR * target)
    return {int(p): int(-(-int(counts[p]) // target)) for p in large} or None


def _payload(base: _Segment, details: index_pb2.VectorIndexDetails, metric: str, vectors: np.ndarray,
             labels: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Stored form of (already normalized for cosine) ``vectors`` in partitions ``labels``."""
    if details.WhichOneof("compression") != "pq":
        return vectors
    m = details.pq.num_sub_vectors
    if pq.use_residual(metric):
        return pq.encode(ivf.residuals(vectors, centroids, labels, _value_type(base)), _codebooks(base, m))
    codes, _ = kmeans.assign_batched(pq._split(vectors, m), _codebooks(base, m), "dot")
    return np.ascontiguousarray(codes.T, dtype=np.uint8)


def _split(current: LanceDataset, column: str, segments: Sequence[table_pb2.IndexMetadata], base: _Segment,
           details: index_pb2.VectorIndexDetails, parts: list, large: dict[int, int]
           ) -> tuple[list, np.ndarray]:
    """Split the large partitions as pylance 14 does: k-means (``ways`` centroids) over each one's
    live rows; the first new centroid takes the partition's place, the others are appended (split
    partitions in index order). Its live rows go to the nearest of its new centroids and the 64
    other partitions nearest its old centroid; those neighbours are rebuilt from their live rows
    (deleted ones leave, all re-encoded), each moving to a new centroid nearer than its own. The
    rebuilt partitions hold their rows by row id; the other partitions stay as they are."""
    metric = _metric(details)
    train_metric = "dot" if metric == "dot" else "l2"
    labels = np.concatenate([p[0] for p in parts]).astype(np.int64)
    ids = np.concatenate([p[1] for p in parts]).astype(np.uint64)
    payload = np.concatenate([p[2] for p in parts])
    old = base.centroids
    k = old.shape[0]
    split_mask = np.zeros(k, bool)
    split_mask[list(large)] = True
    all_vectors, all_ids = _new_rows(current, column, sorted(f.id for f in current._fragments), old.shape[1])
    order = np.argsort(all_ids)
    all_ids, all_vectors = all_ids[order], all_vectors[order]
    all_vectors = ivf.prepare(all_vectors, metric, _value_type(base))

    def live(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions in the parts, row ids, vectors) of the live rows under ``mask``, by row id."""
        where = np.flatnonzero(mask)
        where = where[np.argsort(ids[where], kind="stable")]
        pos = np.minimum(np.searchsorted(all_ids, ids[where]), max(all_ids.size - 1, 0))
        found = all_ids[pos] == ids[where] if all_ids.size else np.zeros(where.size, bool)
        return where[found], ids[where[found]], all_vectors[pos[found]]

    rng = np.random.default_rng()
    value_type = _value_type(base)
    centroids = [old.copy()]
    new_of: dict[int, np.ndarray] = {}
    for p, ways in sorted(large.items()):
        _, _, vectors = live(labels == p)
        ways = max(1, min(ways, len(vectors)))
        sample = vectors
        if len(vectors) > ways * SPLIT_SAMPLE_PER_CENTROID:
            sample = vectors[np.sort(rng.choice(len(vectors), ways * SPLIT_SAMPLE_PER_CENTROID, replace=False))]
        # dot: unit centroids, pylance 14's spherical k-means (as at build)
        trained, _ = kmeans.train(sample, ways, train_metric, rng, spherical=train_metric == "dot")
        trained = ivf.stored(trained, value_type)  # as the files hold them
        centroids[0][p] = trained[0]
        start = sum(len(c) for c in centroids)
        centroids.append(trained[1:])
        new_of[p] = np.concatenate([[p], np.arange(start, start + ways - 1)])
    centroids = np.concatenate(centroids)
    drop = np.zeros(labels.size, bool)
    out_labels, out_ids, out_vectors = [], [], []
    neighbours: dict[int, list[int]] = {}
    for p, new in new_of.items():
        # the 64 partitions nearest the old centroid (other split ones among them, not rebuilt)
        others = np.flatnonzero(np.arange(k) != p)
        dists = ((old[others] - old[p]) ** 2).sum(1) if train_metric == "l2" else -(old[others] @ old[p])
        near = others[np.argsort(dists, kind="stable")[:REASSIGN_RANGE]]
        near = near[~split_mask[near]]
        for q in near.tolist():
            neighbours.setdefault(q, []).extend(new.tolist())
        _, rid, vectors = live(labels == p)
        drop |= labels == p  # deleted rows of a split partition leave the index
        candidates = np.concatenate([new, near])
        local, _ = kmeans.assign(vectors, centroids[candidates], train_metric)
        out_labels.append(candidates[local])
        out_ids.append(rid)
        out_vectors.append(vectors)
    for q, new in sorted(neighbours.items()):
        new = np.asarray(sorted(set(new)))
        _, rid, vectors = live(labels == q)
        drop |= labels == q  # pylance 14 rebuilds a neighbour from its live rows (deleted ones leave)
        _, own = kmeans.assign(vectors, centroids[[q]], train_metric)
        nearest, other = kmeans.assign(vectors, centroids[new], train_metric)
        out_labels.append(np.where(other < own, new[nearest], q))
        out_ids.append(rid)
        out_vectors.append(vectors)
    keep = ~drop
    result = [(labels[keep], ids[keep], payload[keep])]
    if out_ids:
        new_labels = np.concatenate(out_labels).astype(np.int64)
        new_ids = np.concatenate(out_ids)
        vectors = np.concatenate(out_vectors)
        order = np.argsort(new_ids, kind="stable")
        new_labels, new_ids, vectors = new_labels[order], new_ids[order], vectors[order]
        result.append((new_labels, new_ids, _payload(base, details, metric, vectors, new_labels, centroids)))
    return result, centroids


def can_optimize(current: LanceDataset, column: str, segments: Sequence[table_pb2.IndexMetadata]) -> bool:
    """IVF_FLAT/IVF_PQ segments in the layout read here, on a float16/32/64 vector column."""
    dtype = current.schema.field(column).type if column in current.schema.names else None
    if dtype is None or not pa.types.is_fixed_size_list(dtype) or not pa.types.is_floating(dtype.value_type):
        return False
    if all(is_empty_index(s) for s in segments):  # pylance's empty index: built in full (:func:`optimize_vector_index`)
        return all(_details(s).WhichOneof("compression") in ("flat", "pq") for s in segments)
    return all(vector_remap.is_flat_or_pq(s) for s in segments)


def _details(index: table_pb2.IndexMetadata) -> index_pb2.VectorIndexDetails:
    details = index_pb2.VectorIndexDetails()
    try:
        details.ParseFromString(index.index_details.value)
    except Exception:  # protobuf's DecodeError: not ours to touch
        return index_pb2.VectorIndexDetails()
    return details


def optimize_vector_index(current: LanceDataset, name: str, column: str, field_id: int,
                          segments: Sequence[table_pb2.IndexMetadata], missing: Sequence[int],
                          num_indices_to_merge: int | None, retrain: bool
                          ) -> tuple[table_pb2.IndexMetadata | None, list[table_pb2.IndexMetadata]]:
    """(new segment or None, segments it replaces) for the IVF index ``name``."""
    if not can_optimize(current, column, segments):
        log.info("optimize_indices leaves index %r alone: not an IVF_FLAT/IVF_PQ index on float vectors", name)
        return None, []
    details = index_pb2.VectorIndexDetails()
    details.ParseFromString(segments[0].index_details.value)
    if all(is_empty_index(s) for s in segments):
        # pylance 14: an empty index (no files) is built in full over every fragment, whatever
        # num_indices_to_merge / retrain, with the default partition count for the rows now there
        # (still too few vectors for PQ: a new empty entry); it replaces every segment
        if not missing:
            return None, []
        dim = current.schema.field(column).type.list_size
        return _retrain(current, column, field_id, dim, details, name), list(segments)
    if retrain:
        if not missing and len(segments) < 2:
            return None, []
        dim = _load(current.store, segments[0], rows=False).centroids.shape[1]
        return _retrain(current, column, field_id, dim, details, name), list(segments)
    n = num_indices_to_merge or 0
    merge = list(segments[-n:]) if n else []
    if not missing and len(merge) < 2:
        return None, []
    cache: dict[tuple[int, bool], _Segment] = {}

    def load(position: int, rows: bool = True) -> _Segment:  # each segment's files are read once
        if (position, rows) not in cache:
            cache[(position, rows)] = _load(current.store, segments[position], rows)
        return cache[(position, rows)]

    base = load(0, rows=False)  # centroids, codebook, metadata
    vectors, ids = _new_rows(current, column, missing, base.centroids.shape[1])
    labels, payload, loss = _encode(base, details, _metric(details), vectors)
    centroids, small, large = None, None, None
    if num_indices_to_merge is None and missing:
        loaded = [load(i, rows=False) for i in range(len(segments))]
        large = _large_partitions(loaded, labels, details)  # a split comes first: nothing is joined then
        small = None if large else _small_partitions(loaded, labels, details)
        if small is not None:
            counts = _counts(loaded, labels)
        if large or small is not None:
            merge = list(segments)
    parts = [(s.labels, s.ids, s.payload) for s in map(load, range(len(segments) - len(merge), len(segments)))]
    stable = bool(current.manifest_file.manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)
    if merge and not stable:
        live_ids = {f.id for f in current._fragments}
        parts = [_covered_rows(part, segment, live_ids) for part, segment in zip(parts, merge, strict=True)]
    if merge and stable:
        # pylance 14 drops the rows deleted since from merged segments on datasets with stable
        # row ids (without them it keeps the deleted rows of live fragments: _covered_rows)
        merged = sorted(set().union(*(fragment_bitmap(s) for s in merge)) & {f.id for f in current._fragments})
        live = _row_ids(current, merged)
        parts = [(lab[keep], rid[keep], pay[keep]) for lab, rid, pay in parts
                 for keep in [np.isin(rid, live)]]
    parts.append((labels, ids, payload))
    if large:
        parts, centroids = _split(current, column, segments, base, details, parts, large)
    elif small is not None:
        joined = _join(current, column, segments, base, details, parts, vectors, counts, small)
        if joined is not None:
            parts, centroids = joined
        else:  # no partition could be joined (no room): pylance 14 adds a delta segment
            merge, parts = [], [(labels, ids, payload)]
    files = _files(base, np.concatenate([p[0] for p in parts]).astype(np.int64),
                   np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]), loss, centroids)
    # the merged segments' whole bitmaps, removed fragments included, as pylance 14 (their rows left
    # the merge above)
    covered = set(missing)
    for segment in merge:
        covered |= set(fragment_bitmap(segment))
    uuid = str(uuid_lib.uuid4())
    written = [write_index_file(current.store, uuid, file_name, data, current.data_storage_version)
               for file_name, data in files.items()]
    index = table_pb2.IndexMetadata(
        fields=[field_id], name=name,
        dataset_version=min(s.dataset_version for s in merge) if merge else current.version,
        fragment_bitmap=pyroaring.BitMap(sorted(covered)).serialize(),
        index_version=segments[0].index_version, created_at=int(time.time() * 1000), files=written,
    )
    index.uuid.uuid = uuid_lib.UUID(uuid).bytes
    index.index_details.CopyFrom(segments[0].index_details)
    return index, merge
