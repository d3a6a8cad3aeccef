"""A cheap, read-only view of a manifest for tasks that read every version (cleanup).

Parsing hundreds of full manifests costs most of a cleanup: each one repeats
the fragments of the previous version. This view parses the ``Manifest``
message with its fragments kept as raw bytes (a length-delimited field reads
as ``bytes`` on the wire), so identical fragments of different versions are
the same byte string: callers deduplicate them and decode each distinct
fragment once. Only the fields cleanup needs are decoded; the rest is skipped.
The file framing is the one :mod:`manifest` writes (sections, then the
manifest, then a 16-byte footer).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from google.protobuf.message import DecodeError

from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.manifest import manifest_body, read_section

_F = descriptor_pb2.FieldDescriptorProto

#: (name, number, type, label) of the Manifest fields the view decodes (numbers of ``table.proto``).
_FIELDS = [
    ("fragments", 2, _F.TYPE_BYTES, _F.LABEL_REPEATED),
    ("version", 3, _F.TYPE_UINT64, _F.LABEL_OPTIONAL),
    ("index_section", 6, _F.TYPE_UINT64, _F.LABEL_OPTIONAL),
    ("timestamp", 7, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL),
    ("reader_feature_flags", 9, _F.TYPE_UINT64, _F.LABEL_OPTIONAL),
    ("writer_feature_flags", 10, _F.TYPE_UINT64, _F.LABEL_OPTIONAL),
    ("transaction_file", 12, _F.TYPE_STRING, _F.LABEL_OPTIONAL),
]


@functools.cache
def _view_class() -> Any:
    """``ManifestView``: proto2 (so ``index_section`` has presence), built once at first use."""
    pool = descriptor_pool.DescriptorPool()
    timestamp_file = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp_file)
    pool.Add(timestamp_file)
    proto = descriptor_pb2.FileDescriptorProto(
        name="airflow_lance/manifest_view.proto",
        package="airflow_lance.view",
        syntax="proto2",
        dependency=[timestamp_file.name],
    )
    message = proto.message_type.add(name="ManifestView")
    for name, number, kind, label in _FIELDS:
        field = message.field.add(name=name, number=number, type=kind, label=label)
        if kind == _F.TYPE_MESSAGE:
            field.type_name = ".google.protobuf.Timestamp"
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("airflow_lance.view.ManifestView"))


@dataclasses.dataclass
class ManifestView:
    """What cleanup needs from one manifest file."""

    version: int
    timestamp_s: float
    reader_feature_flags: int
    writer_feature_flags: int
    transaction_file: str
    fragments: list[bytes]  # serialized DataFragment messages
    index_section: bytes | None


def read_view(data: bytes, path: str) -> ManifestView:
    """The view of manifest file bytes; CorruptFileError naming ``path`` if malformed."""
    body = manifest_body(data, path)
    view = _view_class()()
    try:
        view.ParseFromString(body)
    except DecodeError as exc:
        raise CorruptFileError(path, f"manifest protobuf does not decode: {exc}") from exc
    index_section = None
    if view.HasField("index_section"):
        index_section = read_section(data, view.index_section, path, "index section")
    return ManifestView(
        version=view.version,
        timestamp_s=view.timestamp.seconds + view.timestamp.nanos / 1e9,
        reader_feature_flags=view.reader_feature_flags,
        writer_feature_flags=view.writer_feature_flags,
        transaction_file=view.transaction_file,
        fragments=list(view.fragments),
        index_section=index_section,
    )
