"""Files outside the dataset root: the manifest's base paths (field 18) and ``base_id``.

A shallow clone (pylance's ``shallow_clone``) references the source dataset's data, deletion
and index files instead of copying them; a multi-base dataset (``initial_bases`` /
``target_bases``) writes data files to other locations. The manifest lists those locations
as ``BasePath {id, name, is_dataset_root, path}`` and a data file, deletion file or index with
``base_id`` set lives there, resolved as Lance resolves it:

| file | base is a dataset root | base is not |
|---|---|---|
| data file | ``{path}/data/{file}`` | ``{path}/{file}`` |
| deletion file | ``{path}/_deletions/{name}`` | refused (corrupt) |
| index file | ``{path}/_indices/{uuid}/{file}`` | ``{path}/{uuid}/{file}`` |

A base is opened with the dataset's own storage options, as pylance does. Ids are never
reused (later versions only add bases), so a store collects the bases of every version it
has read. What we write always goes to the dataset root: new files carry no ``base_id``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from airflow_lance.core import layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.storage import ObjectStore


@dataclasses.dataclass(frozen=True)
class BasePath:
    """One base path of a dataset, with pylance's ``DatasetBasePath`` fields."""

    id: int
    path: str
    name: str | None = None
    is_dataset_root: bool = False

    @classmethod
    def from_pb(cls, pb: table_pb2.BasePath) -> BasePath:
        return cls(id=pb.id, path=pb.path, name=pb.name if pb.HasField("name") else None,
                   is_dataset_root=pb.is_dataset_root)


def register(store: ObjectStore, manifest: table_pb2.Manifest) -> None:
    """Make the base paths of ``manifest`` known to ``store`` (it is read through them)."""
    if not manifest.base_paths:
        return
    known = dict(store.base_paths)
    for pb in manifest.base_paths:
        base = BasePath.from_pb(pb)
        if known.get(base.id, base) != base:
            raise CorruptFileError(
                store.uri, f"base path {base.id} is {base.path!r} in version {manifest.version}, "
                f"{known[base.id].path!r} in another version")
        known[base.id] = base
    store.base_paths = known


def _base_id(item: Any) -> int | None:
    """``base_id`` of a protobuf message (unset: None) or of one of our value objects."""
    if hasattr(item, "HasField"):
        return item.base_id if item.HasField("base_id") else None
    return item.base_id


def base_store(store: ObjectStore, base_id: int, what: str) -> tuple[ObjectStore, BasePath]:
    """The store of base ``base_id`` (opened once per store) and the base; ``what`` names the file."""
    base = store.base_paths.get(base_id)
    if base is None:
        raise CorruptFileError(what, f"base path id {base_id} is not among the base paths of {store.uri}")
    opened = store.base_stores.get(base_id)
    if opened is None:
        from airflow_lance.core.storage import open_store  # the factory imports every backend

        opened = open_store(base.path, store.storage_options)
        store.base_stores = {**store.base_stores, base_id: opened}
    return opened, base


def data_file_location(store: ObjectStore, data_file: Any) -> tuple[ObjectStore, str]:
    """(store, path in it) of a data file (``DataFile`` or its protobuf)."""
    base_id = _base_id(data_file)
    if base_id is None:
        return store, layout.data_file_path(data_file.path)
    opened, base = base_store(store, base_id, data_file.path)
    return opened, layout.data_file_path(data_file.path) if base.is_dataset_root else data_file.path


def deletion_location(store: ObjectStore, deletion: Any, path: str) -> tuple[ObjectStore, str]:
    """(store, path in it) of a deletion file whose path below its dataset root is ``path``."""
    base_id = _base_id(deletion)
    if base_id is None:
        return store, path
    opened, base = base_store(store, base_id, path)
    if not base.is_dataset_root:
        raise CorruptFileError(path, f"deletion file in base path {base_id} ({base.path}), which is not a dataset root")
    return opened, path


def index_file_location(store: ObjectStore, index: table_pb2.IndexMetadata, uuid: str, name: str
                        ) -> tuple[ObjectStore, str]:
    """(store, path in it) of the file ``name`` of the index ``index`` (whose uuid is ``uuid``)."""
    own = f"{layout.index_dir(uuid)}/{name}"
    base_id = _base_id(index)
    if base_id is None:
        return store, own
    opened, base = base_store(store, base_id, own)
    path = f"{layout.index_dir(uuid) if base.is_dataset_root else uuid}/{name}"
    if not opened.exists(path) and store.exists(own):
        # pylance 14's compaction of a shallow clone writes the remapped index to the clone but keeps
        # the old index's base_id (pylance then cannot open it): the files are where they were written
        return store, own
    return opened, path


def foreign_prefixes(store: ObjectStore) -> list[str]:
    """Directories below ``store``'s root (relative, ending in ``/``) that are other bases' roots:
    files there belong to those bases, never to this dataset's cleanup."""
    root = _local_or_uri(store.uri)
    prefixes = []
    for base in store.base_paths.values():
        path = _local_or_uri(base.path)
        if path.startswith(root + "/"):
            prefixes.append(path[len(root) + 1:] + "/")
    return prefixes


def _local_or_uri(uri: str) -> str:
    text = uri.removeprefix("file://")
    if "://" not in text:
        text = os.path.normpath(os.path.abspath(os.path.expanduser(text)))
    return text.rstrip("/")
