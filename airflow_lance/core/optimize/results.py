"""What compaction reports: ``CompactionMetrics`` and per-task ``RewriteResult``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.fragment import FragmentMetadata


@dataclasses.dataclass
class CompactionMetrics:
    """Counts of one compaction (pylance's first four fields, plus ours).

    * ``fragments_removed`` / ``fragments_added``: fragments replaced / written.
    * ``files_removed``: data and deletion files of the replaced fragments. They are
      dropped from the dataset (the new version no longer references them), not
      deleted from storage: older versions still reference them until
      ``cleanup_old_versions`` removes those versions and the files with them.
    * ``files_added``: data files of the new fragments.
    * ``rows``: live rows rewritten (deleted rows are dropped, not counted).
    * ``bytes``: size of the new data files.
    * ``fragments_skipped_indexed``: fragments that needed compaction but were
      left alone because an index covers them (a pure-Python writer cannot
      rewrite index files with remapped row addresses).
    * ``tasks_skipped_conflict``: tasks left out of the commit because a concurrent
      commit changed their fragments (``Compaction.commit(..., skip_conflicting=True)``;
      their files are deleted, the other tasks committed; the counts above cover
      the committed tasks only).
    * ``versions_created``: versions the compaction committed: 1 (the Rewrite;
      no separate fragment-id reservation), plus one ``ReserveFragments`` version
      per commit attempt that remapped indices (one, unless an attempt of
      ``skip_conflicting`` lost the commit race), or 0 when there was nothing to
      compact or the results were already committed.
    * ``version``: the version holding the compaction's Rewrite (0 when none
      was committed, or a retried commit's version was cleaned up).

    Adding metrics (``+=``) sums the counts and keeps the higher ``version``.
    """

    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0
    rows: int = 0
    bytes: int = 0
    fragments_skipped_indexed: int = 0
    tasks_skipped_conflict: int = 0
    versions_created: int = 0
    version: int = 0

    def __iadd__(self, other: CompactionMetrics) -> CompactionMetrics:
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            setattr(self, field.name, max(mine, theirs) if field.name == "version" else mine + theirs)
        return self

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompactionMetrics:
        try:
            return cls(**{f.name: int(data.get(f.name, 0)) for f in dataclasses.fields(cls)})
        except (TypeError, ValueError, AttributeError) as exc:
            raise InvalidInputError(f"malformed compaction metrics: {exc!r}") from exc


def load_json_object(data: Mapping[str, Any] | str, what: str) -> Mapping[str, Any]:
    """Parse a JSON object (or pass a mapping through); InvalidInputError otherwise."""
    try:
        obj = json.loads(data) if isinstance(data, str) else data
    except ValueError as exc:
        raise InvalidInputError(f"malformed {what} JSON: {exc}") from exc
    if not isinstance(obj, Mapping):
        raise InvalidInputError(f"malformed {what} JSON: expected an object")
    return obj


@dataclasses.dataclass(frozen=True)
class RewriteResult:
    """The outcome of one :class:`CompactionTask`: written files, not yet committed.

    Picklable and JSON round-trippable (``to_json``/``from_json``) so tasks can
    run on other machines and hand their results back to the committer.
    """

    read_version: int
    old_fragments: tuple[FragmentMetadata, ...]
    new_fragments: tuple[FragmentMetadata, ...]
    metrics: CompactionMetrics

    @property
    def original_fragments(self) -> tuple[FragmentMetadata, ...]:
        """Lance's Rust name for ``old_fragments``."""
        return self.old_fragments

    def to_json(self) -> dict[str, Any]:
        return {
            "read_version": self.read_version,
            "old_fragments": [f.to_json() for f in self.old_fragments],
            "new_fragments": [f.to_json() for f in self.new_fragments],
            "metrics": self.metrics.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> RewriteResult:
        obj = load_json_object(data, "rewrite result")
        try:
            return cls(
                read_version=int(obj["read_version"]),
                old_fragments=fragments_from_json(obj["old_fragments"]),
                new_fragments=fragments_from_json(obj["new_fragments"]),
                metrics=CompactionMetrics.from_json(obj.get("metrics", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"malformed rewrite result JSON: {exc!r}") from exc


def fragments_from_json(items: Sequence[Any]) -> tuple[FragmentMetadata, ...]:
    """A list of pylance-style fragment JSON objects -> FragmentMetadata (InvalidInputError if malformed)."""
    if isinstance(items, (str, bytes, Mapping)):
        raise InvalidInputError("fragments must be a list")
    return tuple(FragmentMetadata.from_json(item) for item in items)
