"""Versions and transactions as a commit (or an idempotency look-back) reads them.

:class:`History` caches every manifest and transaction it reads, so a commit
reads each at most once however often it retries. :func:`find_landed_version`
is the one idempotency look-back of the project (the commit, ``LanceHook``
and the Kartothek importer use it): it searches the latest ``lookback``
versions for a transaction carrying an idempotency key, newest first.

Cleanup (:mod:`cleanup`) removes old manifests, and the transaction files only
they reference, oldest first; tagged versions may stay behind a gap. The
look-back therefore reads only the versions one listing of ``_versions/``
shows (on S3, GCS and Azure only the pages down to the oldest version of the
window), never asks for a manifest that cannot exist, and counts a version
whose manifest or transaction file vanished meanwhile as "not this key". A
commit that landed in a version since cleaned up cannot be recognised: the
result says so (``cleaned_up``), and the caller decides.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor

from airflow_lance.core import layout
from airflow_lance.core.errors import CommitConflictError, VersionNotFoundError
from airflow_lance.core.manifest import (
    ManifestFile,
    latest_version,
    list_versions,
    probe_newer,
    read_manifest,
)
from airflow_lance.core.storage import ObjectStore
from airflow_lance.core.storage.local import LocalStore
from airflow_lance.core.transaction import IDEMPOTENCY_KEY, Transaction, read_transaction_file

log = logging.getLogger(__name__)

#: How many of the latest versions a commit with an idempotency key searches for an earlier landing.
DEFAULT_IDEMPOTENCY_LOOKBACK = 100
#: Concurrent manifest/transaction reads of a look-back on object stores.
_READ_THREADS = 8


def listed_versions_from(
    store: ObjectStore, oldest: int, scheme: layout.ManifestNamingScheme
) -> dict[int, layout.ManifestNamingScheme]:
    """Committed versions >= ``oldest`` whose manifests one listing of ``_versions/`` shows.

    Stores with lexically ordered listings and V2 names list newest first: the
    listing stops at the first version below ``oldest`` (usually one page).
    """
    if not (store.lexically_ordered and scheme is layout.ManifestNamingScheme.V2):
        return {v: s for v, s in list_versions(store).items() if v >= oldest}
    found: dict[int, layout.ManifestNamingScheme] = {}
    for name in store.iter_sorted_names(layout.VERSIONS_DIR):
        parsed = layout.parse_manifest_name(name)
        if parsed is None:
            continue
        if parsed[0] < oldest:
            if parsed[1] is layout.ManifestNamingScheme.V2:
                break
            continue
        found[parsed[0]] = parsed[1]
    return found


class History:
    """Versions and transactions read during one commit or look-back (each read once).

    The latest version is found by probing forward from a known version, so a
    commit costs the same whatever the number of old versions.
    """

    def __init__(self, store: ObjectStore, known: ManifestFile | None = None) -> None:
        self.store = store
        self._manifests: dict[int, ManifestFile] = {}
        self._transactions: dict[int, Transaction | None] = {}
        self._schemes: dict[int, layout.ManifestNamingScheme] = {}
        self._listed_through: int | None = None  # versions up to this one were listed
        self.latest = 0
        self.scheme = layout.ManifestNamingScheme.V2
        if known is not None:
            self._manifests[known.version] = known
            self.latest, self.scheme = known.version, known.scheme
        self.refresh()

    def refresh(self) -> None:
        if self.latest:
            self.latest, self.scheme = probe_newer(self.store, self.latest, self.scheme)
            return
        found = latest_version(self.store)
        if found is not None:
            self.latest, self.scheme = found

    def manifest(self, version: int) -> ManifestFile:
        """The manifest of ``version``; VersionNotFoundError if it does not exist (any more)."""
        if version not in self._manifests:
            scheme = self._schemes.get(version, self.scheme)
            try:
                self._manifests[version] = read_manifest(self.store, version, scheme)
            except VersionNotFoundError:
                self._manifests[version] = read_manifest(self.store, version)
        return self._manifests[version]

    def transaction(self, version: int) -> Transaction | None:
        """The transaction of ``version``; None if its manifest names none or the file is gone.

        VersionNotFoundError if the manifest itself does not exist (any more).
        """
        if version not in self._transactions:
            name = self.manifest(version).manifest.transaction_file
            try:
                self._transactions[version] = read_transaction_file(self.store, name) if name else None
            except FileNotFoundError:
                self._transactions[version] = None
        return self._transactions[version]

    def concurrent_transaction(self, version: int, read_version: int) -> Transaction:
        """The transaction of ``version``, committed after ``read_version``, for the conflict check.

        A commit cannot check itself against a version it cannot read: that is a
        (retryable) CommitConflictError, whose retry re-reads the dataset.
        """
        try:
            theirs = self.transaction(version)
        except VersionNotFoundError as exc:
            raise CommitConflictError(
                f"version {version} of {self.store.uri}, committed after read version {read_version}, was removed "
                "by a cleanup of old versions before this commit could check it for conflicts; re-read the "
                "dataset and retry"
            ) from exc
        if theirs is None:
            raise CommitConflictError(
                f"version {version} of {self.store.uri}, committed after read version {read_version}, has no "
                "transaction file (cleaned up, or committed without one), so this commit cannot check it for "
                "conflicts; re-read the dataset and retry"
            )
        return theirs

    def existing(self, first: int, last: int) -> list[int]:
        """Versions first..last whose manifests exist (were listed), newest first.

        Lists ``_versions/`` once per History; versions committed after that
        listing are assumed present (a vanished one then reads as missing).
        """
        if first > last:
            return []
        if self._listed_through is not None and first > self._listed_through:
            return list(range(last, first - 1, -1))
        listed = listed_versions_from(self.store, first, self.scheme)
        self._schemes.update(listed)
        self._listed_through = max(last, self._listed_through or 0)
        present = {v for v in listed if v <= last} | {v for v in self._manifests if first <= v <= last}
        return sorted(present, reverse=True)

    def _load(self, version: int) -> Transaction | None:
        """The transaction of ``version``, None when its manifest or transaction file is gone."""
        try:
            return self.transaction(version)
        except VersionNotFoundError:
            self._transactions[version] = None
            return None

    def transactions(self, versions: list[int]) -> list[Transaction | None]:
        """Transactions of ``versions`` (None: gone), read concurrently on object stores."""
        todo = [v for v in versions if v not in self._transactions]
        if len(todo) > 1 and not isinstance(self.store, LocalStore):
            with ThreadPoolExecutor(min(_READ_THREADS, len(todo))) as pool:
                list(pool.map(self._load, todo))
        return [self._load(v) for v in versions]


@dataclasses.dataclass(frozen=True)
class LandedSearch:
    """The outcome of an idempotency look-back.

    ``manifest``/``transaction``: the version committed with the key (None if
    not found). ``first``..``last``: the window of versions searched (empty,
    ``first`` > ``last``, when there was nothing to search); ``searched``: how
    many of them were read (all that still exist when the key was not found).
    ``cleaned_up``: versions of the window had been removed by cleanup, so a
    commit with the key in one of them could not be recognised (the latest
    version is read before anything is listed: a key found there leaves it False).
    """

    key: str
    first: int
    last: int
    searched: int
    cleaned_up: bool
    manifest: ManifestFile | None = None
    transaction: Transaction | None = None

    @property
    def version(self) -> int | None:
        return self.manifest.version if self.manifest is not None else None

    def describe(self) -> str:
        """One line for a log: what was searched and what was found."""
        if self.manifest is not None:
            return f"idempotency key {self.key!r} was committed as version {self.manifest.version}"
        text = f"idempotency key {self.key!r} not found in versions {self.first}..{self.last}"
        if self.cleaned_up:
            text += (
                f" (only {self.searched} of them still exist: cleanup removed the others, and a commit with "
                "this key in one of those cannot be recognised)"
            )
        return text


def _matches(history: History, key: str, versions: list[int]) -> tuple[ManifestFile, Transaction] | None:
    for version, txn in zip(versions, history.transactions(versions)):
        if txn is not None and txn.transaction_properties.get(IDEMPOTENCY_KEY) == key:
            try:
                return history.manifest(version), txn
            except VersionNotFoundError:  # cleaned up between the two reads
                continue
    return None


def search_landed(history: History, key: str, first: int, last: int) -> LandedSearch:
    """Search versions first..last of ``history`` (newest first) for a transaction with ``key``."""
    first = max(1, first)
    # The latest version exists (cleanup never removes it): a retry usually finds its own commit
    # there, so it is read before anything is listed.
    head = [last] if first <= last and last == history.latest else []
    found = _matches(history, key, head)
    if found is not None:
        return LandedSearch(key, first, last, 1, False, *found)
    versions = history.existing(first, last)
    cleaned_up = len(versions) < last - first + 1
    rest = [v for v in versions if v not in head]
    # Newest first; on object stores in concurrent batches of 2, 4, then 8 (a hit is usually recent).
    local = isinstance(history.store, LocalStore)
    start, batch = 0, 1 if local else 2
    while start < len(rest):
        found = _matches(history, key, rest[start : start + batch])
        start += batch
        if found is not None:
            return LandedSearch(key, first, last, len(head) + min(start, len(rest)), cleaned_up, *found)
        batch = batch if local else min(2 * batch, _READ_THREADS)
    return LandedSearch(key, first, last, len(versions), cleaned_up)


def find_landed_version(
    store: ObjectStore,
    key: str,
    *,
    lookback: int = DEFAULT_IDEMPOTENCY_LOOKBACK,
    latest_known: ManifestFile | None = None,
) -> LandedSearch:
    """Search the latest ``lookback`` versions of ``store`` for the commit with idempotency ``key``.

    Never raises for versions removed by cleanup: they are skipped and the result's
    ``cleaned_up`` says whether the window lost versions. ``latest_known`` (a
    manifest the caller just read) saves finding the latest version again.
    """
    history = History(store, latest_known)
    return search_landed(history, key, history.latest - lookback + 1, history.latest)
