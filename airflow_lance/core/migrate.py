"""Fragment statistics of old manifests, derived as Lance derives them when it reads one.

Manifests of Lance 0.7 and older have no ``physical_rows`` and no ``num_deleted_rows``
(proto3: 0), and the 0.8.0 migration of such manifests wrote post-deletion row counts
as ``physical_rows``. Lance trusts the recorded numbers only when the manifest names its
writer (``writer_version``, written since that migration) and the number is not 0;
otherwise it counts the rows of the fragment's first data file and the offsets in its
deletion file (``FileFragment::physical_rows``/``count_deletions``, lance issue 1531),
and writes the derived numbers into the next manifest it commits (``migrate_fragments``).

``migrate_fragment_stats`` does the same on a freshly read manifest, in place, so every
reader sees the true counts and every manifest we commit from it records them.
"""

from __future__ import annotations

from airflow_lance.core import layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.bases import data_file_location
from airflow_lance.core.deletion import read_deletion_vector
from airflow_lance.core.errors import UnsupportedFeatureError
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.fragment import DeletionFile
from airflow_lance.core.storage import ObjectStore


def needs_migration(manifest: table_pb2.Manifest) -> bool:
    """Whether some fragment's counts cannot be trusted (Lance's ``manifest_needs_migration``)."""
    if not manifest.HasField("writer_version"):
        return bool(manifest.fragments)
    if manifest.writer_version.library == layout.WRITER_LIBRARY:
        return False  # ours: counted when written (this check costs a pass over every fragment)
    return any(
        (f.files and f.physical_rows == 0)
        or (f.HasField("deletion_file") and f.deletion_file.num_deleted_rows == 0)
        for f in manifest.fragments
    )


def _file_rows(store: ObjectStore, data_file: table_pb2.DataFile) -> int:
    store, path = data_file_location(store, data_file)
    with store.open_input(path) as source:
        # the recorded size may be wrong for legacy files (pylance 0.39-4.0): let the reader find it
        return LanceFileReader(source, path=path, file_size=None).num_rows


def migrate_fragment_stats(store: ObjectStore, manifest: table_pb2.Manifest) -> None:
    """Replace untrusted ``physical_rows``/``num_deleted_rows`` by the counts in the files."""
    if not needs_migration(manifest):
        return
    trusted = manifest.HasField("writer_version")
    for fragment in manifest.fragments:
        if fragment.files and not (trusted and fragment.physical_rows):
            fragment.physical_rows = _file_rows(store, fragment.files[0])
        if fragment.HasField("deletion_file") and not (trusted and fragment.deletion_file.num_deleted_rows):
            deletion = DeletionFile.from_pb(fragment.deletion_file)
            fragment.deletion_file.num_deleted_rows = int(read_deletion_vector(store, fragment.id, deletion).size)


def check_column_indices(manifest: table_pb2.Manifest) -> None:
    """Refuse 2.1 data files that give a list field a column, as pylance 14 does on opening.

    Only leaves have columns in 2.1+ files; 2.1 files of pylance 0.1x, when 2.1 was still unstable,
    give list fields column indices too, and their pages use encodings 2.1 later replaced: neither
    pylance 14 nor we can read them, and writing next to them would hide that.
    """
    # list fields only: a struct may be a leaf with a column of its own in 2.1+ (packed, blob v2)
    parents = {f.id for f in manifest.fields if f.logical_type.startswith(("list", "large_list"))}
    if not parents:
        return
    for fragment in manifest.fragments:
        for data_file in fragment.files:
            if data_file.file_major_version != 2 or data_file.file_minor_version != 1:
                continue  # only 2.1 was ever unstable this way
            columns = dict(zip(data_file.fields, data_file.column_indices))
            for field_id in parents:
                column = columns.get(field_id, -1)
                if column != -1:
                    raise UnsupportedFeatureError(
                        f"{layout.data_file_path(data_file.path)} (fragment {fragment.id}) gives list field "
                        f"{field_id} column {column}: a file of the unstable 2.1 format of pylance before 0.39, "
                        "which pylance 14 does not open either"
                    )
