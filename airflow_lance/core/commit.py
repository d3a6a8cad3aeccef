"""The commit protocol: check concurrent transactions, rebase, publish atomically.

1. Load every version newer than the transaction's read version, with its
   transaction, and check compatibility (:mod:`conflicts`); rebase deletion
   vectors where Lance does (:mod:`rebase`).
2. Write the transaction file ``_transactions/{read_version}-{uuid}.txn``.
3. Build the next manifest on top of the latest one (:mod:`apply`).
4. Create ``_versions/<next>`` with put-if-not-exists. If another writer took
   that version, back off with jitter and go to 1.

With an idempotency key, a version whose transaction carries the same key
(within ``idempotency_lookback`` versions) is returned instead of committing
twice: a retried task whose commit already landed does not add data again.
The look-back (:func:`history.find_landed_version`) skips versions removed by
cleanup: a key whose version was cleaned up is not found, and commits again.
A concurrent version (after the read version) that was cleaned up cannot be
checked for conflicts: a retryable CommitConflictError.
"""

from __future__ import annotations

import json
import logging
import random
import time

from airflow_lance.core import auto_cleanup, feature_flags, layout
from airflow_lance.core.apply import ApplyContext, build_next_manifest
from airflow_lance.core.conflicts import INCOMPATIBLE, REBASE, RETRY, check
from airflow_lance.core.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    DatasetAlreadyExistsError,
    IncompatibleTransactionError,
    StorageError,
    VersionNotFoundError,
)
from airflow_lance.core.history import DEFAULT_IDEMPOTENCY_LOOKBACK, History, search_landed
from airflow_lance.core.indices.metadata import index_uuid, parse_section
from airflow_lance.core.legacy_dictionaries import manifest_dictionaries
from airflow_lance.core.manifest import ManifestFile, serialize_manifest
from airflow_lance.core.rebase import rebase_create_index, rebase_deletions
from airflow_lance.core.storage import ObjectStore, external
from airflow_lance.core.transaction import IDEMPOTENCY_KEY, LanceOperation, Transaction, write_transaction_file

log = logging.getLogger(__name__)

#: Retry slots are at least this long, and their number stops doubling at 2**_MAX_SLOT_EXPONENT.
_MIN_SLOT_S = 0.001
_MAX_SLOT_EXPONENT = 6


class SlotBackoff:
    """Lance's retry schedule after a lost commit race (its ``SlotBackoff``).

    A slot lasts 1.1x the first attempt, so the schedule scales with the
    store: milliseconds on local disk, a round trip or more on object stores
    (where a fixed millisecond backoff starves the losers). Retry ``n`` waits
    a random number of slots out of ``4 * 2**n``, at most 64.
    """

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._unit: float | None = None
        self.attempt = 0

    def delay(self) -> float:
        if self._unit is None:
            self._unit = max(_MIN_SLOT_S, 1.1 * (time.monotonic() - self._start))
        slots = 2 ** min(self.attempt + 2, _MAX_SLOT_EXPONENT)
        self.attempt += 1
        return random.randrange(slots) * self._unit


def _write_hint(store: ObjectStore, version: int) -> None:
    if not store.writes_version_hint:
        return
    try:
        store.write_hint(layout.LATEST_VERSION_HINT, json.dumps({"version": version}, separators=(",", ":")).encode())
    except StorageError as exc:  # best effort: readers never need it
        log.debug("could not update the version hint: %s", exc)


def _publish(store: ObjectStore, version: int, path: str, data: bytes) -> bool:
    """Put-if-not-exists (or the external table's protocol); after an ambiguous failure,
    look whether our bytes landed."""
    try:
        if store.external_manifests is not None:
            return external.commit(store, store.external_manifests, version, path, data)
        return store.put_if_not_exists(path, data)
    except StorageError as exc:
        try:
            existing = store.read(path)
        except FileNotFoundError:
            raise exc from None
        except StorageError as again:
            raise CommitStateUnknownError(f"commit of {path} may or may not have landed: {exc}") from again
        return existing == data


def _read_version_manifest(history: History, read_version: int) -> ManifestFile:
    """The manifest a rebase starts from; a cleaned-up one is a retryable conflict."""
    try:
        return history.manifest(read_version)
    except VersionNotFoundError as exc:
        raise CommitConflictError(
            f"read version {read_version} of {history.store.uri} was removed by a cleanup of old versions, so "
            "the concurrent deletions cannot be rebased onto it; re-read the dataset and retry"
        ) from exc


def _check_concurrent(history: History, mine: Transaction, first: int, last: int) -> bool:
    """Check versions first..last against ``mine``; return True if a rebase is needed."""
    needs_rebase = False
    if first > last:
        return needs_rebase
    onto = history.manifest(last)
    stable = bool(onto.manifest.reader_feature_flags & feature_flags.STABLE_ROW_IDS)
    live = frozenset(index_uuid(i) for i in parse_section(onto)) if isinstance(mine.operation, LanceOperation.Rewrite) \
        else None
    for version in range(first, last + 1):
        theirs = history.concurrent_transaction(version, mine.read_version)
        outcome = check(mine, theirs, stable_row_ids=stable, live_indices=live)
        if outcome is INCOMPATIBLE:
            raise IncompatibleTransactionError(
                f"{mine.kind} planned on version {mine.read_version} is incompatible with concurrent "
                f"{theirs.kind} committed as version {version}"
            )
        if outcome is RETRY:
            raise CommitConflictError(
                f"{mine.kind} planned on version {mine.read_version} conflicts with concurrent "
                f"{theirs.kind} committed as version {version}; re-read the dataset and retry"
            )
        needs_rebase |= outcome is REBASE
    return needs_rebase


def commit_transaction(
    store: ObjectStore,
    transaction: Transaction,
    *,
    max_retries: int = 20,
    create_only: bool = False,
    idempotency_lookback: int = DEFAULT_IDEMPOTENCY_LOOKBACK,
    latest_known: ManifestFile | None = None,
    new_dataset_scheme: layout.ManifestNamingScheme = layout.ManifestNamingScheme.V2,
    enable_stable_row_ids: bool = False,
    skip_auto_cleanup: bool = False,
) -> ManifestFile:
    """Commit ``transaction``; return the manifest of the new (or already landed) version.

    With ``create_only`` the commit must create version 1 (DatasetAlreadyExistsError
    otherwise, also when a concurrent writer creates the dataset first).
    Raises CommitConflictError (retryable: re-read and redo the operation),
    IncompatibleTransactionError, or CommitStateUnknownError (never clean up then).
    ``latest_known`` (a manifest the caller just read) saves reading it again.
    ``new_dataset_scheme`` and ``enable_stable_row_ids`` apply only when the commit creates
    the dataset (pylance's ``enable_v2_manifest_paths`` / ``enable_stable_row_ids``).
    """
    store.ensure_committable()
    history = History(store, latest_known)
    if create_only and history.latest:
        raise DatasetAlreadyExistsError(f"dataset {store.uri} already exists")
    read_version = transaction.read_version
    if read_version > history.latest:
        raise VersionNotFoundError(f"read_version {read_version} of {store.uri} does not exist")
    key = transaction.transaction_properties.get(IDEMPOTENCY_KEY)
    checked = read_version
    searched = max(0, history.latest - idempotency_lookback)
    needs_rebase = False
    written: Transaction | None = None
    backoff = SlotBackoff()
    for attempt in range(max_retries + 1):
        latest = history.latest
        if create_only and latest:
            raise DatasetAlreadyExistsError(f"dataset {store.uri} was created concurrently")
        if key is not None and latest > searched:
            # Search from before read_version too: a retried task re-reads after its own commit landed.
            # Versions removed by cleanup are skipped: a key committed in one of them is not found.
            found = search_landed(history, key, searched + 1, latest)
            log.debug("%s", found.describe())
            if found.manifest is not None:
                log.info("transaction %s already committed as version %d", key, found.manifest.version)
                return found.manifest
            searched = latest
        needs_rebase |= _check_concurrent(history, transaction, checked + 1, latest)
        checked = latest
        base = history.manifest(latest) if latest else None
        if base is not None:
            feature_flags.check_writable(base.manifest, store.uri)
        current = transaction
        if needs_rebase and base is not None and isinstance(transaction.operation, LanceOperation.CreateIndex):
            current = rebase_create_index(
                transaction, (history.concurrent_transaction(v, read_version) for v in range(read_version + 1, latest + 1))
            )
        elif needs_rebase and base is not None:
            read = _read_version_manifest(history, read_version) if read_version else None
            current = rebase_deletions(store, transaction, base, read)
        if written is None or current is not written:
            txn_name = write_transaction_file(store, current)
            written = current
        scheme = base.scheme if base is not None else new_dataset_scheme
        nxt = build_next_manifest(
            current.operation, base, ApplyContext(txn_name, history.manifest, enable_stable_row_ids)
        )
        dictionaries = manifest_dictionaries(store, nxt.manifest, base, current.operation)
        data = serialize_manifest(nxt.manifest, nxt.index_section, dictionaries)
        path = layout.manifest_path(nxt.manifest.version, scheme)
        if _publish(store, nxt.manifest.version, path, data):
            _write_hint(store, nxt.manifest.version)
            committed = ManifestFile(nxt.manifest, nxt.index_section, path, len(data), scheme, dictionaries)
            if not skip_auto_cleanup:
                auto_cleanup.after_commit(store, committed, base)  # the dataset's lance.auto_cleanup.*
            return committed
        log.debug("version %d was taken by a concurrent writer (attempt %d)", nxt.manifest.version, attempt + 1)
        time.sleep(backoff.delay())
        history.refresh()
    raise CommitConflictError(f"gave up committing to {store.uri} after {max_retries} retries")
