"""Committing rewrite results: ONE Rewrite at the plan's version, ONE new version.

The new fragments go into the Rewrite with id 0 and get their ids when the
Rewrite is applied to the latest version (above its ``max_fragment_id``, as
Lance's ``handle_rewrite_fragments`` does), so no ``ReserveFragments``
version comes first. That matters for cleanup: a reservation version is as
young as the compaction and references every pre-compaction file, so an
``older_than`` cleanup right after a compaction kept them all, and it takes
one of the ``retain_versions`` slots without being a version worth keeping.

No id is needed before the commit, in this process or on Spark executors:
data file names are random, new fragments have no deletion file, and the
row-id sequences they carry (stable row ids) hold row ids, not addresses.
Ids are reserved before the commit (one ``ReserveFragments`` version, as
pylance 14 does) only when an index covering rewritten fragments must be
remapped: its new row addresses name the new fragments.

The Rewrite is committed with the **plan's read_version**, never the latest:
the commit protocol then checks every version committed since the plan, so a
delete that landed in between makes the commit fail as a retryable conflict
instead of silently resurrecting the deleted rows. Everything that can be
checked is checked before the commit, so bad input leaves the dataset
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
from airflow_lance.core.conflicts import INCOMPATIBLE, RETRY, check
from airflow_lance.core.errors import CommitConflictError, InvalidInputError, VersionNotFoundError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.history import History
from airflow_lance.core.indices import remap, vector_remap
from airflow_lance.core.indices.metadata import fragment_bitmap, index_uuid, parse_section
from airflow_lance.core.manifest import (
    ManifestFile,
    data_storage_version,
    next_fragment_id,
    read_latest_manifest,
    read_manifest,
)
from airflow_lance.core.optimize.results import CompactionMetrics, RewriteResult
from airflow_lance.core.optimize.source import has_stable_row_ids
from airflow_lance.core.optimize.task import delete_written, same_fragment
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.transaction import LanceOperation, Transaction, read_transaction_file

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


def _changed(by_id: Mapping[int, table_pb2.DataFragment], result: RewriteResult) -> FragmentMetadata | None:
    """The first old fragment of ``result`` that is not among ``by_id`` (a manifest's fragments by id)
    exactly as the result saw it."""
    for old in result.old_fragments:
        pb = by_id.get(old.id)
        if pb is None or not same_fragment(FragmentMetadata.from_pb(pb), old):
            return old
    return None


def _check_old(manifest: table_pb2.Manifest, results: Sequence[RewriteResult], error: type[Exception]) -> None:
    """Every old fragment is in ``manifest`` exactly as the result saw it; else raise ``error``."""
    by_id = {f.id: f for f in manifest.fragments}
    for result in results:
        old = _changed(by_id, result)
        if old is not None:
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


def _already_committed(latest: table_pb2.Manifest, results: Sequence[RewriteResult]) -> list[bool]:
    """Whether each result is already part of the latest version (a retried commit).

    Its new data files are all there; a result that wrote nothing (every row was
    deleted) counts as committed once none of its old fragments is left.
    """
    ids = {f.id for f in latest.fragments}
    present = {f.path for fragment in latest.fragments for f in fragment.files}
    return [not {f.id for f in result.old_fragments} & ids if not result.new_fragments
            else all(f.path in present for fragment in result.new_fragments for f in fragment.files)
            for result in results]


def _metrics(results: Sequence[RewriteResult], version: int, created: int) -> CompactionMetrics:
    total = CompactionMetrics()
    for result in results:
        total += result.metrics
    total.version, total.versions_created = version, created
    return total


def _landed_version(store: ObjectStore, latest: int, results: Sequence[RewriteResult]) -> int:
    """The version whose Rewrite committed ``results`` before (0 if it cannot be found any more)."""
    read_version = results[0].read_version
    paths = {f.path for r in results for fragment in r.new_fragments for f in fragment.files}
    old_ids = {f.id for r in results for f in r.old_fragments}
    for version in range(latest, read_version, -1):
        try:
            name = read_manifest(store, version).manifest.transaction_file
        except VersionNotFoundError:
            return 0  # cleaned up, and so is every older version
        try:
            txn = read_transaction_file(store, name) if name else None
        except FileNotFoundError:
            continue
        op = txn.operation if txn is not None else None
        if txn is None or txn.read_version != read_version or not isinstance(op, LanceOperation.Rewrite):
            continue
        written = {f.path for g in op.groups for fragment in g.new_fragments for f in fragment.files}
        replaced = {f.id for g in op.groups for f in g.old_fragments}
        if (paths and paths <= written) or (not paths and old_ids <= replaced):
            return version
    return 0


def _already_landed(store: ObjectStore, latest: ManifestFile, results: Sequence[RewriteResult]) -> CompactionMetrics:
    landed = _landed_version(store, latest.version, results)
    log.info("compaction of version %d is already committed (version %d)", results[0].read_version, landed)
    return _metrics(results, landed, 0)


def _source(store: ObjectStore, read_version: int) -> ManifestFile:
    try:
        return read_manifest(store, read_version)
    except VersionNotFoundError as exc:
        raise CommitConflictError(f"version {read_version} the compaction read was cleaned up; re-plan") from exc


def _holds_stale_rows(store: ObjectStore, index: table_pb2.IndexMetadata, touched: set[int],
                      held: dict[str, frozenset[int]]) -> bool:
    """Whether the IVF index ``index`` holds rows of ``touched`` fragments its bitmap does not name
    (``held``: the fragments each index holds rows of, by uuid, filled as indices are read)."""
    outside = touched - set(fragment_bitmap(index))
    if not outside:
        return False
    if index_uuid(index) not in held:
        held[index_uuid(index)] = vector_remap.fragments_held(store, index)
    return bool(outside & held[index_uuid(index)])


def _indices_to_remap(store: ObjectStore, source: ManifestFile, latest: ManifestFile,
                      results: Sequence[RewriteResult], stable: bool, held: dict[str, frozenset[int]]
                      ) -> list[table_pb2.IndexMetadata]:
    """Indices covering a rewritten fragment whose row addresses must be remapped, and IVF indices
    (row addresses) holding stale rows of one outside their bitmap: the remap drops those rows
    (:meth:`.remap.AddressMap.covering`). Left alone, they would be rows of a removed fragment the
    bitmap lacks, which pylance does not mask: its searches would return fewer than k rows."""
    touched = {f.id for r in results for f in r.old_fragments}

    def coverage(index: table_pb2.IndexMetadata) -> frozenset[int] | None:
        return frozenset(fragment_bitmap(index)) & touched if index.fragment_bitmap else None

    planned = {(index_uuid(i), coverage(i)) for i in parse_section(source)}
    out = []
    for index in parse_section(latest):
        covered = fragment_bitmap(index) if index.fragment_bitmap else None
        if covered is not None and not touched & set(covered):
            if not stable and vector_remap.can_remap(index) and _holds_stale_rows(store, index, touched, held):
                out.append(index)
            continue
        for result in results if remap.needs_remap(index, stable) else ():
            inside = {f.id in covered for f in result.old_fragments} if covered is not None else {True}
            if len(inside) > 1 and (index_uuid(index), coverage(index)) in planned:  # Lance refuses this too
                raise InvalidInputError(
                    f"a rewrite group mixes fragments index {index.name!r} covers and fragments it does not"
                )
            if len(inside) > 1:  # the index was built or extended after the plan (as Lance: retryable)
                raise CommitConflictError(
                    f"index {index.name!r} now covers part of a rewrite group (built or optimised after the "
                    "compaction was planned); re-plan the compaction"
                )
        if not remap.can_remap(index, stable):
            raise CommitConflictError(
                f"index {index.name!r} ({index.index_details.type_url}) covering rewritten fragments cannot be "
                "remapped (it was created after the compaction was planned?); re-plan the compaction"
            )
        if remap.needs_remap(index, stable):
            out.append(index)
    return out


def _remap(store: ObjectStore, latest: ManifestFile, results: Sequence[RewriteResult],
           indices: Sequence[table_pb2.IndexMetadata]
           ) -> tuple[ManifestFile, list[LanceOperation.RewriteGroup], list[LanceOperation.RewrittenIndex]]:
    """As pylance 14: reserve ids for the new fragments (one ``ReserveFragments`` version), then write
    every index with its row addresses remapped to them; returns the reservation's manifest, the
    groups with the reserved ids and the ``rewritten_indices``."""
    count = sum(len(r.new_fragments) for r in results)
    groups: list[LanceOperation.RewriteGroup] = []
    next_id = 0
    if count:
        reserved = commit_transaction(
            store, Transaction(latest.version, LanceOperation.ReserveFragments(count)), latest_known=latest
        )
        next_id = next_fragment_id(reserved.manifest) - count
        latest = reserved
    for result in results:
        new = []
        for fragment in result.new_fragments:
            new.append(dataclasses.replace(fragment, id=next_id))
            next_id += 1
        groups.append(LanceOperation.RewriteGroup(list(result.old_fragments), new))
    mapping = remap.AddressMap.build(store, [(g.old_fragments, g.new_fragments) for g in groups])
    version = data_storage_version(latest.manifest)
    rewritten = []
    for index in indices:
        new_uuid, files = remap.remap_index(store, index, mapping, version)
        rewritten.append(LanceOperation.RewrittenIndex(
            index_uuid(index), new_uuid, index.index_details.type_url, index.index_details.value,
            index.index_version, files))
    log.info("compaction remapped %d indices: %s", len(rewritten), ", ".join(i.name for i in indices))
    return latest, groups, rewritten


def _discard_indices(store: ObjectStore, rewritten: Sequence[LanceOperation.RewrittenIndex]) -> None:
    """Delete remapped index files no version references (their Rewrite did not land)."""
    for index in rewritten:
        for item in index.new_index_files:
            try:
                store.delete(f"{layout.index_dir(index.new_id)}/{item.path}")
            except FileNotFoundError:
                pass


@dataclasses.dataclass
class _Onto:
    """The latest version a commit attempt builds on, with what every task's check reads from it."""

    store: ObjectStore
    latest: ManifestFile
    history: History
    fragments: dict[int, table_pb2.DataFragment]
    live_indices: frozenset[str]
    held: dict[str, frozenset[int]]  # see _holds_stale_rows

    @classmethod
    def read(cls, store: ObjectStore, latest: ManifestFile, held: dict[str, frozenset[int]]) -> _Onto:
        return cls(store, latest, History(store, latest), {f.id: f for f in latest.manifest.fragments},
                   frozenset(index_uuid(index) for index in parse_section(latest)), held)


def _conflicting(onto: _Onto, source: ManifestFile, result: RewriteResult, stable: bool) -> str | None:
    """Why ``result`` alone cannot be committed onto ``onto.latest`` (None: it can): the conflict rules
    for a Rewrite of its group against every version committed since the plan, and the index checks."""
    latest = onto.latest
    old = _changed(onto.fragments, result)
    if old is not None:
        return f"fragment {old.id} changed since version {result.read_version}"
    try:
        remapped = _indices_to_remap(onto.store, source, latest, [result], stable, onto.held)
    except CommitConflictError as exc:
        return str(exc)
    rewrite = LanceOperation.Rewrite(
        [LanceOperation.RewriteGroup(list(result.old_fragments), list(result.new_fragments))],
        [LanceOperation.RewrittenIndex(index_uuid(index), "", "", b"", 0) for index in remapped],
    )
    mine = Transaction(result.read_version, rewrite)
    for version in range(result.read_version + 1, latest.version + 1):
        theirs = onto.history.concurrent_transaction(version, result.read_version)
        if check(mine, theirs, stable_row_ids=stable, live_indices=onto.live_indices) in (RETRY, INCOMPATIBLE):
            return f"the {theirs.kind} committed as version {version} conflicts with it"
    return None


#: Commit attempts of ``skip_conflicting``: each one leaves out the results a newer commit conflicts with.
MAX_SKIPPING_ATTEMPTS = 20


def commit_compaction(
    store: ObjectStore, rewrites: Sequence[RewriteResult | Mapping[str, Any] | str], *, skip_conflicting: bool = False
) -> CompactionMetrics:
    """Commit finished tasks as one Rewrite (one new version); return the summed metrics.

    The metrics' ``version`` is the version holding the Rewrite and ``versions_created``
    is 1, or 0 when the results were already committed (a retried commit: nothing is
    committed twice, ``version`` then names the version that has them, 0 if it was
    cleaned up). Raises InvalidInputError for inconsistent results (nothing committed)
    and CommitConflictError when the dataset changed under the plan (for example a
    concurrent delete of a rewritten fragment): re-plan and run again.

    With ``skip_conflicting``, the results a concurrent commit conflicts with are left out and
    the others committed (each task is a group of its own in the Rewrite, so any subset is a
    valid compaction); their files are deleted and ``metrics.tasks_skipped_conflict`` counts
    them. A commit landing while this one is being written starts another attempt without the
    results it conflicts with. CommitConflictError only when every result conflicts.
    """
    results = [as_rewrite_result(item) for item in rewrites]
    if not results:
        return CompactionMetrics()
    read_version = _check_shapes(results)
    source = _source(store, read_version)
    _check_old(source.manifest, results, InvalidInputError)
    stable = has_stable_row_ids(source.manifest)
    held: dict[str, frozenset[int]] = {}  # fragments each IVF index holds rows of, by uuid
    skipped: set[int] = set()  # positions in ``results``
    reservations = 0  # ReserveFragments versions committed by the attempts
    lost: tuple[int, frozenset[str]] | None = None  # (tasks, indices remapped) of the attempt that lost the race
    for attempt in range(1, MAX_SKIPPING_ATTEMPTS + 1):
        latest = read_latest_manifest(store)
        committed_before = _already_committed(latest.manifest, results)
        pending = [r for n, r in enumerate(results) if n not in skipped and not committed_before[n]]
        if not pending and not skipped:
            return _already_landed(store, latest, results)
        if skip_conflicting:
            kept = []
            onto = _Onto.read(store, latest, held)
            for result in pending:
                reason = _conflicting(onto, source, result, stable)
                if reason is None:
                    kept.append(result)
                    continue
                log.warning("compaction leaves out the task over fragments %s: %s",
                            [f.id for f in result.old_fragments], reason)
                skipped.add(next(n for n, r in enumerate(results) if r is result))
                delete_written(store, result.new_fragments)
            pending = kept
            if not pending and len(skipped) < len(results):  # a retried commit: the others landed before
                metrics = _already_landed(store, latest, [r for n, r in enumerate(results) if n not in skipped])
                metrics.tasks_skipped_conflict = len(skipped)
                return metrics
            if not pending:
                raise CommitConflictError(
                    f"every task of the compaction of version {read_version} conflicts with commits since "
                    f"(latest version {latest.version}); re-plan the compaction"
                )
        _check_old(latest.manifest, pending, CommitConflictError)
        _check_new_files(store, pending, stable)
        to_remap = _indices_to_remap(store, source, latest, pending, stable, held)
        attempt_shape = (len(pending), frozenset(index_uuid(index) for index in to_remap))
        if attempt_shape == lost:  # the same commit again: the conflict is not one we resolve
            raise CommitConflictError(
                f"the compaction of version {read_version} lost the commit race, and what landed instead "
                "neither conflicts with one of its tasks nor adds an index to remap; re-plan the compaction"
            )
        rewritten: list[LanceOperation.RewrittenIndex] = []
        if to_remap:
            reserved, groups, rewritten = _remap(store, latest, pending, to_remap)
            reservations += int(reserved.version != latest.version)
            latest = reserved
        else:
            # New fragments keep id 0: the commit gives them ids above the latest max_fragment_id.
            groups = [LanceOperation.RewriteGroup(list(r.old_fragments), list(r.new_fragments)) for r in pending]
        try:
            committed = commit_transaction(
                store, Transaction(read_version, LanceOperation.Rewrite(groups, rewritten)), latest_known=latest
            )
        except CommitConflictError:
            _discard_indices(store, rewritten)
            if not skip_conflicting or attempt == MAX_SKIPPING_ATTEMPTS:
                raise
            log.info("a commit landed during the compaction's commit (attempt %d); leaving out what it "
                     "conflicts with", attempt)
            lost = attempt_shape
            continue
        log.info(
            "compaction committed as version %d: %d fragments -> %d",
            committed.version,
            sum(len(r.old_fragments) for r in pending),
            sum(len(r.new_fragments) for r in pending),
        )
        metrics = _metrics([r for n, r in enumerate(results) if n not in skipped], committed.version,
                           1 + reservations)
        metrics.tasks_skipped_conflict = len(skipped)
        return metrics
    raise AssertionError("unreachable")  # the last attempt returns or raises
