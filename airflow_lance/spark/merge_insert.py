"""Merge insert on Spark: pylance's ``merge_insert`` with the work on the executors.

1. The target's key columns (and the columns a condition, a by-source filter or a partial source
   needs) are read with their row addresses on the executors (:func:`~airflow_lance.spark.read.read_lance`
   at the job's read version) and joined with the source on the keys (Spark's equi-join: a null
   key matches nothing, as in Lance). Inner, left, right or full outer, as the clauses need.
2. Each joined row gets its fate: updated (matched; ``matched_condition`` evaluated by the core on
   the executors, over ``source.*`` and ``target.*`` with the dataset's types), inserted (source
   only), deleted (target only; ``by_source_expr`` evaluated likewise) or unchanged. A target row
   matched by two source rows fails the job before anything is written
   (``AmbiguousMergeInsertError``, pylance's message), whatever the condition says.
3. Updated and inserted rows are written as new fragments by the write job's partition writer
   (updated rows first in each partition: on datasets with stable row ids they keep their row
   ids and created-at versions, see ``core.update.carry_row_ids``); the addresses of updated
   and deleted rows, partitioned by fragment, become each fragment's new deletion vector
   (merged with its existing one; a fragment losing every row is removed).
4. The result (the ``Update``'s parts and pylance's counts) is staged; the operator commits.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from airflow_lance.core import AmbiguousMergeInsertError, FragmentMetadata, SchemaMismatchError, dataset
from airflow_lance.core.arrays import sorted_unique
from airflow_lance.core.merge_insert import condition_mask
from airflow_lance.core.scan import apply_filter
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.update import carry_row_ids, delete_offsets, moved_row_ids
from airflow_lance.spark import merge_keys
from airflow_lance.spark.conform import harmonize
from airflow_lance.spark.distributed import default_parallelism
from airflow_lance.spark.merge_insert_spec import MergeInsertJobResult, MergeInsertJobSpec, unique
from airflow_lance.spark.read import read_lance
from airflow_lance.spark.worker import bulk_write
from airflow_lance.spark.writer import RESULT_DDL, check_row_count, write_partition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROW_ADDRESS = "_rowaddr"
#: target columns are joined under this prefix
TARGET = "__airflow_lance_target_"
KIND = "__airflow_lance_kind"
SOURCE = "__airflow_lance_source"
UPDATED, INSERTED, DELETED, UNCHANGED = 0, 1, 2, 3
#: a writer task gets at least this many new rows (fewer tasks, fewer small fragments)
MIN_ROWS_PER_WRITER = 64 * 1024
DELETIONS_DDL = "fragment string, removed long"
DELETIONS_SCHEMA = pa.schema([("fragment", pa.string()), ("removed", pa.int64())])


def check_source(columns: Sequence[str], schema: pa.Schema, on: Sequence[str]) -> None:
    """The source's columns must be the dataset's (a subset) and hold the keys (core's messages)."""
    names = schema.names
    unexpected = [n for n in columns if n not in names]
    if unexpected:
        raise SchemaMismatchError(f"Append with different schema: unexpected={unexpected} (dataset columns: {names})")
    missing_keys = [k for k in on if k not in columns]
    if missing_keys:
        raise SchemaMismatchError(f"the source has no key column(s) {missing_keys}")


def conformed(table: pa.Table, schema: LanceSchema, arrow: pa.Schema) -> pa.Table:
    """``table``'s columns with the dataset's exact types (Spark's representations converted)."""
    batches = [harmonize(batch, arrow) for batch in table.to_batches()]
    if batches:
        table = pa.Table.from_batches(batches)
    return schema.project(table.column_names).align(table)


def _part(batch: pa.RecordBatch, names: Sequence[str], prefix: str = "") -> pa.Table:
    return pa.table({name: batch.column(prefix + name) for name in names})


def _schema_at(uri: str, storage_options: Mapping[str, str], read_version: int) -> tuple[Any, LanceSchema, pa.Schema]:
    ds = dataset(uri, read_version, storage_options=dict(storage_options))
    return ds, ds.lance_schema, ds.schema


def refine_kinds(batches: Iterator[pa.RecordBatch], *, uri: str, storage_options: Mapping[str, str],
                 read_version: int, source_columns: Sequence[str],
                 target_columns: Sequence[str], condition: str | None,
                 by_source_expr: str | None) -> Iterator[pa.RecordBatch]:
    """Executor side: matched rows whose ``condition`` does not hold, and target-only rows that
    ``by_source_expr`` does not select, become unchanged (core evaluation, dataset types)."""
    from airflow_lance.core.filter import to_expression

    _, lance_schema, arrow = _schema_at(uri, storage_options, read_version)
    by_source = to_expression(by_source_expr, arrow) if by_source_expr else None
    for batch in batches:
        kinds = batch.column(KIND).to_numpy(zero_copy_only=False).copy()
        if condition is not None and (kinds == UPDATED).any():
            rows = np.flatnonzero(kinds == UPDATED)
            chosen = batch.take(pa.array(rows))
            source = conformed(_part(chosen, source_columns), lance_schema, arrow)
            target = conformed(_part(chosen, target_columns, TARGET), lance_schema, arrow)
            kinds[rows[~condition_mask(condition, source, target)]] = UNCHANGED
        if by_source is not None and (kinds == DELETED).any():
            rows = np.flatnonzero(kinds == DELETED)
            target = conformed(_part(batch.take(pa.array(rows)), target_columns, TARGET), lance_schema, arrow)
            kept = apply_filter(target.append_column("__i", pa.array(np.arange(rows.size))), by_source)
            keep = np.zeros(rows.size, dtype=bool)
            keep[kept.column("__i").to_numpy()] = True
            kinds[rows[~keep]] = UNCHANGED
        yield batch.set_column(batch.schema.get_field_index(KIND), KIND, pa.array(kinds, pa.int8()))


def _full_rows(batch: pa.RecordBatch, lance_schema: LanceSchema, arrow: pa.Schema) -> pa.RecordBatch:
    """A new-rows batch with every dataset column (missing ones null) in the dataset's types."""
    data = harmonize(batch, arrow)
    columns = [data.column(f.name) if f.name in data.schema.names else pa.nulls(data.num_rows, f.type)
               for f in arrow]
    table = pa.Table.from_arrays(columns, names=arrow.names)
    aligned = lance_schema.align(table)
    return aligned.combine_chunks().to_batches()[0] if aligned.num_rows else pa.RecordBatch.from_pylist(
        [], schema=arrow)


def write_new_rows(batches: Iterator[pa.RecordBatch], *, uri: str, storage_options: Mapping[str, str],
                   read_version: int, stable_row_ids: bool, max_rows_per_file: int,
                   max_bytes_per_file: int) -> Iterator[pa.RecordBatch]:
    """Executor side: write a partition of updated and inserted rows (updated first) as new
    fragments; on datasets with stable row ids the updated rows carry their row ids."""
    _, lance_schema, arrow = _schema_at(uri, storage_options, read_version)
    moved: list[np.ndarray] = []

    def rows() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if not batch.num_rows:
                continue
            if stable_row_ids:
                kinds = batch.column(KIND).to_numpy(zero_copy_only=False)
                moved.append(batch.column(ROW_ADDRESS).to_numpy(zero_copy_only=False)[kinds == UPDATED])
            yield _full_rows(batch.drop_columns([KIND, ROW_ADDRESS]), lance_schema, arrow)

    for out in write_partition(rows(), uri=uri, mode="append", storage_options=storage_options,
                               max_rows_per_file=max_rows_per_file, max_bytes_per_file=max_bytes_per_file,
                               target_schema=arrow):
        if stable_row_ids and moved:
            fragments = [FragmentMetadata.from_json(text) for text in out.column("fragment").to_pylist()]
            carried = _moved_row_ids(uri, storage_options, read_version, np.concatenate(moved).astype(np.uint64))
            fragments = carry_row_ids(fragments, carried)
            out = out.set_column(0, "fragment", pa.array([json.dumps(f.to_json()) for f in fragments]))
        yield out


def _moved_row_ids(uri: str, storage_options: Mapping[str, str], read_version: int,
                   addresses: np.ndarray) -> np.ndarray:
    """(row id, created-at version) of the rows at ``addresses``, in their order: (2, n) uint64."""
    ds = dataset(uri, read_version, storage_options=dict(storage_options))
    fragment_ids = addresses >> np.uint64(32)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    carried = np.empty((2, addresses.size), dtype=np.uint64)
    for fragment_id in sorted_unique(fragment_ids):
        where = np.flatnonzero(fragment_ids == fragment_id)
        fragment = ds.get_fragment(int(fragment_id))
        assert fragment is not None, f"fragment {fragment_id} is not in version {read_version}"
        carried[:, where] = moved_row_ids(ds.store, fragment.metadata, offsets[where])
    return carried


def write_deletions(batches: Iterator[pa.RecordBatch], *, uri: str, storage_options: Mapping[str, str],
                    read_version: int) -> Iterator[pa.RecordBatch]:
    """Executor side: the new deletion vectors of the fragments whose row addresses this
    partition holds (merged with their existing ones); one row per fragment: its JSON, or
    the id of a fragment whose every row is gone."""
    parts = [b.column(ROW_ADDRESS).to_numpy(zero_copy_only=False) for b in batches if b.num_rows]
    if not parts:
        return
    addresses = np.concatenate(parts).astype(np.uint64)
    fragment_ids = addresses >> np.uint64(32)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    ds = dataset(uri, read_version, storage_options=dict(storage_options))
    hits = {int(f): np.sort(offsets[fragment_ids == f]) for f in sorted_unique(fragment_ids)}
    fragments = []
    for fragment_id in hits:
        fragment = ds.get_fragment(fragment_id)
        assert fragment is not None, f"fragment {fragment_id} is not in version {read_version}"
        fragments.append(fragment.metadata)
    with bulk_write():
        updated, removed = delete_offsets(ds.store, fragments, hits, read_version)
    yield pa.RecordBatch.from_pydict({
        "fragment": [json.dumps(f.to_json()) for f in updated] + [None] * len(removed),
        "removed": [None] * len(updated) + [int(i) for i in removed],
    }, schema=DELETIONS_SCHEMA)


def _join(spark: SparkSession, spec: MergeInsertJobSpec, source: DataFrame,
          target_columns: Sequence[str]) -> DataFrame:
    from pyspark.sql import functions as F

    target = read_lance(spark, spec.uri, version=spec.read_version, columns=list(target_columns),
                        storage_options=dict(spec.storage_options), with_row_address=True)
    target = target.select([F.col(f"`{c}`").alias(TARGET + c) for c in target_columns] + [F.col(ROW_ADDRESS)])
    source = source.withColumn(SOURCE, F.lit(True))
    condition = functools.reduce(lambda a, b: a & b,
                                 [source[f"`{k}`"] == target[TARGET + k] for k in spec.on])
    insert, by_source = spec.when_not_matched_insert_all, spec.when_not_matched_by_source_delete
    how = "full_outer" if insert and by_source else "left_outer" if insert else "right_outer" if by_source else "inner"
    joined = source.join(target, condition, how)
    from_source, from_target = F.col(SOURCE).isNotNull(), F.col(ROW_ADDRESS).isNotNull()
    kind = (F.when(from_source & from_target, F.lit(UPDATED if spec.when_matched_update_all else UNCHANGED))
            .when(from_source, F.lit(INSERTED if insert else UNCHANGED))
            .otherwise(F.lit(DELETED if by_source else UNCHANGED)))
    return joined.withColumn(KIND, kind.cast("byte"))


def count_and_check(classified: DataFrame, spec: MergeInsertJobSpec) -> dict[int, int]:
    """Rows of each fate, and (when matched rows are updated) the ambiguity check, in one Spark job:
    a target row matched by two source rows raises AmbiguousMergeInsertError (pylance's message),
    whatever the condition says."""
    from pyspark.sql import functions as F

    matched = F.col(SOURCE).isNotNull() & F.col(ROW_ADDRESS).isNotNull()
    fates = (UPDATED, INSERTED, DELETED)
    per_row = classified.groupBy(ROW_ADDRESS, matched.alias("matched")).agg(
        F.count(F.lit(1)).alias("n"), *[F.sum((F.col(KIND) == fate).cast("long")).alias(f"k{fate}") for fate in fates])
    repeats = F.when(F.col("matched"), F.col("n"))
    totals = per_row.agg(*[F.sum(f"k{fate}").alias(f"k{fate}") for fate in fates], F.max(repeats).alias("most"),
                         F.max_by(ROW_ADDRESS, repeats).alias("address")).collect()[0]
    if spec.when_matched_update_all and totals["most"] is not None and totals["most"] > 1:
        keys = classified.where(matched & (F.col(ROW_ADDRESS) == totals["address"])).select(
            *[F.col(TARGET + k).alias(k) for k in spec.on]).first()
        row = {k: keys[k] for k in spec.on}
        raise AmbiguousMergeInsertError(
            "Ambiguous merge inserts are prohibited: multiple source rows match the same target row on "
            f"{row}. Please ensure each target row is matched by at most one source row."
        )
    return {fate: int(totals[f"k{fate}"] or 0) for fate in fates}


def run_merge_insert(spark: SparkSession, spec: MergeInsertJobSpec) -> MergeInsertJobResult:
    """Run the merge insert on the executors and stage its result; return it."""
    from airflow_lance.core.filter import referenced_columns, to_expression
    from airflow_lance.spark.direct import load_parquet, plain_parquet_plan
    from airflow_lance.spark.job import load_source

    def load() -> DataFrame:
        frame = load_parquet(spark, spec.source)  # plain Parquet files: no schema-inference job
        return load_source(spark, spec.source) if frame is None else frame

    start = time.monotonic()
    ds = dataset(spec.uri, spec.read_version, storage_options=dict(spec.storage_options))
    arrow, lance_schema = ds.schema, ds.lance_schema
    # plain Parquet files read directly: planned from their footers, no Spark DataFrame (which
    # the key-broadcast plan would not use)
    plan = plain_parquet_plan(spark, spec.source)
    source = None if plan is not None else load()
    source_columns = list(plan.schema.names) if plan is not None else list(source.columns)
    print(f"airflow-lance merge insert: source {'planned' if plan is not None else 'loaded'} in "
          f"{time.monotonic() - start:.2f} s", flush=True)
    check_source(source_columns, arrow, spec.on)
    names = [f.name for f in arrow]
    target_columns = list(spec.on)
    if spec.when_matched_update_all:
        target_columns += [n for n in names if n not in source_columns]  # updated rows keep these
        if spec.matched_condition is not None:
            target_columns += names
    if spec.by_source_expr is not None:
        to_expression(spec.by_source_expr, arrow)  # a bad filter fails here, before anything runs
        target_columns += referenced_columns(spec.by_source_expr, arrow)
    target_columns = unique(target_columns)
    if merge_keys.applies(spec, source_columns, names):
        new_fragments, updated, removed, counts = merge_keys.run(spark, spec, source, ds, plan=plan)
    else:
        new_fragments, updated, removed, counts = _run_joined(spark, spec, load() if source is None else source, ds,
                                                              source_columns, target_columns)
    check_row_count(new_fragments, counts.get(UPDATED, 0) + counts.get(INSERTED, 0), spec.uri)
    result = MergeInsertJobResult(
        spec_digest=spec.digest(),
        new_fragments=tuple(new_fragments),
        updated_fragments=tuple(updated),
        removed_fragment_ids=tuple(removed),
        fields_for_preserving_frag_bitmap=tuple(lance_schema.field_ids()),
        num_inserted_rows=counts.get(INSERTED, 0),
        num_updated_rows=counts.get(UPDATED, 0),
        num_deleted_rows=counts.get(DELETED, 0),
        bytes_written=sum(d.file_size_bytes or 0 for f in new_fragments for d in f.files),
        elapsed_seconds=time.monotonic() - start,
    )
    result.save(spec.staging_root, spec.staging_name, spec.storage_options)
    return result


def _run_joined(spark: SparkSession, spec: MergeInsertJobSpec, source: DataFrame, ds: Any,
                source_columns: Sequence[str], target_columns: Sequence[str],
                ) -> tuple[list[FragmentMetadata], list[FragmentMetadata], list[int], dict[int, int]]:
    """The general plan (a partial source, a condition, deletes by source): Spark joins the
    source with the target's keys, row addresses and the columns the clauses need."""
    from pyspark import StorageLevel

    classified = _join(spark, spec, source, target_columns)
    if spec.matched_condition is not None or spec.by_source_expr is not None:
        classified = classified.mapInArrow(functools.partial(
            refine_kinds, uri=spec.uri, storage_options=dict(spec.storage_options), read_version=spec.read_version,
            source_columns=source_columns, target_columns=target_columns,
            condition=spec.matched_condition, by_source_expr=spec.by_source_expr), classified.schema)
    classified = classified.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = count_and_check(classified, spec)
        new_fragments = _write_rows(spark, spec, classified, ds, source_columns, target_columns,
                                    counts.get(UPDATED, 0) + counts.get(INSERTED, 0))
        updated, removed = _write_deletions(spark, spec, classified, ds)
    finally:
        classified.unpersist()
    return new_fragments, updated, removed, counts


def _write_rows(spark: SparkSession, spec: MergeInsertJobSpec, classified: DataFrame, ds: Any,
                source_columns: Sequence[str], target_columns: Sequence[str], rows: int) -> list[FragmentMetadata]:
    from pyspark.sql import functions as F

    if not rows:
        return []
    names = ds.schema.names
    columns = [F.col(f"`{n}`") if n in source_columns else F.col(TARGET + n).alias(n)
               for n in names if n in source_columns or n in target_columns]
    new_rows = classified.where(F.col(KIND).isin(UPDATED, INSERTED)).select(*columns, KIND, ROW_ADDRESS)
    writers = spec.num_partitions or max(1, min(default_parallelism(spark),
                                                math.ceil(rows / MIN_ROWS_PER_WRITER)))
    new_rows = new_rows.coalesce(writers)
    stable = ds._stable_row_ids
    if stable:
        new_rows = new_rows.sortWithinPartitions(KIND)  # updated rows (0) first: they carry their ids
    writer = functools.partial(
        write_new_rows, uri=spec.uri, storage_options=dict(spec.storage_options), read_version=spec.read_version,
        stable_row_ids=stable,
        max_rows_per_file=spec.max_rows_per_file, max_bytes_per_file=spec.max_bytes_per_file)
    written = new_rows.mapInArrow(writer, RESULT_DDL).collect()
    return [FragmentMetadata.from_json(row["fragment"]) for row in written]


def _write_deletions(spark: SparkSession, spec: MergeInsertJobSpec, classified: DataFrame,
                     ds: Any) -> tuple[list[FragmentMetadata], list[int]]:
    from pyspark.sql import functions as F

    addresses = classified.where(F.col(KIND).isin(UPDATED, DELETED)).select(ROW_ADDRESS)
    tasks = spec.num_partitions or max(1, min(default_parallelism(spark), len(ds.get_fragments())))
    addresses = addresses.repartition(tasks, F.shiftright(F.col(ROW_ADDRESS), 32))
    writer = functools.partial(write_deletions, uri=spec.uri, storage_options=dict(spec.storage_options),
                               read_version=spec.read_version)
    rows = addresses.mapInArrow(writer, DELETIONS_DDL).collect()
    updated = [FragmentMetadata.from_json(row["fragment"]) for row in rows if row["fragment"] is not None]
    removed = sorted(int(row["removed"]) for row in rows if row["removed"] is not None)
    return updated, removed
