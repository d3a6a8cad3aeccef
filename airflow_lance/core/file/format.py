"""Container layout of a Lance 2.0 data file (format notes 6.1).

::

    [page buffers]          each 64-byte aligned, gaps filled with 0x48
    [global buffer 0]       64-byte aligned FileDescriptor (schema + row count)
    [column metadata ...]   ColumnMetadata messages, back to back
    [CMO table]             (u64 position, u64 size) per column
    [GBO table]             (u64 position, u64 size) per global buffer
    [footer, 40 bytes]      see :class:`Footer`

This module holds the constants, the footer codec and the ``google.protobuf.Any``
wrapping of encodings (type URLs are ``"/" + full message name``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from airflow_lance.core._proto import encodings_v2_0_pb2, file2_pb2
from airflow_lance.core.errors import CorruptFileError, UnsupportedFeatureError

MAGIC = b"LANC"
ALIGNMENT = 64
PADDING_BYTE = b"\x48"
FOOTER = struct.Struct("<QQQIIHH4s")
FOOTER_SIZE = FOOTER.size  # 40
TABLE_ENTRY = struct.Struct("<QQ")
#: Footer version pylance writes for "2.0" files; (2, 0) is read as well.
WRITE_VERSION = (0, 3)
V2_0_VERSIONS = ((0, 3), (2, 0))
#: 2.1+ files: only leaf columns, structural page layouts (see ``v21``).
V2_1_VERSIONS = ((2, 1), (2, 2))
READ_VERSIONS = (*V2_0_VERSIONS, *V2_1_VERSIONS)
#: Footer versions of legacy (0.1) files (see ``legacy``).
LEGACY_VERSIONS = ((0, 0), (0, 1), (0, 2))

ARRAY_ENCODING_URL = "/lance.encodings.ArrayEncoding"
COLUMN_ENCODING_URL = "/lance.encodings.ColumnEncoding"


@dataclass(frozen=True)
class Footer:
    """The 40-byte footer at the end of every 2.x data file."""

    column_meta_start: int
    cmo_table_start: int
    gbo_table_start: int
    num_global_buffers: int
    num_columns: int
    major: int
    minor: int

    def pack(self) -> bytes:
        """Serialized footer bytes (magic included)."""
        return FOOTER.pack(
            self.column_meta_start,
            self.cmo_table_start,
            self.gbo_table_start,
            self.num_global_buffers,
            self.num_columns,
            self.major,
            self.minor,
            MAGIC,
        )

    @classmethod
    def parse(cls, data: bytes, file_size: int, path: str) -> Footer:
        """Parse and sanity-check the last 40 bytes of a file of ``file_size`` bytes."""
        if len(data) != FOOTER_SIZE:
            raise CorruptFileError(path, f"file too small for a Lance footer ({file_size} bytes)")
        *fields, magic = FOOTER.unpack(data)
        if magic != MAGIC:
            raise CorruptFileError(path, f"bad magic {magic!r} (expected {MAGIC!r})")
        footer = cls(*fields)
        if (footer.major, footer.minor) not in READ_VERSIONS:
            raise UnsupportedFeatureError(
                f"{path}: data file version {footer.major}.{footer.minor} is not supported "
                "(supported: legacy 0.1, 2.0, 2.1, 2.2)"
            )
        end = file_size - FOOTER_SIZE
        if not (
            footer.column_meta_start <= footer.cmo_table_start
            and footer.cmo_table_start + TABLE_ENTRY.size * footer.num_columns <= footer.gbo_table_start
            and footer.gbo_table_start + TABLE_ENTRY.size * footer.num_global_buffers <= end
        ):
            raise CorruptFileError(path, "footer offsets out of range")
        return footer


def align_padding(position: int, alignment: int = ALIGNMENT) -> int:
    """Bytes of padding needed to bring ``position`` to the next ``alignment`` (64-byte) boundary."""
    return -position % alignment


def wrap_any(message: Message, type_url: str) -> file2_pb2.Encoding:
    """A ``file2.Encoding`` holding ``message`` directly as a serialized Any."""
    packed = any_pb2.Any(type_url=type_url, value=message.SerializeToString())
    return file2_pb2.Encoding(direct=file2_pb2.DirectEncoding(encoding=packed.SerializeToString()))


COLUMN_ENCODING = wrap_any(
    encodings_v2_0_pb2.ColumnEncoding(values={}), COLUMN_ENCODING_URL
)


def unwrap_array_encoding(encoding: file2_pb2.Encoding, path: str) -> encodings_v2_0_pb2.ArrayEncoding:
    """Decode a page's ``ArrayEncoding`` (direct Any with the 2.0 type URL)."""
    if encoding.WhichOneof("location") != "direct":
        raise UnsupportedFeatureError(f"{path}: page encoding location {encoding.WhichOneof('location')!r}")
    packed = any_pb2.Any()
    out = encodings_v2_0_pb2.ArrayEncoding()
    try:
        packed.ParseFromString(encoding.direct.encoding)
        if packed.type_url != ARRAY_ENCODING_URL:
            raise UnsupportedFeatureError(f"{path}: page encoding type {packed.type_url!r} is not a 2.0 encoding")
        out.ParseFromString(packed.value)
    except DecodeError as exc:
        raise CorruptFileError(path, f"undecodable page encoding: {exc}") from exc
    return out
