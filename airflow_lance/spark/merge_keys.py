"""The merge insert's key-broadcast plan: no shuffle of the target, one pass over the source's rows.

Used when the source has every column of the dataset, there is no matched condition and no
``when_not_matched_by_source_delete`` (pylance's upsert, insert-if-not-exists and update-only):
then a new row is a source row as it is, and the target contributes only which keys it holds
and where.

A path source that the direct ingest reads exactly (:mod:`airflow_lance.spark.direct`) is read
with pyarrow, never through Spark rows: its keys on the driver, its splits by the writer tasks
(plain Parquet files are loaded with the schema Spark would infer, computed from the footers:
no schema-inference job). Other sources go through Spark's rows.

1. The source's key columns are collected on the driver (Arrow; a path source reads only those
   columns) and broadcast once as Arrow IPC: their distinct non-null values in the dataset's types
   (on Spark Connect, which has no broadcast variables, they travel inside the tasks' pickled
   function: :func:`~airflow_lance.spark.distributed.share`).
2. Tasks (one per slot) read their target fragments' key columns with their row addresses
   (the core's reader; deleted rows skipped) and look them up in the broadcast keys
   (:class:`KeyIndex`); the driver gets the matched (keys, address) pairs. When no source key
   repeats (no match can be ambiguous) the same task writes the fragments' new deletion
   vectors (merged with the existing ones; a fragment losing every row is removed).
3. Otherwise a target row matched by two source rows fails the job here
   (``AmbiguousMergeInsertError``), before anything is written, and the deletion vectors are
   written by one more job.
4. The source is written as new fragments by the executors in one pass: each batch's keys are
   looked up in the broadcast matched pairs, rows the clauses drop are filtered out, and on
   datasets with stable row ids the updated rows, written first in their partition, keep their
   row ids.

An upsert (update and insert) from a direct source without repeated keys on a dataset without
stable row ids writes every source row whatever matches: steps 2 and 4 then run as one Spark
job, the match and write work packed into one task per slot (:func:`pack`).

A null key matches nothing, as in Lance. Counts are computed on the driver from the keys.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core import AmbiguousMergeInsertError, FragmentMetadata
from airflow_lance.core.arrays import empty_table, sorted_unique
from airflow_lance.spark.distributed import (
    default_parallelism,
    from_ipc,
    map_groups,
    map_task_partitions,
    share,
    to_ipc,
    unshare,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_lance.spark.merge_insert_spec import MergeInsertJobSpec

ROW_ADDRESS = "_rowaddr"
INDEX = "__airflow_lance_index"


def applies(spec: MergeInsertJobSpec, source_columns: Sequence[str], names: Sequence[str]) -> bool:
    """Whether the key-broadcast plan can run ``spec`` (see the module docstring)."""
    return (spec.matched_condition is None and not spec.when_not_matched_by_source_delete
            and set(names) <= set(source_columns))


def key_table(table: pa.Table | pa.RecordBatch, on: Sequence[str], arrow: pa.Schema) -> pa.Table:
    """The key columns of a Spark Arrow batch in the dataset's types."""
    from airflow_lance.spark.conform import harmonize

    keys = pa.RecordBatch.from_arrays([table.column(k).combine_chunks() if isinstance(table, pa.Table)
                                       else table.column(k) for k in on], names=list(on))
    keys = harmonize(keys, arrow, cast=on)
    return pa.Table.from_batches([keys])


def _non_null(table: pa.Table, on: Sequence[str]) -> pa.Table:
    mask = None
    for k in on:
        valid = pc.is_valid(table.column(k))
        mask = valid if mask is None else pc.and_(mask, valid)
    return table.filter(mask) if table.num_rows else table


#: One integer key is looked up in a dense table (a slot per value from the smallest key to the
#: largest: 4 bytes each) when it has at most this many slots per key, or at most DENSE_MIN_SLOTS.
DENSE_SLOTS_PER_KEY = 8
DENSE_MIN_SLOTS = 1 << 20


class KeyIndex:
    """Row addresses by key, built once per task: for one integer key a dense table (unique keys
    in a narrow range: one array access per lookup) or a sorted array (binary search), else a
    hash join per lookup."""

    def __init__(self, pairs: pa.Table, on: Sequence[str]) -> None:
        self.on = list(on)
        self.pairs = pairs
        self.sorted: np.ndarray | None = None
        self.dense: np.ndarray | None = None
        if len(on) == 1 and pa.types.is_integer(pairs.schema.field(on[0]).type):
            keys = pairs.column(on[0]).to_numpy()
            values = pairs.column(ROW_ADDRESS).to_numpy().astype(np.int64)
            if keys.size and self._densify(keys, values):
                return
            order = np.argsort(keys, kind="stable")
            self.sorted, self.values = keys[order], values[order]

    def _densify(self, keys: np.ndarray, values: np.ndarray) -> bool:
        low, high = keys.min(), keys.max()
        span = int(high) - int(low) + 1
        if span > max(DENSE_SLOTS_PER_KEY * keys.size, DENSE_MIN_SLOTS) or keys.size >= 1 << 31:
            return False
        dense = np.full(span + 1, -1, dtype=np.int32)  # the last slot: every probe out of range
        dense[(keys - low).astype(np.int64)] = np.arange(keys.size, dtype=np.int32)
        if np.count_nonzero(dense >= 0) != keys.size:  # a repeated key: the sorted array keeps the first
            return False
        # slot -1 (no key) picks the appended -1 (no address)
        self.dense, self.low, self.high, self.values = dense, low, high, np.append(values, np.int64(-1))
        return True

    def _dense_addresses(self, probe: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
        assert self.dense is not None
        outside = self.dense.size - 1
        if probe.min() >= self.low and probe.max() <= self.high:
            offsets = (probe - self.low).astype(np.intp)
        else:  # the differences of probes out of range may wrap around: replaced
            inside = (probe >= self.low) & (probe <= self.high)
            offsets = np.where(inside, (probe - self.low).astype(np.intp), outside)
        if valid is not None:
            offsets[~valid] = outside
        return self.values[self.dense[offsets]]

    def addresses(self, keys: pa.Table) -> np.ndarray:
        """The row address of each row of ``keys`` (``-1``: not matched; a null key matches nothing)."""
        found = np.full(keys.num_rows, -1, dtype=np.int64)
        if not keys.num_rows or not self.pairs.num_rows:
            return found
        if self.sorted is not None or self.dense is not None:
            column = keys.column(self.on[0]).combine_chunks()
            valid = column.is_valid().to_numpy(zero_copy_only=False) if column.null_count else None
            probe = (column.fill_null(0) if column.null_count else column).to_numpy()
            if self.dense is not None:
                return self._dense_addresses(probe, valid)
            at = np.minimum(np.searchsorted(self.sorted, probe), self.sorted.size - 1)
            hit = self.sorted[at] == probe
            if valid is not None:
                hit &= valid
            found[hit] = self.values[at[hit]]
            return found
        indexed = keys.select(self.on).append_column(INDEX, pa.array(np.arange(keys.num_rows)))
        joined = indexed.join(self.pairs, keys=self.on, join_type="inner")
        found[joined.column(INDEX).to_numpy()] = joined.column(ROW_ADDRESS).to_numpy().astype(np.int64)
        return found


# -- executors -------------------------------------------------------------------------------------


def match_fragments(tasks: Iterator[tuple[int, int, int]], *, uri: str, version: int,
                    storage_options: Mapping[str, str], on: Sequence[str], keys: Any,
                    delete: bool) -> Iterator[tuple[bytes, str | None, int | None]]:
    """Rows of the target fragments of ``tasks`` (fragment, start, stop: whole fragments) whose
    keys are in the broadcast ``keys``: (Arrow IPC of (keys..., ``_rowaddr``), the fragment's new
    JSON, the id of a fragment whose every row is gone). ``delete``: the matched rows are deleted
    here (their fragment's new deletion vector written); else the last two are None."""
    import json

    from airflow_lance.core.fragment_read import SelectionReader
    from airflow_lance.core.update import delete_offsets
    from airflow_lance.spark.read import _open
    from airflow_lance.spark.worker import bulk_write

    ds, fragments = _open(uri, version, storage_options)
    wanted = from_ipc(keys.value)
    index = KeyIndex(wanted.append_column(ROW_ADDRESS, pa.array(np.zeros(wanted.num_rows, np.uint64))), on)
    reader = SelectionReader(ds, list(on), None, with_row_address=True)
    for fragment_id, start, stop in tasks:
        whole = start == 0 and stop >= fragments[fragment_id].physical_rows
        # a whole fragment is scanned (its pages decoded in order: 35-40% less CPU than the same
        # rows taken by offsets, as a row range is read)
        table = reader.read(fragments[fragment_id], row_range=None if whole else (start, stop))
        matched = table.filter(pa.array(index.addresses(table) >= 0)) if table.num_rows else table
        fragment, removed = None, None
        if delete and matched.num_rows:
            offsets = (matched.column(ROW_ADDRESS).to_numpy() & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            with bulk_write():
                updated, gone = delete_offsets(ds.store, [fragments[fragment_id]], {fragment_id: np.sort(offsets)},
                                               version)
            fragment = json.dumps(updated[0].to_json()) if updated else None
            removed = int(gone[0]) if gone else None
        yield to_ipc(matched.select([*on, ROW_ADDRESS])), fragment, removed


def write_fragment_deletions(items: Iterator[tuple[int, bytes]], *, uri: str, storage_options: Mapping[str, str],
                             read_version: int) -> Iterator[tuple[str | None, int | None]]:
    """The new deletion vectors of the fragments of ``items`` (fragment id, its matched offsets as
    uint32): (fragment JSON, None), or (None, id) for a fragment whose every row is gone."""
    import json

    from airflow_lance.core import dataset
    from airflow_lance.core.update import delete_offsets
    from airflow_lance.spark.worker import bulk_write

    items = list(items)
    if not items:
        return
    ds = dataset(uri, read_version, storage_options=dict(storage_options))
    hits = {fid: np.sort(np.frombuffer(offsets, dtype="<u4")) for fid, offsets in items}
    fragments = [ds.get_fragment(fid).metadata for fid in hits]
    with bulk_write():
        updated, removed = delete_offsets(ds.store, fragments, hits, read_version)
    yield from ((json.dumps(f.to_json()), None) for f in updated)
    yield from ((None, int(i)) for i in removed)


def classify_and_write(batches: Iterator[pa.RecordBatch], *, uri: str, storage_options: Mapping[str, str],
                       read_version: int, on: Sequence[str], matched: Any, update: bool, insert: bool,
                       stable_row_ids: bool, max_rows_per_file: int, max_bytes_per_file: int,
                       ) -> Iterator[pa.RecordBatch]:
    """Executor side: write the source rows the clauses keep (updated rows first where row ids
    are stable) as new fragments; yields the write job's result rows."""
    from airflow_lance.spark.merge_insert import INSERTED, KIND, UPDATED, _schema_at, write_new_rows

    _, _, arrow = _schema_at(uri, storage_options, read_version)
    index = KeyIndex(from_ipc(matched.value), on)

    def classified() -> Iterator[pa.RecordBatch]:
        later: list[pa.RecordBatch] = []
        for batch in batches:
            if not batch.num_rows:
                continue
            addresses = index.addresses(key_table(batch, on, arrow))
            is_update = addresses >= 0
            keep = (is_update & update) | (~is_update & insert)
            kinds = np.where(is_update, UPDATED, INSERTED).astype(np.int8)
            out = batch.append_column(KIND, pa.array(kinds)).append_column(ROW_ADDRESS, pa.array(addresses))
            if not keep.all():
                out = out.filter(pa.array(keep))
            if not out.num_rows:
                continue
            if stable_row_ids and insert and update:  # updated rows go first: they carry their row ids
                updated = is_update[keep]
                if not updated.all():
                    later.append(out.filter(pa.array(~updated)))
                    out = out.filter(pa.array(updated))
                if not out.num_rows:
                    continue
            yield out
        yield from later

    yield from write_new_rows(classified(), uri=uri, storage_options=storage_options, read_version=read_version,
                              stable_row_ids=stable_row_ids, max_rows_per_file=max_rows_per_file,
                              max_bytes_per_file=max_bytes_per_file)


def write_splits(groups: Iterator[Sequence[Any]], *, plan: Any, **classify: Any) -> Iterator[str]:
    """Executor side, direct source: read each group's splits with pyarrow (no JVM rows) and
    :func:`classify_and_write` them; yields the new fragments' JSON."""
    from airflow_lance.spark.direct import read_group

    for group in groups:
        for out in classify_and_write(read_group(plan, list(group), [0]), **classify):
            yield from out.column("fragment").to_pylist()


def match_or_write(tasks: Iterator[Sequence[tuple[str, Any]]], *, match: Any,
                   write: Any) -> Iterator[tuple[str, Any]]:
    """Executor side of the fused job: each task is a list of items; a ``("match", fragment
    task)`` item runs :func:`match_fragments`, a ``("write", splits)`` item :func:`write_splits`."""
    for items in tasks:
        for kind, item in items:
            if kind == "write":
                yield from (("fragment", fragment) for fragment in write(iter([item])))
        matches = [item for kind, item in items if kind == "match"]  # one key index for all
        if matches:
            yield from (("match", result) for result in match(iter(matches)))


# -- driver ----------------------------------------------------------------------------------------


def _ambiguity(source_keys: pa.Table, matched: pa.Table, on: Sequence[str]) -> None:
    counts = _non_null(source_keys, on).group_by(list(on)).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts.column("count_all"), 1))
    if not repeated.num_rows or not matched.num_rows:
        return
    hit = matched.join(repeated.select(list(on)), keys=list(on), join_type="inner")
    if hit.num_rows:
        first = hit.sort_by(ROW_ADDRESS).slice(0, 1).to_pylist()[0]
        row = {k: first[k] for k in on}
        raise AmbiguousMergeInsertError(
            "Ambiguous merge inserts are prohibited: multiple source rows match the same target row on "
            f"{row}. Please ensure each target row is matched by at most one source row."
        )


#: The cost model packing the fused job's work into one task per slot: writing a source split
#: costs about its uncompressed bytes, matching a target row about this many bytes' worth.
MATCH_COST_PER_ROW = 16


def pack(weighted: Sequence[tuple[float, Any]], bins: int) -> list[list[Any]]:
    """The items of ``weighted`` ((weight, item)) in at most ``bins`` lists of about equal total
    weight (longest first onto the least loaded; each list keeps the items' order)."""
    lists: list[list[tuple[int, Any]]] = [[] for _ in range(max(1, min(bins, len(weighted))))]
    loads = [0.0] * len(lists)
    for index in sorted(range(len(weighted)), key=lambda i: -weighted[i][0]):
        target = loads.index(min(loads))
        lists[target].append((index, weighted[index][1]))
        loads[target] += weighted[index][0]
    return [[item for _, item in sorted(group, key=lambda x: x[0])] for group in lists if group]


def _integer_key(keys: pa.Table, on: Sequence[str]) -> bool:
    return len(on) == 1 and pa.types.is_integer(keys.schema.field(on[0]).type)


def _one_exact_key(keys: pa.Table, on: Sequence[str]) -> bool:
    """One key column whose values compare exactly (no floating point: NaN)."""
    return len(on) == 1 and not pa.types.is_floating(keys.schema.field(on[0]).type)


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct ``values``, ascending (as they are when already strictly ascending; else
    sorted: Arrow's hash-based unique and NumPy 2's ``unique`` take seconds on millions of keys)."""
    if values.size < 2 or bool(np.all(values[1:] > values[:-1])):
        return values
    ordered = np.sort(values)
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _distinct(keys: pa.Table, on: Sequence[str]) -> pa.Table:
    """The distinct rows of ``keys`` (non-null)."""
    if _integer_key(keys, on):
        column = keys.column(on[0])
        return pa.table({on[0]: pa.array(sorted_distinct(column.to_numpy()), column.type)})
    if _one_exact_key(keys, on):
        return pa.table({on[0]: pc.unique(keys.column(on[0]))})
    return keys.group_by(list(on)).aggregate([])


def _matched_source_rows(source_keys: pa.Table, matched: pa.Table, on: Sequence[str]) -> int:
    """How many rows of ``source_keys`` have a key in ``matched``."""
    if not matched.num_rows:
        return 0
    if _integer_key(source_keys, on):
        found = sorted_distinct(matched.column(on[0]).to_numpy())
        probe = _non_null(source_keys, on).column(on[0]).to_numpy()
        at = np.minimum(np.searchsorted(found, probe), found.size - 1)
        return int(np.count_nonzero(found[at] == probe))
    if _one_exact_key(source_keys, on):
        hit = pc.is_in(source_keys.column(on[0]), value_set=matched.column(on[0]).combine_chunks())
        return int(pc.sum(hit).as_py() or 0)
    return source_keys.join(matched.select(list(on)), keys=list(on), join_type="left semi").num_rows


def _split_weight(split: Any) -> int:
    return split.end - split.start if split.end >= 0 else split.size


def _direct_plan(spark: SparkSession, spec: MergeInsertJobSpec, source: DataFrame, slots: int,
                 log: Any) -> Any:
    """The direct-read plan of a path source (:mod:`airflow_lance.spark.direct`), or None (and
    why, in the log) when Spark's rows must read it."""
    from airflow_lance.spark.direct import DirectPlan, plan_direct

    if spec.source.kind != "path":
        return None
    plan = plan_direct(spark, spec.source, "auto", spec.num_partitions or slots, df=source)
    if isinstance(plan, DirectPlan):
        log(f"airflow-lance merge insert: reading the source directly with pyarrow ({plan.kind}, "
            f"{len(plan.splits)} splits)")
        return plan
    log(f"airflow-lance merge insert: reading the source through Spark rows ({plan})")
    return None


def run(spark: SparkSession, spec: MergeInsertJobSpec, source: DataFrame | None, ds: Any,
        log: Any = print, plan: Any = None,
        ) -> tuple[list[FragmentMetadata], list[FragmentMetadata], list[int], dict[int, int]]:
    """Run the key-broadcast plan: (new fragments, updated fragments, removed fragment ids,
    counts by fate). ``plan``: the source's direct plan when the caller made it (then ``source``
    may be None), else it is planned here from ``source``."""
    import time

    from pyspark.sql import functions as F

    from airflow_lance.spark.direct import group_splits, read_columns
    from airflow_lance.spark.distributed import Inline
    from airflow_lance.spark.merge_insert import DELETED, INSERTED, UPDATED, MIN_ROWS_PER_WRITER
    from airflow_lance.spark.read import plan_tasks
    from airflow_lance.spark.writer import RESULT_DDL

    on, arrow = list(spec.on), ds.schema
    options = dict(spec.storage_options)
    clock = time.monotonic()

    def lap(what: str) -> None:
        nonlocal clock
        now = time.monotonic()
        log(f"airflow-lance merge insert: {what} in {now - clock:.2f} s")
        clock = now

    slots = default_parallelism(spark)
    if plan is None:
        plan = _direct_plan(spark, spec, source, slots, log)
    else:
        log(f"airflow-lance merge insert: reading the source directly with pyarrow ({plan.kind}, "
            f"{len(plan.splits)} splits), planned from the Parquet footers")
    if plan is not None:
        source_keys = key_table(read_columns(plan, on), on, arrow)
    else:
        source_keys = key_table(source.select(*[F.col(f"`{k}`") for k in on]).toArrow(), on, arrow)
    non_null = _non_null(source_keys, on)
    wanted = _distinct(non_null, on)
    lap(f"{source_keys.num_rows} source keys ({wanted.num_rows} distinct) collected")

    # a key repeated in the source is ambiguous if it matches: then the deletions wait for the check
    repeated = wanted.num_rows < non_null.num_rows
    delete_now = spec.when_matched_update_all and not repeated
    tasks = [(t.fragment, t.start, t.stop) for t in plan_tasks(ds)] if wanted.num_rows else []
    pair_schema = pa.schema([arrow.field(k) for k in on] + [pa.field(ROW_ADDRESS, pa.uint64())])
    classify = dict(uri=spec.uri, storage_options=options, read_version=spec.read_version, on=on,
                    update=spec.when_matched_update_all, insert=spec.when_not_matched_insert_all,
                    stable_row_ids=ds._stable_row_ids, max_rows_per_file=spec.max_rows_per_file,
                    max_bytes_per_file=spec.max_bytes_per_file)

    def writers(rows: int) -> int:
        return spec.num_partitions or max(1, min(slots, math.ceil(rows / MIN_ROWS_PER_WRITER)))

    # An upsert needs no match to write: every source row is written (updated or inserted). On a
    # direct source without repeated keys or stable row ids (which updated rows would carry), the
    # target's matching (and deletion vectors) and the source's writing run as one Spark job.
    fused = (plan is not None and spec.when_matched_update_all and spec.when_not_matched_insert_all
             and not repeated and not ds._stable_row_ids)
    updated: list[FragmentMetadata] = []
    removed: list[int] = []
    new_fragments: list[FragmentMetadata] = []
    parts: list[Any] = []
    keys = share(spark, to_ipc(wanted)) if tasks else None
    try:
        matcher = functools.partial(match_fragments, uri=spec.uri, version=spec.read_version,
                                    storage_options=options, on=on, keys=keys, delete=delete_now)
        if fused:
            groups = group_splits(plan.splits, writers(source_keys.num_rows)) if source_keys.num_rows else []
            write = functools.partial(write_splits, plan=plan, matched=Inline(to_ipc(empty_table(pair_schema))),
                                      **classify)
            # one task per slot: a Spark task costs more than matching a fragment
            work = ([(sum(_split_weight(x) for x in g), ("write", g)) for g in groups]
                    + [((t[2] - t[1]) * MATCH_COST_PER_ROW, ("match", t)) for t in tasks])
            out = map_task_partitions(spark, pack(work, slots),
                                      functools.partial(match_or_write, match=matcher, write=write))
            parts = [r for kind, r in out if kind == "match"]
            new_fragments = [FragmentMetadata.from_json(r) for kind, r in out if kind == "fragment"]
        elif tasks:
            parts = map_groups(spark, tasks, spec.num_partitions or slots, matcher)
    finally:
        if keys is not None:
            unshare(keys)
    matched = pa.concat_tables([from_ipc(p) for p, _, _ in parts]) if parts else empty_table(pair_schema)
    updated = [FragmentMetadata.from_json(f) for _, f, _ in parts if f is not None]
    removed = [r for _, _, r in parts if r is not None]
    matched = matched.cast(pair_schema)
    lap(f"{matched.num_rows} target rows matched in {len(tasks)} tasks"
        + (f", {len(updated)} deletion vectors written, {len(removed)} fragments removed" if delete_now else "")
        + (f"; {source_keys.num_rows} source rows written as {len(new_fragments)} fragments in the same job"
           if fused else ""))
    if spec.when_matched_update_all and repeated:
        _ambiguity(source_keys, matched, on)

    matched_source = _matched_source_rows(source_keys, matched, on)
    counts = {UPDATED: matched_source if spec.when_matched_update_all else 0,
              INSERTED: source_keys.num_rows - matched_source if spec.when_not_matched_insert_all else 0,
              DELETED: 0}
    if fused:
        return new_fragments, updated, sorted(removed), counts

    if spec.when_matched_update_all and repeated and matched.num_rows:  # checked: no ambiguity
        addresses = matched.column(ROW_ADDRESS).to_numpy()
        fragment_ids = addresses >> np.uint64(32)
        items = [(int(f), (addresses[fragment_ids == f] & np.uint64(0xFFFFFFFF)).astype("<u4").tobytes())
                 for f in sorted_unique(fragment_ids)]
        writer = functools.partial(write_fragment_deletions, uri=spec.uri, storage_options=options,
                                   read_version=spec.read_version)
        tasks_dv = spec.num_partitions or min(slots, len(items))
        for fragment, gone in map_groups(spark, items, tasks_dv, writer):
            if fragment is not None:
                updated.append(FragmentMetadata.from_json(fragment))
            else:
                removed.append(gone)
        lap(f"{len(updated)} deletion vectors written, {len(removed)} fragments removed")

    rows = counts[UPDATED] + counts[INSERTED]
    if rows:
        pairs = share(spark, to_ipc(matched if spec.when_matched_update_all or spec.when_not_matched_insert_all
                                    else matched.slice(0, 0)))
        try:
            if plan is not None:
                write = functools.partial(write_splits, plan=plan, matched=pairs, **classify)
                out = map_task_partitions(spark, group_splits(plan.splits, writers(rows)), write)
                new_fragments = [FragmentMetadata.from_json(r) for r in out]
            else:
                frame = source.coalesce(writers(rows))
                written = frame.mapInArrow(functools.partial(classify_and_write, matched=pairs, **classify),
                                           RESULT_DDL).collect()
                new_fragments = [FragmentMetadata.from_json(row["fragment"]) for row in written]
        finally:
            unshare(pairs)
        lap(f"{rows} rows written as {len(new_fragments)} fragments")
    return new_fragments, updated, sorted(removed), counts
