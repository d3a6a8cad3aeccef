"""Direct file ingest: executors read their file splits with pyarrow, no JVM row path.

For a ``source_path`` source in Parquet, CSV, JSON (NDJSON) or Arrow IPC, the driver lets Spark
resolve the source as the Spark-row path would (file listing, hive-style partition columns and
their types, CSV/JSON schema inference or the explicit ``schema`` option) and takes the Arrow
schema Spark would hand to Python. It then plans splits (Parquet row groups; byte ranges of
line files, each owning the lines that start in it; whole IPC files), spreads them over
tasks (:func:`airflow_lance.spark.distributed.map_task_partitions`, also on Spark Connect), and
each task reads its splits with pyarrow, converts them to that schema (representation-only
casts), adds the partition columns and writes fragments with
:func:`airflow_lance.spark.writer.write_partition`. The operator commits once, as for the
Spark-row path.

:func:`plan_direct` returns a reason instead of a plan wherever the result could differ from
Spark's (a Parquet type Spark converts, a CSV/JSON option pyarrow lacks, a parse mode whose
malformed-record handling pyarrow cannot reproduce, a date or timestamp parsed from text, a
source outside the local file system); the job then runs the Spark-row path and logs why.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_lance.core import FragmentMetadata, LanceError
from airflow_lance.spark.conform import _same_kind
from airflow_lance.spark.distributed import is_connect, map_task_partitions
from airflow_lance.spark.spec import SourceSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Formats the direct path reads (Spark's format name -> kind).
FORMATS = {"parquet": "parquet", "csv": "csv", "json": "json", "arrow": "ipc", "ipc": "ipc", "feather": "ipc"}
#: Target size of a line-file split (Spark's spark.sql.files.maxPartitionBytes default).
SPLIT_BYTES = 128 << 20
#: Spark's CSV options the direct path honours exactly, with the values it honours.
_CSV_OPTIONS = {"header", "inferschema", "sep", "delimiter", "mode", "schema", "encoding", "charset"}
_JSON_OPTIONS = {"mode", "schema", "encoding", "charset"}
#: Text-parsed types read exactly by pyarrow's CSV/JSON readers plus Arrow's cast.
_TEXT_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_int32, pa.types.is_int64,
               pa.types.is_float64, pa.types.is_boolean)


#: ``""`` inside a field (not an empty quoted field): Spark's parser keeps such a field raw.
_DOUBLED_QUOTE = re.compile(rb'""[^",\r\n]')


class DirectReadError(LanceError):
    """A split could not be read the way Spark would read it (e.g. a malformed CSV line)."""


@dataclasses.dataclass(frozen=True)
class Split:
    """One unit of reading: a file, its row groups (Parquet) or byte range (lines), its partition values."""

    path: str
    partition: tuple[tuple[str, str | None], ...] = ()
    row_groups: tuple[int, ...] = ()
    start: int = 0
    end: int = -1
    size: int = 0


@dataclasses.dataclass(frozen=True)
class DirectPlan:
    kind: str
    schema: pa.Schema  # Spark's Arrow schema of the DataFrame (file columns, then partition columns)
    partition_columns: tuple[str, ...]
    splits: tuple[Split, ...]
    options: Mapping[str, str]
    expected_rows: int | None  # Parquet: from the footers


def _local_path(uri: str) -> str | None:
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("", "file"):
        return urllib.parse.unquote(parsed.path) if parsed.scheme else uri
    return None


def _partition_values(path: str, names: Sequence[str]) -> tuple[tuple[str, str | None], ...]:
    """Hive-style ``name=value`` directories of ``path`` for the partition ``names`` (Spark's escaping)."""
    found: dict[str, str | None] = {}
    for part in path.split("/")[:-1]:
        key, eq, value = part.partition("=")
        if eq and key in names:
            value = urllib.parse.unquote(value)
            found[key] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
    return tuple((name, found.get(name)) for name in names)


def plan_direct(spark: SparkSession, source: SourceSpec, reader: str, tasks: int,
                df: Any = None) -> DirectPlan | str:
    """The direct plan of ``source``, or why the Spark-row path must read it (``reader="auto"``;
    with ``reader="direct"`` only a format the direct path cannot read at all is refused).
    ``df``: the source as Spark already loaded it (:func:`_spark_reader`), else loaded here."""
    kind = FORMATS.get(source.format.lower()) if source.kind == "path" else None
    if kind is None:
        return f"source format {source.format!r} is read by Spark only"
    local = [_local_path(p) for p in source.paths]
    if any(p is None for p in local):
        return "the source is not on the local file system (Spark's Hadoop file systems read it)"
    options = {k.lower(): v for k, v in source.options.items()}
    strict = reader == "direct"
    if kind in ("csv", "json"):
        allowed = _CSV_OPTIONS if kind == "csv" else _JSON_OPTIONS
        extra = sorted(set(options) - allowed)
        if extra:
            return f"{kind} option(s) {extra} have no exact pyarrow equivalent"
        if options.get("encoding", options.get("charset", "utf-8")).lower().replace("-", "") != "utf8":
            return "only UTF-8 text is read directly"
        if not strict and options.get("mode", "PERMISSIVE").upper() != "FAILFAST":
            return (f"{kind} mode {options.get('mode', 'PERMISSIVE')!r}: Spark turns malformed records into nulls, "
                    "which pyarrow cannot reproduce (mode=FAILFAST or reader='direct' reads directly)")
        if len(options.get("sep", options.get("delimiter", ","))) != 1:
            return "a multi-character CSV separator"
    if kind == "ipc":
        files = _list_files(source.paths)
        schema = pa.ipc.open_file(files[0]).schema if files else pa.schema([])
        names: tuple[str, ...] = ()
        splits = [Split(path=f, size=os.path.getsize(f)) for f in files]
        for f in files[1:]:
            if not pa.ipc.open_file(f).schema.equals(schema):
                return f"Arrow files {files[0]} and {f} have different schemas"
        return DirectPlan(kind, schema, names, tuple(splits), options, None)
    df = _spark_reader(spark, source) if df is None else df
    schema = arrow_schema_of(df)
    files = [_local_path(f) or f for f in df.inputFiles()]
    data_names = set(_data_columns(df, [p for p in local if p is not None], options))
    names = tuple(n for n in schema.names if n not in data_names)
    for name in names:
        if not any(test(schema.field(name).type) for test in _TEXT_TYPES):
            return f"partition column {name!r} is {schema.field(name).type} (read directly: strings and numbers)"
    data_schema = pa.schema([schema.field(n) for n in schema.names if n not in names])
    if kind == "parquet":
        return _parquet_plan(schema, names, files, options)
    if "_corrupt_record" in data_schema.names:
        return "Spark found malformed records (_corrupt_record)"
    for field in data_schema:
        if not _text_type_ok(field.type, kind):
            return f"column {field.name!r} is {field.type}: parsed from text only by Spark"
    split_bytes = _conf_bytes(spark, "spark.sql.files.maxPartitionBytes", SPLIT_BYTES)
    splits = []
    for f in sorted(files):
        size = os.path.getsize(f)
        partition = _partition_values(f, names)
        step = max(min(split_bytes, -(-size // max(tasks, 1))), 4096)
        for start in range(0, max(size, 1), step):
            splits.append(Split(path=f, partition=partition, start=start, end=min(start + step, size), size=size))
    return DirectPlan(kind, schema, names, tuple(splits), options, None)


def _parquet_plan(schema: pa.Schema, names: tuple[str, ...], files: Sequence[str],
                  options: Mapping[str, str]) -> DirectPlan | str:
    """The direct plan of Parquet ``files`` read as ``schema`` (partition columns ``names``): one
    split per row group; or why not (a column pyarrow would read as another kind)."""
    import pyarrow.parquet as pq

    data_schema = pa.schema([schema.field(n) for n in schema.names if n not in names])
    splits, rows = [], 0
    for f in sorted(files):
        meta = pq.ParquetFile(f)
        file_schema = meta.schema_arrow
        for field in data_schema:
            index = file_schema.get_field_index(field.name)
            if index < 0 or not _same_kind(file_schema.field(index).type, field.type):
                got = file_schema.field(index).type if index >= 0 else "missing"
                return f"Parquet column {field.name!r} of {f} is {got}; Spark reads it as {field.type}"
        partition = _partition_values(f, names)
        for group in range(meta.metadata.num_row_groups):
            rg = meta.metadata.row_group(group)
            rows += rg.num_rows
            splits.append(Split(path=f, partition=partition, row_groups=(group,), size=rg.total_byte_size))
    return DirectPlan("parquet", schema, names, tuple(splits), options, rows)


def arrow_schema_of(df: Any) -> pa.Schema:
    """The Arrow schema of ``df.toArrow()``: under a ``SparkContext`` computed as ``toArrow``
    computes it (no Spark job); on Spark Connect that of an empty ``toArrow``."""
    if is_connect(df.sparkSession):
        return df.limit(0).toArrow().schema
    return _arrow_schema(df.sparkSession, df.schema)


def _arrow_schema(spark: SparkSession, struct: Any) -> pa.Schema:
    """The Arrow schema ``toArrow`` gives a DataFrame of Spark schema ``struct`` (classic Spark)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    return to_arrow_schema(struct, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                           prefers_large_types=large)


#: Spark's Parquet schema inference of Arrow types it reads without a choice (no unsigned,
#: decimal, time or timestamp types: their inference depends on settings and annotations).
_INFERRED = {pa.int8(): "ByteType", pa.int16(): "ShortType", pa.int32(): "IntegerType", pa.int64(): "LongType",
             pa.float32(): "FloatType", pa.float64(): "DoubleType", pa.bool_(): "BooleanType",
             pa.string(): "StringType", pa.large_string(): "StringType", pa.binary(): "BinaryType",
             pa.large_binary(): "BinaryType", pa.date32(): "DateType"}
#: Characters Spark has refused in Parquet column names.
_ODD_NAME = re.compile(r"[ ,;{}()\n\t=]")


def _inferred_type(dtype: pa.DataType) -> Any:
    from pyspark.sql import types as T

    if dtype in _INFERRED:
        return getattr(T, _INFERRED[dtype])()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype):
        element = _inferred_type(dtype.value_type)
        return None if element is None else T.ArrayType(element, True)
    if pa.types.is_struct(dtype):
        fields = [_inferred_field(dtype.field(i)) for i in range(dtype.num_fields)]
        return None if any(f is None for f in fields) or not fields else T.StructType(fields)
    return None


def _inferred_field(field: pa.Field) -> Any:
    from pyspark.sql import types as T

    dtype = _inferred_type(field.type)
    return None if dtype is None or _ODD_NAME.search(field.name) else T.StructField(field.name, dtype, True)


#: Footer key of the Spark schema Spark writes into its Parquet files (its inference then reads it).
_SPARK_SCHEMA_KEY = b"org.apache.spark.sql.parquet.row.metadata"


def load_parquet(spark: SparkSession, source: SourceSpec) -> Any:
    """A Parquet source of plain files (no directories, no options) loaded with the schema Spark
    would infer, computed here from the footers: Spark then runs no schema-inference job (a
    Spark job per load). None where Spark's inference could differ (types outside
    :data:`_INFERRED` and lists and structs of them, files with different schemas or written by
    Spark, names Spark refuses or that repeat ignoring case): then load it with Spark's inference."""
    struct = _plain_parquet_schema(source)
    if struct is None:
        return None
    reader = spark.read.format("parquet").schema(struct[1])
    return reader.load(list(source.paths) if len(source.paths) > 1 else source.paths[0])


def _plain_parquet_schema(source: SourceSpec) -> tuple[list[str], Any] | None:
    """(local paths, the Spark schema Spark would infer) of a Parquet source of plain files, or
    None (see :func:`load_parquet`)."""
    import pyarrow.parquet as pq
    from pyspark.sql import types as T

    if source.kind != "path" or source.format.lower() != "parquet" or source.options:
        return None
    paths = [_local_path(p) for p in source.paths]
    if not paths or any(p is None or not os.path.isfile(p) or os.path.basename(p).startswith((".", "_"))
                        for p in paths):
        return None
    try:
        footers = [pq.read_schema(p) for p in paths]
    except (OSError, pa.ArrowException):
        return None
    first = footers[0]
    if any(not f.equals(first) for f in footers[1:]) or _SPARK_SCHEMA_KEY in (first.metadata or {}):
        return None
    fields = [_inferred_field(f) for f in first]
    if not fields or any(f is None for f in fields) or len({f.name.lower() for f in fields}) < len(fields):
        return None
    return [os.path.abspath(p) for p in paths if p is not None], T.StructType(fields)


def plain_parquet_plan(spark: SparkSession, source: SourceSpec) -> DirectPlan | None:
    """The direct plan of a Parquet source of plain files (:func:`load_parquet`'s), computed from
    the footers alone: no DataFrame, no JVM call but one setting (a file named directly has no
    partition columns: Spark's base path is its directory). None on Spark Connect and where
    :func:`load_parquet` gives None or the plan would not be direct."""
    if is_connect(spark):
        return None
    struct = _plain_parquet_schema(source)
    if struct is None:
        return None
    paths, schema = struct
    plan = _parquet_plan(_arrow_schema(spark, schema), (), paths, {k.lower(): v for k, v in source.options.items()})
    return plan if isinstance(plan, DirectPlan) else None


def _conf_bytes(spark: SparkSession, key: str, default: int) -> int:
    """A byte-size Spark SQL setting (``128m``, ``4096b``, ``65536``)."""
    text = str(spark.conf.get(key, str(default))).strip().lower()
    units = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit) and text[: -len(unit)].strip().isdigit():
            return int(text[: -len(unit)]) * units[unit]
    return int(text) if text.isdigit() else default


def _text_type_ok(dtype: pa.DataType, kind: str) -> bool:
    if any(test(dtype) for test in _TEXT_TYPES):
        return True
    if kind == "json" and (pa.types.is_list(dtype) or pa.types.is_large_list(dtype)):
        return _text_type_ok(dtype.value_type, kind)
    if kind == "json" and pa.types.is_struct(dtype):
        return all(_text_type_ok(dtype.field(i).type, kind) for i in range(dtype.num_fields))
    return False


def _spark_reader(spark: SparkSession, source: SourceSpec) -> Any:
    reader = spark.read.format(source.format).options(**source.options)
    return reader.load(list(source.paths) if len(source.paths) > 1 else source.paths[0])


def _data_columns(df: Any, roots: Sequence[str], options: Mapping[str, str]) -> list[str]:
    """The columns of ``df`` read from the files: all but the ``name=value`` directories Spark's
    partition discovery finds between the base path (the ``basePath`` option, else the source
    path holding the file: a file given by name has none) and the file."""
    files = df.inputFiles()
    if not files:
        return list(df.columns)
    first = urllib.parse.unquote(urllib.parse.urlparse(files[0]).path)
    bases = [options["basepath"]] if "basepath" in options else roots
    base = next((b.rstrip("/") for b in (_local_path(b) or b for b in bases)
                 if first.startswith(b.rstrip("/") + "/")), None)
    below = first[len(base) + 1:].split("/")[:-1] if base is not None else []
    keys = {part.partition("=")[0] for part in below if "=" in part}
    return [c for c in df.columns if c not in keys]


def _list_files(paths: Sequence[str]) -> list[str]:
    out = []
    for uri in paths:
        path = _local_path(uri) or uri
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                out += [os.path.join(root, n) for n in sorted(names) if not n.startswith((".", "_"))]
        else:
            out.append(path)
    return out


def group_splits(splits: Sequence[Split], tasks: int) -> list[list[Split]]:
    """``splits`` in at most ``tasks`` groups of about equal bytes, in file order within a group."""
    groups: list[list[tuple[int, Split]]] = [[] for _ in range(max(1, min(tasks, len(splits))))]
    loads = [0] * len(groups)
    weight = [s.end - s.start if s.end >= 0 else s.size for s in splits]
    for index in sorted(range(len(splits)), key=lambda i: -weight[i]):
        target = loads.index(min(loads))
        groups[target].append((index, splits[index]))
        loads[target] += weight[index]
    return [[s for _, s in sorted(g, key=lambda x: x[0])] for g in groups if g]


def _line_range(path: str, start: int, end: int) -> bytes:
    """The bytes of the lines of ``path`` whose first byte lies in [start, end)."""
    with open(path, "rb") as handle:
        if start > 0:
            handle.seek(start - 1)
            handle.readline()  # the line holding byte start-1 belongs to the split before
        begin = handle.tell()
        if begin >= end:
            return b""
        data = handle.read(end - begin)
        if data and not data.endswith(b"\n"):
            data += handle.readline()
        return data


#: decoded bytes per Parquet batch a task reads: a worker holds about one batch and the pages of the
#: file it writes, so its peak memory follows this, not the data size (65,536 rows of 256-float
#: embeddings were 64 MiB a batch and a 735 MiB worker). Smaller batches also read faster: pyarrow
#: grows a list column's buffers by reallocation while it decodes a batch, and each new buffer is
#: fresh memory to fault in; at 4 MiB rather than 16 MiB a task of the wide bench table spends
#: about a sixth less CPU (with the memory-mapped reads below)
BATCH_BYTES = 4 << 20
BATCH_ROWS = 65536


def _parquet_batch_rows(metadata: Any, row_groups: Sequence[int]) -> int:
    """Rows per batch: ``BATCH_BYTES`` at the row groups' uncompressed bytes per row, 1024 to 65,536."""
    rows = sum(metadata.row_group(g).num_rows for g in row_groups)
    size = sum(metadata.row_group(g).total_byte_size for g in row_groups)
    if rows == 0 or size <= 0:
        return BATCH_ROWS
    return max(1024, min(BATCH_ROWS, BATCH_BYTES * rows // size))


def _read_split(plan: DirectPlan, split: Split) -> Iterator[pa.RecordBatch]:
    data_schema = pa.schema([f for f in plan.schema if f.name not in plan.partition_columns])
    if plan.kind == "parquet":
        import pyarrow.parquet as pq

        # memory-mapped: pages are decoded from the page cache without first being copied into
        # buffers read from the file (about a tenth of a wide table's read)
        reader = pq.ParquetFile(split.path, memory_map=True)
        yield from reader.iter_batches(row_groups=list(split.row_groups), columns=data_schema.names,
                                       batch_size=_parquet_batch_rows(reader.metadata, split.row_groups),
                                       use_threads=False)
    elif plan.kind == "ipc":
        with pa.memory_map(split.path) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
    elif plan.kind == "csv":
        import pyarrow.csv as pcsv

        data = _line_range(split.path, split.start, split.end)
        if not data:
            return
        if _DOUBLED_QUOTE.search(data):
            raise DirectReadError(f"{split.path} bytes {split.start}-{split.end}: a doubled quote inside a quoted "
                                  "field, which Spark's CSV parser (escape backslash) reads differently: "
                                  "use reader='spark'")
        header = split.start == 0 and plan.options.get("header", "false").lower() == "true"
        sep = plan.options.get("sep", plan.options.get("delimiter", ","))
        try:
            table = pcsv.read_csv(
                io.BytesIO(data),
                read_options=pcsv.ReadOptions(column_names=data_schema.names, skip_rows=1 if header else 0,
                                              use_threads=False),
                parse_options=pcsv.ParseOptions(delimiter=sep, escape_char="\\", double_quote=False),
                convert_options=pcsv.ConvertOptions(
                    column_types={n: pa.string() for n in data_schema.names}, strings_can_be_null=True,
                    null_values=[""], quoted_strings_can_be_null=True))
        except pa.ArrowInvalid as exc:
            raise DirectReadError(f"{split.path} bytes {split.start}-{split.end}: {exc}") from exc
        yield from _cast_text(table, data_schema, split).to_batches()
    else:
        import pyarrow.json as pjson

        data = _line_range(split.path, split.start, split.end)
        if not data.strip():
            return
        try:
            table = pjson.read_json(io.BytesIO(data), read_options=pjson.ReadOptions(use_threads=False),
                                    parse_options=pjson.ParseOptions(explicit_schema=_json_schema(data_schema),
                                                                     unexpected_field_behavior="ignore"))
        except pa.ArrowInvalid as exc:
            raise DirectReadError(f"{split.path} bytes {split.start}-{split.end}: {exc}") from exc
        yield from _cast_text(table, data_schema, split).to_batches()


def _json_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(pa.string() if pa.types.is_large_string(f.type) else f.type) for f in schema])


def _cast_text(table: pa.Table, schema: pa.Schema, split: Split) -> pa.Table:
    columns = []
    for field in schema:
        column = table.column(field.name)
        try:
            columns.append(column.cast(field.type) if column.type != field.type else column)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise DirectReadError(f"{split.path}: column {field.name!r} as {field.type}: {exc}") from exc
    return pa.Table.from_arrays(columns, schema=schema)


def _conform(batch: pa.RecordBatch, plan: DirectPlan, split: Split) -> pa.RecordBatch:
    """``batch`` in Spark's Arrow schema: representation casts, the partition columns appended."""
    values = dict(split.partition)
    columns = []
    for field in plan.schema:
        if field.name in plan.partition_columns:
            value = pa.array([values.get(field.name)], pa.string()).cast(field.type)
            columns.append(pa.repeat(value[0], batch.num_rows) if value[0].is_valid
                           else pa.nulls(batch.num_rows, field.type))
        else:
            column = batch.column(field.name)
            columns.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=plan.schema)


def read_group(plan: DirectPlan, splits: Sequence[Split], counter: list[int]) -> Iterator[pa.RecordBatch]:
    for split in splits:
        for batch in _read_split(plan, split):
            if batch.num_rows:
                counter[0] += batch.num_rows
                yield _conform(batch, plan, split)


def read_columns(plan: DirectPlan, columns: Sequence[str]) -> pa.Table:
    """The ``columns`` of every split, read here (the driver) with pyarrow, in Spark's Arrow types
    (Parquet and Arrow files read only those columns; CSV and JSON lines are parsed whole)."""
    wanted = pa.schema([plan.schema.field(c) for c in columns])
    narrow = plan if plan.kind in ("csv", "json") else dataclasses.replace(
        plan, schema=wanted, partition_columns=tuple(c for c in plan.partition_columns if c in columns))
    batches = [batch.select(list(columns)) for batch in read_group(narrow, plan.splits, [0])]
    return pa.Table.from_batches(batches, schema=wanted)


def write_group(splits: Iterator[Split], *, plan: DirectPlan, writer_options: Mapping[str, Any]) -> Iterator[Any]:
    """One task: read its splits, write fragments; yield (fragment json, schema bytes, rows read)."""
    from airflow_lance.spark.writer import write_partition

    counter = [0]
    results = list(write_partition(read_group(plan, list(splits), counter), **writer_options))
    for batch in results:
        for fragment, schema in zip(batch.column("fragment").to_pylist(), batch.column("schema").to_pylist(),
                                    strict=True):
            yield ("fragment", fragment, schema)
    yield ("rows", counter[0], b"")


def run_direct(spark: SparkSession, plan: DirectPlan, tasks: int,
               writer_options: Mapping[str, Any]) -> tuple[list[FragmentMetadata], set[bytes], int]:
    """Run the plan on the executors; (fragments, schemas they were written with, rows read)."""
    groups = group_splits(plan.splits, tasks)
    if not groups:
        return [], set(), 0
    job = functools.partial(write_group, plan=plan, writer_options=dict(writer_options))
    out = map_task_partitions(spark, groups, functools.partial(_one_group, job=job))
    fragments = [FragmentMetadata.from_json(r[1]) for r in out if r[0] == "fragment"]
    schemas = {bytes(r[2]) for r in out if r[0] == "fragment"}
    rows = sum(int(r[1]) for r in out if r[0] == "rows")
    return fragments, schemas, rows


def _one_group(groups: Iterator[list[Split]], *, job: Any) -> Iterator[Any]:
    for group in groups:
        yield from job(iter(group))
