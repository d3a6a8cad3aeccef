"""Manifest files: framing of ``_versions/*.manifest`` and resolving versions.

A manifest file is a sequence of length-prefixed protobuf sections (an
optional IndexSection, optionally an inline Transaction), then the Manifest
section, then a 16-byte footer: u64 position of the manifest section, u16 0,
u16 2, ``LANC``.
"""

from __future__ import annotations

import dataclasses
import json
import struct

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from airflow_lance.core import bases, feature_flags, layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import (
    CorruptFileError,
    DatasetNotFoundError,
    InvalidInputError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from airflow_lance.core.file.legacy_writer import LEGACY_STORAGE_VERSION, binary_parts, fixed_bytes
from airflow_lance.core.schema import arrow_type_of
from airflow_lance.core.storage import ObjectStore, external

MAGIC = b"LANC"
_FOOTER = struct.Struct("<QHH4s")
_LEN = struct.Struct("<I")
_VARIABLE = (pa.string(), pa.binary(), pa.large_string(), pa.large_binary())


@dataclasses.dataclass(frozen=True)
class DictionaryValues:
    """The values of a legacy dictionary field, stored inside the manifest file itself.

    Legacy (0.1) datasets keep them in front of the manifest's sections, where
    ``Field.dictionary`` points: numbers plainly (``offset`` is where they start), strings and
    binaries as the value bytes followed by ``length + 1`` i64 file positions (``offset`` is
    where the positions start). ``positions`` are relative to the start of ``data`` here.
    """

    logical_type: str
    data: bytes
    positions: np.ndarray | None  # binary-like values only

    @classmethod
    def from_arrow(cls, logical_type: str, values: pa.Array) -> DictionaryValues:
        """The stored form of dictionary ``values`` (nulls stored as empty strings / zeros)."""
        if values.type in _VARIABLE:
            payload, offsets = binary_parts(values)
            return cls(logical_type, bytes(payload), offsets.astype(np.int64))
        return cls(logical_type, bytes(fixed_bytes(values)), None)

    def to_arrow(self) -> pa.Array:
        """The values as an Arrow array of the field's value type."""
        value_type = arrow_type_of(self.logical_type).value_type
        data = pa.py_buffer(self.data)
        if self.positions is None:
            return pa.Array.from_buffers(value_type, self.count, [None, data])
        large = pa.types.is_large_string(value_type) or pa.types.is_large_binary(value_type)
        offsets = pa.py_buffer(self.positions.astype(np.int64 if large else np.int32))
        return pa.Array.from_buffers(value_type, len(self.positions) - 1, [None, offsets, data])

    @property
    def count(self) -> int:
        """Number of values."""
        if self.positions is not None:
            return len(self.positions) - 1
        return len(self.data) * 8 // arrow_type_of(self.logical_type).value_type.bit_width

    def write_at(self, start: int) -> tuple[bytes, int]:
        """The bytes to write at file position ``start`` and the ``dictionary.offset`` to record."""
        if self.positions is None:
            return self.data, start
        positions = (self.positions + start).astype("<i8").tobytes()
        return self.data + positions, start + len(self.data)


@dataclasses.dataclass
class ManifestFile:
    """A parsed manifest file: the message, its raw index section, path and size, and the
    dictionary values of legacy dictionary fields (by field id), carried into the next version."""

    manifest: table_pb2.Manifest
    index_section: bytes | None
    path: str
    size: int
    scheme: layout.ManifestNamingScheme
    dictionaries: dict[int, DictionaryValues] = dataclasses.field(default_factory=dict)

    @property
    def version(self) -> int:
        return self.manifest.version




def file_storage_version(major: int, minor: int) -> str:
    """The data storage version of a data file's ``file_major_version``/``file_minor_version``
    (Lance's ``LanceFileVersion::try_from_major_minor``: 0.0-0.2 legacy, 0.3 = 2.0)."""
    if major == 0 and minor <= 2:
        return LEGACY_STORAGE_VERSION
    if (major, minor) == (0, 3):
        return "2.0"
    if major == 2 and minor <= 2:
        return f"2.{minor}"
    raise InvalidInputError(f"unknown Lance data file version {major}.{minor}")


def data_storage_version(manifest: table_pb2.Manifest) -> str:
    """The dataset's data storage version, as Lance reads it.

    Manifests of pylance 0.15 and older have no ``data_format``: then the data files
    tell (all of them must agree), and a dataset without files is 2.0 when its writer
    flags carry the deprecated v2 flag, else legacy.
    """
    if manifest.HasField("data_format") and manifest.data_format.version:
        return manifest.data_format.version
    found = {file_storage_version(f.file_major_version, f.file_minor_version)
             for fragment in manifest.fragments for f in fragment.files}
    if len(found) > 1:
        raise CorruptFileError(f"data files of version {manifest.version} mix storage versions {sorted(found)}")
    if found:
        return found.pop()
    if manifest.writer_feature_flags & feature_flags.USE_V2_FORMAT_DEPRECATED:
        return "2.0"
    return LEGACY_STORAGE_VERSION


def next_fragment_id(manifest: table_pb2.Manifest | None) -> int:
    """The id a new fragment gets: above ``max_fragment_id``, or (manifests written before
    it existed, or with a max of 0, which proto3 does not store) above every fragment's id."""
    if manifest is None:
        return 0
    highest = max((f.id for f in manifest.fragments), default=-1)
    if manifest.HasField("max_fragment_id"):
        highest = max(highest, manifest.max_fragment_id)
    return highest + 1


def serialize_manifest(
    manifest: table_pb2.Manifest,
    index_section: bytes | None,
    dictionaries: dict[int, DictionaryValues] | None = None,
) -> bytes:
    """Frame a manifest (and the raw IndexSection bytes, if any) as a manifest file.

    ``dictionaries`` (of the version the manifest was built on) are written first, as Lance
    writes them, for every field that still has the same id and type; a legacy dictionary
    field whose values are not given is an error, never a manifest pointing at nothing.
    """
    parts: list[bytes] = []
    offset = 0
    for field in manifest.fields:
        if not field.HasField("dictionary") or not field.dictionary.length:
            continue
        values = (dictionaries or {}).get(field.id)
        if values is None or values.logical_type != field.logical_type:
            raise UnsupportedFeatureError(
                f"the values of legacy dictionary field {field.name!r} are not known: cannot write its manifest")
        blob, field.dictionary.offset = values.write_at(offset)
        parts.append(blob)
        offset += len(blob)
    if index_section is not None:
        manifest.index_section = offset
        parts += [_LEN.pack(len(index_section)), index_section]
        offset += _LEN.size + len(index_section)
    else:
        manifest.ClearField("index_section")
    # We never write inline transactions: the .txn file is authoritative.
    manifest.ClearField("transaction_section")
    manifest.ClearField("transaction_section_deprecated")
    body = manifest.SerializeToString()
    parts += [_LEN.pack(len(body)), body, _FOOTER.pack(offset, 0, 2, MAGIC)]
    return b"".join(parts)


def _dictionary_values(data: bytes, manifest: table_pb2.Manifest, path: str) -> dict[int, DictionaryValues]:
    """The legacy dictionary values stored in manifest file ``data`` (see :class:`DictionaryValues`)."""
    found = {}
    for field in manifest.fields:
        if not field.HasField("dictionary") or not field.dictionary.length:
            continue
        value_type = arrow_type_of(field.logical_type).value_type
        count, offset = field.dictionary.length, field.dictionary.offset
        if pa.types.is_binary(value_type) or pa.types.is_string(value_type) \
                or pa.types.is_large_binary(value_type) or pa.types.is_large_string(value_type):
            end = offset + 8 * (count + 1)
            if offset < 0 or end > len(data):
                raise CorruptFileError(path, f"dictionary of field {field.name!r} is outside the file")
            positions = np.frombuffer(data, "<i8", count + 1, offset)
            start, stop = int(positions[0]), int(positions[-1])
            if start < 0 or stop > offset or np.any(np.diff(positions) < 0):
                raise CorruptFileError(path, f"dictionary of field {field.name!r} has bad value positions")
            found[field.id] = DictionaryValues(field.logical_type, data[start:stop], positions - start)
        elif pa.types.is_primitive(value_type) and value_type.bit_width % 8 == 0:
            end = offset + count * value_type.bit_width // 8
            if offset < 0 or end > len(data):
                raise CorruptFileError(path, f"dictionary of field {field.name!r} is outside the file")
            found[field.id] = DictionaryValues(field.logical_type, data[offset:end], None)
        else:
            raise UnsupportedFeatureError(f"{path}: dictionary values of type {value_type} (field {field.name!r})")
    return found


def read_section(data: bytes, position: int, path: str, what: str) -> bytes:
    """The length-prefixed section at ``position`` of manifest file bytes."""
    if position < 0 or position + _LEN.size > len(data) - _FOOTER.size:
        raise CorruptFileError(path, f"{what} position {position} is outside the file")
    (length,) = _LEN.unpack_from(data, position)
    end = position + _LEN.size + length
    if end > len(data) - _FOOTER.size:
        raise CorruptFileError(path, f"{what} length {length} runs past the footer")
    return data[position + _LEN.size : end]


def manifest_body(data: bytes, path: str) -> bytes:
    """Check the footer of manifest file bytes and return the Manifest section's bytes."""
    if len(data) < _FOOTER.size + _LEN.size:
        raise CorruptFileError(path, f"manifest file is truncated ({len(data)} bytes)")
    position, _major, _minor, magic = _FOOTER.unpack_from(data, len(data) - _FOOTER.size)
    if magic != MAGIC:
        raise CorruptFileError(path, f"bad magic {magic!r}, expected {MAGIC!r}")
    body = read_section(data, position, path, "manifest")
    if position + _LEN.size + len(body) != len(data) - _FOOTER.size:
        raise CorruptFileError(path, "manifest length does not match the file size")
    return body


def parse_manifest(data: bytes, path: str, scheme: layout.ManifestNamingScheme) -> ManifestFile:
    """Parse manifest file bytes; raise CorruptFileError naming ``path`` if malformed."""
    body = manifest_body(data, path)
    manifest = table_pb2.Manifest()
    try:
        manifest.ParseFromString(body)
    except DecodeError as exc:
        raise CorruptFileError(path, f"manifest protobuf does not decode: {exc}") from exc
    index_section = None
    if manifest.HasField("index_section"):
        index_section = read_section(data, manifest.index_section, path, "index section")
    return ManifestFile(manifest, index_section, path, len(data), scheme, _dictionary_values(data, manifest, path))


def list_versions(store: ObjectStore) -> dict[int, layout.ManifestNamingScheme]:
    """All committed versions found in ``_versions/`` with their naming scheme (one listing)."""
    if store.external_manifests is not None:
        external.resolve_latest(store, store.external_manifests)  # finish a half-done commit first
    found: dict[int, layout.ManifestNamingScheme] = {}
    for name in store.list_names(layout.VERSIONS_DIR):
        parsed = layout.parse_manifest_name(name)
        if parsed is not None:
            found[parsed[0]] = parsed[1]
    return found


def naming_scheme(versions: dict[int, layout.ManifestNamingScheme]) -> layout.ManifestNamingScheme:
    """The dataset's scheme: V1 only when every existing manifest is V1-named."""
    if versions and all(s is layout.ManifestNamingScheme.V1 for s in versions.values()):
        return layout.ManifestNamingScheme.V1
    return layout.ManifestNamingScheme.V2


def version_scheme(
    store: ObjectStore, version: int, prefer: layout.ManifestNamingScheme | None = None
) -> layout.ManifestNamingScheme | None:
    """The naming scheme under which ``version`` exists, or None if it does not exist."""
    order = [layout.ManifestNamingScheme.V2, layout.ManifestNamingScheme.V1]
    if prefer is layout.ManifestNamingScheme.V1:
        order.reverse()
    for scheme in order:
        if store.exists(layout.manifest_path(version, scheme)):
            return scheme
    return None


def probe_newer(
    store: ObjectStore, version: int, scheme: layout.ManifestNamingScheme
) -> tuple[int, layout.ManifestNamingScheme]:
    """Starting from an existing ``version``, step to the last consecutive existing version.

    Versions are contiguous, so this finds the latest with one existence check
    per newer version, independent of how many old versions exist. Stores with
    an external manifest table or an ordered listing answer in one request.
    """
    if store.external_manifests is not None or store.lexically_ordered:
        latest = _resolve_latest(store)
        return latest if latest is not None and latest[0] > version else (version, scheme)
    while True:
        found = version_scheme(store, version + 1, scheme)
        if found is None:
            return version, scheme
        version, scheme = version + 1, found


def _latest_from_sorted_listing(store: ObjectStore) -> tuple[int, layout.ManifestNamingScheme] | None:
    """Newest version from a lexically ordered listing: the first V2 name, else the max of all names."""
    best: tuple[int, layout.ManifestNamingScheme] | None = None
    for name in store.iter_sorted_names(layout.VERSIONS_DIR):
        parsed = layout.parse_manifest_name(name)
        if parsed is None:
            continue
        if best is None and parsed[1] is layout.ManifestNamingScheme.V2:
            return parsed  # V2 names sort newest first
        if best is None or parsed[0] > best[0]:
            best = parsed  # V1 names do not sort by version: look at all
    return best


def _resolve_latest(store: ObjectStore) -> tuple[int, layout.ManifestNamingScheme] | None:
    """Latest version from the external table, else from an ordered listing."""
    if store.external_manifests is not None:
        found = external.resolve_latest(store, store.external_manifests)
        if found is not None:
            return found
        # No row yet: the dataset was committed without the table so far.
    if store.lexically_ordered:
        return _latest_from_sorted_listing(store)
    versions = list_versions(store)
    if not versions:
        return None
    latest = max(versions)
    return latest, versions[latest]


def _hinted_version(store: ObjectStore) -> int | None:
    try:
        value = json.loads(store.read(layout.LATEST_VERSION_HINT))["version"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def latest_version(store: ObjectStore) -> tuple[int, layout.ManifestNamingScheme] | None:
    """The newest committed version and its naming scheme, or None for no dataset.

    With an external manifest table, the table decides. On lexically ordered
    object stores the first V2 name of ``_versions/`` is the latest (one small
    listing page). Elsewhere: the (best-effort) hint file, probing forward from
    it; listing ``_versions/`` when there is no usable hint.
    """
    if store.external_manifests is not None or store.lexically_ordered:
        return _resolve_latest(store)
    hinted = _hinted_version(store)
    if hinted is not None:
        scheme = version_scheme(store, hinted)
        if scheme is not None:
            return probe_newer(store, hinted, scheme)
    versions = list_versions(store)
    if not versions:
        return None
    latest = max(versions)
    return latest, versions[latest]


def _migrated(store: ObjectStore, manifest_file: ManifestFile) -> ManifestFile:
    """Old manifests' fragment counts derived from the files, as Lance reads them, and data files
    pylance 14 refuses to open refused (see core.migrate)."""
    from airflow_lance.core.migrate import check_column_indices, migrate_fragment_stats  # imports this module

    bases.register(store, manifest_file.manifest)
    check_column_indices(manifest_file.manifest)
    migrate_fragment_stats(store, manifest_file.manifest)
    return manifest_file


def read_manifest(store: ObjectStore, version: int, scheme: layout.ManifestNamingScheme | None = None) -> ManifestFile:
    """Read the manifest of ``version``: the given scheme, else the V2 name first, then V1."""
    schemes = [scheme] if scheme else [layout.ManifestNamingScheme.V2, layout.ManifestNamingScheme.V1]
    for candidate in schemes:
        path = layout.manifest_path(version, candidate)
        try:
            data = store.read(path)
        except FileNotFoundError:
            continue
        return _migrated(store, parse_manifest(data, path, candidate))
    if store.external_manifests is not None:
        # Committed in the table but not yet moved to its final name: finish it, read again.
        found = external.resolve_version(store, store.external_manifests, version)
        if found is not None:
            path = layout.manifest_path(version, found)
            try:
                return _migrated(store, parse_manifest(store.read(path), path, found))
            except FileNotFoundError:
                pass  # the row outlived its manifest (cleaned up)
    raise VersionNotFoundError(f"version {version} of {store.uri} does not exist")


def read_latest_manifest(store: ObjectStore) -> ManifestFile:
    """Read the newest committed version; DatasetNotFoundError if there is none."""
    found = latest_version(store)
    if found is None:
        raise DatasetNotFoundError(f"no Lance dataset at {store.uri}")
    return read_manifest(store, *found)
