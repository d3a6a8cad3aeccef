"""What ``write_dataset`` (and ``LanceFragment.create``) accept, as pylance's ``_coerce_reader``:
Arrow tables, batches and readers, iterables of batches, pandas DataFrames, dicts of
columns, lists of dicts, pyarrow datasets and scanners, and Lance datasets (ours or pylance's).

pandas is imported only when the data is a DataFrame: the core works without it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from airflow_lance.core.errors import InvalidInputError

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError)


def _is_pandas_frame(data: Any) -> bool:
    return type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame"


def _is_lance_dataset(data: Any) -> bool:
    """Ours (``airflow_lance.core.dataset.LanceDataset``) or pylance's ``lance.LanceDataset``."""
    return type(data).__name__ == "LanceDataset" and hasattr(data, "to_batches") and hasattr(data, "schema")


def coerce_data(data: Any, schema: pa.Schema | None) -> Any:
    """``data`` as an Arrow table or reader when it is one of the Python forms pylance accepts;
    Arrow inputs and iterables of batches are returned unchanged. Conversion errors are
    InvalidInputError (a ValueError, as pylance's), raised before anything is written."""
    try:
        if _is_pandas_frame(data):
            return pa.Table.from_pandas(data, schema=schema)
        if isinstance(data, Mapping):
            return pa.Table.from_pydict(dict(data), schema=schema)
        if isinstance(data, list) and data and isinstance(data[0], Mapping):
            return pa.Table.from_pylist(data, schema=schema)
        if _is_lance_dataset(data):
            return pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
        datasets = sys.modules.get("pyarrow.dataset")  # not imported: data is none of its objects
        if datasets is not None and isinstance(data, (datasets.Dataset, datasets.Scanner)):
            return data.to_reader() if isinstance(data, datasets.Scanner) else data.scanner().to_reader()
    except _ARROW_ERRORS as exc:
        raise InvalidInputError(f"cannot convert {type(data).__name__} to Arrow: {exc}") from exc
    return data

