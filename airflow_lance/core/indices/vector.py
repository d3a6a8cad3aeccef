"""``create_index``: build an IVF_FLAT or IVF_PQ vector index and commit a ``CreateIndex``.

On float16, float32 or float64 vectors; the files store them (and the centroids, the codebook)
in the column's type, as pylance 14 (:mod:`.ivf`).

pylance 14's names and defaults: ``metric`` "L2" (also "euclidean"), "cosine" or "dot";
``replace`` False; ``num_partitions`` default ``num_rows // target_partition_size`` in
[1, 4096] (target 4096 rows for IVF_FLAT, 8192 for IVF_PQ); ``num_sub_vectors`` required for IVF_PQ;
``num_bits`` 8 (or 4: two codes a byte, :mod:`.pq`; ignored by IVF_FLAT); ``sample_rate`` 256;
``max_iters`` 50. Rows whose vector is null or not finite are left out. As pylance 14, at most
one partition per vector is trained (IVF_PQ: one per 256 vectors, at least one), with a warning;
with no rows (IVF_PQ: fewer than ``2**num_bits`` vectors) it commits an empty index (no files)
that ``optimize_indices`` builds once there are rows. Every check runs
before anything is written; the files are laid out by :mod:`.ivf`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid as uuid_lib
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import (
    ColumnNotFoundError,
    IndexParamsError,
    InvalidInputError,
    InvalidTypeError,
    UnsupportedFeatureError,
)
from airflow_lance.core.indices import ivf
from airflow_lance.core.indices.create import check_train, resolve_name
from airflow_lance.core.indices.files import write_index_file
from airflow_lance.core.transaction import LanceOperation

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

log = logging.getLogger(__name__)

PYLANCE_VECTOR_TYPES = ("IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_HNSW_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ", "IVF_RQ")
SUPPORTED_TYPES = ("IVF_FLAT", "IVF_PQ")
PYLANCE_METRICS = ("l2", "cosine", "euclidean", "dot", "hamming")
TARGET_PARTITION_SIZE = {"IVF_FLAT": 4096, "IVF_PQ": 8192}
MAX_PARTITIONS = 4096
#: Keyword arguments of pylance's ``create_index`` accepted here only at their defaults.
_DEFAULTS: dict[str, Any] = {
    "ivf_centroids": None, "pq_codebook": None, "accelerator": None, "index_cache_size": None,
    "shuffle_partition_batches": None, "shuffle_partition_concurrency": None, "ivf_centroids_file": None,
    "precomputed_partition_dataset": None, "storage_options": None, "filter_nan": True,
    "fragment_ids": None, "index_uuid": None, "streaming_sample_rate": None, "streaming_coreset_rate": None,
    "streaming_refine_passes": None, "skip_transpose": False, "progress_callback": None,
    "index_file_version": "V3",
}


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidTypeError(f"{name} must be int, got {type(value)}")
    if value < minimum:
        raise InvalidInputError(f"{name} must be a {'positive' if minimum else 'non-negative'} integer, got {value}")
    return int(value)


def check_training(params: ivf.VectorIndexParams) -> None:
    """pylance 14 records ``sample_rate``/``max_iters`` of 0 without training (``train=False``) and
    refuses them when it trains (a build, ``optimize_indices`` building an empty index), with this message;
    likewise IVF_PQ ``num_bits`` other than 4 or 8 and, with 4 bits, an odd ``num_sub_vectors``
    (pylance 14 commits the empty index for too few rows whatever these are)."""
    if params.sample_rate < 1 or params.max_iters < 1:
        raise InvalidInputError("Invalid user input: sample_rate must be positive and max_iters must be in "
                                f"1..=4294967295, got sample_rate={params.sample_rate} and "
                                f"max_iters={params.max_iters}")
    if params.index_type == "IVF_PQ":  # pylance 14's checks when it encodes (after training; ours before)
        if params.num_bits not in (4, 8):
            raise IndexParamsError(f"ProductQuantization: num_bits {params.num_bits} not supported")
        if params.num_bits == 4 and (params.num_sub_vectors or 0) % 2:
            raise IndexParamsError("PQ: num_sub_vectors must be divisible by 2 for num_bits=4, but got "
                                   f"{params.num_sub_vectors}")


def _column(dataset: LanceDataset, column: Any) -> tuple[str, int, int]:
    if isinstance(column, (list, tuple)):
        if len(column) != 1:
            raise UnsupportedFeatureError(f"a vector index covers exactly one column, got {list(column)}")
        column = column[0]
    if not isinstance(column, str):
        raise InvalidTypeError(f"column must be a string, not {type(column).__name__}")
    if column not in dataset.schema.names:
        raise ColumnNotFoundError(f"{column} not found in schema")
    dtype = dataset.schema.field(column).type
    if not pa.types.is_fixed_size_list(dtype):
        raise InvalidTypeError(f"Vector column {column} must be FixedSizeListArray, got {dtype}")
    if not pa.types.is_floating(dtype.value_type) and not pa.types.is_uint8(dtype.value_type):
        raise InvalidTypeError(f"Vector column {column} must have floating value type, got {dtype.value_type}")
    field_id = next(f.id for f in dataset.lance_schema.top_level() if f.name == column)
    return column, field_id, dtype.list_size


def _value_type(dataset: LanceDataset, column: str, metric: str) -> str:
    """The vector values' type (float16, float32 or float64). pylance 14 takes uint8 vectors for the
    hamming metric only, refusing them at training for the others."""
    value_type = dataset.schema.field(column).type.value_type
    if pa.types.is_uint8(value_type):  # hamming is refused in _params
        raise InvalidInputError(f"Invalid user input: Unsupported training sample type UInt8 with metric {metric}")
    return str(value_type.to_pandas_dtype().__name__)


def _params(dataset: LanceDataset, index_type: Any, metric: Any, num_partitions: Any, num_sub_vectors: Any,
            target_partition_size: Any, dim: int, kwargs: dict[str, Any], train: bool = True
            ) -> ivf.VectorIndexParams:
    if not isinstance(index_type, str):
        raise InvalidTypeError(f"index_type must be a string, not {type(index_type).__name__}")
    kind = index_type.upper()
    if kind not in PYLANCE_VECTOR_TYPES:
        raise UnsupportedFeatureError(f"Only {list(PYLANCE_VECTOR_TYPES)} index types supported. Got {index_type}")
    if kind not in SUPPORTED_TYPES:
        raise UnsupportedFeatureError(f"{kind} indices are not supported yet (supported: IVF_FLAT, IVF_PQ)")
    if not isinstance(metric, str) or metric.lower() not in PYLANCE_METRICS:
        raise InvalidInputError(f"Metric {metric} not supported.")
    metric = "l2" if metric.lower() == "euclidean" else metric.lower()
    if metric == "hamming":
        raise UnsupportedFeatureError("the hamming metric is not supported yet (supported: l2, cosine, dot)")
    extra = dict(kwargs)
    num_bits = _positive_int("num_bits", extra.pop("num_bits", 8))
    sample_rate = _positive_int("sample_rate", extra.pop("sample_rate", ivf.SAMPLE_RATE), 0)
    max_iters = _positive_int("max_iters", extra.pop("max_iters", 50), 0)
    for key, value in extra.items():
        if key not in _DEFAULTS:
            raise InvalidInputError(f"create_index got an unexpected argument {key!r}")
        default = _DEFAULTS[key]
        if (value is not None) if default is None else not (type(value) is type(default) and value == default):
            raise UnsupportedFeatureError(f"create_index({key}=...) is not supported yet")
    if num_partitions is None:
        target = TARGET_PARTITION_SIZE[kind] if target_partition_size is None else \
            _positive_int("target_partition_size", target_partition_size)
        num_partitions = min(max(1, dataset.count_rows() // target), MAX_PARTITIONS)
    elif isinstance(num_partitions, float):
        num_partitions = int(num_partitions)
    if not train and isinstance(num_partitions, (int, np.integer)) and not isinstance(num_partitions, bool) \
            and num_partitions < 1:
        num_partitions = 1  # pylance 14 without training: not checked (nor recorded; optimize chooses its own)
    num_partitions = _positive_int("num_partitions", num_partitions)
    if kind == "IVF_PQ":
        if num_sub_vectors is None:  # pylance 14's message (num_partitions has a default)
            raise InvalidInputError("num_partitions and num_sub_vectors are required for IVF_PQ")
        num_sub_vectors = _positive_int("num_sub_vectors", num_sub_vectors)
        if dim % num_sub_vectors:
            raise InvalidInputError(f"dimension ({dim}) must be divisible by num_sub_vectors ({num_sub_vectors})")
    return ivf.VectorIndexParams(kind, metric, num_partitions, num_sub_vectors if kind == "IVF_PQ" else None,
                                 num_bits if kind == "IVF_PQ" else 8, sample_rate, max_iters)


def read_vectors(current: LanceDataset, column: str, dim: int, fragment_ids: list[int] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The finite, non-null vectors of ``column`` (in :func:`ivf.compute_dtype`: float64 vectors as
    float64, else float32) with their row ids, and the fragments read (``fragment_ids``, default
    every fragment)."""
    fragments = [f.id for f in current._fragments]
    if fragment_ids is None:
        table = current.scanner(columns=[column], with_row_id=True).to_table()
    else:
        wanted = set(fragment_ids)
        fragments = [f for f in fragments if f in wanted]
        table = current.scanner(columns=[column], with_row_id=True,
                                fragments=[current.get_fragment(f) for f in fragments]).to_table()
    values = table.column(column).combine_chunks()
    valid = values.is_valid()
    ids = table.column("_rowid").combine_chunks().filter(valid)
    values = values.filter(valid)
    flat = pc.list_flatten(values).to_numpy(zero_copy_only=False)
    vectors = flat.astype(ivf.compute_dtype(flat.dtype.name), copy=False).reshape(len(values), dim)
    finite = np.isfinite(vectors).all(axis=1)
    return vectors[finite], ids.to_numpy(zero_copy_only=False).astype(np.uint64)[finite], fragments


def trains_nothing(params: ivf.VectorIndexParams, rows: int, vectors: int) -> bool:
    """pylance 14 commits an *empty* index (no files, empty fragment bitmap; :func:`empty_vector_index`)
    instead of training on a dataset without rows, or IVF_PQ on fewer vectors than PQ trains on
    (``2**num_bits``); a later ``optimize_indices`` builds the full index."""
    return rows == 0 or (params.index_type == "IVF_PQ" and vectors < 2 ** params.num_bits)


def cap_partitions(params: ivf.VectorIndexParams, rows: int) -> ivf.VectorIndexParams:
    """pylance 14 trains at most one partition per vector, and for IVF_PQ at most one per 256
    (callers commit an empty index where :func:`trains_nothing`)."""
    if params.index_type == "IVF_PQ" and rows < 2 ** params.num_bits:
        raise InvalidInputError(f"Not enough rows to train PQ. Requires {2 ** params.num_bits} rows but only "
                                f"{rows} available")
    if rows == 0:
        raise InvalidInputError("the column holds no non-null, finite vectors to train IVF on")
    cap = max(1, rows // 256) if params.index_type == "IVF_PQ" else rows  # 4-bit PQ too (pylance 14 observed)
    if params.num_partitions > cap:
        log.warning("Build Vector Index: training %d of the %d requested IVF partitions; the column holds %d vectors",
                    cap, params.num_partitions, rows)
        return dataclasses.replace(params, num_partitions=cap)
    return params


def empty_vector_index(current: LanceDataset, field_id: int, name: str, params: ivf.VectorIndexParams,
                       dataset_version: int | None = None) -> table_pb2.IndexMetadata:
    """The entry pylance 14 commits when :func:`trains_nothing`: a new uuid, no files (nothing is
    written under ``_indices/``), an empty fragment bitmap, the build's details, index version 1."""
    index = table_pb2.IndexMetadata(
        fields=[field_id], name=name, dataset_version=current.version if dataset_version is None else dataset_version,
        fragment_bitmap=pyroaring.BitMap().serialize(), index_version=ivf.INDEX_VERSION,
        created_at=int(time.time() * 1000),
    )
    index.uuid.uuid = uuid_lib.uuid4().bytes
    index.index_details.type_url = ivf.TYPE_URL
    index.index_details.value = ivf.details(params)
    return index


def is_empty_index(index: table_pb2.IndexMetadata) -> bool:
    """An IVF entry without files (:func:`empty_vector_index`, pylance's or ours)."""
    return index.index_details.type_url == ivf.TYPE_URL and not index.files


def write_vector_index(current: LanceDataset, field_id: int, name: str, params: ivf.VectorIndexParams,
                       files: dict[str, Any], fragments: list[int],
                       dataset_version: int | None = None) -> table_pb2.IndexMetadata:
    """Write ``files`` (:func:`ivf.assemble`'s) under a new ``_indices/{uuid}/``; its ``IndexMetadata``."""
    uuid = str(uuid_lib.uuid4())
    written = [write_index_file(current.store, uuid, file_name, data, current.data_storage_version)
               for file_name, data in files.items()]
    index = table_pb2.IndexMetadata(
        fields=[field_id], name=name, dataset_version=current.version if dataset_version is None else dataset_version,
        fragment_bitmap=pyroaring.BitMap(fragments).serialize(),
        index_version=ivf.INDEX_VERSION, created_at=int(time.time() * 1000), files=written,
    )
    index.uuid.uuid = uuid_lib.UUID(uuid).bytes
    index.index_details.type_url = ivf.TYPE_URL
    index.index_details.value = ivf.details(params)
    return index


def build_vector_index(current: LanceDataset, column: str, field_id: int, dim: int, params: ivf.VectorIndexParams,
                       name: str, seed: int | None = None) -> tuple[table_pb2.IndexMetadata, int]:
    """Write the files of the index under a new ``_indices/{uuid}/``; its ``IndexMetadata`` and the
    vectors it holds (pylance 14's empty index where :func:`trains_nothing`: no files, 0)."""
    vectors, row_ids, fragments = read_vectors(current, column, dim)
    if trains_nothing(params, current.count_rows(), len(vectors)):
        return empty_vector_index(current, field_id, name, params), 0
    check_training(params)
    params = cap_partitions(params, len(vectors))
    files = ivf.build(vectors, row_ids, params, np.random.default_rng(seed))
    return write_vector_index(current, field_id, name, params, files, fragments), len(row_ids)


def check_vector_index(dataset: LanceDataset, column: Any, index_type: str, name: str | None, metric: str,
                       replace: bool, num_partitions: int | None, num_sub_vectors: int | None,
                       target_partition_size: int | None = None, train: bool = True, **kwargs: Any
                       ) -> tuple[str, int, int, ivf.VectorIndexParams]:
    """Every check of :func:`create_index` (nothing is written): the column, its field id, the
    dimension and the build's parameters. Without ``train`` (pylance 14) no row is read, so rows
    without vectors are no error, nor is a ``num_partitions`` below 1."""
    check_train(train)
    column, field_id, dim = _column(dataset, column)
    params = _params(dataset, index_type, metric, num_partitions, num_sub_vectors, target_partition_size, dim,
                     kwargs, train)
    params = dataclasses.replace(params, value_type=_value_type(dataset, column, params.metric))
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidInputError(f"name must be a non-empty string, not {name!r}")
    resolve_name(dataset, column, field_id, params.index_type, name, replace, ivf.TYPE_URL)
    if train:
        _check_rows(dataset, column, dim, params)
    return column, field_id, dim, params


def _check_rows(dataset: LanceDataset, column: str, dim: int, params: ivf.VectorIndexParams) -> None:
    """The build's row check made up front where it is cheap: live rows whose vectors are all
    null or not finite cannot train IVF (InvalidInputError, as pylance 14). No rows at all, or
    too few vectors for PQ, give an empty index instead (:func:`trains_nothing`)."""
    rows = dataset.count_rows()
    untrainable = params.sample_rate < 1 or params.max_iters < 1  # refused only where it trains (pylance 14)
    bad_pq = params.index_type == "IVF_PQ" and (  # likewise (so refused before a Spark job is submitted)
        params.num_bits not in (4, 8) or (params.num_bits == 4 and (params.num_sub_vectors or 0) % 2))
    if 0 < rows < 2 ** params.num_bits or ((untrainable or bad_pq) and rows):  # only then are the rows read
        vectors, _, _ = read_vectors(dataset, column, dim)
        if not trains_nothing(params, rows, len(vectors)):
            check_training(params)
            cap_partitions(params, len(vectors))


def create_index(
    dataset: LanceDataset, column: Any, index_type: str, name: str | None = None, metric: str = "L2",
    replace: bool = False, num_partitions: int | None = None, num_sub_vectors: int | None = None, *,
    target_partition_size: int | None = None, train: bool = True, conflict_retries: int = 10, **kwargs: Any,
) -> None:
    """Build an IVF_FLAT or IVF_PQ index on ``column`` and commit it; the handle moves to the new version.

    Raises before writing anything: ColumnNotFoundError (KeyError); InvalidTypeError
    (TypeError) for a column that is no fixed-size list of floats (float16, float32, float64; uint8 is
    an InvalidInputError, as pylance 14 refuses it at training) or a non-int count;
    InvalidInputError (ValueError) for an unknown metric, a ``num_partitions`` /
    ``num_sub_vectors`` below 1 or not dividing the dimension, live rows without one finite
    vector; on a dataset without rows (IVF_PQ: fewer than ``2**num_bits`` finite vectors) an empty index is
    committed, as pylance 14 (:func:`empty_vector_index`; ``optimize_indices`` builds it later);
    IndexParamsError (RuntimeError, ValueError) for IVF_PQ ``num_bits`` other than 4 or 8 or an odd
    ``num_sub_vectors`` with 4 bits (where it trains);
    UnsupportedFeatureError (NotImplementedError) for other index types, the hamming metric
    and pylance arguments not implemented here (given at other than their defaults);
    IndexExistsError (RuntimeError) for a taken name without ``replace``.
    ``train=False`` (pylance 14): the empty index (:func:`empty_vector_index`) whatever the rows.
    """
    column, field_id, dim, params = check_vector_index(dataset, column, index_type, name, metric, replace,
                                                       num_partitions, num_sub_vectors, target_partition_size,
                                                       train, **kwargs)

    def plan(current: LanceDataset) -> tuple[LanceOperation.CreateIndex, None]:
        nonlocal column, field_id, dim, params
        if current is not dataset:  # a retry: the column may have been cast (a new field id) or dropped
            column, field_id, dim, params = check_vector_index(current, column, index_type, name, metric, replace,
                                                               num_partitions, num_sub_vectors,
                                                               target_partition_size, train, **kwargs)
        index_name, existing = resolve_name(current, column, field_id, params.index_type, name, replace, ivf.TYPE_URL)
        if train:
            index, _ = build_vector_index(current, column, field_id, dim, params, index_name)
        else:
            index = empty_vector_index(current, field_id, name=index_name, params=params)
        return LanceOperation.CreateIndex(new_indices=[index], removed_indices=existing), None

    dataset._commit_planned(plan, conflict_retries)
