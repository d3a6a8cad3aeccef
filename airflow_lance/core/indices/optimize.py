"""``optimize_indices``: fold fragments appended since an index was built into it, as pylance 14.

An index is one or more entries (segments) of the same name; a fragment no segment covers is
searched without the index. pylance 14 (``num_indices_to_merge``, default None = 1 for scalar indices):

* ``0``: a new *delta* segment over only the unindexed fragments;
* ``n > 0``: the ``n`` newest segments and the unindexed fragments become one segment
  (``retrain=True``: every segment), the merged ones are removed;

all in one ``CreateIndex`` transaction. A merged segment keeps the oldest merged segment's
``dataset_version`` (as pylance 14; except a LABEL_LIST merged from several segments), a delta
gets the version it was built on. The merged
segment here is rebuilt from the covered fragments' data (deleted rows leave it), which pylance
finds and uses like its own. IVF_FLAT/IVF_PQ indices follow pylance's vector rules
(:mod:`.vector_optimize`: default None = a delta with the existing centroids and codebook).
Indices of other types (FTS, HNSW, ...) are left alone (logged); nothing is committed when no
index changes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import IndexNotFoundError, InvalidInputError
from airflow_lance.core.indices import ivf
from airflow_lance.core.indices.create import TYPE_URLS, build_index
from airflow_lance.core.indices.metadata import fragment_bitmap, user_indices
from airflow_lance.core.indices.vector_optimize import can_optimize, optimize_vector_index
from airflow_lance.core.transaction import LanceOperation

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

log = logging.getLogger(__name__)

_TYPES = {url: name for name, url in TYPE_URLS.items()}


def unindexed_fragments(dataset: LanceDataset, name: str) -> list[int]:
    """Ids of the fragments of ``dataset`` no segment of the index ``name`` covers."""
    covered = set()
    for index in user_indices(dataset.manifest_file):
        if index.name == name:
            covered |= set(fragment_bitmap(index))
    return [f.id for f in dataset._fragments if f.id not in covered]


def unindexed_rows(dataset: LanceDataset, name: str) -> int:
    """Live rows of ``dataset`` the index ``name`` does not cover."""
    missing = set(unindexed_fragments(dataset, name))
    return sum(f.num_rows for f in dataset._fragments if f.id in missing)


def _segments(current: LanceDataset, index_names: Sequence[str] | None) -> dict[str, list[table_pb2.IndexMetadata]]:
    by_name: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in user_indices(current.manifest_file):
        by_name.setdefault(index.name, []).append(index)
    if index_names is not None:
        unknown = [n for n in index_names if n not in by_name]
        if unknown:
            raise IndexNotFoundError(f"Index {unknown[0]!r} not found")
        by_name = {n: by_name[n] for n in index_names}
    return by_name


def _plan(current: LanceDataset, num_indices_to_merge: int | None, index_names: Sequence[str] | None,
          retrain: bool) -> tuple[LanceOperation.CreateIndex | None, int]:
    new, removed = [], []
    live = {f.id for f in current._fragments}
    names = {f.id: f.name for f in current.lance_schema.top_level()}
    for name, segments in _segments(current, index_names).items():
        if segments[0].index_details.type_url == ivf.TYPE_URL and len(segments[0].fields) == 1 \
                and segments[0].fields[0] in names:
            vector, merged = optimize_vector_index(
                current, name, names[segments[0].fields[0]], segments[0].fields[0], segments,
                unindexed_fragments(current, name), num_indices_to_merge, retrain)
            if vector is not None:
                new.append(vector)
                removed.extend(merged)
            continue
        count = 1 if num_indices_to_merge is None else num_indices_to_merge
        kind = _TYPES.get(segments[0].index_details.type_url)
        if kind is None or len(segments[0].fields) != 1 or segments[0].fields[0] not in names:
            log.info("optimize_indices leaves index %r (%s) alone: not a type built here", name,
                     segments[0].index_details.type_url)
            continue
        missing = unindexed_fragments(current, name)
        merge = segments if retrain else (segments[-count:] if count else [])
        if not missing and len(merge) < 2:
            continue
        covered = set(missing)
        for segment in merge:
            covered |= set(fragment_bitmap(segment)) & live
        # pylance 14: the oldest merged segment's version, but a LABEL_LIST merged from several
        # segments (rebuilt), or segments that cover no fragment (``train=False``), get the
        # version it was built on, as a delta does
        dataset_version = None if not merge or (kind == "LABEL_LIST" and len(merge) > 1) or all(
            not fragment_bitmap(s) for s in merge) else min(s.dataset_version for s in merge)
        field_id = segments[0].fields[0]
        new.append(build_index(current, names[field_id], field_id, kind, name, sorted(covered), dataset_version))
        removed.extend(merge)
    if not new:
        return None, 0
    return LanceOperation.CreateIndex(new_indices=new, removed_indices=removed), len(new)


def optimize_indices(dataset: LanceDataset, *, num_indices_to_merge: int | None = None,
                     index_names: Sequence[str] | None = None, retrain: bool = False,
                     conflict_retries: int = 10) -> None:
    """pylance 14's ``optimize_indices``; the handle moves to the new version (if one is committed)."""
    if num_indices_to_merge is not None and (isinstance(num_indices_to_merge, bool)
                                             or not isinstance(num_indices_to_merge, int) or num_indices_to_merge < 0):
        raise InvalidInputError(f"num_indices_to_merge must be a non-negative int, not {num_indices_to_merge!r}")
    if index_names is not None:
        if isinstance(index_names, str) or not all(isinstance(n, str) for n in index_names):
            raise InvalidInputError("index_names must be a list of index names")
        _segments(dataset, index_names)  # unknown names fail before anything is written
    if _plan_is_noop(dataset, num_indices_to_merge, index_names, retrain):
        return

    def plan(current: LanceDataset) -> tuple[LanceOperation.BaseOperation, None]:
        operation, _ = _plan(current, num_indices_to_merge, index_names, retrain)
        if operation is None:  # a concurrent commit did it; an empty CreateIndex changes nothing
            operation = LanceOperation.CreateIndex()
        return operation, None

    dataset._commit_planned(plan, conflict_retries)


def _plan_is_noop(dataset: LanceDataset, num_indices_to_merge: int | None, index_names: Sequence[str] | None,
                  retrain: bool) -> bool:
    for name, segments in _segments(dataset, index_names).items():
        vector = segments[0].index_details.type_url == ivf.TYPE_URL
        if vector:
            names = {f.id: f.name for f in dataset.lance_schema.top_level()}
            if len(segments[0].fields) != 1 or segments[0].fields[0] not in names or \
                    not can_optimize(dataset, names[segments[0].fields[0]], segments):
                continue
        elif segments[0].index_details.type_url not in _TYPES:
            continue
        if num_indices_to_merge is None:  # pylance: scalar indices merge one, vector ones add a delta
            count = 0 if vector else 1
        else:
            count = num_indices_to_merge
        merge = segments if retrain else (segments[-count:] if count else [])
        if unindexed_fragments(dataset, name) or len(merge) >= 2:
            return False
    return True
