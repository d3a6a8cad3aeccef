"""``CompactionTask``: rewrite one bin of fragments into new data files (no commit).

A task is plain data (picklable, JSON round-trippable) and runs anywhere that
can reach the dataset: it reads the manifest of the plan's ``read_version``,
checks that its fragments are the ones of that version, reads their live rows
in order (deletions applied), and streams them into new data files of the
dataset's own format. On datasets with stable row ids the surviving rows' ids
and created/updated versions move with them (format notes 12).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_lance.core import layout, rowids
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.deletion import deletion_path, keep_mask, read_deletion_vector
from airflow_lance.core.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.manifest import ManifestFile
from airflow_lance.core.optimize.options import CompactionOptions
from airflow_lance.core.optimize.results import (
    CompactionMetrics,
    RewriteResult,
    fragments_from_json,
    load_json_object,
)
from airflow_lance.core.optimize.source import DatasetOrUri, file_version, has_stable_row_ids, open_source
from airflow_lance.core.scan import read_fragment
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.write import resolve_storage_version, write_data_files


@dataclasses.dataclass(frozen=True)
class CompactionTask:
    """Adjacent fragments of one version to rewrite into fewer, larger ones."""

    read_version: int
    fragments: tuple[FragmentMetadata, ...]
    options: CompactionOptions = dataclasses.field(default_factory=CompactionOptions)

    def execute(self, dataset_or_uri: DatasetOrUri, storage_options: Mapping[str, str] | None = None) -> RewriteResult:
        """Write the new fragments; return them with the fragments they replace.

        Nothing is committed: hand the result to :meth:`Compaction.commit`.
        """
        store, source = open_source(dataset_or_uri, storage_options, self.read_version)
        return rewrite_task(store, source, self)

    def to_json(self) -> dict[str, Any]:
        return {
            "read_version": self.read_version,
            "fragments": [f.to_json() for f in self.fragments],
            "options": self.options.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> CompactionTask:
        obj = load_json_object(data, "compaction task")
        try:
            return cls(
                int(obj["read_version"]),
                fragments_from_json(obj["fragments"]),
                CompactionOptions.from_json(obj.get("options", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"malformed compaction task JSON: {exc!r}") from exc


def same_fragment(a: FragmentMetadata, b: FragmentMetadata) -> bool:
    """Same id, data files, row count and deletion file (what a rewrite depends on)."""
    return (a.id, a.files, a.physical_rows, a.deletion_file) == (b.id, b.files, b.physical_rows, b.deletion_file)


def _source_fragments(manifest: table_pb2.Manifest, task: CompactionTask) -> list[table_pb2.DataFragment]:
    """The task's fragments as the read version stores them; InvalidInputError if they differ."""
    if not task.fragments:
        raise InvalidInputError("a compaction task needs at least one fragment")
    if len({f.id for f in task.fragments}) != len(task.fragments):
        raise InvalidInputError("a compaction task lists a fragment twice")
    by_id = {f.id: f for f in manifest.fragments}
    found = []
    for fragment in task.fragments:
        pb = by_id.get(fragment.id)
        if pb is None or not same_fragment(FragmentMetadata.from_pb(pb), fragment):
            raise InvalidInputError(
                f"fragment {fragment.id} of the task is not the fragment of version {manifest.version}"
            )
        found.append(pb)
    return found


class _Carried:
    """Per-row sequences that travel with the rows of a stable-row-id dataset."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.row_ids: list[np.ndarray] = []
        self.versions: dict[tuple[str, str], list[np.ndarray] | None] = {
            rowids.CREATED_AT_FIELDS: [],
            rowids.LAST_UPDATED_FIELDS: [],
        }

    def add(self, pb: table_pb2.DataFragment, mask: np.ndarray | None) -> None:
        what = f"fragment {pb.id} row ids"
        data = rowids.sequence_bytes(self.store, pb, rowids.ROW_ID_FIELDS)
        if data is None:
            raise CorruptFileError(what, "a fragment of a dataset with stable row ids has no row id sequence")
        ids = rowids.decode_row_ids(data, what)
        if ids.size != pb.physical_rows:
            raise CorruptFileError(what, f"{ids.size} row ids for {pb.physical_rows} rows")
        self.row_ids.append(ids if mask is None else ids[mask])
        for fields, parts in self.versions.items():
            if parts is None:
                continue
            raw = rowids.sequence_bytes(self.store, pb, fields)
            if raw is None:  # not every source has it: the new fragments go without
                self.versions[fields] = None
                continue
            versions = rowids.decode_versions(raw, pb.physical_rows, f"fragment {pb.id} {fields[0]}")
            parts.append(versions if mask is None else versions[mask])

    def attach(self, fragments: Sequence[FragmentMetadata]) -> list[FragmentMetadata]:
        """The new fragments with their slices of the carried sequences."""
        ids = np.concatenate(self.row_ids) if self.row_ids else np.empty(0, dtype=np.uint64)
        total = sum(f.physical_rows for f in fragments)
        if ids.size != total:
            raise CorruptFileError("compaction", f"carried {ids.size} row ids for {total} rewritten rows")
        versions = {fields: np.concatenate(parts) for fields, parts in self.versions.items() if parts}
        out, start = [], 0
        for fragment in fragments:
            end = start + fragment.physical_rows
            pb = table_pb2.DataFragment(inline_row_ids=rowids.encode_row_ids(ids[start:end]))
            for (inline, _external), values in versions.items():
                setattr(pb, inline, rowids.encode_versions(values[start:end]))
            out.append(dataclasses.replace(fragment, extra=pb.SerializeToString()))
            start = end
        return out


def _live_batches(
    store: ObjectStore,
    schema: LanceSchema,
    pairs: Sequence[tuple[FragmentMetadata, table_pb2.DataFragment]],
    carried: _Carried | None,
) -> Iterator[pa.RecordBatch]:
    """The live rows of the fragments, in order, as record batches."""
    for fragment, pb in pairs:
        table = read_fragment(store, fragment, schema, with_deletions=False)
        mask = None
        if fragment.deletion_file is not None:
            deleted = read_deletion_vector(store, fragment.id, fragment.deletion_file)
            mask = keep_mask(fragment.physical_rows, deleted, deletion_path(fragment.id, fragment.deletion_file))
            table = table.filter(pa.array(mask))
        if carried is not None:
            carried.add(pb, mask)
        yield from table.to_batches()


def delete_written(store: ObjectStore, fragments: Sequence[FragmentMetadata]) -> None:
    """Remove data files that no commit references (best effort)."""
    for fragment in fragments:
        for data_file in fragment.files:
            try:
                store.delete(layout.data_file_path(data_file.path))
            except OSError:
                pass


def rewrite_task(store: ObjectStore, source: ManifestFile, task: CompactionTask) -> RewriteResult:
    """Execute ``task`` against the manifest of its read version (see module docstring)."""
    manifest = source.manifest
    pbs = _source_fragments(manifest, task)
    storage_version = resolve_storage_version(None, source)
    schema = LanceSchema.from_fields(list(manifest.fields), dict(manifest.schema_metadata))
    carried = _Carried(store) if has_stable_row_ids(manifest) else None
    new = write_data_files(
        store,
        _live_batches(store, schema, list(zip(task.fragments, pbs)), carried),
        schema,
        max_rows_per_file=task.options.target_rows_per_fragment,
        max_bytes_per_file=task.options.max_bytes_per_file,
    )
    try:
        live, rows = sum(f.num_rows for f in task.fragments), sum(f.physical_rows for f in new)
        if live != rows:  # a deletion file whose row count disagrees with its content
            raise CorruptFileError("compaction", f"fragments {[f.id for f in task.fragments]} claim {live} "
                                   f"live rows but {rows} were read")
        written = {file_version(f) for fragment in new for f in fragment.files}
        if written - {storage_version}:
            raise UnsupportedFeatureError(
                f"compaction wrote data files of version {sorted(written)} into a {storage_version} dataset"
            )
        if carried is not None:
            new = carried.attach(new)
    except BaseException:
        delete_written(store, new)
        raise
    metrics = CompactionMetrics(
        fragments_removed=len(task.fragments),
        fragments_added=len(new),
        files_removed=sum(len(f.files) + (f.deletion_file is not None) for f in task.fragments),
        files_added=sum(len(f.files) for f in new),
        rows=sum(f.physical_rows for f in new),
        bytes=sum(d.file_size_bytes or 0 for f in new for d in f.files),
    )
    return RewriteResult(task.read_version, tuple(task.fragments), tuple(new), metrics)
