"""Read the rows of a validated Kartothek table, partition by partition, as Arrow batches.

Each payload file is streamed with ``ParquetFile.iter_batches``; pandas index
columns are dropped, payload columns cast to the table schema's types
(dictionaries decoded, narrow integers widened), and the partition columns
rebuilt from the typed partition values as repeated scalars.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lance.core.errors import StorageError
from airflow_lance.core.kartothek.errors import KartothekFileError
from airflow_lance.core.kartothek.partitions import partition_column
from airflow_lance.core.kartothek.validate import PartitionSource
from airflow_lance.core.storage import ObjectStore

DEFAULT_BATCH_ROWS = 64 * 1024


def _conform(column: pa.Array, arrow_type: pa.DataType, key: str, name: str) -> pa.Array:
    if column.type == arrow_type:
        return column
    try:
        return column.cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise KartothekFileError(key, f"column {name!r} ({column.type}) does not convert to {arrow_type}: {exc}") \
            from exc


def read_partition(
    store: ObjectStore,
    partition: PartitionSource,
    schema: pa.Schema,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Batches of ``partition`` with exactly the columns (and types) of ``schema``.

    ``schema`` may omit the partition columns (they are then not rebuilt).
    """
    values = dict(partition.values)
    payload = [field for field in schema if field.name not in values]
    try:
        with store.open_input(partition.key) as source:
            parquet = pq.ParquetFile(source)
            batches = parquet.iter_batches(batch_size=batch_rows, columns=[f.name for f in payload],
                                           use_threads=False)
            for batch in batches:
                arrays = []
                for field in schema:
                    if field.name in values:
                        arrays.append(partition_column(values[field.name], field.type, batch.num_rows))
                    else:
                        column = batch.column(field.name)
                        arrays.append(_conform(column, field.type, partition.key, field.name))
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    except FileNotFoundError as exc:
        raise KartothekFileError(partition.key, "the payload file disappeared") from exc
    except StorageError:
        raise
    except (pa.ArrowException, OSError) as exc:
        raise KartothekFileError(partition.key, f"cannot read the payload file: {exc}") from exc
