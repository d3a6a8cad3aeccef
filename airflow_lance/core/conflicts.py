"""Compatibility of a transaction with the ones committed since its read version.

Lance's conflict rules (format notes section 9) for the operations we model;
an operation we do not model, or a version without a transaction, is treated
as a retryable conflict: conservative, never wrong.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import pyroaring

from airflow_lance.core.indices.metadata import ROW_ID_TYPES, index_uuid
from airflow_lance.core.transaction import LanceOperation, Transaction


class Outcome(enum.Enum):
    """What a concurrent transaction means for ours."""

    OK = "compatible"
    REBASE = "rebase"  # compatible after merging deletion vectors (or, for a new index, pruning its bitmap)
    RETRY = "retryable conflict"  # redo the operation on the new version
    INCOMPATIBLE = "incompatible"


OK, REBASE, RETRY, INCOMPATIBLE = Outcome.OK, Outcome.REBASE, Outcome.RETRY, Outcome.INCOMPATIBLE

#: Kinds Lance names that we never expect to see rows for; anything else is unknown.
_ALWAYS_FINE_FOR_ALL = {"clone", "update_bases"}


def _overlap(mine: Transaction, theirs: Transaction) -> bool:
    return bool(mine.operation.touched_fragment_ids() & theirs.operation.touched_fragment_ids())


def _raw_ids(theirs: Transaction) -> set[int]:
    """Fragment ids touched by operations we keep only in wire form (DataReplacement)."""
    raw = theirs.raw
    if raw is not None and raw.WhichOneof("operation") == "data_replacement":
        return {r.fragment_id for r in raw.data_replacement.replacements}
    return set()


def _config_keys(txn: Transaction) -> set[str]:
    op = txn.operation
    if isinstance(op, LanceOperation.Overwrite):
        return set(op.config_upsert_values or {})
    if isinstance(op, LanceOperation.UpdateConfig):
        return op.config_keys()
    return set()


def _append(mine: Transaction, theirs: Transaction) -> Outcome:
    if theirs.kind in ("overwrite", "restore", "update_mem_wal_state"):
        return INCOMPATIBLE
    if isinstance(theirs.operation, (LanceOperation.Merge, LanceOperation.Project)) and not (
        theirs.operation.preserves_nullability
    ):
        return RETRY  # pylance 14: our fragments could lack a non-nullable column it added
    return OK


def _inserted_keys(mine: Transaction, theirs: Transaction) -> Outcome:
    """pylance 14's primary-key rule: an Update carrying inserted keys conflicts (retryably)
    with a concurrent Append, with an Update without inserted keys, and with one whose keys
    may overlap (or are on other fields)."""
    keys = mine.operation.inserted_rows_filter
    if theirs.kind == "append":
        return RETRY
    if theirs.kind == "update":
        other = getattr(theirs.operation, "inserted_rows_filter", None)
        if other is None or other.field_ids != keys.field_ids or keys.intersects(other):
            return RETRY
    return OK


def _delete_or_update(mine: Transaction, theirs: Transaction) -> Outcome:
    kind = theirs.kind
    if getattr(mine.operation, "inserted_rows_filter", None) is not None and _inserted_keys(mine, theirs) is RETRY:
        return RETRY
    if kind in ("append", "create_index", "project", "reserve_fragments", "update_config"):
        return OK
    if kind in ("overwrite", "restore"):
        return INCOMPATIBLE
    if kind in ("delete", "update"):
        if not _overlap(mine, theirs):
            return OK
        op = theirs.operation
        removed = set(op.deleted_fragment_ids if isinstance(op, LanceOperation.Delete) else op.removed_fragment_ids)
        columns = isinstance(op, LanceOperation.Update) and op.update_mode == "rewrite_columns"
        mine_columns = isinstance(mine.operation, LanceOperation.Update) and mine.operation.update_mode == "rewrite_columns"
        if removed & mine.operation.touched_fragment_ids() or columns or mine_columns:
            return RETRY
        return REBASE
    if kind == "rewrite":
        return RETRY if _overlap(mine, theirs) else OK
    if kind == "data_replacement":
        return RETRY if _raw_ids(theirs) & mine.operation.touched_fragment_ids() else OK
    return RETRY  # merge, unknown


def _overwrite(mine: Transaction, theirs: Transaction) -> Outcome:
    if theirs.kind in ("overwrite", "update_config") and _config_keys(mine) & _config_keys(theirs):
        return INCOMPATIBLE
    return OK


def _rewrite(mine: Transaction, theirs: Transaction, stable_row_ids: bool = False,
             live_indices: frozenset[str] | None = None) -> Outcome:
    kind = theirs.kind
    if kind in ("append", "project", "reserve_fragments", "update_config"):
        return OK
    if kind in ("overwrite", "restore"):
        return INCOMPATIBLE
    if kind in ("delete", "update", "rewrite"):
        return RETRY if _overlap(mine, theirs) else OK
    if kind == "data_replacement":
        return RETRY if _raw_ids(theirs) & mine.operation.touched_fragment_ids() else OK
    if kind == "create_index":
        return _rewrite_over_create_index(mine, theirs, stable_row_ids, live_indices)
    return RETRY  # merge, unknown


def _rewrite_over_create_index(mine: Transaction, theirs: Transaction, stable_row_ids: bool,
                               live_indices: frozenset[str] | None) -> Outcome:
    """A new index (a build, an optimize delta or merge) over other fragments commits beside us, as in
    Lance. One whose bitmap covers a fragment we rewrite holds that fragment's rows: Lance retries; we
    commit when our rewrite carries that very index remapped (the compaction remaps every index of the
    latest version it commits onto, so a retry picks the new one up), or when, with stable row ids, it
    holds row ids and covers each of our groups whole (the rewrite then only moves its bitmap to the new
    fragments, as for any such index), or when a later commit already replaced it (it is not among the
    ``live_indices`` of the version we commit onto; whatever replaced it is checked in its own right).
    An index without a bitmap may cover anything. We also retry where it removed an index our rewrite
    remaps (dropped, or merged into a new segment), stricter than Lance: the commit would carry a
    rewritten index nothing uses and leave its remapped files behind, while a retry remaps what the
    latest version holds and removes them."""
    op, other = mine.operation, theirs.operation
    assert isinstance(op, LanceOperation.Rewrite) and isinstance(other, LanceOperation.CreateIndex)
    touched = op.touched_fragment_ids()
    remapped = {index.old_id for index in op.rewritten_indices}
    groups = [{f.id for f in group.old_fragments} for group in op.groups]
    for index in other.new_indices:
        if not index.fragment_bitmap:
            return RETRY
        covered = set(pyroaring.BitMap.deserialize(index.fragment_bitmap))
        uuid = index_uuid(index)
        if not touched & covered or uuid in remapped or (live_indices is not None and uuid not in live_indices):
            continue
        moves = stable_row_ids and index.index_details.type_url in ROW_ID_TYPES
        if not (moves and all(group <= covered or not group & covered for group in groups)):
            return RETRY
    return RETRY if remapped & {index_uuid(index) for index in other.removed_indices} else OK


def _merge(mine: Transaction, theirs: Transaction) -> Outcome:
    kind = theirs.kind
    if kind in ("create_index", "reserve_fragments", "update_config"):
        return OK
    if kind in ("overwrite", "project", "restore"):
        return INCOMPATIBLE
    return RETRY


def _project(mine: Transaction, theirs: Transaction) -> Outcome:
    kind = theirs.kind
    op = mine.operation
    assert isinstance(op, LanceOperation.Project)
    if not op.preserves_nullability and kind in ("append", "update", "merge", "data_replacement"):
        return RETRY  # pylance 14: a Project that may tighten nullability conflicts with concurrent writes
    if kind in ("append", "delete", "update", "create_index", "rewrite", "reserve_fragments", "update_config",
                "data_replacement"):
        return OK
    if kind in ("overwrite", "restore"):
        return INCOMPATIBLE
    return RETRY


def _restore(mine: Transaction, theirs: Transaction) -> Outcome:
    return OK if theirs.kind != "update_mem_wal_state" else INCOMPATIBLE


def _reserve(mine: Transaction, theirs: Transaction) -> Outcome:
    return INCOMPATIBLE if theirs.kind in ("overwrite", "restore") else OK


def _update_config(mine: Transaction, theirs: Transaction) -> Outcome:
    op = mine.operation
    assert isinstance(op, LanceOperation.UpdateConfig)
    if theirs.kind == "overwrite":
        schema_change = op.schema_metadata_updates is not None or bool(op.field_metadata_updates)
        return INCOMPATIBLE if schema_change or _config_keys(mine) & _config_keys(theirs) else OK
    if theirs.kind == "update_config":
        other = theirs.operation
        assert isinstance(other, LanceOperation.UpdateConfig)
        clash = _config_keys(mine) & _config_keys(theirs)
        for attr in ("table_metadata_updates", "schema_metadata_updates"):
            a, b = getattr(op, attr), getattr(other, attr)
            if a is not None and b is not None and (a.replace or b.replace or set(a.updates) & set(b.updates)):
                clash.add(attr)
        if set(op.field_metadata_updates or {}) & set(other.field_metadata_updates or {}):
            clash.add("field metadata")
        return INCOMPATIBLE if clash else OK
    return OK


def _data_replacement(mine: Transaction, theirs: Transaction) -> Outcome:
    """pylance 14's rules for a replacement (or backfill) of column files in given fragments:

    * a delete or update that removed a target fragment: incompatible;
    * an update that moved rows out of a target fragment (their new copies carry the old values),
      or rewrote a replaced field of a target fragment in place (our file would undo it): retry;
    * a drop of a replaced field: incompatible; any merge, or an index on a replaced field: retry;
    * a rewrite of a target fragment, or a replacement of the same fields of one: retry;
    * anything else (deletion vectors on a target fragment, in-place updates of other fields,
      appends, indices on other fields): compatible."""
    kind = theirs.kind
    op = mine.operation
    assert isinstance(op, LanceOperation.DataReplacement)
    targets = {group.fragment_id for group in op.replacements}
    fields = {f for group in op.replacements for f in group.new_file.fields}
    if kind in ("overwrite", "restore", "update_mem_wal_state"):
        return INCOMPATIBLE
    if kind == "rewrite":
        return RETRY if _overlap(mine, theirs) else OK
    if kind == "data_replacement":
        other = theirs.operation
        if not isinstance(other, LanceOperation.DataReplacement):
            return RETRY
        for group in op.replacements:
            for their in other.replacements:
                if group.fragment_id == their.fragment_id and set(group.new_file.fields) & set(their.new_file.fields):
                    return RETRY
        return OK
    if kind == "create_index":
        return RETRY if _index_fields(theirs.operation) & fields else OK
    if kind in ("delete", "update"):
        other = theirs.operation
        removed = set(other.deleted_fragment_ids if isinstance(other, LanceOperation.Delete)
                      else other.removed_fragment_ids)
        if removed & targets:
            return INCOMPATIBLE
        if isinstance(other, LanceOperation.Update):
            if other.update_mode != "rewrite_columns":
                return RETRY if {f.id for f in other.updated_fragments} & targets else OK
            for group in op.replacements:
                if group.fragment_id in updated_in_place(other, set(group.new_file.fields)):
                    return RETRY
        return OK
    if kind == "project":
        return INCOMPATIBLE if fields - set(theirs.operation.schema.field_ids()) else OK
    return OK if kind in ("append", "update_config", "reserve_fragments", "clone", "update_bases") else RETRY


def _index_names(operation: LanceOperation.BaseOperation) -> set[str]:
    assert isinstance(operation, LanceOperation.CreateIndex)
    return {i.name for i in (*operation.new_indices, *operation.removed_indices)}


def _index_fields(operation: LanceOperation.BaseOperation) -> set[int]:
    assert isinstance(operation, LanceOperation.CreateIndex)
    return {f for i in (*operation.new_indices, *operation.removed_indices) for f in i.fields}


def _create_index(mine: Transaction, theirs: Transaction) -> Outcome:
    """An index built on the read version stays right over appends, deletes and updates that
    rewrite rows (the rows they replaced are masked by deletion vectors at query time, the rows
    they wrote are in new fragments the index does not cover), and next to other indices of other
    names. Over an update that rewrote indexed columns in place it commits too, without the
    fragments that update changed (a rebase, as pylance 14 does). Anything that rewrites fragments,
    or a change of the same index names, makes us rebuild on the latest version (stricter than
    Lance for merge and project)."""
    kind = theirs.kind
    if kind in ("append", "delete", "reserve_fragments", "update_config"):
        return OK
    if kind == "create_index":
        return RETRY if _index_names(mine.operation) & _index_names(theirs.operation) else OK
    if kind == "update":
        return REBASE if updated_in_place(theirs.operation, _index_fields(mine.operation)) else OK
    return RETRY  # rewrite, merge, project, data_replacement, overwrite, restore, unknown


def updated_in_place(operation: LanceOperation.BaseOperation, fields: set[int]) -> set[int]:
    """The fragments an Update rewrote in place on any of ``fields`` (none for a row rewrite)."""
    if not isinstance(operation, LanceOperation.Update) or operation.update_mode != "rewrite_columns":
        return set()
    return {f.id for f in operation.updated_fragments} if set(operation.fields_modified) & fields else set()


_RULES: dict[type, Callable[[Transaction, Transaction], Outcome]] = {
    LanceOperation.Append: _append,
    LanceOperation.Delete: _delete_or_update,
    LanceOperation.Update: _delete_or_update,
    LanceOperation.Overwrite: _overwrite,
    LanceOperation.Rewrite: _rewrite,
    LanceOperation.Merge: _merge,
    LanceOperation.Project: _project,
    LanceOperation.DataReplacement: _data_replacement,
    LanceOperation.Restore: _restore,
    LanceOperation.ReserveFragments: _reserve,
    LanceOperation.UpdateConfig: _update_config,
    LanceOperation.CreateIndex: _create_index,
}


def check(mine: Transaction, theirs: Transaction, *, stable_row_ids: bool = False,
          live_indices: frozenset[str] | None = None) -> Outcome:
    """How ``theirs`` (already committed) affects committing ``mine`` (on a dataset with
    ``stable_row_ids`` or not; ``live_indices``: the index uuids of the version ``mine`` commits onto,
    where known)."""
    if theirs.kind in _ALWAYS_FINE_FOR_ALL:
        return OK
    known = isinstance(theirs.operation, tuple(_RULES)) or theirs.kind == "data_replacement" or (
        theirs.kind == "create_index"
    )
    if not known and not isinstance(mine.operation, (LanceOperation.Overwrite, LanceOperation.Restore)):
        return RETRY
    if isinstance(mine.operation, LanceOperation.Rewrite):
        return _rewrite(mine, theirs, stable_row_ids, live_indices)
    rule = _RULES.get(type(mine.operation))
    return rule(mine, theirs) if rule else RETRY
