"""New columns computed fragment by fragment in separate processes (e.g. Spark executors), committed once.

:class:`AddColumnsPlan` splits ``add_columns`` into its three steps so the middle one can run
anywhere:

1. **plan** (:meth:`AddColumnsPlan.plan`), at a read version: the new fields (ids above every id
   the manifest has used, as ``add_columns`` gives them) or, with ``only_missing``, the existing
   fields of those columns, and the fragments to write: every fragment, or only those that store
   none of the columns (appended after the columns were added). Unknown input columns, a new
   column that exists already (or, with ``only_missing``, one that does not, or another type)
   raise :class:`~airflow_lance.core.errors.SchemaEvolutionError` before anything is written.
2. **write** one data file per fragment covering its ``physical_rows`` (deleted rows stored as
   null), with ``add_columns``' own code: :meth:`write_fragment` calls a batch function over the
   fragment's live rows, :meth:`write_fragment_values` stores values computed elsewhere (one per
   live row, in row order).
3. **commit** one operation (:meth:`operation`): a ``Merge`` with every fragment (new columns), or a
   ``DataReplacement`` adding the new file to each filled fragment (``only_missing``). A Merge is
   planned at the read version; when appends or deletes landed since (Lance makes a concurrent
   Merge retry), the Merge is rebuilt on the latest version instead: appended fragments keep their
   rows and read the new columns as null, deletions are kept. Any other concurrent change (a
   rewrite, an update, another Merge, ...) raises :class:`CommitConflictError`: run it again.

The plan is JSON (:meth:`to_json`) so that the processes writing files need nothing but it, the
dataset's URI and the read version.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_lance.core import feature_flags
from airflow_lance.core._proto import file_pb2
from airflow_lance.core.errors import CommitConflictError, SchemaEvolutionError, SchemaMismatchError
from airflow_lance.core.evolution import (
    BatchUDF,
    _combined,
    _Compute,
    _one_batch,
    _updated_at,
    compute_fragment_columns,
    new_columns_schema,
    next_field_id,
    remove_new_files,
)
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.transaction import LanceOperation

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

#: Kinds of concurrent commits a Merge of new columns is rebuilt over (instead of failing).
REBASE_OVER = frozenset({"append", "delete", "create_index", "reserve_fragments", "update_config"})


def _nullable(schema: pa.Schema) -> pa.Schema:
    """New columns are nullable (fragments appended before the next backfill read them as null)."""
    return pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)


def _stored_ids(fragment: FragmentMetadata) -> set[int]:
    return {i for data_file in fragment.files for i in data_file.fields}


@dataclasses.dataclass(frozen=True)
class AddColumnsPlan:
    """What to write and commit to add (or backfill) columns; see the module docstring."""

    read_version: int
    #: the fields written: new ones (ids from the dataset's next id) or, ``only_missing``, existing ones
    fields: LanceSchema
    input_columns: tuple[str, ...]
    fragment_ids: tuple[int, ...]
    only_missing: bool = False

    # -- planning ----------------------------------------------------------------------------

    @staticmethod
    def check_input_columns(dataset: LanceDataset, columns: Sequence[str]) -> tuple[str, ...]:
        """``columns`` if every one is a top-level column of ``dataset``; SchemaEvolutionError otherwise."""
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise SchemaEvolutionError("input columns must be a list of column names")
        known = {f.name for f in dataset.lance_schema.top_level()}
        unknown = [c for c in columns if c not in known]
        if unknown:
            raise SchemaEvolutionError(f"column(s) {unknown} do not exist in the dataset "
                                       f"(columns: {', '.join(sorted(known))})")
        return tuple(columns)

    @staticmethod
    def existing_fields(dataset: LanceDataset, names: Sequence[str]) -> LanceSchema:
        """The fields of the existing top-level columns ``names`` (``only_missing``)."""
        known = {f.name for f in dataset.lance_schema.top_level()}
        missing = [n for n in names if n not in known]
        if missing:
            raise SchemaEvolutionError(f"column(s) {missing} do not exist in the dataset: only_missing backfills "
                                       "columns added before (add them first)")
        return dataset.lance_schema.project(list(names))

    @staticmethod
    def missing_fragments(dataset: LanceDataset, names: Sequence[str]) -> list[int]:
        """Ids of the fragments that store none of the columns ``names``; SchemaEvolutionError if a
        fragment stores some of them only (they were not added together)."""
        ids = set(AddColumnsPlan.existing_fields(dataset, names).field_ids())
        out = []
        for fragment in dataset._fragments:
            stored = _stored_ids(fragment) & ids
            if not stored:
                out.append(fragment.id)
            elif stored != ids:
                raise SchemaEvolutionError(
                    f"fragment {fragment.id} stores some of the columns {list(names)} but not all: backfill the "
                    "columns added together in one call, the others in another")
        return out

    @classmethod
    def plan(cls, dataset: LanceDataset, output: pa.Schema, input_columns: Sequence[str], *,
             only_missing: bool = False, fragment_ids: Sequence[int] | None = None) -> AddColumnsPlan:
        """Plan on ``dataset`` (its version is the read version). ``output`` is the schema of the
        computed columns. ``fragment_ids`` (default: every fragment, or those lacking the columns)
        must be fragments of the dataset."""
        inputs = cls.check_input_columns(dataset, input_columns)
        if not len(output):
            raise SchemaEvolutionError("the transform produces no columns")
        if only_missing:
            fields = cls.existing_fields(dataset, output.names)
            stored = fields.to_arrow()
            for field in output:
                have = stored.field(field.name).type
                if have != field.type:
                    raise SchemaMismatchError(f"column {field.name!r} is {have} in the dataset, the transform "
                                              f"computes {field.type}")
            planned = cls.missing_fragments(dataset, output.names)
        else:
            fields = new_columns_schema(dataset.lance_schema, _nullable(output), next_field_id(dataset._manifest))
            planned = [f.id for f in dataset._fragments]
        if fragment_ids is not None:
            if sorted(fragment_ids) != sorted(planned):
                raise SchemaEvolutionError(f"the fragments to write {sorted(fragment_ids)} are not the dataset's "
                                           f"{sorted(planned)} at version {dataset.version}")
            planned = list(fragment_ids)
        return cls(dataset.version, fields, inputs, tuple(planned), only_missing)

    @property
    def output_schema(self) -> pa.Schema:
        """The Arrow schema of the written columns (what a transform must produce)."""
        return self.fields.to_arrow()

    # -- writing -----------------------------------------------------------------------------

    def _fragment(self, dataset: LanceDataset, fragment_id: int) -> FragmentMetadata:
        if dataset.version != self.read_version:
            raise SchemaEvolutionError(f"the dataset is at version {dataset.version}, the plan at {self.read_version}")
        for fragment in dataset._fragments:
            if fragment.id == fragment_id and fragment_id in self.fragment_ids:
                return fragment
        raise SchemaEvolutionError(f"fragment {fragment_id} is not one of the plan's fragments")

    def _write(self, dataset: LanceDataset, fragment: FragmentMetadata, compute: _Compute,
               batch_size: int | None) -> FragmentMetadata:
        new = compute_fragment_columns(dataset, fragment, compute, self.fields, batch_size)
        if not self.only_missing and dataset._manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS:
            new = _updated_at(new, self.read_version + 1)
        return new

    def write_fragment(self, dataset: LanceDataset, fragment_id: int,
                       func: Callable[[pa.RecordBatch], Any], batch_size: int | None = None) -> FragmentMetadata:
        """Compute the columns of one fragment with ``func`` (RecordBatch of the input columns of
        live rows -> RecordBatch / Table / pandas DataFrame of the columns, as ``add_columns``'
        UDFs; results are cast to :attr:`output_schema`) and write their file. ``dataset`` is
        opened at the read version. Returns the fragment with the file added."""
        output = self.output_schema

        def call(batch: pa.RecordBatch) -> Any:
            result = func(batch)
            if type(result).__name__ == "DataFrame" and hasattr(result, "to_numpy"):  # pandas
                result = pa.Table.from_pandas(result, preserve_index=False)
            if isinstance(result, (pa.RecordBatch, pa.Table)) and result.schema != output:
                try:
                    result = _one_batch(pa.table(result).select(output.names).cast(output), output)
                except (KeyError, ValueError, pa.ArrowException) as exc:
                    raise SchemaEvolutionError(f"the transform returned {result.schema}, expected {output}: "
                                               f"{exc}") from exc
            return result

        udf = BatchUDF(call, output)
        compute = _Compute(list(self.input_columns), False, False, output, udf._call)
        return self._write(dataset, self._fragment(dataset, fragment_id), compute, batch_size)

    def write_fragment_values(self, dataset: LanceDataset, fragment_id: int, values: pa.Table) -> FragmentMetadata:
        """Store values computed elsewhere for one fragment: one row per live row, in row order,
        columns named as :attr:`output_schema` (cast to it)."""
        output = self.output_schema
        try:
            values = values.select(output.names).cast(output)
        except (KeyError, ValueError, pa.ArrowException) as exc:
            raise SchemaEvolutionError(f"values {values.schema} do not match {output}: {exc}") from exc
        batch = _one_batch(values, output)

        def fn(live: pa.RecordBatch) -> pa.RecordBatch:
            if live.num_rows != batch.num_rows:
                raise SchemaEvolutionError(f"fragment {fragment_id} has {live.num_rows} live rows, "
                                           f"{batch.num_rows} values were computed")
            return batch

        compute = _Compute([], False, False, output, fn, whole_fragment=True)
        return self._write(dataset, self._fragment(dataset, fragment_id), compute, None)

    # -- committing --------------------------------------------------------------------------

    def check_written(self, written: Sequence[FragmentMetadata]) -> None:
        """Every planned fragment written once, each with exactly one new file of the plan's fields."""
        ids = [f.id for f in written]
        if sorted(ids) != sorted(self.fragment_ids):
            raise SchemaEvolutionError(f"written fragments {sorted(ids)} are not the planned "
                                       f"{sorted(self.fragment_ids)}")
        want = self.fields.field_ids()
        for fragment in written:
            if not fragment.files or sorted(fragment.files[-1].fields) != sorted(want):
                raise SchemaEvolutionError(f"fragment {fragment.id} lacks the new columns' file")

    def operation(self, latest: LanceDataset, written: Sequence[FragmentMetadata]
                  ) -> tuple[LanceOperation.BaseOperation, int]:
        """The operation to commit and the version to commit it at, given the latest version.

        ``only_missing``: a DataReplacement at the read version (Lance's conflict rules apply). New
        columns: a Merge at the read version, or rebuilt on ``latest`` when only appends and
        deletes (and index, config, fragment-id reservations) landed since; CommitConflictError
        otherwise."""
        self.check_written(written)
        if self.only_missing:
            groups = [LanceOperation.DataReplacementGroup(f.id, f.files[-1]) for f in written]
            return LanceOperation.DataReplacement(groups), self.read_version
        base = latest if latest.version == self.read_version else latest.checkout_version(self.read_version)
        by_id = {f.id: f for f in written}
        if latest.version == self.read_version:
            fragments = [by_id[f.id] for f in base._fragments]
        else:
            fragments = self._rebased(base, latest, by_id)
        schema = _combined(latest.lance_schema, LanceSchema(self.fields.fields, self.fields.metadata))
        return LanceOperation.Merge(fragments, schema, True), latest.version

    def _rebased(self, base: LanceDataset, latest: LanceDataset, by_id: Mapping[int, FragmentMetadata]
                 ) -> list[FragmentMetadata]:
        for version in range(self.read_version + 1, latest.version + 1):
            txn = latest.read_transaction(version)
            kind = txn.kind if txn is not None else "unknown"
            if kind not in REBASE_OVER:
                raise CommitConflictError(
                    f"version {version} ({kind}) was committed after the read version {self.read_version}: the new "
                    "columns cannot be committed over it; nothing was committed, run the job again")
        read = {f.id: f for f in base._fragments}
        out = []
        stable = bool(latest._manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)
        for fragment in latest._fragments:
            if fragment.id not in read:  # appended since: reads the new columns as null
                out.append(fragment)
                continue
            if [d.path for d in fragment.files] != [d.path for d in read[fragment.id].files]:
                raise CommitConflictError(f"fragment {fragment.id} changed its data files since version "
                                          f"{self.read_version}; nothing was committed, run the job again")
            new = dataclasses.replace(by_id[fragment.id], deletion_file=fragment.deletion_file)
            out.append(_updated_at(new, latest.version + 1) if stable else new)
        return out

    def missing_files(self, dataset: LanceDataset, written: Sequence[FragmentMetadata]) -> list[str]:
        """The new data files of ``written`` that are not in the dataset's store (do not commit then)."""
        from airflow_lance.core.layout import data_file_path

        paths = [data_file_path(f.files[-1].path) for f in written if f.files]
        return [path for path in paths if not dataset.store.exists(path)]

    def discard(self, dataset: LanceDataset, written: Sequence[FragmentMetadata]) -> None:
        """Delete the new files of ``written`` (a plan that will not be committed)."""
        base = dataset if dataset.version == self.read_version else dataset.checkout_version(self.read_version)
        remove_new_files(base, base._fragments, written)

    # -- JSON --------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "read_version": self.read_version,
            "fields": base64.b64encode(self.fields.to_proto().SerializeToString()).decode(),
            "input_columns": list(self.input_columns),
            "fragment_ids": list(self.fragment_ids),
            "only_missing": self.only_missing,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> AddColumnsPlan:
        if isinstance(data, str):
            data = json.loads(data)
        try:
            proto = file_pb2.Schema.FromString(base64.b64decode(data["fields"]))
            return cls(int(data["read_version"]), LanceSchema.from_fields(proto.fields, dict(proto.metadata)),
                       tuple(data["input_columns"]), tuple(int(i) for i in data["fragment_ids"]),
                       bool(data.get("only_missing", False)))
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaEvolutionError(f"malformed add-columns plan: {exc!r}") from None
