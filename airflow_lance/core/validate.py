"""``LanceDataset.validate()``: pylance's integrity checks of one version.

The checks are Lance's ``Dataset::validate``:

* fragment ids are unique and listed in increasing order;
* per fragment: no field stored twice, not a mix of legacy and 2.x data files, a legacy file's
  field ids increasing, a 2.x file with one column index per field; every data file holds the
  same number of rows, the fragment's ``physical_rows``; the deletion vector holds
  ``num_deleted_rows`` offsets, all below that length;
* index uuids are unique, and the segments of one index name cover disjoint fragments.

A failed check raises :class:`~airflow_lance.core.errors.CorruptFileError` naming the file (a
missing data or deletion file: ``DataFileNotFoundError``). Every data file's footer is read (no
data pages), and every deletion file.
"""

from __future__ import annotations

import collections
import itertools
from typing import TYPE_CHECKING

from airflow_lance.core import layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.deletion import deletion_path, read_deletion_vector
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.indices.metadata import fragment_bitmap, index_uuid, parse_section
from airflow_lance.core.manifest import ManifestFile
from airflow_lance.core.scan import FragmentReader

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset


def validate(dataset: LanceDataset) -> None:
    """Raise ``CorruptFileError`` for the first inconsistency of ``dataset``'s version (see the module)."""
    manifest_file = dataset.manifest_file
    fragments = dataset._fragments
    ids = [f.id for f in fragments]
    duplicated = sorted(i for i, n in collections.Counter(ids).items() if n > 1)
    if duplicated:
        raise CorruptFileError(manifest_file.path, f"fragment id {duplicated[0]} is listed more than once")
    for previous, current in itertools.pairwise(ids):
        if current < previous:
            raise CorruptFileError(manifest_file.path,
                                   f"fragment ids are not in increasing order: {current} after {previous}")
    for fragment in fragments:
        _validate_fragment(dataset, fragment)
    _validate_indices(manifest_file)


def _validate_fragment(dataset: LanceDataset, fragment: FragmentMetadata) -> None:
    files = list(fragment.files)
    if not files:
        return
    first = layout.data_file_path(files[0].path)
    seen: set[int] = set()
    for data_file in files:
        path = layout.data_file_path(data_file.path)
        fields = [f for f in data_file.fields if f >= 0]  # -2: a dropped field's tombstone
        twice = sorted(set(fields) & seen)
        if twice or len(set(fields)) != len(fields):
            raise CorruptFileError(path, f"field id {(twice or fields)[0]} is stored twice in fragment {fragment.id}")
        seen.update(fields)
        if data_file.is_legacy and any(b <= a for a, b in itertools.pairwise(data_file.fields)):
            raise CorruptFileError(path, "field ids are not in increasing order")
        if not data_file.is_legacy and len(data_file.fields) != len(data_file.column_indices):
            raise CorruptFileError(path, f"{len(data_file.fields)} field ids but "
                                         f"{len(data_file.column_indices)} column indices")
    if len({f.is_legacy for f in files}) > 1:
        raise CorruptFileError(first, f"fragment {fragment.id} mixes legacy and 2.x data files")
    with FragmentReader(dataset.store, fragment) as reader:
        lengths = reader.data_file_rows()
    for length, data_file in zip(lengths, files, strict=True):
        if length != lengths[0]:
            raise CorruptFileError(layout.data_file_path(data_file.path),
                                   f"holds {length} rows, the fragment's first data file {lengths[0]}")
    if fragment.physical_rows and fragment.physical_rows != lengths[0]:  # 0: not recorded (old releases)
        raise CorruptFileError(first, f"fragment {fragment.id} records {fragment.physical_rows} physical rows, "
                                      f"its data files hold {lengths[0]}")
    deletion = fragment.deletion_file
    if deletion is None:
        return
    offsets = read_deletion_vector(dataset.store, fragment.id, deletion)
    path = deletion_path(fragment.id, deletion)
    if deletion.num_deleted_rows and deletion.num_deleted_rows != len(offsets):  # 0: not recorded
        raise CorruptFileError(path, f"holds {len(offsets)} deleted rows, the manifest records "
                                     f"{deletion.num_deleted_rows}")
    if len(offsets) and int(offsets.max()) >= lengths[0]:
        raise CorruptFileError(path, f"deletes row {int(offsets.max())} of a fragment of {lengths[0]} rows")


def _validate_indices(manifest_file: ManifestFile) -> None:
    indices = parse_section(manifest_file)
    uuids = collections.Counter(index_uuid(i) for i in indices)
    twice = sorted(u for u, n in uuids.items() if n > 1)
    path = manifest_file.path
    if twice:
        raise CorruptFileError(path, f"index {twice[0]} is listed more than once")
    by_name: dict[str, list[table_pb2.IndexMetadata]] = collections.defaultdict(list)
    for index in indices:
        by_name[index.name].append(index)
    for name, segments in by_name.items():
        covered: set[int] = set()
        for segment in segments:
            bitmap = set(fragment_bitmap(segment))
            overlap = sorted(bitmap & covered)
            if overlap:
                raise CorruptFileError(path, f"segments of index {name!r} overlap on fragments {overlap}")
            covered |= bitmap
