"""``LanceDataset.merge_insert(on)``: pylance's builder for upserts, inserts-if-absent and
replacing a slice of the data, as one ``Update`` commit (``REWRITE_ROWS``, as pylance 14).

The source is joined with the target's live keys (a pyarrow hash join: null keys match
nothing). Matched rows that are updated are rewritten into new fragments together with the
inserted rows (moved rows first; on datasets with stable row ids they keep their row ids);
their old rows, and the rows deleted by ``when_not_matched_by_source_delete``, get deletion
vectors. Source columns may be a subset of the dataset's: updated rows keep their other
values, inserted rows get nulls. A target row matched by two source rows is an error, as in
pylance. Everything is evaluated before anything is written.

``when_matched_fail()`` refuses any match (``MergeInsertMatchedError``, nothing written).
When ``on`` is the schema's unenforced primary key the commit carries pylance 14's
inserted-keys filter (``core.key_filter``): two concurrent merge_inserts that insert the same
new key conflict, and the later one is re-planned on the new version (the key then matches),
as in pylance; disjoint keys both commit. ``use_index`` is accepted and changes nothing: the
core builds no index, every merge is a hash join over the live keys.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core.arrays import empty_table
from airflow_lance.core.errors import (
    AmbiguousMergeInsertError,
    InvalidInputError,
    MergeInsertMatchedError,
    SchemaMismatchError,
)
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.key_filter import KeyExistenceFilter, key_hashes, primary_key_fields
from airflow_lance.core.scan import apply_filter
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.transaction import LanceOperation, Transaction
from airflow_lance.core.update import OFFSET, delete_offsets, live_rows, moved_row_ids, read_rows, write_rows
from airflow_lance.core.write import as_batches

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

_FRAGMENT = "__airflow_lance_fragment"
_SOURCE = "__airflow_lance_source_row"


@dataclasses.dataclass
class MergeInsertPlan:
    """What the builder was configured to do."""

    on: list[str]
    matched: str | None = None  # "update", "delete" or "fail"
    condition: str | None = None
    insert: bool = False
    delete_by_source: bool = False
    by_source_filter: str | pc.Expression | None = None


class MergeInsertBuilder:
    """pylance's ``MergeInsertBuilder``: configure with ``when_*`` methods, then ``execute``."""

    def __init__(self, dataset: LanceDataset, on: str | Iterable[str] | None) -> None:
        self._dataset = dataset
        self._plan = MergeInsertPlan(_key_columns(dataset.lance_schema, on))
        self._conflict_retries = 10
        self._retry_timeout = dt.timedelta(seconds=30)
        self._use_index = True

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        """Matched rows are replaced by the source's (only those where ``condition`` holds;
        it names columns ``source.x`` and ``target.x``)."""
        if condition is not None and not isinstance(condition, str):
            raise InvalidInputError(f"condition must be a SQL string, not {type(condition).__name__}")
        self._plan.matched, self._plan.condition = "update", condition
        return self

    def when_matched_delete(self) -> MergeInsertBuilder:
        """Matched rows are deleted from the target."""
        self._plan.matched, self._plan.condition = "delete", None
        return self

    def when_matched_fail(self) -> MergeInsertBuilder:
        """Any source row matching a target row fails the whole operation
        (``MergeInsertMatchedError`` naming the key; nothing is written)."""
        self._plan.matched, self._plan.condition = "fail", None
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        """Source rows that match no target row are inserted."""
        self._plan.insert = True
        return self

    def when_not_matched_by_source_delete(self, expr: str | pc.Expression | None = None) -> MergeInsertBuilder:
        """Target rows that match no source row (and satisfy ``expr``, if given) are deleted."""
        self._plan.delete_by_source, self._plan.by_source_filter = True, expr
        return self

    def conflict_retries(self, max_retries: int) -> MergeInsertBuilder:
        self._conflict_retries = int(max_retries)
        return self

    def retry_timeout(self, timeout: dt.timedelta) -> MergeInsertBuilder:
        """Stop retrying conflicts after ``timeout`` (pylance's default: 30 seconds; one
        attempt is always made)."""
        if not isinstance(timeout, dt.timedelta):
            raise TypeError(f"argument 'timeout': {type(timeout).__name__!r} object is not an instance of 'timedelta'")
        if timeout < dt.timedelta(0):
            raise ValueError("It is not possible to convert a negative timedelta to a Rust Duration")
        self._retry_timeout = timeout
        return self

    def use_index(self, use_index: bool) -> MergeInsertBuilder:
        """pylance's switch between an index probe and a scan; accepted for compatibility
        (the core has no scalar index to probe: every merge scans the live keys)."""
        if not isinstance(use_index, bool):
            raise TypeError(f"argument 'use_index': {type(use_index).__name__!r} object is not an instance of 'bool'")
        self._use_index = use_index
        return self

    def execute(self, data_obj: Any, *, schema: pa.Schema | None = None) -> dict[str, int]:
        """Run the merge and commit it; returns ``num_inserted_rows``, ``num_updated_rows`` and
        ``num_deleted_rows``. The dataset handle moves to the new version."""
        plan = self._plan
        if plan.matched is None and not plan.insert and not plan.delete_by_source:
            raise InvalidInputError("The merge insert job is not configured to change the data in any way")
        source = _source_table(data_obj, schema)
        return self._dataset._commit_planned(
            lambda current: plan_merge_insert(
                current.store, current._fragments, current.lance_schema, source, plan, current.version,
                current.data_storage_version, current._stable_row_ids,
            ),
            self._conflict_retries,
            self._retry_timeout,
        )


    def execute_uncommitted(self, data_obj: Any, *, schema: pa.Schema | None = None) -> tuple[Transaction, dict[str, int]]:
        """Write the new rows and deletion vectors but commit nothing: (the Transaction, the counts).
        Commit it with ``LanceDataset.commit(uri, transaction.operation, transaction.read_version)``."""
        plan = self._plan
        if plan.matched is None and not plan.insert and not plan.delete_by_source:
            raise InvalidInputError("The merge insert job is not configured to change the data in any way")
        ds = self._dataset
        operation, stats = plan_merge_insert(
            ds.store, ds._fragments, ds.lance_schema, _source_table(data_obj, schema), plan, ds.version,
            ds.data_storage_version, ds._stable_row_ids,
        )
        return Transaction(read_version=ds.version, operation=operation), stats


def _key_columns(schema: LanceSchema, on: str | Iterable[str] | None) -> list[str]:
    if on is None:
        keys = [f.name for f in primary_key_fields(schema)]
        if not keys:
            raise InvalidInputError("merge_insert needs `on`: the dataset has no unenforced primary key")
        return keys
    keys = [on] if isinstance(on, str) else list(on)
    if not keys or not all(isinstance(k, str) for k in keys):
        raise InvalidInputError(f"`on` must be a column name or a list of column names, not {on!r}")
    names = [f.name for f in schema.top_level()]
    for key in keys:
        if key not in names:
            raise InvalidInputError(f"Merge insert key column {key!r} does not exist in schema (columns: {names})")
    return keys


def _source_table(data: Any, schema: pa.Schema | None) -> pa.Table:
    from airflow_lance.core.dataset import LanceDataset

    if isinstance(data, LanceDataset):
        return data.to_table()
    if type(data).__module__.startswith("pandas"):
        return pa.Table.from_pandas(data, schema=schema, preserve_index=False)
    arrow_schema, batches = as_batches(data, schema)
    return pa.Table.from_batches(list(batches), schema=arrow_schema)


def _check_source(source: pa.Table, schema: LanceSchema, on: Sequence[str]) -> pa.Table:
    """The source with the dataset's exact types; SchemaMismatchError names what differs."""
    names = [f.name for f in schema.top_level()]
    unexpected = [n for n in source.column_names if n not in names]
    if unexpected:
        raise SchemaMismatchError(f"Append with different schema: unexpected={unexpected} (dataset columns: {names})")
    missing_keys = [k for k in on if k not in source.column_names]
    if missing_keys:
        raise SchemaMismatchError(f"the source has no key column(s) {missing_keys}")
    present = schema.project([n for n in names if n in source.column_names])
    return present.align(source)


def _target_matched_rows(
    store: ObjectStore, fragments: Mapping[int, FragmentMetadata], schema: LanceSchema, matched: pa.Table
) -> pa.Table:
    """Full target rows of the matched pairs (``matched`` sorted by fragment, then offset)."""
    frag_ids = matched.column(_FRAGMENT).to_numpy()
    offsets = matched.column(OFFSET).to_numpy()
    parts = []
    bounds = np.flatnonzero(np.diff(frag_ids)) + 1
    for start, end in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [frag_ids.size]))):
        if end > start:
            fragment = fragments[int(frag_ids[start])]
            parts.append(read_rows(store, fragment, schema, offsets[start:end]))
    return pa.concat_tables(parts) if parts else empty_table(schema.to_arrow())


def condition_mask(condition: str, source_rows: pa.Table, target_rows: pa.Table) -> np.ndarray:
    from airflow_lance.core.filter import to_expression

    both = pa.table({
        "source": pa.StructArray.from_arrays(
            [c.combine_chunks() for c in source_rows.columns], names=source_rows.column_names),
        "target": pa.StructArray.from_arrays(
            [c.combine_chunks() for c in target_rows.columns], names=target_rows.column_names),
    }) if source_rows.num_rows else None
    expression = to_expression(condition, pa.schema([
        pa.field("source", pa.struct(list(source_rows.schema))),
        pa.field("target", pa.struct(list(target_rows.schema))),
    ]))
    if both is None:
        return np.zeros(0, dtype=bool)
    index = pa.array(np.arange(both.num_rows))
    kept = apply_filter(both.append_column("__i", index), expression).column("__i").to_numpy()
    mask = np.zeros(both.num_rows, dtype=bool)
    mask[kept] = True
    return mask


def _full_rows(rows: pa.Table, schema: LanceSchema) -> pa.Table:
    """``rows`` with the dataset's columns: missing ones as nulls."""
    arrow = schema.to_arrow()
    columns = [rows.column(f.name) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in arrow]
    return schema.align(pa.Table.from_arrays(columns, schema=arrow))


def plan_merge_insert(
    store: ObjectStore,
    fragments: Sequence[FragmentMetadata],
    schema: LanceSchema,
    source: pa.Table,
    plan: MergeInsertPlan,
    read_version: int,
    storage_version: str,
    stable_row_ids: bool,
) -> tuple[LanceOperation.Update, dict[str, int]]:
    """Plan (and write the files of) a merge insert: (the Update operation, pylance's counts)."""
    from airflow_lance.core.filter import referenced_columns, to_expression

    source = _check_source(source, schema, plan.on)
    arrow = schema.to_arrow()
    by_source = None
    read = list(plan.on)
    if plan.delete_by_source and plan.by_source_filter is not None:
        by_source = to_expression(plan.by_source_filter, arrow)
        read += [c for c in referenced_columns(plan.by_source_filter, arrow) if c not in read]
    by_id = {f.id: f for f in fragments}
    projection = schema.project(read)
    keys = []
    for fragment in fragments:
        rows = live_rows(store, fragment, projection)
        keys.append(rows.append_column(_FRAGMENT, pa.array(np.full(rows.num_rows, fragment.id, dtype=np.uint32))))
    target = pa.concat_tables(keys) if keys else empty_table(projection.to_arrow()).append_column(
        OFFSET, pa.array([], pa.uint32())).append_column(_FRAGMENT, pa.array([], pa.uint32()))
    indexed = source.select(plan.on).append_column(_SOURCE, pa.array(np.arange(source.num_rows, dtype=np.int64)))
    try:
        matched = target.select([*plan.on, OFFSET, _FRAGMENT]).join(indexed, keys=plan.on, join_type="inner")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidInputError(f"cannot join on {plan.on}: {exc}") from exc
    matched = matched.sort_by([(_FRAGMENT, "ascending"), (OFFSET, "ascending")])
    frag_ids = matched.column(_FRAGMENT).to_numpy().astype(np.uint64)
    offsets = matched.column(OFFSET).to_numpy().astype(np.uint64)
    address = (frag_ids << np.uint64(32)) | offsets
    if plan.matched == "fail" and matched.num_rows:
        row = matched.slice(0, 1).select(plan.on).to_pylist()[0]
        raise MergeInsertMatchedError(
            "Merge insert failed: found matching row with key values: "
            + ", ".join(f"{k} = {v}" for k, v in row.items()))
    if plan.matched is not None and address.size:
        repeated = np.flatnonzero(address[1:] == address[:-1])
        if repeated.size:
            row = matched.slice(int(repeated[0]), 1).select(plan.on).to_pylist()[0]
            raise AmbiguousMergeInsertError(
                "Ambiguous merge inserts are prohibited: multiple source rows match the same target row on "
                f"{row}. Please ensure each target row is matched by at most one source row."
            )
    source_rows = matched.column(_SOURCE).to_numpy()
    hits: list[pa.Table] = []  # (fragment, offset) of the target rows to delete
    updated_rows = empty_table(schema.to_arrow())
    moved = None
    num_updated = num_deleted = 0
    if plan.matched in ("update", "delete") and matched.num_rows:
        chosen = matched
        if plan.matched == "update":
            # only the target columns the source lacks (all of them for a condition) are read
            names = [f.name for f in schema.top_level()]
            needed = names if plan.condition is not None else [n for n in names if n not in source.column_names]
            target_rows = (_target_matched_rows(store, by_id, schema.project(needed), matched) if needed
                           else pa.table({"_": pa.nulls(matched.num_rows)}).drop_columns(["_"]))
            new_values = source.take(pa.array(source_rows))
            if plan.condition is not None:
                mask = pa.array(condition_mask(plan.condition, new_values, target_rows))
                chosen, target_rows, new_values = matched.filter(mask), target_rows.filter(mask), new_values.filter(mask)
            updated_rows = _full_rows(pa.table(
                {f.name: (new_values.column(f.name) if f.name in new_values.column_names else target_rows.column(f.name))
                 for f in arrow}), schema)
            num_updated = chosen.num_rows
            if stable_row_ids and chosen.num_rows:
                moved = _moved(store, by_id, chosen)
        else:
            num_deleted += chosen.num_rows
        hits.append(chosen.select([_FRAGMENT, OFFSET]))
    if plan.delete_by_source:
        target_address = (target.column(_FRAGMENT).to_numpy().astype(np.uint64) << np.uint64(32)) | target.column(
            OFFSET).to_numpy().astype(np.uint64)
        unmatched = target.filter(pa.array(~np.isin(target_address, address)))
        if by_source is not None:
            unmatched = apply_filter(unmatched, by_source)
        num_deleted += unmatched.num_rows
        hits.append(unmatched.select([_FRAGMENT, OFFSET]))
    inserted = empty_table(source.schema)
    if plan.insert:
        unmatched_source = np.ones(source.num_rows, dtype=bool)
        unmatched_source[source_rows] = False
        inserted = source.filter(pa.array(unmatched_source))
    key_filter = None
    pk_ids = [f.id for f in primary_key_fields(schema)]
    by_name = {f.name: f.id for f in schema.top_level()}
    on_ids = [by_name[k] for k in plan.on]
    delete_only = plan.matched == "delete" and not plan.insert and not plan.delete_by_source  # pylance: no filter
    if pk_ids and on_ids == pk_ids and not delete_only:
        key_filter = KeyExistenceFilter.build(pk_ids, key_hashes(inserted, plan.on))
    inserted = _full_rows(inserted, schema)
    stats = {"num_inserted_rows": inserted.num_rows, "num_updated_rows": num_updated, "num_deleted_rows": num_deleted}
    # Everything is evaluated: write the new rows, then the deletion vectors.
    new_fragments = []
    if updated_rows.num_rows or inserted.num_rows:
        new_fragments = write_rows(store, [updated_rows, inserted], schema, storage_version, moved)
    deleted = pa.concat_tables(hits) if hits else None
    per_fragment: dict[int, np.ndarray] = {}
    if deleted is not None and deleted.num_rows:
        deleted = deleted.sort_by([(_FRAGMENT, "ascending")])
        ids = deleted.column(_FRAGMENT).to_numpy()
        offs = deleted.column(OFFSET).to_numpy()
        bounds = np.flatnonzero(np.diff(ids)) + 1
        for part_ids, part_offs in zip(np.split(ids, bounds), np.split(offs, bounds)):
            per_fragment[int(part_ids[0])] = part_offs
    updated, removed = delete_offsets(store, fragments, per_fragment, read_version)
    operation = LanceOperation.Update(
        removed_fragment_ids=removed,
        updated_fragments=updated,
        new_fragments=new_fragments,
        fields_for_preserving_frag_bitmap=schema.field_ids(),  # every field, nested ones too (pylance's)
        inserted_rows_filter=key_filter,
    )
    return operation, stats


def _moved(store: ObjectStore, fragments: Mapping[int, FragmentMetadata], chosen: pa.Table) -> np.ndarray:
    """Row ids and created-at versions of the updated rows, in ``chosen``'s order (sorted by fragment)."""
    frag_ids = chosen.column(_FRAGMENT).to_numpy()
    offsets = chosen.column(OFFSET).to_numpy()
    bounds = np.flatnonzero(np.diff(frag_ids)) + 1
    parts = [
        moved_row_ids(store, fragments[int(ids[0])], offs)
        for ids, offs in zip(np.split(frag_ids, bounds), np.split(offsets, bounds))
    ]
    return np.concatenate(parts, axis=1)
