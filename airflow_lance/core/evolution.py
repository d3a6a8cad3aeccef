"""Schema and data evolution (pylance's names): ``add_columns``, ``drop_columns``,
``alter_columns``, ``merge`` and ``LanceFragment.merge_columns``, plus ``batch_udf``.

New columns are written per fragment into new data files that cover the fragment's
``physical_rows`` (rows deleted in the fragment read as null there, as Lance writes them)
and committed as one ``Merge``; new fields take ids above every id the manifest has used
(schema and data files, so ids of dropped columns still stored in files are never reused).
All-null columns (a ``pa.Field``/``pa.Schema``), drops, renames and nullability changes are
metadata only. A cast rewrites only the cast column under a new field id; data files that no
longer hold any field of the schema leave the fragment (pylance 14 keeps the old id listed in
files that still hold other fields: so do we). Everything is validated before anything is
written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import pickle
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import closing
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core import feature_flags
from airflow_lance.core._proto import file_pb2, table_pb2
from airflow_lance.core.arrays import arrow_dataset, empty_table
from airflow_lance.core.deletion import deletion_path, keep_mask, read_deletion_vector
from airflow_lance.core.errors import (
    CommitConflictError,
    IncompatibleTransactionError,
    InvalidInputError,
    InvalidTransformError,
    SchemaEvolutionError,
    UnsupportedFeatureError,
)
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.manifest import LEGACY_STORAGE_VERSION
from airflow_lance.core.rowids import ROW_ID_FIELDS, decode_row_ids, encode_versions, sequence_bytes
from airflow_lance.core.scan import read_fragment
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.transaction import LanceOperation
from airflow_lance.core.write import write_data_files

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset
    from airflow_lance.core.storage import ObjectStore

#: Rows handed to a UDF at a time (physical rows of a fragment; deleted ones are left out).
DEFAULT_BATCH_SIZE = 8192
ROW_ID, ROW_ADDRESS = "_rowid", "_rowaddr"
_ROWS = "__airflow_lance_rows"


# -- batch UDFs (pylance's lance.batch_udf) ------------------------------------------------------


class BatchUDFCheckpoint:
    """Results of a UDF kept in SQLite until they are committed, in pylance's format, so a run
    of either resumes from a checkpoint the other wrote: table ``batches`` (fragment id, batch
    index, the result RecordBatch pickled as pylance does) and ``fragments`` (fragments whose
    new file is written but not committed, as pylance's JSON). Pickles are read with an
    unpickler that only builds pyarrow objects; our older IPC-stream blobs are still read."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        with closing(sqlite3.connect(self.path)) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS batches (fragment_id INT, batch_index INT, result BLOB)")
            conn.execute("CREATE TABLE IF NOT EXISTS fragments (fragment_id INT, data BLOB)")
            conn.commit()

    def cleanup(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    def get_batch(self, fragment_id: int, batch_index: int) -> pa.RecordBatch | None:
        with closing(sqlite3.connect(self.path)) as conn:
            row = conn.execute(
                "SELECT result FROM batches WHERE fragment_id = ? AND batch_index = ?", (fragment_id, batch_index)
            ).fetchone()
        if row is None:
            return None
        blob = bytes(row[0])
        if blob[:1] == b"\x80":  # a pickle (pylance's format)
            try:
                batch = _ArrowUnpickler(io.BytesIO(blob)).load()
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
                raise SchemaEvolutionError(f"checkpoint {self.path}: batch ({fragment_id}, {batch_index}) "
                                           f"does not unpickle: {exc}") from exc
            if not isinstance(batch, pa.RecordBatch):
                raise SchemaEvolutionError(f"checkpoint {self.path}: batch ({fragment_id}, {batch_index}) "
                                           f"holds a {type(batch).__name__}, not a RecordBatch")
            return batch
        with pa.ipc.open_stream(pa.py_buffer(blob)) as reader:
            return _one_batch(reader.read_all(), reader.schema)

    def insert_batch(self, fragment_id: int, batch_index: int, batch: pa.RecordBatch) -> None:
        with closing(sqlite3.connect(self.path)) as conn:
            conn.execute("INSERT INTO batches (fragment_id, batch_index, result) VALUES (?, ?, ?)",
                         (fragment_id, batch_index, pickle.dumps(batch)))
            conn.commit()

    def get_fragment(self, fragment_id: int) -> str | None:
        with closing(sqlite3.connect(self.path)) as conn:
            row = conn.execute("SELECT data FROM fragments WHERE fragment_id = ?", (fragment_id,)).fetchone()
        return row[0] if row is not None else None

    def insert_fragment(self, fragment_id: int, fragment: str) -> None:
        with closing(sqlite3.connect(self.path)) as conn:
            conn.execute("INSERT INTO fragments (fragment_id, data) VALUES (?, ?)", (fragment_id, fragment))
            conn.execute("DELETE FROM batches WHERE fragment_id = ?", (fragment_id,))
            conn.commit()


_PLAIN_BUILTINS = {("builtins", "bytearray"), ("builtins", "bytes")}


class _ArrowUnpickler(pickle.Unpickler):
    """Builds only pyarrow's own objects (what a pickled RecordBatch refers to)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module == "pyarrow.lib" and not name.startswith("__")) or (module, name) in _PLAIN_BUILTINS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a UDF checkpoint may only hold pyarrow objects, not {module}.{name}")


class BatchUDF:
    """A function RecordBatch -> RecordBatch (or pandas DataFrame) for ``add_columns``."""

    def __init__(self, func: Callable[[pa.RecordBatch], Any], output_schema: pa.Schema | None = None,
                 checkpoint_file: str | os.PathLike[str] | None = None) -> None:
        self.func = func
        self.output_schema = output_schema
        self.cache = BatchUDFCheckpoint(checkpoint_file) if checkpoint_file is not None else None

    def __call__(self, batch: pa.RecordBatch) -> Any:
        return self.func(batch)

    def _call(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        result = _as_batch(self.func(batch))
        if self.output_schema is not None and result.schema != self.output_schema:
            raise SchemaEvolutionError(
                f"output schema of the UDF does not match the expected schema: expected {self.output_schema}, "
                f"got {result.schema}")
        if result.num_rows != batch.num_rows:
            raise SchemaEvolutionError(f"the UDF returned {result.num_rows} rows for a batch of {batch.num_rows}")
        return result


def batch_udf(output_schema: pa.Schema | None = None,
              checkpoint_file: str | os.PathLike[str] | None = None) -> Callable[[Callable[..., Any]], BatchUDF]:
    """Decorator making a :class:`BatchUDF` (pylance's ``lance.batch_udf``)."""
    return lambda func: BatchUDF(func, output_schema, checkpoint_file)


def _one_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)


def _as_batch(result: Any) -> pa.RecordBatch:
    if isinstance(result, pa.RecordBatch):
        return result
    if isinstance(result, pa.Table):
        return _one_batch(result, result.schema)
    if type(result).__name__ == "DataFrame" and hasattr(result, "to_numpy"):
        return pa.RecordBatch.from_pandas(result)
    raise InvalidTransformError(f"a UDF must return a RecordBatch or pandas DataFrame, not {type(result).__name__}")


# -- field ids and schemas ------------------------------------------------------------------------


def next_field_id(manifest: table_pb2.Manifest) -> int:
    """One above every field id of the schema and of the data files (Lance's ``max_field_id``)."""
    ids = [f.id for f in manifest.fields]
    ids += [i for frag in manifest.fragments for d in frag.files for i in d.fields]
    return max(ids, default=-1) + 1


def _shifted(fields: Iterable[file_pb2.Field], start: int) -> list[file_pb2.Field]:
    out = []
    for f in fields:
        copy = file_pb2.Field()
        copy.CopyFrom(f)
        copy.id = f.id + start
        if f.parent_id >= 0:
            copy.parent_id = f.parent_id + start
        out.append(copy)
    return out


def new_columns_schema(existing: LanceSchema, new: pa.Schema, first_id: int) -> LanceSchema:
    """The Lance fields of ``new`` with ids from ``first_id``; names checked against ``existing``."""
    taken = {f.name for f in existing.top_level()}
    clash = [f.name for f in new if f.name in taken]
    if clash:
        raise SchemaEvolutionError(f"column(s) {clash} already exist in the dataset")
    try:
        fields = LanceSchema.from_arrow(pa.schema(list(new))).fields
    except InvalidInputError as exc:  # duplicate names, '.' in a name
        raise SchemaEvolutionError(str(exc)) from exc
    metadata = LanceSchema.from_arrow(pa.schema([], metadata=new.metadata)).metadata
    return LanceSchema(_shifted(fields, first_id), metadata)


def _combined(existing: LanceSchema, added: LanceSchema) -> LanceSchema:
    """The schema with the new fields; the new columns' schema metadata joins the dataset's, as
    pylance's (a pandas UDF's ``pandas`` key included)."""
    metadata = {**existing.metadata, **added.metadata}
    return LanceSchema.from_fields(list(existing.fields) + list(added.fields), metadata)


# -- computing new columns per fragment ------------------------------------------------------------


@dataclasses.dataclass
class _Compute:
    """How to compute new columns from a batch of existing ones."""

    read: list[str]
    with_row_id: bool
    with_row_address: bool
    output: pa.Schema
    fn: Callable[[pa.RecordBatch], pa.RecordBatch]
    cache: BatchUDFCheckpoint | None = None
    #: Vectorised transforms (SQL, casts, joins) see no batches: one call per fragment.
    whole_fragment: bool = False


def _split_read_columns(read_columns: Sequence[str] | None, schema: LanceSchema) -> tuple[list[str] | None, bool, bool]:
    if read_columns is None:
        return None, False, False
    if isinstance(read_columns, str) or not all(isinstance(c, str) for c in read_columns):
        raise SchemaEvolutionError("read_columns must be a list of column names")
    plain = [c for c in read_columns if c not in (ROW_ID, ROW_ADDRESS)]
    known = {f.name for f in schema.top_level()}
    unknown = [c for c in plain if c not in known]
    if unknown:
        raise SchemaEvolutionError(f"column(s) {unknown} do not exist in the dataset")
    return plain, ROW_ID in read_columns, ROW_ADDRESS in read_columns


def _sql_compute(transforms: Mapping[Any, Any], schema: LanceSchema) -> _Compute:
    from airflow_lance.core.filter import translate_value  # sqlglot is slow to import

    arrow = schema.to_arrow()
    expressions: dict[str, pc.Expression] = {}
    nullable: dict[str, bool] = {}
    needed_by: dict[str, list[str]] = {}
    read: list[str] = []
    for name, sql in transforms.items():
        if not isinstance(name, str):
            raise InvalidTransformError(f"column names must be strings, not {type(name).__name__}")
        if not isinstance(sql, str):
            raise InvalidTransformError(f"column expressions must be strings, not {type(sql).__name__}")
        try:
            expressions[name], needed, nullable[name] = translate_value(sql, arrow)
            needed_by[name] = needed
        except SchemaEvolutionError:
            raise
        except Exception as exc:
            raise SchemaEvolutionError(f"expression {sql!r} of column {name!r}: {exc}") from exc
        read += [c for c in needed if c not in read]
    empty = empty_table(pa.schema([arrow.field(c) for c in read]))
    sample = arrow_dataset().dataset(empty).to_table(columns=expressions)
    # pylance's nullability (DataFusion's): literals and non-null columns through null-preserving
    # operators give a non-nullable column; a row that is null anyway is an error below. An
    # expression of literals only is folded to a constant: nullable only if that is null.
    constants = {n: e for n, e in expressions.items() if not needed_by[n]}
    if constants:
        folded = arrow_dataset().dataset(pa.table({"_": [0]})).to_table(columns=constants)
        nullable.update({n: folded.column(n).null_count > 0 for n in constants})
    output = pa.schema([pa.field(n, t, nullable[n]) for n, t in zip(sample.schema.names, sample.schema.types)])

    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        try:
            table = arrow_dataset().dataset(pa.Table.from_batches([batch])).to_table(columns=expressions)
            for field, column in zip(output, table.columns):
                if not field.nullable and column.null_count:
                    raise SchemaEvolutionError(f"column {field.name!r} is not nullable but its expression "
                                               f"gave {column.null_count} null(s)")
            return _one_batch(table.cast(output), output)
        except pa.ArrowException as exc:
            raise SchemaEvolutionError(f"cannot evaluate the new columns: {exc}") from exc

    return _Compute(read, False, False, output, fn, whole_fragment=True)


class _Values:
    """Precomputed values (pylance's ``ReaderLike``), handed out in row order: each fragment
    takes as many as it has live rows."""

    def __init__(self, table: pa.Table) -> None:
        self.table, self.offset = table, 0

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.offset + batch.num_rows > self.table.num_rows:
            raise SchemaEvolutionError("Stream ended before producing values for all rows in dataset")
        piece = self.table.slice(self.offset, batch.num_rows)
        self.offset += batch.num_rows
        return _one_batch(piece, self.table.schema)

    def check_consumed(self) -> None:
        if self.offset != self.table.num_rows:
            raise SchemaEvolutionError("Stream produced more values than expected for dataset")


def _values_compute(data: pa.RecordBatchReader | pa.Table | pa.RecordBatch, reader_schema: pa.Schema | None
                    ) -> _Compute:
    table = _as_table(data)
    if reader_schema is not None:
        try:
            table = table.cast(reader_schema)
        except (pa.ArrowException, ValueError) as exc:
            raise SchemaEvolutionError(f"the values do not match reader_schema: {exc}") from exc
    values = _Values(table)
    return _Compute([], False, False, table.schema, values, whole_fragment=True)


def _udf_compute(udf: Any, dataset: LanceDataset, read_columns: Sequence[str] | None,
                 fragments: Sequence[FragmentMetadata] | None = None) -> _Compute:
    schema = dataset.lance_schema
    read, with_id, with_addr = _split_read_columns(read_columns, schema)
    read = read if read is not None else [f.name for f in schema.top_level()]
    if not isinstance(udf, BatchUDF):
        udf = BatchUDF(udf)
        plain = True
    else:
        plain = False
    if udf.output_schema is None:  # infer from the first row, as pylance does
        for fragment in fragments if fragments is not None else dataset._fragments:
            sample = _fragment_input(dataset, fragment, read, with_id, with_addr, limit=1)
            if sample.num_rows:
                break
        else:
            raise SchemaEvolutionError("cannot infer the UDF's output schema of an empty dataset; give output_schema")
        try:
            udf.output_schema = _as_batch(udf.func(sample.to_batches()[0])).schema
        except SchemaEvolutionError:
            raise
        except Exception as exc:
            if plain:
                raise InvalidTransformError(
                    f"transforms must be a BatchUDF, dict, or map function; the callable failed on a batch: {exc}"
                ) from exc
            raise
    return _Compute(list(read), with_id, with_addr, udf.output_schema, udf._call, udf.cache)


def _fragment_input(dataset: LanceDataset, fragment: FragmentMetadata, read: Sequence[str], with_id: bool,
                    with_addr: bool, limit: int | None = None) -> pa.Table:
    table = read_fragment(dataset.store, fragment, dataset.lance_schema.project(list(read)))
    if with_id or with_addr:
        table = _with_row_columns(dataset, fragment, table, with_id, with_addr)
    return table.slice(0, limit) if limit is not None else table


def _live_mask(store: ObjectStore, fragment: FragmentMetadata) -> np.ndarray:
    if fragment.deletion_file is None:
        return np.ones(fragment.physical_rows, dtype=bool)
    deleted = read_deletion_vector(store, fragment.id, fragment.deletion_file)
    return keep_mask(fragment.physical_rows, deleted, deletion_path(fragment.id, fragment.deletion_file))


def _with_row_columns(dataset: LanceDataset, fragment: FragmentMetadata, live: pa.Table, with_id: bool,
                      with_addr: bool) -> pa.Table:
    mask = _live_mask(dataset.store, fragment)
    offsets = np.flatnonzero(mask).astype(np.uint64)
    addresses = (np.uint64(fragment.id) << np.uint64(32)) | offsets
    if with_id:
        ids = addresses
        if dataset._manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS:
            data = sequence_bytes(dataset.store, fragment.to_pb(), ROW_ID_FIELDS)
            if data is None:
                raise SchemaEvolutionError(f"fragment {fragment.id} has no row ids")
            ids = decode_row_ids(data)[offsets.astype(np.int64)].astype(np.uint64)
        live = live.append_column(ROW_ID, pa.array(ids, pa.uint64()))
    if with_addr:
        live = live.append_column(ROW_ADDRESS, pa.array(addresses, pa.uint64()))
    return live


def _check_legacy_nulls(table: pa.Table) -> None:
    """pylance's refusal: legacy files store no nulls of primitive and list columns."""
    for field, column in zip(table.schema, table.columns):
        t = field.type
        if column.null_count and not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                                      or pa.types.is_large_binary(t) or pa.types.is_struct(t)):
            raise SchemaEvolutionError(
                f"Column {field.name!r} has null values of type: {t}, but storing nulls for this data type is not "
                "supported by the dataset's current Lance file format version: V1")


def compute_fragment_columns(
    dataset: LanceDataset, fragment: FragmentMetadata, compute: _Compute, new_fields: LanceSchema,
    batch_size: int | None,
) -> FragmentMetadata:
    """Write the new columns of one fragment into one data file covering its physical rows;
    return the fragment with that file added."""
    store = dataset.store
    if compute.cache is not None:
        cached = compute.cache.get_fragment(fragment.id)
        if cached is not None:
            done = FragmentMetadata.from_json(cached)
            return dataclasses.replace(fragment, files=fragment.files + done.files[-1:])
    size = batch_size or DEFAULT_BATCH_SIZE
    if size <= 0:
        raise SchemaEvolutionError("batch_size must be positive")
    if compute.whole_fragment:
        size = max(fragment.physical_rows, 1)
    mask = _live_mask(store, fragment)
    if compute.read:
        table = read_fragment(store, fragment, dataset.lance_schema.project(compute.read), with_deletions=False)
    else:  # nothing to read (precomputed values, row ids only): a placeholder column keeps the row count
        table = pa.table({_ROWS: pa.nulls(fragment.physical_rows)})
    live = table.filter(pa.array(mask)) if fragment.deletion_file is not None else table
    if compute.with_row_id or compute.with_row_address:
        live = _with_row_columns(dataset, fragment, live, compute.with_row_id, compute.with_row_address)
        if not compute.read:
            live = live.drop_columns([_ROWS])
    # physical batch i covers rows [i*size, (i+1)*size): its live rows are a slice of ``live``
    bounds = np.concatenate([[0], np.cumsum(mask)])[np.minimum(np.arange(0, fragment.physical_rows + size, size),
                                                                fragment.physical_rows)]
    outputs = []
    for index, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        if index * size >= fragment.physical_rows:
            break
        batch = None if compute.cache is None else compute.cache.get_batch(fragment.id, index)
        if batch is None:
            piece = live.slice(int(start), int(stop - start))
            batch = compute.fn(_one_batch(piece, piece.schema))
            if compute.cache is not None:
                compute.cache.insert_batch(fragment.id, index, batch)
        outputs.append(batch)
    result = pa.Table.from_batches(outputs, compute.output) if outputs else empty_table(compute.output)
    if result.num_rows != int(mask.sum()):
        raise SchemaEvolutionError(f"new columns have {result.num_rows} rows, fragment {fragment.id} has "
                                   f"{int(mask.sum())}")
    if dataset.data_storage_version == LEGACY_STORAGE_VERSION:
        _check_legacy_nulls(result)
    if fragment.deletion_file is not None:  # deleted rows are stored as nulls
        positions = np.cumsum(mask) - 1
        result = result.take(pa.array(positions, mask=~mask))
    written = write_data_files(store, iter(result.combine_chunks().to_batches()), new_fields,
                               max_rows_per_file=max(fragment.physical_rows, 1), max_bytes_per_file=2**62,
                               data_storage_version=dataset.data_storage_version)
    files = tuple(f for w in written for f in w.files)
    if len(files) != 1:
        raise SchemaEvolutionError(f"fragment {fragment.id}: expected one new data file, wrote {len(files)}")
    new = dataclasses.replace(fragment, files=fragment.files + files)
    if compute.cache is not None:
        compute.cache.insert_fragment(fragment.id, checkpoint_fragment_json(new))
    return new


def checkpoint_fragment_json(fragment: FragmentMetadata) -> str:
    """The fragment as pylance's checkpoint holds it (Lance's serde JSON): row ids and version
    metadata as ``row_id_meta`` / ``*_version_meta``, so pylance resuming keeps them."""
    import json

    data = fragment.to_json()
    extra = data.pop("extra", None)
    if extra:
        pb = table_pb2.DataFragment()
        pb.ParseFromString(fragment.extra)

        def external(f: table_pb2.ExternalFile) -> dict[str, Any]:
            return {"path": f.path, "offset": f.offset, "size": f.size}

        if pb.HasField("inline_row_ids"):
            data["row_id_meta"] = {"Inline": list(pb.inline_row_ids)}
        elif pb.HasField("external_row_ids"):
            data["row_id_meta"] = {"External": external(pb.external_row_ids)}
        for name in ("last_updated_at", "created_at"):
            if pb.HasField(f"{name}_version_inline"):
                data[f"{name}_version_meta"] = {"inline": list(getattr(pb, f"{name}_version_inline"))}
            elif pb.HasField(f"{name}_version_file"):
                data[f"{name}_version_meta"] = {"external": external(getattr(pb, f"{name}_version_file"))}
    return json.dumps(data)


def compute_all_fragments(dataset: LanceDataset, fragments: Sequence[FragmentMetadata], compute: _Compute,
                          new_fields: LanceSchema, batch_size: int | None) -> list[FragmentMetadata]:
    """``compute_fragment_columns`` for every fragment; if one fails, the files already written
    are removed (unless a UDF checkpoint keeps them for the next attempt)."""
    done: list[FragmentMetadata] = []
    try:
        for fragment in fragments:
            done.append(compute_fragment_columns(dataset, fragment, compute, new_fields, batch_size))
    except BaseException:
        if compute.cache is None:
            remove_new_files(dataset, fragments, done)
        raise
    if dataset._manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS:
        done = [_updated_at(fragment, dataset.version + 1) for fragment in done]
    return done


def _updated_at(fragment: FragmentMetadata, version: int) -> FragmentMetadata:
    """Every row of the fragment was last updated at ``version`` (pylance 14 records a data write so)."""
    pb = fragment.to_pb()
    pb.last_updated_at_version_inline = encode_versions(np.full(fragment.physical_rows, version, dtype=np.uint64))
    return FragmentMetadata.from_pb(pb)


def remove_new_files(dataset: LanceDataset, before: Sequence[FragmentMetadata],
                     after: Sequence[FragmentMetadata]) -> None:
    """Delete the data files of ``after`` that ``before`` does not have (a plan that is not committed)."""
    from airflow_lance.core import layout

    old = {d.path for f in before for d in f.files}
    for fragment in after:
        for data_file in fragment.files:
            if data_file.path not in old:
                with contextlib.suppress(FileNotFoundError, OSError):
                    dataset.store.delete(layout.data_file_path(data_file.path))


# -- add_columns -----------------------------------------------------------------------------------

Transforms = Union[Mapping[str, str], BatchUDF, Callable[..., Any], pa.Field, Sequence[pa.Field], pa.Schema]


def _all_null_schema(transforms: Any) -> pa.Schema | None:
    if isinstance(transforms, pa.Field):
        return pa.schema([transforms])
    if isinstance(transforms, (list, tuple)) and transforms and isinstance(transforms[0], pa.Field):
        if not all(isinstance(f, pa.Field) for f in transforms):
            raise InvalidTransformError("a list of transforms must hold only pyarrow Fields")
        return pa.schema(list(transforms))
    if isinstance(transforms, pa.Schema):
        return transforms
    return None


def plan_compute(dataset: LanceDataset, transforms: Any, read_columns: Sequence[str] | None,
                 reader_schema: pa.Schema | None, fragments: Sequence[FragmentMetadata] | None = None) -> _Compute:
    if isinstance(transforms, Mapping):
        return _sql_compute(transforms, dataset.lance_schema)
    if isinstance(transforms, (pa.RecordBatchReader, pa.Table, pa.RecordBatch)):
        return _values_compute(transforms, reader_schema)
    if isinstance(transforms, BatchUDF) or callable(transforms):
        return _udf_compute(transforms, dataset, read_columns, fragments)
    raise InvalidTransformError(
        f"transforms must be a dict of SQL expressions, a BatchUDF or callable, or pyarrow Field(s)/Schema, "
        f"not {type(transforms).__name__}")


def plan_add_columns(dataset: LanceDataset, transforms: Any, read_columns: Sequence[str] | None = None,
                     reader_schema: pa.Schema | None = None, batch_size: int | None = None,
                     ) -> tuple[LanceOperation.Merge, BatchUDFCheckpoint | None]:
    """Write the new columns' files; return the Merge to commit (and the UDF's checkpoint)."""
    schema = dataset.lance_schema
    first_id = next_field_id(dataset._manifest)
    nulls = _all_null_schema(transforms)
    if nulls is not None and dataset.data_storage_version == LEGACY_STORAGE_VERSION:
        raise SchemaEvolutionError("Cannot add all-null columns to legacy dataset version.")
    if nulls is not None:
        added = new_columns_schema(schema, nulls, first_id)
        return LanceOperation.Merge(list(dataset._fragments), _combined(schema, added), True), None
    compute = plan_compute(dataset, transforms, read_columns, reader_schema)
    if not len(compute.output):
        raise SchemaEvolutionError("the transform produces no columns")
    added = new_columns_schema(schema, compute.output, first_id)
    fragments = compute_all_fragments(dataset, dataset._fragments, compute, added, batch_size)
    if isinstance(compute.fn, _Values):
        try:
            compute.fn.check_consumed()
        except SchemaEvolutionError:
            remove_new_files(dataset, dataset._fragments, fragments)
            raise
    return LanceOperation.Merge(fragments, _combined(schema, added), True), compute.cache


def merge_columns(dataset: LanceDataset, fragment: FragmentMetadata, value_func: Any,
                  columns: Sequence[str] | None = None, batch_size: int | None = None,
                  reader_schema: pa.Schema | None = None) -> tuple[FragmentMetadata, LanceSchema]:
    """``LanceFragment.merge_columns``: the fragment with the new columns' file, and the new schema."""
    if isinstance(value_func, BatchUDF) and value_func.cache is not None:
        raise SchemaEvolutionError(
            "A checkpoint file cannot be used when applying a UDF with LanceFragment.merge_columns. You must "
            "apply your own checkpointing for fragment-level operations.")
    compute = plan_compute(dataset, value_func, columns, reader_schema, [fragment])
    added = new_columns_schema(dataset.lance_schema, compute.output, next_field_id(dataset._manifest))
    new = compute_fragment_columns(dataset, fragment, compute, added, batch_size)
    return new, _combined(dataset.lance_schema, added)


# -- drop_columns / alter_columns -------------------------------------------------------------------


def _field_by_path(schema: LanceSchema, path: str) -> file_pb2.Field | None:
    parent, found = -1, None
    for part in path.split("."):
        found = next((f for f in schema.children(parent) if f.name == part), None)
        if found is None:
            return None
        parent = found.id
    return found


def plan_drop_columns(dataset: LanceDataset, columns: Sequence[str]) -> LanceOperation.Project:
    schema = dataset.lance_schema
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise SchemaEvolutionError("columns must be a list of column names")
    removed: set[int] = set()
    for name in columns:
        field = _field_by_path(schema, name)
        if field is None:
            raise SchemaEvolutionError(f"Column {name} does not exist in the dataset")
        removed.update(schema.subtree_ids(field.id))
    kept = [f for f in schema.fields if f.id not in removed]
    if not [f for f in kept if f.parent_id == -1]:
        raise SchemaEvolutionError("Cannot drop all columns from a dataset")
    return LanceOperation.Project(LanceSchema.from_fields(kept, schema.metadata), True)


def _is_upcast_downcast(source: pa.DataType, target: pa.DataType) -> bool:
    """Lance's rule: casts stay within one kind of type."""
    t = pa.types
    if t.is_integer(source):
        return t.is_integer(target)
    if t.is_floating(source):
        return t.is_floating(target)
    if t.is_temporal(source):
        return t.is_temporal(target)
    if t.is_boolean(source):
        return t.is_boolean(target)
    if t.is_string(source) or t.is_large_string(source):
        return t.is_string(target) or t.is_large_string(target)
    if t.is_binary(source) or t.is_large_binary(source):
        return t.is_binary(target) or t.is_large_binary(target)
    if t.is_decimal(source):
        return t.is_decimal(target)
    if t.is_list(source) or t.is_large_list(source) or t.is_fixed_size_list(source):
        return (t.is_list(target) or t.is_large_list(target) or t.is_fixed_size_list(target)) and \
            _is_upcast_downcast(source.value_type, target.value_type)
    return False


_ALTER_KEYS = {"path", "name", "nullable", "data_type"}


def plan_alter_columns(dataset: LanceDataset, alterations: Sequence[Mapping[str, Any]]
                       ) -> LanceOperation.Project | LanceOperation.Merge:
    schema = dataset.lance_schema
    fields = {f.id: _copy(f) for f in schema.fields}
    casts: list[tuple[file_pb2.Field, pa.DataType]] = []
    for alteration in alterations:
        if not isinstance(alteration, Mapping) or "path" not in alteration or set(alteration) - _ALTER_KEYS:
            raise SchemaEvolutionError(f"an alteration is a dict with 'path' and any of 'name', 'nullable', "
                                       f"'data_type', not {alteration!r}")
        path = alteration["path"]
        source = _field_by_path(schema, path) if isinstance(path, str) else None
        if source is None:
            raise SchemaEvolutionError(f'Column "{path}" does not exist in the dataset')
        target = fields[source.id]
        if alteration.get("name") is not None:
            if not isinstance(alteration["name"], str) or not alteration["name"] or "." in alteration["name"]:
                raise SchemaEvolutionError(f"invalid new name {alteration['name']!r}")
            target.name = alteration["name"]
        nullable = alteration.get("nullable")
        if nullable is not None:
            if not nullable and source.nullable:
                _check_no_nulls(dataset, source)
            target.nullable = bool(nullable)
        data_type = alteration.get("data_type")
        if data_type is not None:
            if source.parent_id != -1:
                _check_nested_cast(dataset, schema, source, path, casts)
            old_type = schema.arrow_field(source.id).type
            if not isinstance(data_type, pa.DataType) or not _is_upcast_downcast(old_type, data_type):
                raise SchemaEvolutionError(f'Cannot cast column "{path}" from {old_type} to {data_type}')
            casts.append((source, data_type))
    renamed = LanceSchema([fields[f.id] for f in schema.fields], schema.metadata)
    for parent in [-1] + [f.id for f in schema.fields]:
        names = [f.name for f in renamed.children(parent)]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SchemaEvolutionError(f"Duplicate field name(s) {dupes} in the schema")
    tightened = any(a.get("nullable") is False for a in alterations)
    if not casts:
        return LanceOperation.Project(LanceSchema.from_fields(renamed.fields, schema.metadata), not tightened)
    _refuse_indexed_casts(dataset, schema, casts)
    return _plan_casts(dataset, renamed, casts)


def _refuse_indexed_casts(dataset: LanceDataset, schema: LanceSchema,
                          casts: Sequence[tuple[file_pb2.Field, pa.DataType]]) -> None:
    """pylance 14 refuses to cast a column an index is built on: the cast gives the column a new
    field id, and an index left on the old one breaks every filtered scan in pylance."""
    from airflow_lance.core.indices.metadata import user_indices

    cast_ids = {i for source, _ in casts for i in schema.subtree_ids(source.id)}
    attached = sorted({index.name for index in user_indices(dataset.manifest_file) if set(index.fields) & cast_ids})
    if attached:
        columns = [".".join([a.name for a in _ancestors(schema, source)] + [source.name]) for source, _ in casts]
        raise SchemaEvolutionError(
            f"cannot cast {columns}: index(es) {attached} are built on them and a cast rewrites the column's "
            "data; drop them with drop_index() first and create them again after the cast")


def _ancestors(schema: LanceSchema, field: file_pb2.Field) -> list[file_pb2.Field]:
    """The fields above ``field``, top-level first."""
    chain = []
    while field.parent_id != -1:
        field = schema.field(field.parent_id)
        chain.append(field)
    return chain[::-1]


def _check_nested_cast(dataset: LanceDataset, schema: LanceSchema, source: file_pb2.Field, path: str,
                       casts: Sequence[tuple[file_pb2.Field, pa.DataType]]) -> None:
    """A nested cast as pylance 14 does it: a leaf inside structs only, 2.1+ files (pylance
    writes 2.0 datasets it cannot read back), one per top-level struct and call."""
    if dataset.data_storage_version in (LEGACY_STORAGE_VERSION, "2.0"):
        raise UnsupportedFeatureError(
            f"casting the nested column {path!r} needs data storage version 2.1 or later "
            f"(this dataset: {dataset.data_storage_version})")
    ancestors = _ancestors(schema, source)
    if schema.children(source.id) or not all(pa.types.is_struct(schema.arrow_field(a.id).type) for a in ancestors):
        raise UnsupportedFeatureError(f"casting {path!r}: only a leaf field inside structs can be cast")
    top = ancestors[0].id
    if any(c.parent_id != -1 and _ancestors(schema, c)[0].id == top for c, _ in casts):
        raise UnsupportedFeatureError(f"casting {path!r}: one nested cast per top-level struct and call")


def _pruned_struct(schema: LanceSchema, chain: Sequence[file_pb2.Field], leaf: pa.Field) -> pa.Field:
    """The struct field ``chain[0]`` holding only the path down to ``leaf``."""
    field = leaf
    for ancestor in reversed(chain):
        arrow = schema.arrow_field(ancestor.id)
        field = pa.field(arrow.name, pa.struct([field]), arrow.nullable, metadata=arrow.metadata)
    return field


def _cast_nested(array: pa.Array, path: Sequence[str], target: pa.DataType, output: pa.Field) -> pa.Array:
    """``array`` (the top-level struct) pruned to ``path`` with the leaf cast; every level keeps
    its validity."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not path:
        return array.cast(target, safe=True)
    child = _cast_nested(array.field(path[0]), path[1:], target, output.type.field(0))
    mask = pa.array(np.asarray(array.is_null())) if array.null_count else None
    return pa.StructArray.from_arrays([child], fields=[output.type.field(0)], mask=mask)


def _copy(f: file_pb2.Field) -> file_pb2.Field:
    out = file_pb2.Field()
    out.CopyFrom(f)
    return out


def _check_no_nulls(dataset: LanceDataset, field: file_pb2.Field) -> None:
    if field.parent_id != -1:
        raise UnsupportedFeatureError("making a nested column non-nullable is not supported")
    projection = dataset.lance_schema.project([field.name])
    for fragment in dataset._fragments:
        if read_fragment(dataset.store, fragment, projection).column(0).null_count:
            raise SchemaEvolutionError(f"Column {field.name!r} contains null values and cannot be made non-nullable")


def _plan_casts(dataset: LanceDataset, renamed: LanceSchema,
                casts: list[tuple[file_pb2.Field, pa.DataType]]) -> LanceOperation.Merge:
    next_id = next_field_id(dataset._manifest)
    _given = list(casts)
    replaced: dict[int, list[file_pb2.Field]] = {}
    new_arrow = []
    for source, data_type in casts:
        dest = renamed.field(source.id)
        arrow_field = pa.field(dest.name, data_type, dest.nullable, metadata=renamed.arrow_field(source.id).metadata)
        new = _shifted(LanceSchema.from_arrow(pa.schema([arrow_field])).fields, next_id)
        next_id += len(new)
        chain = _ancestors(renamed, source)
        if chain:  # a nested leaf: the new field keeps its parent; the file holds the path down to it
            new[0].parent_id = source.parent_id
            arrow_field = _pruned_struct(renamed, chain, arrow_field)
        replaced[source.id] = new
        new_arrow.append(arrow_field)
    order = {f.id: i for i, f in enumerate(renamed.fields)}
    if dataset.data_storage_version != LEGACY_STORAGE_VERSION:  # legacy files list fields by id, as pylance's
        # ids in the order given, the columns of the file in schema order
        casts = sorted(casts, key=lambda c: order[c[0].id])
        new_arrow = [field for _, field in sorted(zip([order[s.id] for s, _ in _given], new_arrow))]
    fields: list[file_pb2.Field] = []
    for f in renamed.fields:
        if f.id in replaced:
            fields.extend(replaced[f.id])
        elif f.id not in {i for s, _ in casts for i in renamed.subtree_ids(s.id)}:
            fields.append(f)
    new_schema = LanceSchema.from_fields(fields, renamed.metadata)
    cast_fields = LanceSchema([f for s, _ in casts for f in
                               [_copy(a) for a in _ancestors(renamed, s)] + replaced[s.id]])
    chains = [_ancestors(renamed, s) for s, _ in casts]
    names = [chain[0].name if chain else s.name for chain, (s, _) in zip(chains, casts)]
    paths = [[a.name for a in chain[1:]] + [s.name] if chain else [] for chain, (s, _) in zip(chains, casts)]
    output = pa.schema(new_arrow)

    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        try:
            return pa.RecordBatch.from_arrays(
                [_cast_nested(batch.column(n), path, t, out)
                 for n, path, (_, t), out in zip(names, paths, casts, output)], schema=output)
        except pa.ArrowException as exc:
            raise SchemaEvolutionError(f"cannot cast: {exc}") from exc

    compute = _Compute(names, False, False, output, fn, whole_fragment=True)
    keep = set(new_schema.field_ids())
    fragments = [dataclasses.replace(new, files=tuple(d for d in new.files if keep & set(d.fields)))
                 for new in compute_all_fragments(dataset, dataset._fragments, compute, cast_fields, None)]
    return LanceOperation.Merge(fragments, new_schema, True)


# -- merge(data, left_on, right_on) ----------------------------------------------------------------


def _as_table(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_numpy"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        batches = list(data)
        if batches and all(isinstance(b, pa.RecordBatch) for b in batches):
            return pa.Table.from_batches(batches)
    raise InvalidTransformError(f"cannot merge data of type {type(data).__name__}")


def plan_merge(dataset: LanceDataset, data: Any, left_on: str, right_on: str | None = None,
               schema: pa.Schema | None = None) -> LanceOperation.Merge:
    """Add the columns of ``data`` by joining ``data[right_on]`` to ``left_on``; rows without a
    match get nulls, and of rows of ``data`` with the same key the last one counts (as in pylance)."""
    table = _as_table(data)
    if schema is not None:
        table = table.cast(schema)
    right_on = right_on or left_on
    existing = dataset.lance_schema
    left = _field_by_path(existing, left_on) if isinstance(left_on, str) else None
    if left is None or left.parent_id != -1:
        raise SchemaEvolutionError(f"Column {left_on} does not exist in the left side dataset")
    if right_on not in table.column_names:
        raise SchemaEvolutionError(f"Column {right_on} does not exist in the right side dataset")
    new_names = [n for n in table.column_names if n != right_on]
    for name in new_names:
        if _field_by_path(existing, name) is not None:
            raise SchemaEvolutionError(f"Column {name} exists in both sides of the dataset")
    if not new_names:
        raise SchemaEvolutionError("data has no columns besides the join key")
    left_type, right_type = existing.arrow_field(left.id).type, table.schema.field(right_on).type
    if left_type != right_type:
        raise SchemaEvolutionError(f"Index column type mismatch: expected {left_type}, got {right_type}")
    table = table.take(pa.array(np.arange(table.num_rows - 1, -1, -1)))  # a repeated key: the last row wins
    keys = table.column(right_on)
    values = table.select(new_names)
    added = new_columns_schema(existing, values.schema, next_field_id(dataset._manifest))

    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        return _one_batch(values.take(pc.index_in(batch.column(0), value_set=keys)), values.schema)

    compute = _Compute([left.name], False, False, values.schema, fn, whole_fragment=True)
    fragments = compute_all_fragments(dataset, dataset._fragments, compute, added, None)
    return LanceOperation.Merge(fragments, _combined(existing, added), True)


# -- committing ------------------------------------------------------------------------------------


def commit_evolution(dataset: LanceDataset, plan: Callable[[LanceDataset], LanceOperation.BaseOperation],
                     conflict_retries: int = 10, keep_files: bool = False) -> LanceDataset:
    """Plan on ``dataset``, commit; on a retryable conflict re-plan on the latest version. Returns
    the new version (the caller advances its handle). The files of a plan that does not commit
    are removed, unless ``keep_files`` (a UDF checkpoint still refers to them)."""
    from airflow_lance.core.dataset import LanceDataset as _LanceDataset, _open_version

    current = dataset
    for attempt in range(conflict_retries + 1):
        operation = plan(current)
        try:
            return _LanceDataset.commit(current, operation, current.version)
        except BaseException as error:
            if isinstance(operation, LanceOperation.Merge) and not keep_files:
                remove_new_files(current, current._fragments, operation.fragments)
            if isinstance(error, IncompatibleTransactionError) or not isinstance(error, CommitConflictError):
                raise
            if attempt == conflict_retries:
                raise
            current = _open_version(dataset.store, None)
    raise AssertionError("unreachable")


def add_columns(dataset: LanceDataset, transforms: Any, read_columns: Sequence[str] | None = None,
                reader_schema: pa.Schema | None = None, batch_size: int | None = None) -> LanceDataset:
    """Compute and commit new columns; the checkpoint of a UDF is removed once committed."""
    caches: list[BatchUDFCheckpoint] = []
    if isinstance(transforms, pa.RecordBatchReader):  # read once, for every attempt
        transforms = transforms.read_all()

    def plan(current: LanceDataset) -> LanceOperation.BaseOperation:
        operation, cache = plan_add_columns(current, transforms, read_columns, reader_schema, batch_size)
        if cache is not None:
            caches.append(cache)
        return operation

    new = commit_evolution(dataset, plan, keep_files=isinstance(transforms, BatchUDF) and transforms.cache is not None)
    for cache in caches[:1]:
        cache.cleanup()
    return new


def drop_columns(dataset: LanceDataset, columns: Sequence[str]) -> LanceDataset:
    return commit_evolution(dataset, lambda current: plan_drop_columns(current, columns))


def alter_columns(dataset: LanceDataset, alterations: Sequence[Mapping[str, Any]]) -> LanceDataset:
    return commit_evolution(dataset, lambda current: plan_alter_columns(current, alterations))


def merge(dataset: LanceDataset, data: Any, left_on: str, right_on: str | None = None,
          schema: pa.Schema | None = None) -> LanceDataset:
    table = _as_table(data)  # a reader is consumed once, for every attempt
    return commit_evolution(dataset, lambda current: plan_merge(current, table, left_on, right_on, schema))
