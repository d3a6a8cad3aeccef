"""Committing rewrite results: reserve fragment ids, then ONE Rewrite at the plan's version.

The Rewrite is committed with the **plan's read_version**, never the latest:
the commit protocol then checks every version committed since the plan, so a
delete that landed in between makes the commit fail as a retryable conflict
instead of silently resurrecting the deleted rows. Everything that can be
checked is checked before the first commit, so bad input leaves the dataset
unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_lance.core import layout, rowids
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.commit import commit_transaction
from airflow_lance.core.errors import CommitConflictError, InvalidInputError, VersionNotFoundError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.manifest import ManifestFile, read_latest_manifest, read_manifest
from airflow_lance.core.optimize.results import CompactionMetrics, RewriteResult
from airflow_lance.core.optimize.source import has_stable_row_ids
from airflow_lance.core.optimize.task import same_fragment
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.transaction import LanceOperation, Transaction

log = logging.getLogger(__name__)


def as_rewrite_result(item: RewriteResult | Mapping[str, Any] | str) -> RewriteResult:
    """A RewriteResult, or one decoded from its JSON form."""
    if isinstance(item, RewriteResult):
        return item
    if isinstance(item, (Mapping, str)):
        return RewriteResult.from_json(item)
    raise InvalidInputError(f"expected a RewriteResult, not {type(item).__name__}")


def _check_shapes(results: Sequence[RewriteResult]) -> int:
    """Self-consistency of the results; returns their common read version."""
    versions = {r.read_version for r in results}
    if len(versions) != 1:
        raise InvalidInputError(f"rewrite results come from different plans (read versions {sorted(versions)})")
    seen: set[int] = set()
    for result in results:
        old_ids = [f.id for f in result.old_fragments]
        if not old_ids:
            raise InvalidInputError("a rewrite result replaces no fragment")
        if seen & set(old_ids) or len(set(old_ids)) != len(old_ids):
            raise InvalidInputError(f"fragments {sorted(seen & set(old_ids)) or old_ids} are rewritten twice")
        seen.update(old_ids)
        for new in result.new_fragments:
            if new.id != 0 or new.deletion_file is not None or not new.files:
                raise InvalidInputError("new fragments must have data files, no deletion file and id 0")
        live = sum(f.num_rows for f in result.old_fragments)
        written = sum(f.physical_rows for f in result.new_fragments)
        if live != written:
            raise InvalidInputError(f"a rewrite of {live} live rows wrote {written} rows")
    return versions.pop()


def _check_old(manifest: table_pb2.Manifest, results: Sequence[RewriteResult], error: type[Exception]) -> None:
    """Every old fragment is in ``manifest`` exactly as the result saw it; else raise ``error``."""
    by_id = {f.id: f for f in manifest.fragments}
    for result in results:
        for old in result.old_fragments:
            pb = by_id.get(old.id)
            if pb is None or not same_fragment(FragmentMetadata.from_pb(pb), old):
                raise error(
                    f"fragment {old.id} is not as the compaction read it (version {manifest.version}); "
                    "re-plan the compaction"
                )


def _check_new_files(store: ObjectStore, results: Sequence[RewriteResult], stable: bool) -> None:
    """New data files exist with their recorded sizes; row ids present where required."""
    for result in results:
        for fragment in result.new_fragments:
            for data_file in fragment.files:
                path = layout.data_file_path(data_file.path)
                try:
                    size = store.size(path)
                except FileNotFoundError:
                    raise InvalidInputError(f"new data file {path} does not exist") from None
                if data_file.file_size_bytes and size != data_file.file_size_bytes:
                    raise InvalidInputError(f"new data file {path} has {size} bytes, not {data_file.file_size_bytes}")
            if stable:
                pb = fragment.to_pb()
                data = rowids.sequence_bytes(store, pb, rowids.ROW_ID_FIELDS)
                if data is None or rowids.decode_row_ids(data).size != fragment.physical_rows:
                    raise InvalidInputError("new fragments of a dataset with stable row ids must carry their row ids")


def _already_committed(latest: table_pb2.Manifest, result: RewriteResult) -> bool:
    """Whether ``result`` is already part of the latest version (a retried commit).

    Its new data files are all there; a result that wrote nothing (every row was
    deleted) counts as committed once none of its old fragments is left.
    """
    if not result.new_fragments:
        return not {f.id for f in result.old_fragments} & {f.id for f in latest.fragments}
    present = {f.path for fragment in latest.fragments for f in fragment.files}
    return all(f.path in present for fragment in result.new_fragments for f in fragment.files)


def _metrics(results: Sequence[RewriteResult]) -> CompactionMetrics:
    total = CompactionMetrics()
    for result in results:
        total += result.metrics
    return total


def _source(store: ObjectStore, read_version: int) -> ManifestFile:
    try:
        return read_manifest(store, read_version)
    except VersionNotFoundError as exc:
        raise CommitConflictError(f"version {read_version} the compaction read was cleaned up; re-plan") from exc


def commit_compaction(
    store: ObjectStore, rewrites: Sequence[RewriteResult | Mapping[str, Any] | str]
) -> CompactionMetrics:
    """Commit finished tasks as one Rewrite; return the summed metrics.

    Raises InvalidInputError for inconsistent results (nothing committed) and
    CommitConflictError when the dataset changed under the plan (for example a
    concurrent delete of a rewritten fragment): re-plan and run again. Results
    whose files are already in the latest version (a retried commit) are not
    committed twice.
    """
    results = [as_rewrite_result(item) for item in rewrites]
    if not results:
        return CompactionMetrics()
    read_version = _check_shapes(results)
    source = _source(store, read_version)
    _check_old(source.manifest, results, InvalidInputError)
    latest = read_latest_manifest(store)
    pending = [r for r in results if not _already_committed(latest.manifest, r)]
    if not pending:
        log.info("compaction of version %d is already committed", read_version)
        return _metrics(results)
    _check_old(latest.manifest, pending, CommitConflictError)
    _check_new_files(store, pending, has_stable_row_ids(source.manifest))
    count = sum(len(r.new_fragments) for r in pending)
    groups = []
    next_id = 0
    if count:
        reserved = commit_transaction(store, Transaction(read_version, LanceOperation.ReserveFragments(count)))
        next_id = reserved.manifest.max_fragment_id - count + 1
    for result in pending:
        new = []
        for fragment in result.new_fragments:
            new.append(dataclasses.replace(fragment, id=next_id))
            next_id += 1
        groups.append(LanceOperation.RewriteGroup(list(result.old_fragments), new))
    committed = commit_transaction(store, Transaction(read_version, LanceOperation.Rewrite(groups)))
    log.info(
        "compaction committed as version %d: %d fragments -> %d",
        committed.version,
        sum(len(r.old_fragments) for r in pending),
        count,
    )
    return _metrics(results)
