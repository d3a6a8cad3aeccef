"""Compaction options (pylance's names and defaults), validated once, JSON-ready."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_lance.core.errors import InvalidInputError
from airflow_lance.core.write import MAX_BYTES_PER_FILE

DEFAULT_TARGET_ROWS_PER_FRAGMENT = 1024 * 1024
DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD = 0.1


def _positive_int(name: str, value: Any, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise InvalidInputError(f"{name} must be a positive integer{' or None' if optional else ''}, not {value!r}")
    return int(value)


def _fragment_ids(value: Iterable[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidInputError(f"excluded_fragment_ids must be a list of fragment ids, not {value!r}")
    ids = list(value)
    if any(isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0 for i in ids):
        raise InvalidInputError(f"excluded_fragment_ids must hold non-negative integers, not {ids!r}")
    return tuple(sorted({int(i) for i in ids}))  # duplicates and unknown ids are ignored, as in Lance


@dataclasses.dataclass(frozen=True)
class CompactionOptions:
    """What to compact and how big the new fragments get.

    * ``target_rows_per_fragment``: fragments with fewer physical rows are
      candidates to merge with their neighbours; new files hold at most this
      many rows.
    * ``max_bytes_per_file``: cut new files at this size (write default).
    * ``materialize_deletions`` / ``materialize_deletions_threshold``: a
      fragment whose deleted fraction is above the threshold is rewritten even
      alone (a threshold of 1.0 or more disables this, as in Lance).
    * ``max_source_fragments`` / ``max_source_rows``: per-run budgets; tasks are
      kept in order until the next one would exceed a budget.
    * ``excluded_fragment_ids``: never rewritten; they end a bin like a large
      fragment does.
    """

    target_rows_per_fragment: int = DEFAULT_TARGET_ROWS_PER_FRAGMENT
    max_bytes_per_file: int = MAX_BYTES_PER_FILE
    materialize_deletions: bool = True
    materialize_deletions_threshold: float = DEFAULT_MATERIALIZE_DELETIONS_THRESHOLD
    max_source_fragments: int | None = None
    max_source_rows: int | None = None
    excluded_fragment_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "target_rows_per_fragment", _positive_int("target_rows_per_fragment", self.target_rows_per_fragment))
        set_(self, "max_bytes_per_file", _positive_int("max_bytes_per_file", self.max_bytes_per_file))
        if not isinstance(self.materialize_deletions, bool):
            raise InvalidInputError(f"materialize_deletions must be a bool, not {self.materialize_deletions!r}")
        threshold = self.materialize_deletions_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or threshold != threshold:
            raise InvalidInputError(f"materialize_deletions_threshold must be a number, not {threshold!r}")
        set_(self, "materialize_deletions_threshold", float(threshold))
        for name in ("max_source_fragments", "max_source_rows"):
            set_(self, name, _positive_int(name, getattr(self, name), optional=True))
        set_(self, "excluded_fragment_ids", _fragment_ids(self.excluded_fragment_ids))

    @property
    def materializes_deletions(self) -> bool:
        """Whether deletions make a fragment a candidate (off when the threshold is >= 1)."""
        return self.materialize_deletions and self.materialize_deletions_threshold < 1.0

    @classmethod
    def build(cls, options: Mapping[str, Any] | CompactionOptions | None = None, **overrides: Any) -> CompactionOptions:
        """Options from a pylance-style dict (or options) plus keyword overrides; unknown keys are errors."""
        if isinstance(options, CompactionOptions):
            base = dataclasses.asdict(options)
        elif options is None:
            base = {}
        elif isinstance(options, Mapping):
            base = dict(options)
        else:
            raise InvalidInputError(f"compaction options must be a dict, not {type(options).__name__}")
        base.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(base) - known)
        if unknown:
            raise InvalidInputError(f"unknown compaction option(s) {unknown}; supported: {sorted(known)}")
        return cls(**{k: v for k, v in base.items() if v is not None})

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["excluded_fragment_ids"] = list(self.excluded_fragment_ids)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompactionOptions:
        return cls.build(data)
