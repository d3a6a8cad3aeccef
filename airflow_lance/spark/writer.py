"""A Spark DataFrame written as uncommitted Lance fragments, in parallel on the executors.

``mapInArrow`` hands each partition's Arrow batches to :func:`write_partition`, which
streams them through ``airflow_lance.core.write_fragments`` (files cut at
``max_rows_per_file`` / ``max_bytes_per_file``) and yields one row per fragment: its
pylance-compatible JSON and the Arrow schema it was written with. The driver collects
those rows and checks that the fragments hold exactly the rows Spark counted, with an
``Observation`` on the same pass over the data (no second scan of the source).

Spark has no fixed-size array type, so a vector column reaches Python as ``list<float>``.
Lance's vector indices need ``fixed_size_list<float>[dim]``: name such columns in
``fixed_size_lists`` (or mark the Spark column with the metadata key
``arrow.fixed-size-list.size``, lance-spark's convention) and they are stored as fixed-size
lists; a row of another length fails the write. ``cast`` ({column: type name}, and
``fixed_size_lists`` entries with an element type such as ``(64, "float32")``) converts
columns on the executors with Arrow's cast (a JSON source's doubles become
``fixed_size_list<float32>[64]``); a value that cannot be cast fails the write naming its
column.
"""

from __future__ import annotations

import functools
import itertools
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_lance.core import FragmentMetadata, LanceError, SchemaMismatchError, write_fragments
from airflow_lance.spark.conform import harmonize, with_casts, with_fixed_size_lists
from airflow_lance.spark.spec import WriteJobResult, WriteMode, check_against_dataset, parse_type, size_map
from airflow_lance.spark.worker import bulk_write

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

#: Spark column metadata naming a column's fixed list size (lance-spark's convention).
FIXED_SIZE_LIST_KEY = "arrow.fixed-size-list.size"
#: Output of :func:`write_partition` (Spark DDL and the matching Arrow schema).
RESULT_DDL = "fragment string, schema binary"
RESULT_SCHEMA = pa.schema([("fragment", pa.string()), ("schema", pa.binary())])


class RowCountMismatchError(LanceError):
    """The written fragments do not hold the rows Spark counted; nothing may be committed."""


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
    fixed_size_lists: Mapping[str, int] | None = None,
    cast: Mapping[str, str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Write one partition as fragments; yield a :data:`RESULT_SCHEMA` batch describing them.

    ``target_schema`` (appends) is the dataset's schema: Spark's representation of the
    same types is converted to it. Otherwise the list columns named in ``fixed_size_lists``
    become fixed-size lists and those in ``cast`` get its types (appends: the dataset's
    types, which the driver checked are the same). ``data_storage_version`` picks the file format of a new
    dataset (the core's default otherwise; appends keep the dataset's). An empty partition
    writes nothing.
    """
    first = next(batches, None)
    if first is None:
        return
    stream: Iterator[pa.RecordBatch] = itertools.chain([first], batches)
    casts = dict(cast or {})
    if target_schema is None and (fixed_size_lists or casts):
        target_schema = with_casts(with_fixed_size_lists(first.schema, fixed_size_lists or {}), casts)
    if target_schema is not None:
        stream = (harmonize(batch, target_schema, casts) for batch in stream)
        first_schema = target_schema
    else:
        first_schema = first.schema
    with bulk_write():
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


def fixed_size_lists_of(schema: StructType, explicit: Mapping[str, int] | None = None,
                        cast: Mapping[str, str] | None = None) -> dict[str, int]:
    """Fixed list sizes of the array columns of a Spark ``schema``: those marked with
    :data:`FIXED_SIZE_LIST_KEY` in their metadata, then ``explicit`` ({column: size}, which
    wins); columns named in ``cast`` get its type instead. Raises :class:`SchemaMismatchError`
    for a column (of either) that is missing, or not a top-level array where a list is wanted,
    and ``JobSpecError`` for a size that is not a positive integer."""
    from pyspark.sql.types import ArrayType

    fields = {field.name: field for field in schema.fields}
    marked = {name: field.metadata[FIXED_SIZE_LIST_KEY] for name, field in fields.items()
              if FIXED_SIZE_LIST_KEY in (field.metadata or {}) and name not in (cast or {})}
    sizes = size_map("fixed_size_lists", {**marked, **(explicit or {})})
    lists = [*sizes, *(name for name, text in (cast or {}).items() if pa.types.is_nested(parse_type(text)))]
    for name in [*sizes, *(cast or {})]:
        if name not in fields:
            raise SchemaMismatchError(
                f"column {name!r} is not a column of the source (columns: {', '.join(fields)})")
        if name in lists and not isinstance(fields[name].dataType, ArrayType):
            raise SchemaMismatchError(
                f"column {name!r} is {fields[name].dataType.simpleString()}, not an array: it cannot become a list")
    return sizes


def check_row_count(fragments: Sequence[FragmentMetadata], spark_rows: int, uri: str) -> None:
    """Raise :class:`RowCountMismatchError` unless the fragments hold exactly ``spark_rows`` rows."""
    written = sum(f.physical_rows for f in fragments)
    if written != spark_rows:
        raise RowCountMismatchError(
            f"the fragments written to {uri} hold {written} rows but Spark counted {spark_rows}; nothing was committed"
        )


def result_schema(schemas: set[bytes], target_schema: pa.Schema | None, source_schema: Callable[[], pa.Schema],
                  sizes: Mapping[str, int], casts: Mapping[str, str], producers: str) -> pa.Schema:
    """The schema of a write's fragments: the one schema its tasks wrote (IPC bytes; several are an
    error), else (no rows) the dataset's, else the source's with the vector sizes and casts applied."""
    if len(schemas) > 1:
        raise SchemaMismatchError(f"{producers} produced different Arrow schemas; cannot commit them together")
    if schemas:
        return pa.ipc.read_schema(pa.py_buffer(next(iter(schemas))))
    if target_schema is not None:
        return target_schema
    return with_casts(with_fixed_size_lists(source_schema(), sizes), casts)


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
    fixed_size_lists: Mapping[str, int] | None = None,
    cast: Mapping[str, str] | None = None,
) -> WriteJobResult:
    """Write ``df`` as uncommitted fragments of ``uri`` and validate the row count.

    ``mode`` is ``write_fragments``' mode: ``create`` (the dataset must not exist),
    ``append`` (fragments get the dataset's field ids; pass its ``target_schema``) or
    ``overwrite`` (a fresh schema). ``fixed_size_lists`` ({column: size}, added to the
    columns marked with :data:`FIXED_SIZE_LIST_KEY`) stores array columns as fixed-size
    lists (vectors); ``cast`` ({column: type name}) converts columns. Raises :class:`RowCountMismatchError` if the fragments do not hold
    exactly Spark's row count.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    start = time.monotonic()
    casts = dict(cast or {})
    sizes = fixed_size_lists_of(df.schema, fixed_size_lists, casts)
    if target_schema is not None:
        check_against_dataset(target_schema, sizes, casts)
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
        fixed_size_lists=sizes,
        cast=casts,
    )
    rows = observed.mapInArrow(writer, RESULT_DDL).collect()
    spark_rows = int(observation.get["rows"])
    fragments = tuple(FragmentMetadata.from_json(row["fragment"]) for row in rows)
    schema = result_schema({bytes(row["schema"]) for row in rows}, target_schema,
                           lambda: df.limit(0).toArrow().schema, sizes, casts, "Spark partitions")
    check_row_count(fragments, spark_rows, uri)
    return WriteJobResult(
        spec_digest=spec_digest,
        fragments=fragments,
        num_rows=spark_rows,
        bytes_written=sum(d.file_size_bytes or 0 for f in fragments for d in f.files),
        schema=schema,
        elapsed_seconds=time.monotonic() - start,
    )
