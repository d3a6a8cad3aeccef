"""Lance as a Spark source: :func:`read_lance` reads a dataset version on the executors.

The driver opens the dataset at the pinned version (a number or a tag), compiles the
projection and filter once (a bad column or filter fails here, before any task runs), and
plans the read: one task per fragment, or per row range of a fragment larger than
``rows_per_partition``, or, with ``since_version``, per fragment holding rows inserted or
updated since that version (:func:`airflow_lance.core.changes.changes_between`). Each task is
one Spark partition; ``mapInArrow`` runs :func:`read_tasks` on the executors, which open the
same version with the core and read their fragment's rows with the projection, the filter
pushed down and ``_rowaddr`` when asked (:class:`~airflow_lance.core.fragment_read.SelectionReader`).

The Spark schema comes from the scan's Arrow schema (:func:`spark_arrow_schema`): types Spark
lacks become the nearest it has (``uint8``/``uint16``/``uint32`` a wider signed integer and
``uint64`` ``decimal(20,0)``, as Spark reads them from Parquet; ``uint64`` row addresses and ids
``bigint``, fixed-size lists arrays, ``float16`` ``float``, dictionaries their
values, timestamps microseconds), converted on the executors.

Storage options reach the executors as the write job's do: inside the pickled task function,
never in the plan's text, a log line or a task row.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_lance.core import InvalidInputError, LanceDataset, dataset
from airflow_lance.core.fragment_read import SelectionReader
from airflow_lance.spark.distributed import rows_per_partition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: One read task per row: the fragment, a physical row range, and (``since_version``) the
#: physical offsets to read as little-endian uint32 (empty: the whole range).
TASK_DDL = "fragment long, start long, stop long, offsets binary"
TASK_SCHEMA = pa.schema([("fragment", pa.int64()), ("start", pa.int64()), ("stop", pa.int64()),
                         ("offsets", pa.binary())])
#: Rows per Arrow batch handed back to Spark.
BATCH_ROWS = 64 * 1024


@dataclasses.dataclass(frozen=True)
class ReadTask:
    """What one Spark partition reads: rows ``[start, stop)`` of a fragment, or only ``offsets``."""

    fragment: int
    start: int
    stop: int
    offsets: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return self.stop - self.start if self.offsets is None else int(self.offsets.size)


# -- Arrow types Spark can hold --------------------------------------------------------------------


def spark_arrow_type(dtype: pa.DataType) -> pa.DataType:
    """The Arrow type through which a column of ``dtype`` reaches Spark (see the module docstring)."""
    t = pa.types
    if isinstance(dtype, pa.BaseExtensionType):  # JSON as its text, others as their storage
        return spark_arrow_type(dtype.storage_type)
    if t.is_dictionary(dtype):
        return spark_arrow_type(dtype.value_type)
    if t.is_uint8(dtype):
        return pa.int16()
    if t.is_uint16(dtype):
        return pa.int32()
    if t.is_uint32(dtype):
        return pa.int64()
    if t.is_uint64(dtype):  # as Spark reads Parquet's uint64: every value exact (a join on it matches)
        return pa.decimal128(20, 0)
    if t.is_float16(dtype):
        return pa.float32()
    if t.is_large_string(dtype) or t.is_string_view(dtype):
        return pa.string()
    if t.is_large_binary(dtype) or t.is_binary_view(dtype) or t.is_fixed_size_binary(dtype):
        return pa.binary()
    if t.is_timestamp(dtype):
        return pa.timestamp("us", dtype.tz)
    if t.is_date64(dtype):
        return pa.date32()
    if t.is_list(dtype) or t.is_large_list(dtype) or t.is_fixed_size_list(dtype) or t.is_list_view(dtype):
        value = dtype.value_field
        return pa.list_(value.with_type(spark_arrow_type(value.type)))
    if t.is_struct(dtype):
        return pa.struct([f.with_type(spark_arrow_type(f.type)) for f in dtype])
    if t.is_map(dtype):
        return pa.map_(spark_arrow_type(dtype.key_type), dtype.item_field.with_type(spark_arrow_type(dtype.item_type)))
    return dtype


#: Lance's uint64 row metadata columns: ``bigint`` in Spark (row addresses and ids stay below 2**63).
ROW_METADATA_COLUMNS = ("_rowid", "_rowaddr", "_row_last_updated_at_version", "_row_created_at_version")


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column of a type Spark can hold (:func:`spark_arrow_type`; row metadata
    columns ``bigint``)."""
    return pa.schema([f.with_type(pa.int64() if f.name in ROW_METADATA_COLUMNS and pa.types.is_uint64(f.type)
                                  else spark_arrow_type(f.type)) for f in schema], metadata=schema.metadata)


def to_spark_schema(schema: pa.Schema) -> Any:
    """The Spark ``StructType`` of an Arrow schema already passed through :func:`spark_arrow_schema`."""
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        return from_arrow_schema(schema)
    except TypeError as exc:  # an Arrow type Spark has no counterpart for
        raise InvalidInputError(f"a column cannot be read into Spark: {exc}") from exc


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the types of ``schema`` (same names, in order)."""
    if table.schema.equals(schema):
        return table
    return pa.Table.from_arrays(
        [column.cast(field.type, safe=False) if column.type != field.type else column
         for column, field in zip(table.columns, schema, strict=True)],
        schema=schema,
    )


# -- planning (driver) -----------------------------------------------------------------------------


def _check_rows_per_partition(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(f"rows_per_partition must be a positive integer, not {value!r}")
    return value


def plan_tasks(ds: LanceDataset, rows_per_partition: int | None = None,
               selections: Mapping[int, np.ndarray | None] | None = None) -> list[ReadTask]:
    """The read tasks of a dataset version: every fragment (or those of ``selections``: fragment
    id -> physical offsets, None for the whole fragment), fragments of more than
    ``rows_per_partition`` physical rows (selected rows) split into ranges of that many."""
    tasks: list[ReadTask] = []
    for fragment in ds._fragments:
        if selections is not None and fragment.id not in selections:
            continue
        offsets = None if selections is None else selections[fragment.id]
        if offsets is not None:
            offsets = np.asarray(offsets, dtype=np.uint32)
            if not offsets.size:
                continue
            step = rows_per_partition or offsets.size
            for first in range(0, offsets.size, step):
                piece = offsets[first:first + step]
                tasks.append(ReadTask(fragment.id, int(piece[0]), int(piece[-1]) + 1, piece))
            continue
        if fragment.num_rows == 0:
            continue
        rows = fragment.physical_rows
        step = rows_per_partition or rows
        tasks.extend(ReadTask(fragment.id, start, min(start + step, rows)) for start in range(0, rows, step))
    return tasks


def _task_rows(tasks: Sequence[ReadTask]) -> list[tuple[int, int, int, bytes]]:
    return [(t.fragment, t.start, t.stop, b"" if t.offsets is None else t.offsets.astype("<u4").tobytes())
            for t in tasks]


def pack_tasks(tasks: Sequence[ReadTask], rows_per_partition: int | None) -> list[list[ReadTask]]:
    """The tasks of each Spark partition: one each, or with ``rows_per_partition`` consecutive
    tasks packed together while their rows stay within it (small fragments share a partition)."""
    if rows_per_partition is None:
        return [[task] for task in tasks]
    groups: list[list[ReadTask]] = []
    size = 0
    for task in tasks:
        if groups and size + task.num_rows <= rows_per_partition:
            groups[-1].append(task)
            size += task.num_rows
        else:
            groups.append([task])
            size = task.num_rows
    return groups


# -- reading (executors) ---------------------------------------------------------------------------

_OPENED: dict[tuple[str, int], tuple[LanceDataset, dict[int, Any]]] = {}
_OPENED_LOCK = threading.Lock()
#: dataset versions a Python worker keeps open
_OPENED_MAX = 4


def _open(uri: str, version: int, storage_options: Mapping[str, str]) -> tuple[LanceDataset, dict[int, Any]]:
    """The dataset version and its fragments by id, opened once per Python worker."""
    key = (uri, version)
    with _OPENED_LOCK:
        found = _OPENED.pop(key, None)
        if found is None:
            ds = dataset(uri, version, storage_options=dict(storage_options))
            found = (ds, {f.id: f for f in ds._fragments})
        _OPENED[key] = found  # most recently used last
        while len(_OPENED) > _OPENED_MAX:
            _OPENED.pop(next(iter(_OPENED)))
        return found


def read_tasks(
    batches: Iterator[pa.RecordBatch],
    *,
    uri: str,
    version: int,
    storage_options: Mapping[str, str],
    columns: Sequence[str] | Mapping[str, str] | None,
    filter: str | None,
    with_row_address: bool,
    schema: pa.Schema,
    with_row_id: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Read the tasks of ``batches`` (:data:`TASK_SCHEMA` rows); yield batches of ``schema``."""
    ds, fragments = _open(uri, version, storage_options)
    reader = SelectionReader(ds, columns, filter, with_row_id=with_row_id, with_row_address=with_row_address)
    for batch in batches:
        for fragment_id, start, stop, offsets in zip(*(batch.column(i).to_pylist() for i in range(4)), strict=True):
            fragment = fragments.get(fragment_id)
            if fragment is None:
                raise InvalidInputError(f"fragment {fragment_id} is not in version {version} of {uri}")
            table = reader.read(
                fragment,
                row_range=(start, stop),
                offsets=np.frombuffer(offsets, dtype="<u4").astype(np.int64) if offsets else None,
            )
            if table.num_rows:
                yield from conform_table(table, schema).to_batches(max_chunksize=BATCH_ROWS)


# -- the source ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LanceRead:
    """A planned read: the version read, the tasks, the Arrow schema Spark gets, and (with
    ``since_version``) the counts of the changes read."""

    version: int
    tasks: tuple[ReadTask, ...]
    schema: pa.Schema
    changes: Any = None
    #: the tasks of each Spark partition (:func:`pack_tasks`)
    partitions: tuple[tuple[ReadTask, ...], ...] = ()


def plan_read(
    uri: str,
    *,
    version: int | str | None = None,
    columns: Sequence[str] | Mapping[str, str] | None = None,
    filter: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    since_version: int | str | None = None,
    with_row_address: bool = False,
    rows_per_partition: int | None = None,
    with_row_id: bool = False,
) -> LanceRead:
    """Open the version, compile the scan (errors here, before any task) and plan the tasks."""
    rows_per_partition = _check_rows_per_partition(rows_per_partition)
    if filter is not None and not isinstance(filter, str):
        raise InvalidInputError(f"filter must be a SQL string, not {type(filter).__name__}")
    ds = dataset(uri, version, storage_options=dict(storage_options or {}))
    scan_schema = SelectionReader(ds, columns, filter, with_row_id=with_row_id, with_row_address=with_row_address).schema
    changes = None
    selections = None
    if since_version is not None:
        from airflow_lance.core.changes import changes_between

        changes = changes_between(ds, since_version)
        selections = changes.selections()
    tasks = plan_tasks(ds, rows_per_partition, selections)
    partitions = tuple(tuple(group) for group in pack_tasks(tasks, rows_per_partition))
    return LanceRead(ds.version, tuple(tasks), spark_arrow_schema(scan_schema), changes, partitions)


def read_lance(
    spark: SparkSession,
    uri: str,
    *,
    version: int | str | None = None,
    columns: Sequence[str] | Mapping[str, str] | None = None,
    filter: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    since_version: int | str | None = None,
    with_row_address: bool = False,
    rows_per_partition: int | None = None,
    with_row_id: bool = False,
) -> DataFrame:
    """A DataFrame of a Lance dataset version, read on the executors (one partition per task).

    ``version``: a version number or tag (default: the latest, pinned when called); ``columns``:
    names or ``{name: SQL expression}``; ``filter``: a SQL predicate evaluated during each
    fragment's read; ``with_row_address``: add ``_rowaddr`` (``bigint``; fragment id << 32 |
    offset); ``with_row_id``: add ``_rowid`` (``bigint``; the stable row id where the dataset
    has them, else the address); ``since_version``: only the rows inserted or updated after that version
    (:mod:`airflow_lance.core.changes`); ``rows_per_partition``: split larger fragments into
    row ranges and pack smaller ones together, for partitions of about that many rows (a range
    decodes only the pages holding its rows). Errors (missing version or tag, unknown column, bad filter)
    are raised here as the core's typed errors.
    """
    planned = plan_read(uri, version=version, columns=columns, filter=filter, storage_options=storage_options,
                        since_version=since_version, with_row_address=with_row_address,
                        rows_per_partition=rows_per_partition, with_row_id=with_row_id)
    return dataframe_of(spark, uri, planned, columns=columns, filter=filter, storage_options=storage_options,
                        with_row_address=with_row_address, with_row_id=with_row_id)


def dataframe_of(spark: SparkSession, uri: str, planned: LanceRead, *,
                 columns: Sequence[str] | Mapping[str, str] | None, filter: str | None,
                 storage_options: Mapping[str, str] | None, with_row_address: bool,
                 with_row_id: bool = False) -> DataFrame:
    """The DataFrame that runs a planned read (an empty one when there is nothing to read)."""
    spark_schema = to_spark_schema(planned.schema)
    if not planned.tasks:
        return spark.createDataFrame([], spark_schema)
    groups = [_task_rows(group) for group in planned.partitions or [[t] for t in planned.tasks]]
    tasks = rows_per_partition(spark, groups, TASK_DDL, TASK_SCHEMA)
    reader = functools.partial(
        read_tasks,
        uri=uri,
        version=planned.version,
        storage_options=dict(storage_options or {}),
        columns=dict(columns) if isinstance(columns, Mapping) else (list(columns) if columns is not None else None),
        filter=filter,
        with_row_address=with_row_address,
        schema=planned.schema,
        with_row_id=with_row_id,
    )
    return tasks.mapInArrow(reader, spark_schema)
