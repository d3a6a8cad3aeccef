"""Rebasing a transaction over concurrent ones the conflict rules found compatible.

A Delete/Update over concurrent deletes: when another writer changed the deletion
file of a fragment we also delete from, our deletion vector is merged with theirs
(never dropping either side), unless both deleted the same row, which is a
retryable conflict as in Lance. A CreateIndex over updates that rewrote its
columns in place: the updated fragments leave its bitmap, as pylance 14 does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np
import pyroaring

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.arrays import sorted_unique
from airflow_lance.core.conflicts import updated_in_place
from airflow_lance.core.deletion import read_deletion_vector, write_deletion_vector
from airflow_lance.core.errors import CommitConflictError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.manifest import ManifestFile
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.transaction import LanceOperation, Transaction

_EMPTY = np.empty(0, dtype=np.uint32)


def _vector(store: ObjectStore, fragment: FragmentMetadata) -> np.ndarray:
    if fragment.deletion_file is None:
        return _EMPTY
    return sorted_unique(read_deletion_vector(store, fragment.id, fragment.deletion_file))


def _fragments(manifest: ManifestFile) -> dict[int, FragmentMetadata]:
    return {f.id: FragmentMetadata.from_pb(f) for f in manifest.manifest.fragments}


def rebase_deletions(
    store: ObjectStore, mine: Transaction, latest: ManifestFile, read: ManifestFile | None
) -> Transaction:
    """Return ``mine`` with deletion vectors merged into those of ``latest``."""
    op = mine.operation
    assert isinstance(op, (LanceOperation.Delete, LanceOperation.Update))
    current = _fragments(latest)
    original = _fragments(read) if read is not None else {}
    updated: list[FragmentMetadata] = []
    removed = list(op.deleted_fragment_ids if isinstance(op, LanceOperation.Delete) else op.removed_fragment_ids)
    for fragment_id in removed:  # we deleted every live row: any row they deleted there, we deleted too
        now, before = current.get(fragment_id), original.get(fragment_id)
        if now is not None and before is not None and now.deletion_file != before.deletion_file:
            raise CommitConflictError(
                f"fragment {fragment_id}: rows were also deleted by a concurrent transaction; retry"
            )
    for fragment in op.updated_fragments:
        now, before = current[fragment.id], original.get(fragment.id)
        if before is None or now.deletion_file == before.deletion_file:
            updated.append(fragment)
            continue
        base = _vector(store, before)
        ours, theirs = _vector(store, fragment), _vector(store, now)
        both = np.intersect1d(np.setdiff1d(ours, base), np.setdiff1d(theirs, base))
        if both.size:
            raise CommitConflictError(
                f"fragment {fragment.id}: {both.size} rows were also deleted by a concurrent transaction; retry"
            )
        merged = np.union1d(ours, theirs).astype(np.uint32)
        if merged.size >= now.physical_rows:  # every row gone: the fragment is removed (Delete and Update)
            removed.append(fragment.id)
            continue
        deletion = write_deletion_vector(store, fragment.id, mine.read_version, merged)
        updated.append(dataclasses.replace(now, deletion_file=deletion))
    if isinstance(op, LanceOperation.Delete):
        new_op: LanceOperation.BaseOperation = LanceOperation.Delete(updated, removed, op.predicate)
    else:
        new_op = dataclasses.replace(op, updated_fragments=updated, removed_fragment_ids=removed)
    return dataclasses.replace(mine, operation=new_op, raw=None)


def rebase_create_index(mine: Transaction, concurrent: Iterable[Transaction]) -> Transaction:
    """``mine`` (a CreateIndex) without, in each new index's fragment bitmap, the fragments that a
    concurrent update rewrote in place on that index's fields: the index holds their old values."""
    op = mine.operation
    assert isinstance(op, LanceOperation.CreateIndex)
    concurrent = list(concurrent)
    new_indices = []
    for index in op.new_indices:
        stale = set().union(*(updated_in_place(t.operation, set(index.fields)) for t in concurrent))
        if stale and index.fragment_bitmap:
            bitmap = pyroaring.BitMap.deserialize(index.fragment_bitmap) - pyroaring.BitMap(stale)
            index = table_pb2.IndexMetadata.FromString(index.SerializeToString())
            index.fragment_bitmap = bitmap.serialize()
        new_indices.append(index)
    return dataclasses.replace(mine, operation=dataclasses.replace(op, new_indices=new_indices), raw=None)
