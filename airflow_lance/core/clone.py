"""``shallow_clone``: a new dataset that references a version of another one, copying no data.

As pylance's ``LanceDataset.shallow_clone`` writes it: the clone's first version has the source
version's number, schema, fragments, indices and config; the source's root becomes a new base
path (``is_dataset_root``) and every data file, deletion file and index without a ``base_id``
points at it (those already in another base keep theirs, so clones of clones read through). The
transaction is a ``Clone`` (``is_shallow``, the version referenced, the source's path).
Writes to the clone go to the clone's root only; cleanup of the clone never touches the source.
Cleanup of the *source* does not know the clone: tag the cloned version in the source (as
pylance's documentation advises) to keep its files.
"""

from __future__ import annotations

import os
import uuid as uuid_lib
from collections.abc import Mapping
from typing import TYPE_CHECKING

import airflow_lance
from airflow_lance.core import feature_flags, layout
from airflow_lance.core._proto import table_pb2, transaction_pb2
from airflow_lance.core.apply import WRITER_LIBRARY, _timestamp_now
from airflow_lance.core.commit import _publish, _write_hint
from airflow_lance.core.errors import DatasetAlreadyExistsError, InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.manifest import ManifestFile, latest_version, serialize_manifest
from airflow_lance.core.storage import open_store

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset

_MAIN_BRANCHES = (None, "main")
_ROW_FILES = ("external_row_ids", "last_updated_at_version_file", "created_at_version_file")


def _reference(source: LanceDataset, reference: object) -> LanceDataset:
    """The source at the referenced version."""
    if isinstance(reference, tuple):
        if len(reference) != 2 or reference[0] not in _MAIN_BRANCHES:
            raise UnsupportedFeatureError(f"shallow_clone of a branch other than main is not supported: {reference!r}")
        reference = reference[1]
        if reference is None:
            return source.checkout_version(source.latest_version)
    if isinstance(reference, bool) or not isinstance(reference, (int, str)):
        raise InvalidInputError(f"reference must be a version number, a tag or (branch, version), not {reference!r}")
    return source.checkout_version(reference)


def _source_path(uri: str) -> str:
    """The source root as the clone's base path records it: local paths made absolute."""
    if "://" in uri:
        return uri
    return os.path.abspath(os.path.expanduser(uri))


def _point_at(message: table_pb2.DataFile | table_pb2.DeletionFile | table_pb2.IndexMetadata, base_id: int) -> None:
    if not message.HasField("base_id"):
        message.base_id = base_id


def shallow_clone(
    source: LanceDataset,
    target_path: str | os.PathLike[str],
    reference: int | str | tuple[str | None, int | None],
    storage_options: Mapping[str, str] | None = None,
) -> LanceDataset:
    """Create a dataset at ``target_path`` referencing ``reference`` (a version number, a tag, or
    ``(branch, version)`` on main) of ``source``; return it. ``storage_options`` default to the
    source's. DatasetAlreadyExistsError if ``target_path`` holds a dataset; nothing is written
    before every check passed."""
    from airflow_lance.core.dataset import LanceDataset

    version = _reference(source, reference)
    # its flags are recomputed for the clone: a feature we do not know would be dropped from them
    feature_flags.check_writable(version.manifest_file.manifest, source.uri)
    options = source.store.storage_options if storage_options is None else storage_options
    store = open_store(target_path, options)
    store.ensure_committable()
    if latest_version(store) is not None:
        raise DatasetAlreadyExistsError(f"dataset {store.uri} already exists")
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(version.manifest_file.manifest)
    for fragment in manifest.fragments:
        used = [name for name in _ROW_FILES if fragment.HasField(name)]
        if used:
            raise UnsupportedFeatureError(
                f"fragment {fragment.id} keeps its row metadata in files ({', '.join(used)}): not cloned here")
    base_id = max((base.id for base in manifest.base_paths), default=-1) + 1
    manifest.base_paths.add(id=base_id, is_dataset_root=True, path=_source_path(source.uri))
    for fragment in manifest.fragments:
        for data_file in fragment.files:
            _point_at(data_file, base_id)
        if fragment.HasField("deletion_file"):
            _point_at(fragment.deletion_file, base_id)
    index_section = None
    if version.manifest_file.index_section:
        section = table_pb2.IndexSection.FromString(version.manifest_file.index_section)
        for index in section.indices:
            _point_at(index, base_id)
        index_section = section.SerializeToString()

    # ref_name stays unset for main, also when a tag was named (as pylance 14 writes it)
    clone = transaction_pb2.Transaction.Clone(is_shallow=True, ref_version=manifest.version,
                                              ref_path=_source_path(source.uri))
    transaction = transaction_pb2.Transaction(read_version=manifest.version, uuid=str(uuid_lib.uuid4()), clone=clone)
    manifest.transaction_file = layout.transaction_file_name(transaction.read_version, transaction.uuid)
    manifest.timestamp.CopyFrom(_timestamp_now())
    manifest.writer_version.Clear()
    manifest.writer_version.library = WRITER_LIBRARY
    manifest.writer_version.version = airflow_lance.__version__
    manifest.ClearField("tag")
    manifest.ClearField("branch")
    feature_flags.apply_feature_flags(manifest, manifest.reader_feature_flags, manifest.writer_feature_flags)

    scheme = layout.ManifestNamingScheme.V2
    store.write(layout.transaction_file_path(manifest.transaction_file), transaction.SerializeToString())
    dictionaries = version.manifest_file.dictionaries
    data = serialize_manifest(manifest, index_section, dictionaries)
    path = layout.manifest_path(manifest.version, scheme)
    if not _publish(store, manifest.version, path, data):
        raise DatasetAlreadyExistsError(f"dataset {store.uri} was created concurrently")
    _write_hint(store, manifest.version)
    return LanceDataset(store, ManifestFile(manifest, index_section, path, len(data), scheme, dictionaries))
