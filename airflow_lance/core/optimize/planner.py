"""Which fragments to compact: Lance's candidate selection and binning (format notes 11.2).

Fragments are visited in manifest order (insertion order is kept):

* a fragment whose deleted fraction is above the threshold must be rewritten
  (*compact itself*); otherwise one with fewer physical rows than the target
  is a candidate to merge (*compact with neighbours*); any other fragment, and
  every excluded one, ends the current bin;
* a bin is also cut where the set of indices covering the fragments changes,
  so indexed and unindexed fragments never mix;
* a bin of a single *compact with neighbours* fragment is dropped;
* bins are split into tasks of at least ``target_rows_per_fragment`` live
  rows, the remainder joining the last task;
* budgets (``max_source_fragments``, ``max_source_rows``) keep tasks in order
  until the next one would exceed them.

Fragments covered by indices the commit can remap (BTREE, BITMAP, LABEL_LIST, NGRAM, IVF_FLAT,
IVF_PQ, IVF_SQ; :mod:`airflow_lance.core.indices.remap`) or leaves alone (ZONEMAP, BLOOMFILTER;
and with stable row ids every index holding row ids, FTS and IVF_HNSW_*/IVF_RQ included, as
pylance 14) are compacted. Tasks over fragments covered by another index (FTS or HNSW without
stable row ids, ...), or by one without a fragment bitmap, are dropped and counted in
``fragments_skipped_indexed``.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Mapping
from typing import Any

import pyroaring

from airflow_lance.core import feature_flags
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.indices.remap import can_remap
from airflow_lance.core.manifest import ManifestFile
from airflow_lance.core.optimize.options import CompactionOptions
from airflow_lance.core.optimize.results import load_json_object
from airflow_lance.core.optimize.source import has_stable_row_ids
from airflow_lance.core.optimize.task import CompactionTask
from airflow_lance.core.write import resolve_storage_version

log = logging.getLogger(__name__)

#: Lance's system index recording deferred index remaps; we cannot maintain it.
FRAG_REUSE_INDEX_NAME = "__lance_frag_reuse"


class Candidacy(enum.Enum):
    COMPACT_ITSELF = "compact itself"
    COMPACT_WITH_NEIGHBORS = "compact with neighbours"


@dataclasses.dataclass(frozen=True)
class CompactionPlan:
    """Tasks planned against ``read_version``; commit their results with that version."""

    read_version: int
    tasks: tuple[CompactionTask, ...]
    options: CompactionOptions = dataclasses.field(default_factory=CompactionOptions)
    fragments_skipped_indexed: int = 0

    def num_tasks(self) -> int:
        return len(self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {
            "read_version": self.read_version,
            "tasks": [task.to_json() for task in self.tasks],
            "options": self.options.to_json(),
            "fragments_skipped_indexed": self.fragments_skipped_indexed,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> CompactionPlan:
        obj = load_json_object(data, "compaction plan")
        try:
            tasks = obj["tasks"]
            if isinstance(tasks, (str, bytes, Mapping)):
                raise TypeError("tasks must be a list")
            return cls(
                int(obj["read_version"]),
                tuple(CompactionTask.from_json(task) for task in tasks),
                CompactionOptions.from_json(obj.get("options", {})),
                int(obj.get("fragments_skipped_indexed", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"malformed compaction plan JSON: {exc!r}") from exc


@dataclasses.dataclass
class _Bin:
    fragments: list[FragmentMetadata]
    candidacy: list[Candidacy]
    indices: tuple[int, ...]

    def is_noop(self) -> bool:
        return len(self.fragments) == 1 and self.candidacy[0] is Candidacy.COMPACT_WITH_NEIGHBORS

    def split_for_size(self, min_rows: int) -> list[list[FragmentMetadata]]:
        """Consecutive groups of at least ``min_rows`` live rows; the remainder joins the last."""
        rows = [f.num_rows for f in self.fragments]
        groups, start = [], 0
        while True:
            end, count = start, 0
            while count < min_rows and end < len(rows):
                count += rows[end]
                end += 1
            if sum(rows[end:]) >= min_rows:
                groups.append(self.fragments[start:end])
                start = end
            else:
                groups.append(self.fragments[start:])
                return groups


def _index_coverage(manifest_file: ManifestFile) -> list[tuple[pyroaring.BitMap | None, bool]]:
    """(fragment bitmap, remappable) of every index; bitmap None when an index has none (it may cover anything)."""
    if not manifest_file.index_section:
        return []
    section = table_pb2.IndexSection()
    section.ParseFromString(manifest_file.index_section)
    coverage: list[tuple[pyroaring.BitMap | None, bool]] = []
    stable = has_stable_row_ids(manifest_file.manifest)
    for index in section.indices:
        if index.name == FRAG_REUSE_INDEX_NAME:
            raise UnsupportedFeatureError(
                "the dataset has a fragment reuse index (deferred index remapping); compact it with pylance"
            )
        coverage.append((pyroaring.BitMap.deserialize(index.fragment_bitmap) if index.fragment_bitmap else None,
                         can_remap(index, stable)))
    return coverage


def _candidacy(fragment: FragmentMetadata, options: CompactionOptions) -> Candidacy | None:
    physical = fragment.physical_rows
    deleted_fraction = fragment.num_deletions / physical if physical else 0.0
    if options.materializes_deletions and deleted_fraction > options.materialize_deletions_threshold:
        return Candidacy.COMPACT_ITSELF
    if physical < options.target_rows_per_fragment:
        return Candidacy.COMPACT_WITH_NEIGHBORS
    return None


def _bins(
    fragments: list[FragmentMetadata], coverage: list[tuple[pyroaring.BitMap | None, bool]], options: CompactionOptions
) -> list[_Bin]:
    """Runs of consecutive candidates covered by the same indices (format notes 11.2)."""
    excluded = set(options.excluded_fragment_ids)
    bins: list[_Bin] = []
    current: _Bin | None = None
    for fragment in fragments:
        candidacy = None if fragment.id in excluded else _candidacy(fragment, options)
        if candidacy is None:
            if current is not None:
                bins.append(current)
                current = None
            continue
        indices = tuple(i for i, (bitmap, _) in enumerate(coverage) if bitmap is None or fragment.id in bitmap)
        if current is not None and current.indices != indices:
            bins.append(current)
            current = None
        if current is None:
            current = _Bin([], [], indices)
        current.fragments.append(fragment)
        current.candidacy.append(candidacy)
    if current is not None:
        bins.append(current)
    return bins


def _within_budget(groups: list[list[FragmentMetadata]], options: CompactionOptions) -> list[list[FragmentMetadata]]:
    if options.max_source_fragments is None and options.max_source_rows is None:
        return groups
    kept: list[list[FragmentMetadata]] = []
    fragments = rows = 0
    for group in groups:
        fragments += len(group)
        rows += sum(f.num_rows for f in group)
        if (options.max_source_fragments is not None and fragments > options.max_source_fragments) or (
            options.max_source_rows is not None and rows > options.max_source_rows
        ):
            break
        kept.append(group)
    if groups and not kept:
        log.warning("compaction plan is empty: the first task already exceeds a source budget")
    return kept


def plan_compaction(uri: str, manifest_file: ManifestFile, options: CompactionOptions) -> CompactionPlan:
    """Plan the compaction of the version ``manifest_file`` (of the dataset at ``uri``) describes."""
    manifest = manifest_file.manifest
    fragments = [FragmentMetadata.from_pb(pb) for pb in manifest.fragments]
    groups: list[list[FragmentMetadata]] = []
    skipped = 0
    coverage = _index_coverage(manifest_file)
    for candidate in _bins(fragments, coverage, options):
        if candidate.is_noop():
            continue
        split = candidate.split_for_size(options.target_rows_per_fragment)
        if not all(coverage[i][1] for i in candidate.indices):
            skipped += len(candidate.fragments)
            continue
        groups.extend(split)
    groups = _within_budget(groups, options)
    if groups:  # refuse before anything is written, not in the middle of a task
        feature_flags.check_writable(manifest, uri)
        resolve_storage_version(None, manifest_file)
    if skipped:
        log.info("compaction leaves %d fragments alone: an index that cannot be remapped covers them", skipped)
    tasks = tuple(CompactionTask(manifest.version, tuple(group), options) for group in groups)
    return CompactionPlan(manifest.version, tasks, options, skipped)
