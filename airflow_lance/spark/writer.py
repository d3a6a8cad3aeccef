"""A Spark DataFrame written as uncommitted Lance fragments, in parallel on the executors.

``mapInArrow`` hands each partition's Arrow batches to :func:`write_partition`, which
streams them through ``airflow_lance.core.write_fragments`` (files cut at
``max_rows_per_file`` / ``max_bytes_per_file``) and yields one row per fragment: its
pylance-compatible JSON and the Arrow schema it was written with. The driver collects
those rows and checks that the fragments hold exactly the rows Spark counted, with an
``Observation`` on the same pass over the data (no second scan of the source).
"""

from __future__ import annotations

import functools
import itertools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_lance.core import FragmentMetadata, LanceError, SchemaMismatchError, write_fragments
from airflow_lance.spark.spec import WriteJobResult, WriteMode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Output of :func:`write_partition` (Spark DDL and the matching Arrow schema).
RESULT_DDL = "fragment string, schema binary"
RESULT_SCHEMA = pa.schema([("fragment", pa.string()), ("schema", pa.binary())])


class RowCountMismatchError(LanceError):
    """The written fragments do not hold the rows Spark counted; nothing may be committed."""


def _same_kind(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether ``source`` differs from ``target`` only in representation (large/small offsets,
    list child names, time zone spelling, a list holding a fixed-size list's values)."""
    if source == target:
        return True
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    binaries = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    for family in (strings, binaries):
        if any(test(source) for test in family) and any(test(target) for test in family):
            return True
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        return source.unit == target.unit and (source.tz is None) == (target.tz is None)
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    if any(test(source) for test in lists) and any(test(target) for test in lists):
        return _same_kind(source.value_type, target.value_type)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        names = {target.field(i).name: target.field(i).type for i in range(target.num_fields)}
        return all(
            source.field(i).name in names and _same_kind(source.field(i).type, names[source.field(i).name])
            for i in range(source.num_fields)
        )
    return False


def harmonize(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Cast the columns of ``batch`` whose type differs from the dataset's only in representation
    (Spark's Arrow types vs. the dataset's); anything else is left for the core to reject."""
    columns, fields, changed = [], [], False
    for field, column in zip(batch.schema, batch.columns, strict=True):
        index = target.get_field_index(field.name)
        wanted = target.field(index).type if index >= 0 else field.type
        if wanted != field.type and _same_kind(field.type, wanted):
            try:
                column = column.cast(wanted)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(
                    f"column {field.name!r}: cannot store {field.type} as {wanted}: {exc}"
                ) from exc
            field, changed = field.with_type(wanted), True
        columns.append(column)
        fields.append(field)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, batch.schema.metadata)) if changed else batch


def write_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    uri: str,
    mode: WriteMode,
    storage_options: Mapping[str, str],
    max_rows_per_file: int,
    max_bytes_per_file: int,
    target_schema: pa.Schema | None = None,
    data_storage_version: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Write one partition as fragments; yield a :data:`RESULT_SCHEMA` batch describing them.

    ``target_schema`` (appends) is the dataset's schema: Spark's representation of the
    same types is converted to it. ``data_storage_version`` picks the file format of a new
    dataset (the core's default otherwise; appends keep the dataset's). An empty partition
    writes nothing.
    """
    first = next(batches, None)
    if first is None:
        return
    stream: Iterator[pa.RecordBatch] = itertools.chain([first], batches)
    if target_schema is not None:
        stream = (harmonize(batch, target_schema) for batch in stream)
        first_schema = target_schema
    else:
        first_schema = first.schema
    fragments = write_fragments(
        stream,
        uri,
        schema=first_schema,
        mode=mode,
        max_rows_per_file=max_rows_per_file,
        max_bytes_per_file=max_bytes_per_file,
        data_storage_version=data_storage_version,
        storage_options=storage_options,
    )
    if fragments:
        schema_bytes = first_schema.serialize().to_pybytes()
        yield pa.RecordBatch.from_pydict(
            {"fragment": [json.dumps(f.to_json()) for f in fragments], "schema": [schema_bytes] * len(fragments)},
            schema=RESULT_SCHEMA,
        )


def check_row_count(fragments: Sequence[FragmentMetadata], spark_rows: int, uri: str) -> None:
    """Raise :class:`RowCountMismatchError` unless the fragments hold exactly ``spark_rows`` rows."""
    written = sum(f.physical_rows for f in fragments)
    if written != spark_rows:
        raise RowCountMismatchError(
            f"the fragments written to {uri} hold {written} rows but Spark counted {spark_rows}; nothing was committed"
        )


def write_dataframe(
    df: DataFrame,
    *,
    uri: str,
    mode: WriteMode,
    storage_options: Mapping[str, str],
    max_rows_per_file: int,
    max_bytes_per_file: int,
    target_schema: pa.Schema | None = None,
    data_storage_version: str | None = None,
    spec_digest: str = "",
) -> WriteJobResult:
    """Write ``df`` as uncommitted fragments of ``uri`` and validate the row count.

    ``mode`` is ``write_fragments``' mode: ``create`` (the dataset must not exist),
    ``append`` (fragments get the dataset's field ids; pass its ``target_schema``) or
    ``overwrite`` (a fresh schema). Raises :class:`RowCountMismatchError` if the fragments
    do not hold exactly Spark's row count.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    start = time.monotonic()
    observation = Observation("airflow_lance_write")
    observed = df.observe(observation, F.count(F.lit(1)).alias("rows"))
    writer = functools.partial(
        write_partition,
        uri=uri,
        mode=mode,
        storage_options=dict(storage_options),
        max_rows_per_file=max_rows_per_file,
        max_bytes_per_file=max_bytes_per_file,
        target_schema=target_schema,
        data_storage_version=data_storage_version,
    )
    rows = observed.mapInArrow(writer, RESULT_DDL).collect()
    spark_rows = int(observation.get["rows"])
    fragments = tuple(FragmentMetadata.from_json(row["fragment"]) for row in rows)
    schemas = {bytes(row["schema"]) for row in rows}
    if len(schemas) > 1:
        raise SchemaMismatchError("Spark partitions produced different Arrow schemas; cannot commit them together")
    if schemas:
        schema = pa.ipc.read_schema(pa.py_buffer(schemas.pop()))
    else:
        schema = target_schema if target_schema is not None else df.limit(0).toArrow().schema
    check_row_count(fragments, spark_rows, uri)
    return WriteJobResult(
        spec_digest=spec_digest,
        fragments=fragments,
        num_rows=spark_rows,
        bytes_written=sum(d.file_size_bytes or 0 for f in fragments for d in f.files),
        schema=schema,
        elapsed_seconds=time.monotonic() - start,
    )
