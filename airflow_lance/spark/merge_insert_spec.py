"""The contract between ``LanceSparkMergeInsertOperator`` and the Spark merge-insert job.

The operator writes a :class:`MergeInsertJobSpec` as JSON into a private file shipped with
``--files`` (storage options never go on a command line); the job joins the source with the
target's keys on the executors, writes the new fragments (inserted and updated rows) and the
deletion vectors (replaced and deleted rows), and stages a :class:`MergeInsertJobResult` at
the staging location. It never commits: the operator commits one ``Update`` from the result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_lance.core import FragmentMetadata
from airflow_lance.spark.spec import (
    MAX_BYTES_PER_FILE,
    MAX_ROWS_PER_FILE,
    JobSpecError,
    SourceSpec,
    StagedResult,
    missing_fragment_files,
    require,
    string_map,
)

#: The key of a spec document that names a merge-insert job.
MERGE_INSERT_KEY = "merge_insert"
MERGE_INSERT_SPEC_VERSION = 1


def _optional_sql(name: str, value: Any) -> str | None:
    require(value is None or (isinstance(value, str) and bool(value.strip())),
            f"{name} must be a SQL string, not {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class MergeInsertJobSpec:
    """One Spark merge insert: pylance's ``merge_insert(on)`` with its ``when_*`` clauses.

    ``when_matched_update_all`` (``matched_condition`` limits it, naming ``source.x`` and
    ``target.x``), ``when_not_matched_insert_all`` and ``when_not_matched_by_source_delete``
    (``by_source_expr`` limits it) as pylance's builder methods.
    """

    uri: str
    read_version: int
    source: SourceSpec
    on: tuple[str, ...]
    staging_root: str
    staging_name: str
    storage_options: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    when_matched_update_all: bool = True
    matched_condition: str | None = None
    when_not_matched_insert_all: bool = True
    when_not_matched_by_source_delete: bool = False
    by_source_expr: str | None = None
    num_partitions: int | None = None
    max_rows_per_file: int = MAX_ROWS_PER_FILE
    max_bytes_per_file: int = MAX_BYTES_PER_FILE

    def __post_init__(self) -> None:
        require(isinstance(self.uri, str) and bool(self.uri), "uri must be a non-empty string")
        require(isinstance(self.read_version, int) and self.read_version >= 1,
                f"read_version must be a positive integer, not {self.read_version!r}")
        require(isinstance(self.source, SourceSpec), "source must be a SourceSpec")
        on = (self.on,) if isinstance(self.on, str) else tuple(self.on)
        require(bool(on) and all(isinstance(k, str) and k for k in on),
                f"on must be a column name or a list of column names, not {self.on!r}")
        require(len(set(on)) == len(on), f"on names a column twice: {list(on)}")
        object.__setattr__(self, "on", on)
        for name in ("when_matched_update_all", "when_not_matched_insert_all", "when_not_matched_by_source_delete"):
            require(isinstance(getattr(self, name), bool), f"{name} must be true or false")
        _optional_sql("matched_condition", self.matched_condition)
        _optional_sql("by_source_expr", self.by_source_expr)
        require(self.matched_condition is None or self.when_matched_update_all,
                "matched_condition applies to when_matched_update_all only")
        require(self.by_source_expr is None or self.when_not_matched_by_source_delete,
                "by_source_expr applies to when_not_matched_by_source_delete only")
        require(self.when_matched_update_all or self.when_not_matched_insert_all
                or self.when_not_matched_by_source_delete,
                "The merge insert job is not configured to change the data in any way")
        require(bool(self.staging_root) and bool(self.staging_name), "staging location is missing")
        for name in ("max_rows_per_file", "max_bytes_per_file", *(("num_partitions",) if self.num_partitions else ())):
            value = getattr(self, name)
            require(isinstance(value, int) and not isinstance(value, bool) and value > 0,
                    f"{name} must be a positive integer, not {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_version": MERGE_INSERT_SPEC_VERSION,
            MERGE_INSERT_KEY: {
                "on": list(self.on),
                "when_matched_update_all": self.when_matched_update_all,
                "matched_condition": self.matched_condition,
                "when_not_matched_insert_all": self.when_not_matched_insert_all,
                "when_not_matched_by_source_delete": self.when_not_matched_by_source_delete,
                "by_source_expr": self.by_source_expr,
            },
            "uri": self.uri,
            "read_version": self.read_version,
            "source": self.source.to_json(),
            "staging_root": self.staging_root,
            "staging_name": self.staging_name,
            "storage_options": dict(self.storage_options),
            "num_partitions": self.num_partitions,
            "max_rows_per_file": self.max_rows_per_file,
            "max_bytes_per_file": self.max_bytes_per_file,
        }

    def to_json(self) -> str:
        """The spec as JSON (includes storage options: store it privately, never log it)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MergeInsertJobSpec:
        require(data.get("spec_version") == MERGE_INSERT_SPEC_VERSION,
                f"merge insert job spec version {data.get('spec_version')!r} is not {MERGE_INSERT_SPEC_VERSION}: "
                "operator and job differ")
        try:
            plan = data[MERGE_INSERT_KEY]
            require(isinstance(plan, Mapping), f"{MERGE_INSERT_KEY} must be an object")
            return cls(
                uri=data["uri"],
                read_version=data["read_version"],
                source=SourceSpec.from_json(data["source"]),
                on=tuple(plan["on"]),
                staging_root=data["staging_root"],
                staging_name=data["staging_name"],
                storage_options=string_map("storage_options", data.get("storage_options") or {}),
                when_matched_update_all=plan["when_matched_update_all"],
                matched_condition=plan.get("matched_condition"),
                when_not_matched_insert_all=plan["when_not_matched_insert_all"],
                when_not_matched_by_source_delete=plan["when_not_matched_by_source_delete"],
                by_source_expr=plan.get("by_source_expr"),
                num_partitions=data.get("num_partitions"),
                max_rows_per_file=data.get("max_rows_per_file", MAX_ROWS_PER_FILE),
                max_bytes_per_file=data.get("max_bytes_per_file", MAX_BYTES_PER_FILE),
            )
        except KeyError as exc:
            raise JobSpecError(f"merge insert job spec lacks {exc.args[0]!r}") from None

    def digest(self) -> str:
        """Identity of the job (storage options and staging location left out)."""
        data = self.to_dict()
        for key in ("storage_options", "staging_root", "staging_name"):
            data.pop(key)
        data["source"].get("lance", {}).pop("storage_options", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def describe(self) -> str:
        """A log-friendly description (no option values)."""
        clauses = []
        if self.when_matched_update_all:
            clauses.append("update matched" + (" (conditional)" if self.matched_condition else ""))
        if self.when_not_matched_insert_all:
            clauses.append("insert unmatched")
        if self.when_not_matched_by_source_delete:
            clauses.append("delete not matched by source" + (" (filtered)" if self.by_source_expr else ""))
        return (f"merge insert on {list(self.on)} into {self.uri} at version {self.read_version} from "
                f"{self.source.describe()}: {', '.join(clauses)}")


@dataclasses.dataclass(frozen=True)
class MergeInsertJobResult(StagedResult):
    """What a finished merge-insert job staged: the parts of the ``Update`` and pylance's counts."""

    spec_digest: str
    new_fragments: tuple[FragmentMetadata, ...]
    updated_fragments: tuple[FragmentMetadata, ...]
    removed_fragment_ids: tuple[int, ...]
    fields_for_preserving_frag_bitmap: tuple[int, ...]
    num_inserted_rows: int
    num_updated_rows: int
    num_deleted_rows: int
    bytes_written: int
    elapsed_seconds: float

    @property
    def counts(self) -> dict[str, int]:
        """pylance's ``merge_insert`` result."""
        return {"num_inserted_rows": self.num_inserted_rows, "num_updated_rows": self.num_updated_rows,
                "num_deleted_rows": self.num_deleted_rows}

    def missing_files(self, dataset_uri: str, storage_options: Mapping[str, str]) -> list[str]:
        """Data files of the new fragments and deletion files of the updated ones that do not
        exist (any means: do not commit it)."""
        return missing_fragment_files(dataset_uri, storage_options, (*self.new_fragments, *self.updated_fragments))

    def to_json(self) -> str:
        return json.dumps({
            "spec_digest": self.spec_digest,
            "new_fragments": [f.to_json() for f in self.new_fragments],
            "updated_fragments": [f.to_json() for f in self.updated_fragments],
            "removed_fragment_ids": list(self.removed_fragment_ids),
            "fields_for_preserving_frag_bitmap": list(self.fields_for_preserving_frag_bitmap),
            **self.counts,
            "bytes_written": self.bytes_written,
            "elapsed_seconds": self.elapsed_seconds,
        })

    @classmethod
    def from_json(cls, text: str | bytes) -> MergeInsertJobResult:
        try:
            data = json.loads(text)
            return cls(
                spec_digest=str(data["spec_digest"]),
                new_fragments=tuple(FragmentMetadata.from_json(f) for f in data["new_fragments"]),
                updated_fragments=tuple(FragmentMetadata.from_json(f) for f in data["updated_fragments"]),
                removed_fragment_ids=tuple(int(i) for i in data["removed_fragment_ids"]),
                fields_for_preserving_frag_bitmap=tuple(int(i) for i in data["fields_for_preserving_frag_bitmap"]),
                num_inserted_rows=int(data["num_inserted_rows"]),
                num_updated_rows=int(data["num_updated_rows"]),
                num_deleted_rows=int(data["num_deleted_rows"]),
                bytes_written=int(data["bytes_written"]),
                elapsed_seconds=float(data["elapsed_seconds"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise JobSpecError(f"staged merge insert result is malformed: {exc!r}") from None


def unique(names: Sequence[str]) -> list[str]:
    """``names`` without repetitions, in order."""
    return list(dict.fromkeys(names))
