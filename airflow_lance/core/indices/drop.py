"""``drop_index``: one ``CreateIndex`` transaction that removes every entry of the named index
(pylance 14 commits exactly this: no new indices, the removed ``IndexMetadata`` in full). The
files stay until ``cleanup_old_versions`` removes versions that reference them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_lance.core.errors import IndexNotFoundError, InvalidTypeError
from airflow_lance.core.indices.metadata import user_indices
from airflow_lance.core.transaction import LanceOperation

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset


def _plan(current: LanceDataset, name: str) -> tuple[LanceOperation.CreateIndex, None]:
    removed = [i for i in user_indices(current.manifest_file) if i.name == name]
    if not removed:
        raise IndexNotFoundError(f"Lance index not found: name={name}")
    return LanceOperation.CreateIndex(new_indices=[], removed_indices=removed), None


def drop_index(dataset: LanceDataset, name: str, *, conflict_retries: int = 10) -> None:
    """Drop the index ``name``; IndexNotFoundError (RuntimeError) when there is none."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"index name must be a string, not {type(name).__name__}")
    _plan(dataset, name)  # fail before committing anything
    dataset._commit_planned(lambda current: _plan(current, name), conflict_retries)
