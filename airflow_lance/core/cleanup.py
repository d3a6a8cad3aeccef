"""``cleanup_old_versions``: remove old versions and the files only they reference (format notes 11.1).

A version is kept (with every file it references: data, deletion, transaction
and index files) when it is the handle's version or newer, when it is not old
by the policy (``older_than`` and/or ``retain_versions``), or when a tag (or a
branch) points at it. Everything else is *old*:

* old manifests are removed, oldest first, before any other file;
* files referenced only by old manifests are *verified* garbage and removed;
* files no manifest references (failed or in-flight writes, temporary files,
  the ``_airflow_staging/`` scratch space of Spark jobs) are *unverified*:
  removed only when at least 7 days old (or ``delete_unverified=True``) **and**
  older than the oldest retained manifest, so a write in progress is never
  touched.

Files in other base paths (a shallow clone's source, ``target_bases`` of a
multi-base dataset) belong to those bases and are never removed, as in pylance,
also when such a base lies inside the dataset's root.

Cost: one listing of each managed directory and one read of each manifest.
Nothing is deleted until every manifest has been read and checked, so an
error (corrupt manifest, unsupported feature, tagged old version) leaves the
dataset unchanged. ``dry_run=True`` deletes nothing and returns exactly the
files a real run would delete.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import time
import uuid as uuid_lib
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from google.protobuf.message import DecodeError

from airflow_lance.core import bases, feature_flags, layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.dataset import LanceDataset
from airflow_lance.core.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    InvalidInputError,
    LanceError,
)
from airflow_lance.core.manifest import latest_version, read_manifest
from airflow_lance.core.manifest_view import read_view
from airflow_lance.core.storage import FileInfo, ObjectStore, open_store
from airflow_lance.core.storage.local import LocalStore
from airflow_lance.core.tags import Tags

log = logging.getLogger(__name__)

#: Unreferenced files younger than this may belong to a write in progress (Lance's value).
UNVERIFIED_THRESHOLD = dt.timedelta(days=7)
DEFAULT_OLDER_THAN = dt.timedelta(days=14)
_READ_THREADS = 8
_ROW_SEQUENCE_FILES = ("external_row_ids", "last_updated_at_version_file", "created_at_version_file")


class TaggedVersionsError(InvalidInputError):
    """Cleanup would remove tagged versions and ``error_if_tagged_old_versions`` is set."""


@dataclasses.dataclass
class CleanupStats:
    """What cleanup removed (or, in a dry run, would remove); pylance's fields plus ours.

    ``files`` lists the removed paths relative to the dataset root, manifests
    first; ``files_removed`` is their number (manifests and temporary files
    included).
    """

    bytes_removed: int = 0
    old_versions: int = 0
    data_files_removed: int = 0
    transaction_files_removed: int = 0
    index_files_removed: int = 0
    deletion_files_removed: int = 0
    files_removed: int = 0
    failed_deletes: int = 0
    dry_run: bool = False
    files: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Version:
    """One committed manifest: its file, and what it references (fragments as raw bytes)."""

    info: FileInfo
    version: int
    timestamp_s: float
    fragments: set[bytes]
    files: set[str]  # transaction file
    index_uuids: set[str]
    writer_feature_flags: int = 0


@dataclasses.dataclass(frozen=True)
class _Candidate:
    path: str
    size: int
    kind: str  # manifest | data | deletion | transaction | index | temp | staging


_COUNTERS = {
    "manifest": "old_versions",
    "data": "data_files_removed",
    "deletion": "deletion_files_removed",
    "transaction": "transaction_files_removed",
    "index": "index_files_removed",
}


def _fragment_files(blob: bytes, where: str) -> list[str]:
    """Paths (relative to the root) one serialized fragment references in this dataset's root."""
    fragment = table_pb2.DataFragment.FromString(blob)
    files = [layout.DATA_DIR + "/" + f.path for f in fragment.files if not f.HasField("base_id")]
    if fragment.HasField("deletion_file") and not fragment.deletion_file.HasField("base_id"):
        deletion = fragment.deletion_file
        if deletion.file_type not in layout.DELETION_SUFFIXES:
            raise CorruptFileError(where, f"unknown deletion file type {deletion.file_type}")
        files.append(layout.deletion_file_path(fragment.id, deletion.read_version, deletion.id, deletion.file_type))
    files.extend(getattr(fragment, name).path for name in _ROW_SEQUENCE_FILES if fragment.HasField(name))
    return files


def _expand(fragments: set[bytes], cache: dict[bytes, list[str]], where: str) -> set[str]:
    """Files of a set of distinct fragments, decoding each fragment once per cleanup."""
    files: set[str] = set()
    for blob in fragments:
        found = cache.get(blob)
        if found is None:
            try:
                found = cache[blob] = _fragment_files(blob, where)
            except DecodeError as exc:
                raise CorruptFileError(where, f"fragment does not decode: {exc}") from exc
        files.update(found)
    return files


def _index_uuids(index_section: bytes | None, where: str) -> set[str]:
    if not index_section:
        return set()
    section = table_pb2.IndexSection()
    try:
        section.ParseFromString(index_section)
    except DecodeError as exc:
        raise CorruptFileError(where, f"index section does not decode: {exc}") from exc
    return {str(uuid_lib.UUID(bytes=index.uuid.uuid)) for index in section.indices if index.uuid.uuid}


def _read_versions(store: ObjectStore, listed: list[FileInfo], read_version: int) -> list[_Version]:
    """Read every committed manifest once; skip old ones a concurrent cleanup removed."""
    named = []
    for info in listed:
        parsed = layout.parse_manifest_name(info.path.rsplit("/", 1)[-1])
        if parsed is not None:
            named.append((info, parsed[0]))

    def fetch(item: tuple[FileInfo, int]) -> bytes | None:
        info, version = item
        try:
            return store.read(info.path)
        except FileNotFoundError:
            if version < read_version:
                return None
            raise

    if isinstance(store, LocalStore) or len(named) < 2:  # local reads are cheaper than threads
        blobs = [fetch(item) for item in named]
    else:  # object stores: overlap the round trips
        with ThreadPoolExecutor(_READ_THREADS) as pool:
            blobs = list(pool.map(fetch, named))
    versions = []
    for (info, version), data in zip(named, blobs):
        if data is None:
            continue
        view = read_view(data, info.path)
        if view.version != version:
            raise CorruptFileError(info.path, f"manifest of version {view.version} under the name of {version}")
        flags = table_pb2.Manifest(
            version=version,
            reader_feature_flags=view.reader_feature_flags,
            writer_feature_flags=view.writer_feature_flags,
        )
        feature_flags.check_readable(flags, store.uri)
        feature_flags.check_writable(flags, store.uri)
        files = {layout.transaction_file_path(view.transaction_file)} if view.transaction_file else set()
        uuids = _index_uuids(view.index_section, info.path)
        versions.append(_Version(info, version, view.timestamp_s, set(view.fragments), files, uuids,
                                 view.writer_feature_flags))
    return versions


def _tagged_versions(store: ObjectStore) -> set[int]:
    return {int(tag["version"]) for tag in Tags(store).list().values()}


def _branch_versions(store: ObjectStore) -> set[int]:
    """Versions branches were created from: a branch reads their files, so they stay."""
    protected: set[int] = set()
    for name in store.list_names(layout.BRANCHES_DIR):
        if not name.endswith(".json"):
            continue
        path = f"{layout.BRANCHES_DIR}/{name}"
        try:
            content = json.loads(store.read(path))
            if content.get("parentVersion") is not None:
                protected.add(int(content["parentVersion"]))
        except (ValueError, TypeError, AttributeError) as exc:
            raise CorruptFileError(path, f"malformed branch file: {exc!r}") from exc
    return protected


def _check_policy(older_than: dt.timedelta | None, retain_versions: int | None) -> None:
    if older_than is not None and (not isinstance(older_than, dt.timedelta) or older_than < dt.timedelta(0)):
        raise InvalidInputError(f"older_than must be a non-negative timedelta, not {older_than!r}")
    if retain_versions is not None and (
        isinstance(retain_versions, bool) or not isinstance(retain_versions, int) or retain_versions <= 0
    ):
        raise InvalidInputError(f"retain_versions must be a positive integer, not {retain_versions!r}")


def _is_old(version: _Version, read_version: int, cutoff_s: float | None, retain_versions: int | None) -> bool:
    """Old by the policy (both limits apply when both are given, as in Lance)."""
    old = True
    if cutoff_s is not None:
        old &= version.timestamp_s < cutoff_s
    if retain_versions is not None:
        old &= version.version < read_version - retain_versions + 1
    return old


def _sidecar_owner(path: str) -> str | None:
    """The data file a blob sidecar belongs to: pylance 14 stores a data file's packed and dedicated
    blob v2 payloads as ``data/{stem}/{id}.blob`` next to ``data/{stem}.lance``."""
    if not path.startswith(layout.DATA_DIR + "/") or not path.endswith(layout.BLOB_SIDECAR_SUFFIX):
        return None
    directory = path.rsplit("/", 1)[0]
    return directory + ".lance" if directory != layout.DATA_DIR else None


class _Classifier:
    """Decides the fate of each listed file from the references of kept and old versions."""

    def __init__(self, kept: Iterable[_Version], old: Iterable[_Version], unverified_before_s: float) -> None:
        self.cache: dict[bytes, list[str]] = {}
        self.referenced, self.referenced_uuids = self.references(kept)
        self.verified, self.verified_uuids = self.references(old)
        self.unverified_before_s = unverified_before_s

    def references(self, versions: Iterable[_Version]) -> tuple[set[str], set[str]]:
        """Files and index uuids the given versions reference (shared fragments decoded once)."""
        fragments: set[bytes] = set()
        files: set[str] = set()
        uuids: set[str] = set()
        for version in versions:
            fragments |= version.fragments
            files |= version.files
            uuids |= version.index_uuids
        return files | _expand(fragments, self.cache, "manifest fragments"), uuids

    def _unverified(self, info: FileInfo, kind: str) -> _Candidate | None:
        return _Candidate(info.path, info.size, kind) if info.mtime < self.unverified_before_s else None

    def classify(self, info: FileInfo) -> _Candidate | None:
        top, _, rest = info.path.partition("/")
        name = info.path.rsplit("/", 1)[-1]
        if top == layout.STAGING_DIR:
            return self._unverified(info, "staging")
        if top == layout.INDICES_DIR:
            index_uuid = rest.split("/", 1)[0]
            if "/" not in rest or index_uuid in self.referenced_uuids:
                return None
            if index_uuid in self.verified_uuids:
                return _Candidate(info.path, info.size, "index")
            return self._unverified(info, "index")
        if layout.is_temp_file_name(name):
            return self._unverified(info, "temp")
        owner = _sidecar_owner(info.path)
        if owner is not None:  # a blob v2 sidecar goes with its data file
            if owner in self.referenced or info.path in self.referenced:
                return None
            if owner in self.verified:
                return _Candidate(info.path, info.size, "data")
            return self._unverified(info, "data")
        kind = {
            (layout.DATA_DIR, ".lance"): "data",
            (layout.DELETIONS_DIR, ".arrow"): "deletion",
            (layout.DELETIONS_DIR, ".bin"): "deletion",
            (layout.TRANSACTIONS_DIR, ".txn"): "transaction",
        }.get((top, os.path.splitext(name)[1]))
        if kind is None or "/" in rest or info.path in self.referenced:
            return None  # not a file kind cleanup owns (or in a subdirectory): never touched
        if info.path in self.verified:
            return _Candidate(info.path, info.size, kind)
        return self._unverified(info, kind)


def _delete(store: ObjectStore, candidates: list[_Candidate], stats: CleanupStats) -> set[str]:
    """Delete ``candidates``; count what went; return the paths that could not be deleted."""
    failed: set[str] = set()
    for candidate in candidates:
        if not stats.dry_run:
            try:
                store.delete(candidate.path)
            except (LanceError, OSError) as exc:
                log.warning("cleanup could not delete %s: %s", candidate.path, exc)
                stats.failed_deletes += 1
                failed.add(candidate.path)
                continue
        stats.files.append(candidate.path)
        stats.files_removed += 1
        stats.bytes_removed += candidate.size
        counter = _COUNTERS.get(candidate.kind)
        if counter:
            setattr(stats, counter, getattr(stats, counter) + 1)
    return failed


def _prune_empty_dirs(store: ObjectStore, removed: list[str]) -> None:
    """On local disk, remove the ``_indices/{uuid}/``, ``_airflow_staging/...`` and blob sidecar
    (``data/{stem}/``) directories cleanup emptied."""
    if not isinstance(store, LocalStore):
        return  # object stores have no directories
    owned = (layout.INDICES_DIR + "/", layout.STAGING_DIR + "/")
    parents = {os.path.dirname(p) for p in removed if p.startswith(owned) or _sidecar_owner(p) is not None}
    for parent in sorted(parents, key=len, reverse=True):
        while parent not in ("", layout.INDICES_DIR, layout.STAGING_DIR, layout.DATA_DIR):
            try:
                os.rmdir(os.path.join(store.root, parent))
            except OSError:  # not empty (or gone): leave it
                break
            parent = os.path.dirname(parent)


def _outside_other_bases(store: ObjectStore, versions: list[_Version], candidates: list[_Candidate]
                         ) -> list[_Candidate]:
    """``candidates`` without the files below another base path of the dataset that lies inside its
    root: those belong to the base (pylance's ``initial_bases``/``add_bases``), not to this cleanup."""
    with_bases = [v for v in versions if v.writer_feature_flags & feature_flags.BASE_PATHS]
    if not with_bases:
        return candidates
    read_manifest(store, max(v.version for v in with_bases))  # registers the bases with the store
    prefixes = tuple(bases.foreign_prefixes(store))
    if not prefixes:
        return candidates
    log.warning("%s: base paths inside the dataset (%s): files below them are never cleaned up",
                store.uri, ", ".join(prefixes))
    return [c for c in candidates if not c.path.startswith(prefixes)]


def cleanup_old_versions(
    dataset_or_uri: LanceDataset | str | os.PathLike[str],
    *,
    older_than: dt.timedelta | None = None,
    retain_versions: int | None = None,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    dry_run: bool = False,
    storage_options: Mapping[str, str] | None = None,
) -> CleanupStats:
    """Remove old versions and the files only they reference (see the module docstring).

    ``older_than`` defaults to 14 days when neither it nor ``retain_versions``
    is given (pylance's rule); with both, a version must be old by both to go.
    Raises TaggedVersionsError (nothing deleted) when a tagged version is old
    and ``error_if_tagged_old_versions`` is set; tagged versions are otherwise
    kept silently.
    """
    _check_policy(older_than, retain_versions)
    if older_than is None and retain_versions is None:
        older_than = DEFAULT_OLDER_THAN
    if isinstance(dataset_or_uri, LanceDataset):
        store, handle_version = dataset_or_uri.store, dataset_or_uri.version
    else:
        store, handle_version = open_store(dataset_or_uri, storage_options), None
    now_s = time.time()
    if store.external_manifests is not None:
        latest_version(store)  # the table may hold a commit whose manifest is not moved in place yet: finish it
    listed = store.list(layout.VERSIONS_DIR)
    committed = [layout.parse_manifest_name(i.path.rsplit("/", 1)[-1]) for i in listed]
    latest = max((c[0] for c in committed if c is not None), default=None)
    if latest is None:
        raise DatasetNotFoundError(f"no Lance dataset at {store.uri}")
    read_version = handle_version if handle_version is not None else latest
    tagged, branched = _tagged_versions(store), _branch_versions(store)
    versions = _read_versions(store, listed, read_version)

    cutoff_s = now_s - older_than.total_seconds() if older_than is not None else None
    kept, old, tagged_old = [], [], []
    for version in versions:
        is_old = version.version < read_version and _is_old(version, read_version, cutoff_s, retain_versions)
        if is_old and version.version in tagged:
            tagged_old.append(version.version)
        is_old &= version.version not in tagged | branched
        (old if is_old else kept).append(version)
    if tagged_old and error_if_tagged_old_versions:
        raise TaggedVersionsError(
            f"{len(tagged_old)} tagged version(s) would be removed by this cleanup: {sorted(tagged_old)}; "
            "delete their tags or pass error_if_tagged_old_versions=False"
        )

    earliest_kept_s = min((v.timestamp_s for v in kept), default=now_s)
    unverified_before_s = earliest_kept_s if delete_unverified else min(
        earliest_kept_s, now_s - UNVERIFIED_THRESHOLD.total_seconds()
    )
    classifier = _Classifier(kept, old, unverified_before_s)
    old.sort(key=lambda v: v.version)
    manifests = [_Candidate(v.info.path, v.info.size, "manifest") for v in old]
    others = [c for c in (classifier.classify(i) for i in listed) if c is not None]  # _versions/.tmp*
    for directory in (
        layout.TRANSACTIONS_DIR,
        layout.DELETIONS_DIR,
        layout.DATA_DIR,
        layout.INDICES_DIR,
        layout.STAGING_DIR,
    ):
        others.extend(c for c in (classifier.classify(i) for i in store.list(directory)) if c is not None)

    others = _outside_other_bases(store, versions, others)

    stats = CleanupStats(dry_run=dry_run)
    failed = _delete(store, manifests, stats)
    if failed:  # a version that stays visible keeps its files
        keep, keep_uuids = classifier.references([v for v in old if v.info.path in failed])
        others = [
            c for c in others
            if c.path not in keep and _sidecar_owner(c.path) not in keep
            and not (c.kind == "index" and c.path.split("/")[1] in keep_uuids)
        ]
    _delete(store, others, stats)
    if not dry_run:
        _prune_empty_dirs(store, stats.files)
    log.info(
        "cleanup of %s%s: %d old versions, %d files, %d bytes",
        store.uri,
        " (dry run)" if dry_run else "",
        stats.old_versions,
        stats.files_removed,
        stats.bytes_removed,
    )
    return stats
