"""One entry point for any index type: check the request and build the index without committing.

:func:`check_index` runs every check of ``create_scalar_index`` / ``create_index`` (nothing is
written; the core's typed errors) and resolves the index's name and the entries it replaces;
:func:`build_index_uncommitted` writes the files under a new ``_indices/{uuid}/`` and returns the
``IndexMetadata`` to commit in a ``CreateIndex`` (the Airflow operator's local mode; its Spark mode
builds the same files on Spark, :mod:`airflow_lance.spark.create_index`).
"""

from __future__ import annotations

import base64
import dataclasses
import uuid as uuid_lib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from airflow_lance.core import layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import InvalidInputError, InvalidTypeError, UnsupportedFeatureError
from airflow_lance.core.indices import ivf
from airflow_lance.core.indices.create import PYLANCE_SCALAR_TYPES
from airflow_lance.core.indices.create import SUPPORTED_TYPES as SUPPORTED_SCALAR_TYPES
from airflow_lance.core.indices.create import (
    check_scalar_index,
    check_train,
    empty_column,
    index_files,
    read_column,
    resolve_name,
    write_index,
)
from airflow_lance.core.indices.vector import SUPPORTED_TYPES as SUPPORTED_VECTOR_TYPES
from airflow_lance.core.indices.vector import (
    PYLANCE_VECTOR_TYPES,
    build_vector_index,
    check_vector_index,
    empty_vector_index,
    trains_nothing,
)

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

#: Keyword arguments of :func:`check_index` besides the column and index type.
VECTOR_ARGS = ("metric", "num_partitions", "num_sub_vectors", "target_partition_size", "sample_rate", "max_iters",
               "num_bits")


@dataclasses.dataclass
class CheckedIndex:
    """A request that passed the checks: what to build and the name it gets."""

    column: str
    index_type: str
    field_id: int
    name: str
    removed: list[table_pb2.IndexMetadata]
    dim: int | None = None
    vector: ivf.VectorIndexParams | None = None
    train: bool = True

    @property
    def is_vector(self) -> bool:
        return self.vector is not None


def is_vector_type(index_type: Any) -> bool:
    return isinstance(index_type, str) and index_type.upper() in PYLANCE_VECTOR_TYPES


def check_index(ds: LanceDataset, column: Any, index_type: Any, name: str | None = None, replace: bool = False,
                train: bool = True, **kwargs: Any) -> CheckedIndex:
    """The checks of the core's create for ``index_type`` (scalar or vector) on ``ds`` (nothing is
    written); ``kwargs`` are the vector build's (:data:`VECTOR_ARGS`, given as None for defaults),
    refused for scalar types when given. ``train=False``: pylance 14's empty index (any type)."""
    check_train(train)
    if not isinstance(index_type, str):
        raise InvalidTypeError(f"index_type must be a string, not {type(index_type).__name__}")
    given = {k: v for k, v in kwargs.items() if v is not None}
    if not is_vector_type(index_type) and index_type.upper() not in PYLANCE_SCALAR_TYPES:
        raise UnsupportedFeatureError(
            f"unknown index type {index_type!r}: pylance's scalar types are {', '.join(PYLANCE_SCALAR_TYPES)}, "
            f"its vector types {', '.join(PYLANCE_VECTOR_TYPES)} (built here: {', '.join(SUPPORTED_SCALAR_TYPES)}, "
            f"{', '.join(SUPPORTED_VECTOR_TYPES)})")
    if is_vector_type(index_type):
        extra = {k: given[k] for k in ("sample_rate", "max_iters", "num_bits") if k in given}
        column, field_id, dim, params = check_vector_index(
            ds, column, index_type, name, given.get("metric", "L2"), replace, given.get("num_partitions"),
            given.get("num_sub_vectors"), given.get("target_partition_size"), train, **extra)
        resolved, removed = resolve_name(ds, column, field_id, params.index_type, name, replace, ivf.TYPE_URL)
        return CheckedIndex(column, params.index_type, field_id, resolved, removed, dim, params, train)
    kind, field_id = check_scalar_index(ds, column, index_type, name, replace)
    unused = sorted(k for k in given if k != "metric" or str(given[k]).lower() != "l2")
    if unused:
        raise InvalidInputError(f"{', '.join(unused)} apply to vector indices only, not to a {kind} index")
    resolved, removed = resolve_name(ds, column, field_id, kind, name, replace)
    return CheckedIndex(column, kind, field_id, resolved, removed, train=train)


def builds_empty_index(ds: LanceDataset, checked: CheckedIndex) -> bool:
    """Whether the checked index is, without reading a vector, one pylance 14 commits empty
    (``train=False``; a vector index on no rows, IVF_PQ on fewer live rows than PQ trains on): the
    Airflow operator then builds it locally, no Spark job runs (:func:`.vector.trains_nothing`;
    the Spark job makes the same entry when only the vectors, not the rows, are too few)."""
    if not checked.train:
        return True
    if checked.vector is None:
        return False
    rows = ds.count_rows()
    return trains_nothing(checked.vector, rows, rows)  # as if every row had a vector


def build_index_uncommitted(ds: LanceDataset, checked: CheckedIndex, seed: int | None = None
                            ) -> tuple[table_pb2.IndexMetadata, int]:
    """Write the files of the checked index over every fragment of ``ds``; its ``IndexMetadata``
    (to commit in a ``CreateIndex`` at ``ds.version``) and the rows indexed."""
    if checked.vector is not None:
        assert checked.dim is not None
        if not checked.train:
            return empty_vector_index(ds, checked.field_id, checked.name, checked.vector), 0
        return build_vector_index(ds, checked.column, checked.field_id, checked.dim, checked.vector, checked.name, seed)
    values, addrs, fragments = read_column(ds, checked.column, checked.index_type) if checked.train else \
        empty_column(ds, checked.column)
    files, type_url, version = index_files(ds, checked.index_type, values, addrs)
    return write_index(ds, checked.field_id, checked.name, files, type_url, version, fragments), len(addrs)


def check_params(ds: LanceDataset, params: Mapping[str, Any]) -> CheckedIndex:
    """:func:`check_index` of a job's parameter mapping (``column``, ``index_type``, ``name``,
    ``replace``, ``train`` (default True) and :data:`VECTOR_ARGS`; other keys ignored)."""
    return check_index(ds, params.get("column"), params.get("index_type"), params.get("name"),
                       bool(params.get("replace")), params.get("train", True),
                       **{k: params.get(k) for k in VECTOR_ARGS})


def index_uuid(index: table_pb2.IndexMetadata) -> str:
    """The index's uuid as text (its ``_indices/{uuid}/`` folder)."""
    return str(uuid_lib.UUID(bytes=index.uuid.uuid))


def encode_index(index: table_pb2.IndexMetadata) -> str:
    """An ``IndexMetadata`` as base64 text (for a staged job result)."""
    return base64.b64encode(index.SerializeToString()).decode()


def decode_index(text: str) -> table_pb2.IndexMetadata:
    """The ``IndexMetadata`` :func:`encode_index` gave; InvalidInputError if it is malformed."""
    try:
        return table_pb2.IndexMetadata.FromString(base64.b64decode(text, validate=True))
    except (ValueError, TypeError, DecodeError) as exc:
        raise InvalidInputError(f"not an encoded IndexMetadata: {exc}") from None


def missing_index_files(ds: LanceDataset, index: table_pb2.IndexMetadata) -> list[str]:
    """The files of ``index`` (written, maybe not committed) that are not in ``ds``'s store."""
    folder = layout.index_dir(index_uuid(index))
    return [f"{folder}/{f.path}" for f in index.files if not ds.store.exists(f"{folder}/{f.path}")]
