"""``create_scalar_index``: build a BTREE, BITMAP or LABEL_LIST index and commit a ``CreateIndex``.

The column is read at the handle's version with row addresses (deleted rows excluded), the
index files are written under a new ``_indices/{uuid}/``, and one transaction adds the index
(and removes the one it replaces). On a retryable conflict the index is rebuilt on the latest
version; the files of the lost attempt are left for ``cleanup_old_versions``.
"""

from __future__ import annotations

import time
import uuid as uuid_lib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyroaring

from airflow_lance.core import feature_flags
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import (
    ColumnNotFoundError,
    IndexExistsError,
    InvalidInputError,
    InvalidTypeError,
    UnsupportedFeatureError,
)
from airflow_lance.core.indices import bitmap, btree, label_list
from airflow_lance.core.indices.files import write_index_file
from airflow_lance.core.indices.metadata import type_name, user_indices
from airflow_lance.core.transaction import LanceOperation

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

#: Scalar index types pylance 14 accepts; only those in BUILDERS are built here so far.
PYLANCE_SCALAR_TYPES = ("BTREE", "BITMAP", "NGRAM", "ZONEMAP", "LABEL_LIST", "INVERTED", "FTS", "BLOOMFILTER",
                        "RTREE", "MINHASHLSH")
SUPPORTED_TYPES = ("BTREE", "BITMAP", "LABEL_LIST")


def _scalar_type(dtype: pa.DataType) -> bool:
    return (pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_boolean(dtype)
          or pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_binary(dtype)
          or pa.types.is_large_binary(dtype) or pa.types.is_decimal(dtype) or pa.types.is_fixed_size_binary(dtype)
          or pa.types.is_temporal(dtype))


def _check_type(column: str, dtype: pa.DataType, index_type: str) -> None:
    if index_type == "LABEL_LIST":
        if not (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)) or not _scalar_type(dtype.value_type):
            raise InvalidTypeError(f"LABEL_LIST index column {column} must be a list of int, float, bool, str, "
                                   f"binary, decimal or temporal values, not {dtype}")
        return
    if not _scalar_type(dtype):
        raise InvalidTypeError(
            f"BTREE/BITMAP index column {column} must be int, float, bool, str, large_str, binary, large_binary, "
            f"decimal, fixed-size-binary, or temporal, not {dtype}"
        )


def _index_type(index_type: str) -> str:
    if not isinstance(index_type, str):
        raise InvalidTypeError(f"index_type must be a string, not {type(index_type).__name__}")
    upper = index_type.upper()
    if upper not in PYLANCE_SCALAR_TYPES:
        raise UnsupportedFeatureError(
            f"Only {', '.join(repr(t) for t in PYLANCE_SCALAR_TYPES)} are scalar index types; received {index_type!r}"
        )
    if upper not in SUPPORTED_TYPES:
        supported = ", ".join(SUPPORTED_TYPES)
        raise UnsupportedFeatureError(f"{upper} indices are not supported yet (supported: {supported})")
    return upper


TYPE_URLS = {"BTREE": btree.TYPE_URL, "BITMAP": bitmap.TYPE_URL, "LABEL_LIST": label_list.TYPE_URL}


def resolve_name(current: LanceDataset, column: str, field_id: int, index_type: str, name: str | None,
                 replace: bool, type_url: str | None = None) -> tuple[str, list[table_pb2.IndexMetadata]]:
    """pylance 14's naming: the index's name and the entries it replaces.

    Without ``name``: ``{column}_idx``, or ``{column}_idx_2``, ``_3``, ... while the name is taken by
    an index of another type on the column (of the same type: the details' type names agree, as the
    two URLs vector details have had; an index without details, which releases before 0.20 wrote,
    counts as the same type, as in pylance 14). A name taken by an index on other fields is an error
    (also with ``replace``); one taken on the same fields is replaced if ``replace``, else an error.
    """
    indices = user_indices(current.manifest_file)
    type_url = type_url or TYPE_URLS[index_type]

    def same_type(index: table_pb2.IndexMetadata) -> bool:
        found = index.index_details.type_url
        return not found or type_name(found) == type_name(type_url)

    if name is None:
        for n in range(1, len(indices) + 2):
            name = f"{column}_idx" if n == 1 else f"{column}_idx_{n}"
            taken = [i for i in indices if i.name == name]
            if not taken or (list(taken[0].fields) == [field_id] and same_type(taken[0])):
                break
    assert name is not None
    existing = [i for i in indices if i.name == name]
    if existing and list(existing[0].fields) != [field_id]:
        raise IndexExistsError(f"Index name {name!r} already exists with different fields, please specify a "
                               "different name")
    if existing and not replace:
        raise IndexExistsError(
            f"Index name {name!r} already exists, please specify a different name or use replace=True"
        )
    return name, existing


def reads_row_ids(current: LanceDataset, index_type: str) -> bool:
    """Whether the index holds stable row ids (else row addresses): pylance 14 on datasets with
    stable row ids: BTREE holds row addresses, BITMAP and LABEL_LIST the stable row ids (which
    compaction keeps, so only BTREE is remapped then)."""
    stable = bool(current.manifest_file.manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)
    return stable and index_type != "BTREE"


def read_column(current: LanceDataset, column: str, index_type: str, fragment_ids: Sequence[int] | None = None
                ) -> tuple[pa.Array, np.ndarray, list[int]]:
    """The values of ``column`` in ``fragment_ids`` (default: every fragment; deleted rows left
    out) with the row addresses (or ids, :func:`reads_row_ids`) the index holds, and the fragments read."""
    by_id = reads_row_ids(current, index_type)
    fragments = list(current._fragments)
    if fragment_ids is not None:
        wanted = set(fragment_ids)
        fragments = [f for f in fragments if f.id in wanted]
    table = current.scanner(columns=[column], with_row_id=by_id, with_row_address=not by_id,
                            fragments=[current.get_fragment(f.id) for f in fragments]).to_table()
    values = table.column(column).combine_chunks()
    addrs = table.column("_rowid" if by_id else "_rowaddr").to_numpy().astype(np.uint64, copy=False)
    return values, addrs, [f.id for f in fragments]


def index_files(current: LanceDataset, index_type: str, values: pa.Array, addrs: np.ndarray,
                order: np.ndarray | None = None) -> tuple[dict, str, int]:
    """The files of a scalar index over ``values`` at ``addrs`` (any order), its type URL and version.
    ``order``: the positions in index order when known (BTREE, BITMAP; :func:`.sort.merge_order`)."""
    stable = bool(current.manifest_file.manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)
    if index_type == "BTREE":
        return btree.build(values, addrs, order=order), btree.TYPE_URL, btree.index_version(stable)
    if index_type == "BITMAP":
        return bitmap.build(values, addrs, order), bitmap.TYPE_URL, bitmap.INDEX_VERSION
    return label_list.build(values, addrs), label_list.TYPE_URL, label_list.INDEX_VERSION


def write_index(current: LanceDataset, field_id: int, name: str, files: dict, type_url: str, version: int,
                fragment_ids: Sequence[int], dataset_version: int | None = None) -> table_pb2.IndexMetadata:
    """Write ``files`` under a new ``_indices/{uuid}/`` and return the index's ``IndexMetadata``."""
    uuid = str(uuid_lib.uuid4())
    written = [write_index_file(current.store, uuid, file_name, data, current.data_storage_version)
               for file_name, data in files.items()]
    index = table_pb2.IndexMetadata(
        fields=[field_id], name=name,
        dataset_version=current.version if dataset_version is None else dataset_version,
        fragment_bitmap=pyroaring.BitMap(fragment_ids).serialize(),
        index_version=version, created_at=int(time.time() * 1000), files=written,
    )
    index.uuid.uuid = uuid_lib.UUID(uuid).bytes
    index.index_details.type_url = type_url
    return index


def empty_column(current: LanceDataset, column: str) -> tuple[pa.Array, np.ndarray, list[int]]:
    """What :func:`read_column` gives for no fragment: no values (of the column's type), no row
    addresses, no fragments (``train=False``: pylance 14 writes the index over no rows)."""
    return pa.array([], current.schema.field(column).type), np.zeros(0, np.uint64), []


def build_index(current: LanceDataset, column: str, field_id: int, index_type: str, name: str,
                fragment_ids: Sequence[int] | None = None, dataset_version: int | None = None, train: bool = True
                ) -> table_pb2.IndexMetadata:
    """Write the files of an index over ``column`` in ``fragment_ids`` (default: every fragment) of
    ``current`` under a new ``_indices/{uuid}/`` and return its ``IndexMetadata``; without ``train``
    pylance 14's empty index: the files over no rows, an empty fragment bitmap."""
    values, addrs, fragments = read_column(current, column, index_type, fragment_ids) if train else \
        empty_column(current, column)
    files, type_url, version = index_files(current, index_type, values, addrs)
    return write_index(current, field_id, name, files, type_url, version, fragments, dataset_version)


def _build(current: LanceDataset, column: str, field_id: int, index_type: str, name: str | None,
           replace: bool, train: bool) -> LanceOperation.CreateIndex:
    name, existing = resolve_name(current, column, field_id, index_type, name, replace)
    index = build_index(current, column, field_id, index_type, name, train=train)
    return LanceOperation.CreateIndex(new_indices=[index], removed_indices=existing)


def check_train(train: object) -> bool:
    if not isinstance(train, bool):
        raise InvalidTypeError(f"train must be a bool, not {type(train).__name__}")
    return train


def check_scalar_index(dataset: LanceDataset, column: str, index_type: str, name: str | None, replace: bool
                       ) -> tuple[str, int]:
    """Every check of :func:`create_scalar_index` (nothing is written): the index type and the field id."""
    kind = _index_type(index_type)
    if not isinstance(column, str):
        raise InvalidTypeError(f"column must be a string, not {type(column).__name__}")
    if column not in dataset.schema.names:
        raise ColumnNotFoundError(f"{column} not found in schema")
    _check_type(column, dataset.schema.field(column).type, kind)
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidInputError(f"name must be a non-empty string, not {name!r}")
    field_id = next(f.id for f in dataset.lance_schema.top_level() if f.name == column)
    resolve_name(dataset, column, field_id, kind, name, replace)  # name errors before anything is written
    return kind, field_id


def create_scalar_index(
    dataset: LanceDataset, column: str, index_type: str = "BTREE", name: str | None = None, *,
    replace: bool = True, train: bool = True, conflict_retries: int = 10,
) -> None:
    """Build a scalar index on ``column`` and commit it; the handle moves to the new version.

    ``train=False`` (pylance 14): the index is written over no rows (its files, an empty fragment
    bitmap: every fragment is unindexed), a later ``optimize_indices`` builds it over the data.
    ``name`` defaults to ``{column}_idx`` (see :func:`resolve_name`). An index of the same name on
    the same column is replaced when ``replace`` (pylance 14's default), else IndexExistsError.
    Raises before writing anything: ColumnNotFoundError (KeyError), InvalidTypeError (TypeError)
    for a column type the index cannot hold, UnsupportedFeatureError (NotImplementedError) for an
    unknown or not yet supported ``index_type``.
    """
    check_train(train)
    kind, field_id = check_scalar_index(dataset, column, index_type, name, replace)

    def plan(current: LanceDataset) -> tuple[LanceOperation.CreateIndex, None]:
        nonlocal kind, field_id
        if current is not dataset:  # a retry: the column may have been cast (a new field id) or dropped
            kind, field_id = check_scalar_index(current, column, index_type, name, replace)
        return _build(current, column, field_id, kind, name, replace, train), None

    dataset._commit_planned(plan, conflict_retries)
