"""Manifest framing, naming schemes and preservation of unknown fields."""

from __future__ import annotations

import pytest
from google.protobuf.internal import encoder

from airflow_lance.core import layout
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.manifest import parse_manifest, serialize_manifest


def test_naming_schemes_round_trip():
    for version in (1, 2, 10, 123456):
        for scheme in layout.ManifestNamingScheme:
            name = layout.manifest_path(version, scheme).split("/")[-1]
            assert layout.parse_manifest_name(name) == (version, scheme)
    assert layout.manifest_path(1, layout.ManifestNamingScheme.V2).endswith("18446744073709551614.manifest")
    for name in ("latest_version_hint.json", ".tmp-x", "18446744073709551614.manifest-abc", "d1.manifest"):
        assert layout.parse_manifest_name(name) is None


def test_unknown_fields_survive_read_modify_write():
    manifest = table_pb2.Manifest(version=3)
    # Field 24 (unknown to our protos), varint 7, as newer Lance releases write.
    raw = manifest.SerializeToString() + encoder._VarintBytes(24 << 3) + encoder._VarintBytes(7)
    parsed = table_pb2.Manifest()
    parsed.ParseFromString(raw)
    parsed.version = 4
    again = parse_manifest(serialize_manifest(parsed, None), "m", layout.ManifestNamingScheme.V2)
    assert again.manifest.SerializeToString().endswith(encoder._VarintBytes(24 << 3) + encoder._VarintBytes(7))


def test_index_section_is_framed_and_found():
    manifest = table_pb2.Manifest(version=1)
    section = table_pb2.IndexSection(indices=[table_pb2.IndexMetadata(name="id_idx")]).SerializeToString()
    data = serialize_manifest(manifest, section)
    parsed = parse_manifest(data, "m", layout.ManifestNamingScheme.V2)
    assert parsed.index_section == section and parsed.manifest.index_section == 0


@pytest.mark.parametrize("cut", [0, 5, 17, 40])
def test_truncated_manifest_is_corrupt(cut):
    data = serialize_manifest(table_pb2.Manifest(version=1, tag="x" * 30), None)
    with pytest.raises(CorruptFileError):
        parse_manifest(data[cut:] if cut else data[:-1], "m", layout.ManifestNamingScheme.V2)
