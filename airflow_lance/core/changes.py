"""What changed between two versions of a dataset: rows inserted, updated and deleted.

:func:`changes_between` compares a base version with a later one and returns, per fragment of
the later version, the physical offsets of the live rows that are new or changed since the
base (:class:`Changes`), plus the counts of rows inserted, updated and deleted. It never reads
data files, only manifests, transactions, deletion vectors and row sequences:

* **Datasets with stable row ids.** Row ids are handed out in increasing order
  (``Manifest.next_row_id``), and compaction and updates keep them: a row is *inserted* when
  its id is at least the base version's ``next_row_id``. A row is *updated* when it is older
  but its last-updated version (the fragment's ``last_updated_at_version`` sequence, which
  Lance keeps through compaction) is after the base. Only the two manifests (and the
  transactions in between) are read; with a ``Restore`` in between, which can bring back rows
  deleted at the base or older values, the base's row ids and versions are compared instead.
* **Other datasets.** Row addresses change when rows move, so the versions in between are
  walked: fragments that appear are new rows, except the fragments a compaction (a ``Rewrite``
  transaction) wrote, which hold the live rows of the fragments they replace in the same order
  and inherit whether each was new. An update rewrites rows into new fragments and deletes the
  old ones, so without row ids an updated row counts as deleted and inserted (``updated`` is 0).
  An ``Overwrite`` replaces everything: every row is new; a ``Restore`` brings back the rows of
  the version restored (new where they were new then; when it restores a version before the base,
  the rows live at the base are old and the others new). Every version in between must still exist
  (``VersionNotFoundError`` otherwise).

Counts: ``inserted`` and ``updated`` are live rows of the later version; ``deleted`` is the
number of rows of the base version that are gone (``rows(base) - (rows(new) - inserted)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from airflow_lance.core import rowids
from airflow_lance.core.errors import InvalidInputError, VersionNotFoundError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.scanner import fragment_row_ids, has_stable_row_ids, live_offsets
from airflow_lance.core.transaction import LanceOperation

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset


@dataclasses.dataclass(frozen=True)
class Changes:
    """Rows of ``version`` inserted or updated since ``base_version`` and the change counts.

    ``fragments`` maps the id of every fragment of ``version`` holding such rows to their
    physical offsets (sorted uint32, live rows only), or to None when every live row of the
    fragment is new.
    """

    base_version: int
    version: int
    fragments: Mapping[int, np.ndarray | None]
    inserted: int
    updated: int
    deleted: int
    stable_row_ids: bool

    def selections(self) -> dict[int, np.ndarray | None]:
        """The fragments to read and their rows (see ``fragments``)."""
        return dict(self.fragments)

    @property
    def num_rows(self) -> int:
        """Rows to read: inserted plus updated."""
        return self.inserted + self.updated

    def counts(self) -> dict[str, int]:
        """``{"base_version", "version", "inserted", "updated", "deleted"}``, JSON-ready."""
        return {"base_version": self.base_version, "version": self.version, "inserted": self.inserted,
                "updated": self.updated, "deleted": self.deleted}


def _live_mask(dataset: LanceDataset, fragment: FragmentMetadata) -> np.ndarray:
    mask = np.ones(fragment.physical_rows, dtype=bool)
    live = live_offsets(dataset, fragment)
    if live is not None:
        mask[:] = False
        mask[live] = True
    return mask


def _selection(mask: np.ndarray, live: np.ndarray) -> np.ndarray | None:
    """None when ``mask`` holds every live row, else the offsets it selects (uint32)."""
    if np.array_equal(mask, live):
        return None
    return np.flatnonzero(mask).astype(np.uint32)


def _resolve_base(dataset: LanceDataset, base: int | str) -> LanceDataset:
    if isinstance(base, bool) or not isinstance(base, (int, str)):
        raise InvalidInputError(f"since_version must be a version number or a tag name, not {base!r}")
    base_dataset = dataset.checkout_version(base)
    if base_dataset.version > dataset.version:
        raise InvalidInputError(
            f"since_version {base!r} (version {base_dataset.version}) is after the version read ({dataset.version})")
    return base_dataset


def changes_between(dataset: LanceDataset, base: int | str) -> Changes:
    """The rows of ``dataset`` (a version) inserted or updated since version ``base`` (a number
    or a tag; 0: before the first version, every row is inserted), and the counts of rows
    inserted, updated and deleted (see the module docstring)."""
    if base == 0 and not isinstance(base, bool):
        rows = {f.id: None for f in dataset._fragments if f.num_rows}
        return Changes(0, dataset.version, rows, sum(f.num_rows for f in dataset._fragments), 0, 0,
                       has_stable_row_ids(dataset))
    base_dataset = _resolve_base(dataset, base)
    if has_stable_row_ids(dataset) and has_stable_row_ids(base_dataset):
        flags = _stable_flags(dataset, base_dataset)
    else:
        flags = _walked_flags(dataset, base_dataset)
    fragments: dict[int, np.ndarray | None] = {}
    inserted = updated = 0
    for fragment in dataset._fragments:
        found = flags.get(fragment.id)
        if found is None:
            continue
        new, changed = found
        live = _live_mask(dataset, fragment)
        new &= live
        changed &= live & ~new
        inserted += int(new.sum())
        updated += int(changed.sum())
        either = new | changed
        if either.any():
            fragments[fragment.id] = _selection(either, live)
    base_rows = sum(f.num_rows for f in base_dataset._fragments)
    rows = sum(f.num_rows for f in dataset._fragments)
    return Changes(
        base_version=base_dataset.version,
        version=dataset.version,
        fragments=fragments,
        inserted=inserted,
        updated=updated,
        deleted=base_rows - (rows - inserted),
        stable_row_ids=has_stable_row_ids(dataset),
    )


Flags = dict[int, tuple[np.ndarray, np.ndarray]]


def _last_updated(dataset: LanceDataset, fragment: FragmentMetadata) -> np.ndarray | None:
    data = rowids.sequence_bytes(dataset.store, fragment.to_pb(), rowids.LAST_UPDATED_FIELDS)
    if data is None:
        return None
    return rowids.decode_versions(data, fragment.physical_rows, f"fragment {fragment.id} last-updated versions")


def _stable_flags(dataset: LanceDataset, base: LanceDataset) -> Flags:
    """(inserted, updated) flags per physical row, from row ids and last-updated versions.

    Without a ``Restore`` in between, from the base's ``next_row_id`` and version number alone.
    A ``Restore`` can bring back rows deleted at the base, or older values: then a row is
    inserted when its id is not live at the base, updated when its last-updated version differs
    from the base's (the base's row ids and versions are read for that)."""
    exact = _restored_between(dataset, base)
    base_rows = _live_row_versions(base) if exact else None
    first_new_id = np.uint64(base.manifest_file.manifest.next_row_id)
    flags: Flags = {}
    for fragment in dataset._fragments:
        ids = fragment_row_ids(dataset, fragment)
        versions = _last_updated(dataset, fragment)
        if base_rows is None:
            new = ids >= first_new_id
            changed = np.zeros(ids.size, dtype=bool) if versions is None else versions > np.uint64(base.version)
        else:
            base_ids, base_versions = base_rows
            at = np.minimum(np.searchsorted(base_ids, ids), max(base_ids.size - 1, 0))
            found = base_ids[at] == ids if base_ids.size else np.zeros(ids.size, dtype=bool)
            new = ~found
            changed = found & (versions != base_versions[at]) if versions is not None and base_ids.size \
                else np.zeros(ids.size, dtype=bool)
        if new.any() or changed.any():
            flags[fragment.id] = (new, changed)
    return flags


def _restored_between(dataset: LanceDataset, base: LanceDataset) -> bool:
    """Whether a ``Restore`` may lie between the two versions (a version or transaction in between
    is gone: assume so)."""
    for version in range(base.version + 1, dataset.version + 1):
        try:
            transaction = dataset.read_transaction(version)
        except VersionNotFoundError:
            return True
        if transaction is None or isinstance(transaction.operation, LanceOperation.Restore):
            return True
    return False


def _live_row_versions(dataset: LanceDataset) -> tuple[np.ndarray, np.ndarray]:
    """The row ids (sorted) of the live rows of a version with stable row ids, and their
    last-updated versions (0 where not recorded)."""
    ids_pieces, version_pieces = [], []
    for fragment in dataset._fragments:
        ids = fragment_row_ids(dataset, fragment)
        versions = _last_updated(dataset, fragment)
        if versions is None:
            versions = np.zeros(ids.size, dtype=np.uint64)
        live = live_offsets(dataset, fragment)
        ids_pieces.append(ids if live is None else ids[live])
        version_pieces.append(versions if live is None else versions[live])
    if not ids_pieces:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    ids, versions = np.concatenate(ids_pieces), np.concatenate(version_pieces)
    order = np.argsort(ids, kind="stable")
    return ids[order], versions[order]


def _walked_flags(dataset: LanceDataset, base: LanceDataset) -> Flags:
    """Inserted flags per physical row, following fragments version by version (module docstring)."""
    new: dict[int, np.ndarray] = {}
    walked = {base.version: new}  # the flags of every version walked (a Restore goes back to one)
    previous = base
    for version in range(base.version + 1, dataset.version + 1):
        try:
            current = dataset if version == dataset.version else dataset.checkout_version(version)
        except VersionNotFoundError as exc:
            raise VersionNotFoundError(
                f"version {version} of {dataset.uri} is gone (cleaned up): the rows changed between "
                f"versions {base.version} and {dataset.version} of a dataset without stable row ids "
                "can only be found through every version in between") from exc
        new = walked[version] = _step(previous, current, new, walked, base)
        previous = current
    return {fid: (flags, np.zeros_like(flags)) for fid, flags in new.items() if flags.any()}


def _step(previous: LanceDataset, current: LanceDataset, new: dict[int, np.ndarray],
          walked: Mapping[int, dict[int, np.ndarray]], base: LanceDataset) -> dict[int, np.ndarray]:
    """The inserted flags of ``current``'s fragments, from those of ``previous``'s."""
    before = {f.id: f for f in previous._fragments}
    now = {f.id: f for f in current._fragments}
    transaction = current.read_transaction()
    operation = transaction.operation if transaction is not None else None
    result = {fid: flags for fid, flags in new.items() if fid in now}
    if isinstance(operation, LanceOperation.Overwrite):
        return {fid: np.ones(f.physical_rows, dtype=bool) for fid, f in now.items()}
    if isinstance(operation, LanceOperation.Restore):
        # back to a version walked: its flags; to one before the base: the rows live at the base are old
        restored = walked.get(operation.version)
        if restored is not None:
            return {fid: flags for fid, flags in restored.items() if fid in now}
        at_base = {f.id: f for f in base._fragments}
        return {fid: ~_live_mask(base, at_base[fid]) if fid in at_base else np.ones(f.physical_rows, dtype=bool)
                for fid, f in now.items()}
    rewritten: set[int] = set()
    if isinstance(operation, LanceOperation.Rewrite):
        for group in operation.groups:
            rewritten.update(_inherit(previous, group, new, now, result))
    for fid, fragment in now.items():
        if fid not in before and fid not in rewritten:
            result[fid] = np.ones(fragment.physical_rows, dtype=bool)
    return result


def _inherit(previous: LanceDataset, group: LanceOperation.RewriteGroup, new: Mapping[int, np.ndarray],
             now: Mapping[int, FragmentMetadata], result: dict[int, np.ndarray]) -> set[int]:
    """Flags of the fragments a compaction group wrote: the live rows of its old fragments, in
    order. Returns the ids of the group's new fragments (all rows old when no old row was new)."""
    # by their first data file: a transaction may record the new fragments before ids were assigned
    by_file = {f.files[0].path: f for f in now.values() if f.files}
    targets = [by_file[f.files[0].path] for f in group.new_fragments if f.files and f.files[0].path in by_file]
    ids = {f.id for f in targets}
    olds = list(group.old_fragments)
    if not any(f.id in new for f in olds):
        return ids
    pieces = []
    for old in olds:
        flags = new.get(old.id, np.zeros(old.physical_rows, dtype=bool))
        live = live_offsets(previous, old)
        pieces.append(flags if live is None else flags[live])
    carried = np.concatenate(pieces) if pieces else np.zeros(0, dtype=bool)
    if carried.size != sum(f.physical_rows for f in targets):
        # not a plain concatenation of live rows: be safe and call every row of the group new
        result.update((f.id, np.ones(f.physical_rows, dtype=bool)) for f in targets)
        return ids
    position = 0
    for target in targets:
        result[target.id] = carried[position:position + target.physical_rows]
        position += target.physical_rows
    return ids
