"""Fragment-level operations with pylance's names: ``LanceFragment.create`` (write one
fragment's data file, commit nothing) and ``LanceFragment.delete`` (a new deletion vector,
commit nothing); the caller commits them with ``LanceOperation.Append``/``Overwrite``/``Delete``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from airflow_lance.core.delete import plan_delete
from airflow_lance.core.errors import InvalidInputError, InvalidTypeError, UnsupportedFeatureError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore, open_store
from airflow_lance.core.write import MAX_BYTES_PER_FILE, prepare_write, write_data_files

#: One fragment, one data file: no row limit cuts it.
_UNLIMITED_ROWS = (1 << 63) - 1


def create_fragment(
    dataset_uri: str | os.PathLike[str],
    data: Any,
    fragment_id: int | None = None,
    schema: pa.Schema | None = None,
    max_rows_per_group: int = 1024,
    progress: Any = None,
    mode: str = "append",
    *,
    data_storage_version: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> FragmentMetadata:
    """Write ``data`` as one fragment (one data file) under ``dataset_uri``; return its metadata.

    With ``mode="append"`` on an existing dataset the data must match its schema (its field
    ids are used); otherwise the schema is new (ids from 0). ``fragment_id`` None gives id 0
    ("assign at commit").
    """
    if fragment_id is not None and (isinstance(fragment_id, bool) or not isinstance(fragment_id, int)
                                    or fragment_id < 0):
        raise InvalidTypeError(f"fragment_id must be a non-negative int, not {fragment_id!r}")
    if progress is not None:
        raise UnsupportedFeatureError("progress hooks of LanceFragment.create are not supported")
    store = open_store(dataset_uri, storage_options)
    _existing, target, batches, version = prepare_write(store, data, schema, mode, data_storage_version)
    written = write_data_files(
        store, batches, target, max_rows_per_file=_UNLIMITED_ROWS, max_bytes_per_file=MAX_BYTES_PER_FILE,
        data_storage_version=version, max_rows_per_group=max_rows_per_group,
    )
    if not written:
        raise InvalidInputError("cannot create a fragment without rows")
    if len(written) > 1:  # only past 90 GiB in one file
        raise InvalidInputError(f"the data needs {len(written)} data files: write it with write_fragments")
    return written[0].with_id(fragment_id or 0)


def delete_from_fragment(
    store: ObjectStore, fragment: FragmentMetadata, schema: LanceSchema, predicate: str, read_version: int
) -> FragmentMetadata | None:
    """The fragment with the rows matching ``predicate`` deleted too (a new deletion file; the
    unchanged fragment when nothing matches), or None when no row would be left."""
    operation, deleted = plan_delete(store, [fragment], schema, predicate, read_version)
    if operation.deleted_fragment_ids:
        return None
    return operation.updated_fragments[0] if operation.updated_fragments else fragment
