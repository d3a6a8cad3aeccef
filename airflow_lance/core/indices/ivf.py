"""IVF_FLAT and IVF_PQ index files, as pylance 14 writes them (index file version V3).

Two Lance files under ``_indices/{uuid}/``:

``auxiliary.idx``: the indexed rows grouped by IVF partition (partition 0 first; inside a
partition in scan order): ``_rowid`` (uint64, the row id: the row address unless the dataset
has stable row ids) and ``flat`` (``fixed_size_list<float>[dim]`` not null, the vector,
L2-normalized for ``cosine``) or ``__pq_code`` (``fixed_size_list<uint8>[num_sub_vectors]``,
``[num_sub_vectors / 2]`` with ``num_bits`` 4: two codes a byte; each partition's codes
transposed, see :mod:`.pq`). Global buffer 1: an ``IVF`` message with
the partitions' ``offsets``/``lengths`` in this file and no centroids; for PQ global buffer 2:
the codebook ``Tensor``. Schema metadata: ``distance_type`` (``l2``/``cosine``/``dot``),
``lance:ivf`` = "1", ``storage_metadata`` = a JSON list with one JSON string: ``{"dim":D}``
(flat) or ``{"codebook_position":2,"nbits":8,"num_sub_vectors":M,"dimension":D,
"codebook_tensor":[],"transposed":true}`` (PQ; ``"nbits":4`` for 4-bit codes).

``index.idx``: no rows, one column ``__flat_marker`` (uint64, not null). Global buffer 1: an
``IVF`` message with the centroids (``Tensor`` ``[num_partitions, dim]``), zero
offsets and lengths per partition and the k-means loss. Schema metadata: ``lance:index`` =
``{"type":"IVF_FLAT"|"IVF_PQ","distance_type":...}``, ``lance:ivf`` = "1", ``lance:flat`` = a
JSON list of one empty string per partition.

Vectors, centroids and the codebook are stored in the column's value type (float16, float32 or
float64: ``flat``'s values and the ``Tensor``s' data type), as pylance 14 does; k-means and PQ
run in float32 (float64 for float64 vectors) against the centroids and codebook as stored.

Manifest: ``index_details`` ``/lance.index.pb.VectorIndexDetails`` (metric, ``flat`` or
``pq`` {num_bits, num_sub_vectors}, the build's runtime hints), ``index_version`` 1.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa

from airflow_lance.core._proto import index_pb2
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.indices import kmeans, pq
from airflow_lance.core.indices.files import IndexFileData

INDEX_NAME = "index.idx"
AUXILIARY_NAME = "auxiliary.idx"
TYPE_URL = "/lance.index.pb.VectorIndexDetails"
INDEX_VERSION = 1
SAMPLE_RATE = 256
METRICS = {"l2": index_pb2.L2, "cosine": index_pb2.Cosine, "dot": index_pb2.Dot}


@dataclasses.dataclass
class VectorIndexParams:
    index_type: str  # IVF_FLAT or IVF_PQ
    metric: str  # l2, cosine or dot
    num_partitions: int
    num_sub_vectors: int | None = None
    num_bits: int = pq.NUM_BITS
    sample_rate: int = SAMPLE_RATE
    max_iters: int = kmeans.MAX_ITERS
    value_type: str = "float32"  # the vector column's: float16, float32 or float64 (what the files store)


#: The vector value types indexed, each with its ``Tensor`` data type.
TENSOR_TYPES = {"float16": index_pb2.Tensor.FLOAT16, "float32": index_pb2.Tensor.FLOAT32,
                "float64": index_pb2.Tensor.FLOAT64}


def compute_dtype(value_type: str) -> type[np.floating]:
    """What k-means, PQ and the distances run in: float64 for float64 vectors, else float32
    (float16 vectors are widened; what is stored is rounded back, see :func:`stored`)."""
    return np.float64 if value_type == "float64" else np.float32


def stored(array: np.ndarray, value_type: str) -> np.ndarray:
    """``array`` rounded to ``value_type`` (as the files hold it), in the compute dtype: centroids and
    codebooks are used as stored, so the codes and partitions match what pylance reads back."""
    compute = compute_dtype(value_type)
    if np.dtype(value_type) == compute:  # float32, float64: nothing to round
        return np.asarray(array).astype(compute, copy=False)
    return np.asarray(array).astype(value_type).astype(compute)


def residuals(vectors: np.ndarray, centroids: np.ndarray, labels: np.ndarray, value_type: str) -> np.ndarray:
    """What PQ quantizes for ``l2``/``cosine``: each vector minus its centroid, rounded to the
    column's value type as Lance computes it (float16 in float16)."""
    return stored(vectors - centroids[labels], value_type)


def _tensor(array: np.ndarray, value_type: str = "float32") -> index_pb2.Tensor:
    return index_pb2.Tensor(data_type=TENSOR_TYPES[value_type], shape=list(array.shape),
                            data=np.ascontiguousarray(array, dtype=np.dtype(value_type).newbyteorder("<")).tobytes())


def tensor_value_type(tensor: index_pb2.Tensor) -> str:
    """The value type (float16, float32 or float64) of a float ``Tensor``."""
    for value_type, data_type in TENSOR_TYPES.items():
        if tensor.data_type == data_type:
            return value_type
    raise CorruptFileError(f"{INDEX_NAME} / {AUXILIARY_NAME}", f"unsupported vector index tensor type {tensor.data_type}")


def tensor_array(tensor: index_pb2.Tensor) -> np.ndarray:
    """A float ``Tensor`` (centroids, a PQ codebook) as numpy in its compute dtype."""
    value_type = tensor_value_type(tensor)
    array = np.frombuffer(tensor.data, np.dtype(value_type).newbyteorder("<")).reshape(tuple(tensor.shape))
    return array.astype(compute_dtype(value_type))


def _ivf(offsets: np.ndarray, lengths: np.ndarray, centroids: np.ndarray | None = None,
         loss: float | None = None, value_type: str = "float32") -> bytes:
    message = index_pb2.IVF(offsets=offsets.tolist(), lengths=lengths.tolist())
    if centroids is not None:
        message.centroids_tensor.CopyFrom(_tensor(centroids, value_type))
    if loss is not None:
        message.loss = loss
    return message.SerializeToString()


def details(params: VectorIndexParams) -> bytes:
    """``VectorIndexDetails`` with the runtime hints pylance 14 records for the build."""
    message = index_pb2.VectorIndexDetails(metric_type=METRICS[params.metric])
    hints = {
        "lance.ivf.sample_rate": str(params.sample_rate), "lance.ivf.max_iters": str(params.max_iters),
        "lance.ivf.shuffle_partition_concurrency": "2", "lance.ivf.shuffle_partition_batches": "10240",
        "lance.skip_transpose": "false",
    }
    if params.index_type == "IVF_PQ":
        message.pq.num_bits = params.num_bits
        message.pq.num_sub_vectors = params.num_sub_vectors or 0
        hints.update({"lance.pq.kmeans_redos": "1", "lance.pq.sample_rate": str(params.sample_rate),
                      "lance.pq.max_iters": str(params.max_iters)})
    else:
        message.flat.SetInParent()
    message.runtime_hints.update(hints)
    return message.SerializeToString()


def normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm, rounded as Lance does (the squares summed in float32 in
    dimension order, bit-identical to the vectors pylance 14 stores; float64 vectors in float64)."""
    dtype = np.float64 if np.asarray(vectors).dtype == np.float64 else np.float32
    vectors = np.asarray(vectors, dtype)
    squares = np.zeros(len(vectors), dtype)
    for column in range(vectors.shape[1]):  # one pass per dimension, each vectorised over rows
        squares += vectors[:, column] * vectors[:, column]
    norms = np.sqrt(squares)[:, None]
    return vectors / np.where(norms == 0, np.float32(1), norms)


def _fsl(values: np.ndarray, width: int, value_type: pa.DataType) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), value_type), width)


@dataclasses.dataclass
class IvfModel:
    """What training gives: the IVF centroids and (IVF_PQ) the PQ codebooks
    (``num_sub_vectors x 2**num_bits x sub_dim``); with them any vectors can be assigned and
    encoded independently (one fragment at a time on Spark executors)."""

    params: VectorIndexParams
    centroids: np.ndarray
    codebooks: np.ndarray | None = None


@dataclasses.dataclass
class EncodedPart:
    """Some vectors assigned and encoded: partition ids (int64), their distances' sum (the
    k-means loss share) and the stored values (IVF_PQ: codes n x m uint8; IVF_FLAT: the vectors,
    normalized for cosine)."""

    labels: np.ndarray
    loss: float
    values: np.ndarray


def prepare(vectors: np.ndarray, metric: str, value_type: str = "float32") -> np.ndarray:
    """Vectors as indexed: L2-normalized for ``cosine`` (rounded to ``value_type``, as stored),
    else unchanged."""
    return stored(normalize(vectors), value_type) if metric == "cosine" else vectors


def _train_metric(params: VectorIndexParams) -> str:
    return "dot" if params.metric == "dot" else "l2"


def train(vectors: np.ndarray, params: VectorIndexParams, rng: np.random.Generator
          ) -> tuple[IvfModel, np.ndarray, np.ndarray]:
    """Train IVF centroids (on ``num_partitions * sample_rate`` rows of ``vectors`` at most; ``dot``:
    unit centroids, as pylance 14: spherical k-means, rows assigned by inner product, a centroid
    its members' mean normalized) and for IVF_PQ the codebooks (on the residuals of ``vectors``); ``vectors`` are
    :func:`prepare`-d.
    Returns the model and the labels and distances of ``vectors`` (reused by :func:`encode`)."""
    n = len(vectors)
    train_metric = _train_metric(params)
    k = params.num_partitions
    sample = vectors
    if n > k * params.sample_rate:
        sample = vectors[np.sort(rng.choice(n, size=k * params.sample_rate, replace=False))]
    # dot: unit centroids, each its members' mean normalized (pylance 14's spherical k-means)
    centroids, _ = kmeans.train(sample, k, train_metric, rng, params.max_iters, spherical=params.metric == "dot")
    centroids = stored(centroids, params.value_type)
    labels, dists = kmeans.assign(vectors, centroids, train_metric)
    codebooks = None
    if params.index_type == "IVF_PQ":
        assert params.num_sub_vectors is not None
        values = residuals(vectors, centroids, labels, params.value_type) if pq.use_residual(params.metric) \
            else vectors
        codebooks = stored(pq.train(values, params.num_sub_vectors, rng, params.num_bits, params.max_iters),
                           params.value_type)
    return IvfModel(params, centroids, codebooks), labels, dists


def encode(vectors: np.ndarray, model: IvfModel, labels: np.ndarray | None = None,
           dists: np.ndarray | None = None) -> EncodedPart:
    """Assign :func:`prepare`-d ``vectors`` to partitions and encode them (labels/dists if known)."""
    if labels is None or dists is None:
        labels, dists = kmeans.assign(vectors, model.centroids, _train_metric(model.params))
    if model.codebooks is None:
        return EncodedPart(labels, float(dists.sum()), vectors)
    params = model.params
    values = residuals(vectors, model.centroids, labels, params.value_type) if pq.use_residual(params.metric) \
        else vectors
    return EncodedPart(labels, float(dists.sum()), pq.encode(values, model.codebooks))


def build(vectors: np.ndarray, row_ids: np.ndarray, params: VectorIndexParams,
          rng: np.random.Generator) -> dict[str, IndexFileData]:
    """The files of an IVF_FLAT/IVF_PQ over ``vectors`` (n x dim, finite, in the
    :func:`compute_dtype` of ``params.value_type``) at ``row_ids``."""
    vectors = prepare(vectors, params.metric, params.value_type)
    model, labels, dists = train(vectors, params, rng)
    return assemble(model, encode(vectors, model, labels, dists), row_ids)


def assemble(model: IvfModel, part: EncodedPart, row_ids: np.ndarray) -> dict[str, IndexFileData]:
    """The files of the index from the encoded rows (in scan order) and their row ids."""
    params, centroids = model.params, model.centroids
    k, dim = centroids.shape
    labels, loss = part.labels, part.loss
    order = np.argsort(labels, kind="stable")
    lengths = np.bincount(labels, minlength=k).astype(np.uint32)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.uint64)[:-1]]).astype(np.uint64)
    ids = pa.array(np.asarray(row_ids, np.uint64)[order], pa.uint64())
    global_buffers = [_ivf(offsets, lengths)]
    if params.index_type == "IVF_FLAT":
        value_type = pa.from_numpy_dtype(np.dtype(params.value_type))
        column = pa.field("flat", pa.list_(value_type, dim), nullable=False)
        values = _fsl(part.values[order].astype(params.value_type, copy=False), dim, value_type)
        storage = {"dim": dim}
    else:
        m = params.num_sub_vectors
        assert m is not None and model.codebooks is not None
        width = pq.code_width(m, params.num_bits)
        codes = pq.transpose_partitions(pq.pack(part.values[order], params.num_bits), lengths)
        column = pa.field("__pq_code", pa.list_(pa.uint8(), width))
        values = _fsl(codes, width, pa.uint8())
        global_buffers.append(_tensor(pq.codebook_matrix(model.codebooks), params.value_type).SerializeToString())
        storage = {"codebook_position": 2, "nbits": params.num_bits, "num_sub_vectors": m, "dimension": dim,
                   "codebook_tensor": [], "transposed": True}
    auxiliary = pa.table([ids, values], schema=pa.schema([pa.field("_rowid", pa.uint64()), column]))
    aux_metadata = {
        "distance_type": params.metric, "lance:ivf": "1",
        "storage_metadata": json.dumps([json.dumps(storage, separators=(",", ":"))], separators=(",", ":")),
    }
    marker = pa.table({"__flat_marker": pa.array([], pa.uint64())},
                      schema=pa.schema([pa.field("__flat_marker", pa.uint64(), nullable=False)]))
    index_metadata = {
        "lance:index": json.dumps({"type": params.index_type, "distance_type": params.metric}, separators=(",", ":")),
        "lance:ivf": "1",
        "lance:flat": json.dumps([""] * k, separators=(",", ":")),
    }
    zeros = np.zeros(k, np.uint64)
    return {
        AUXILIARY_NAME: IndexFileData(auxiliary, aux_metadata, global_buffers),
        INDEX_NAME: IndexFileData(marker, index_metadata, [_ivf(zeros, zeros.astype(np.uint32), centroids, loss,
                                                                   params.value_type)]),
    }
