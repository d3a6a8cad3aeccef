"""Page decoders for encodings pylance 2.0 does not write by default (hand-built pages)."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest

from airflow_lance.core._proto import encodings_v2_0_pb2 as enc
from airflow_lance.core.errors import CorruptFileError, UnsupportedFeatureError
from airflow_lance.core.file.decode import Page, decode_array


def _page(*buffers: bytes) -> Page:
    return Page([pa.py_buffer(b) for b in buffers], "hand.lance", "test page")


def _flat(bits: int, index: int = 0, scheme: str = "") -> enc.ArrayEncoding:
    flat = enc.Flat(bits_per_value=bits, buffer=enc.Buffer(buffer_index=index))
    if scheme:
        flat.compression.scheme = scheme
    return enc.ArrayEncoding(flat=flat)


def test_constant():
    encoding = enc.ArrayEncoding(constant=enc.Constant(value=struct.pack("<i", -7)))
    assert decode_array(encoding, _page(), 3, pa.int32()).to_pylist() == [-7, -7, -7]
    with pytest.raises(CorruptFileError):
        decode_array(encoding, _page(), 3, pa.int64())


def test_fixed_size_binary_strings():
    encoding = enc.ArrayEncoding(fixed_size_binary=enc.FixedSizeBinary(bytes=_flat(8), byte_width=2))
    out = decode_array(encoding, _page(b"aabbcc"), 3, pa.string())
    assert out.to_pylist() == ["aa", "bb", "cc"]
    with pytest.raises(CorruptFileError):
        decode_array(encoding, _page(b"aabb"), 3, pa.string())


@pytest.mark.parametrize("scheme,codec,prefix", [("zstd", "zstd", "<Q"), ("lz4", "lz4_raw", "<I")])
def test_compressed_flat_values(scheme, codec, prefix):
    values = np.arange(1000, dtype=np.int64)
    raw = values.tobytes()
    packed = struct.pack(prefix, len(raw)) + pa.Codec(codec).compress(raw, asbytes=True)
    out = decode_array(_flat(64, scheme=scheme), _page(packed), 1000, pa.int64())
    assert out.equals(pa.array(values))
    with pytest.raises(CorruptFileError, match="decompress"):
        decode_array(_flat(64, scheme=scheme), _page(packed[:-10]), 1000, pa.int64())


def test_unknown_compression_and_encodings():
    with pytest.raises(UnsupportedFeatureError, match="brotli"):
        decode_array(_flat(64, scheme="brotli"), _page(b"x" * 8), 1, pa.int64())
    fsst = enc.ArrayEncoding(fsst=enc.Fsst(symbol_table=b"x"))
    with pytest.raises(UnsupportedFeatureError, match="fsst"):
        decode_array(fsst, _page(), 1, pa.string())
    bitpacked = enc.ArrayEncoding(bitpacked=enc.Bitpacked(compressed_bits_per_value=3))
    with pytest.raises(UnsupportedFeatureError, match="bitpacked"):
        decode_array(bitpacked, _page(b"\x00"), 1, pa.int32())
    column_buffer = enc.ArrayEncoding(flat=enc.Flat(bits_per_value=8, buffer=enc.Buffer(buffer_type=enc.Buffer.column)))
    with pytest.raises(UnsupportedFeatureError, match="buffer type"):
        decode_array(column_buffer, _page(b"\x00"), 1, pa.int8())


def test_flat_width_and_size_checks():
    with pytest.raises(CorruptFileError, match="32 bits"):
        decode_array(_flat(32), _page(b"\x00" * 8), 1, pa.int64())
    with pytest.raises(CorruptFileError, match="needs 16"):
        decode_array(_flat(64), _page(b"\x00" * 8), 2, pa.int64())
    with pytest.raises(CorruptFileError, match="buffer index"):
        decode_array(_flat(64, index=3), _page(b"\x00" * 8), 1, pa.int64())


def test_binary_null_adjustment_and_bad_offsets():
    binary = enc.ArrayEncoding(binary=enc.Binary(
        indices=enc.ArrayEncoding(nullable=enc.Nullable(no_nulls=enc.Nullable.NoNull(values=_flat(64)))),
        bytes=_flat(8, 1),
        null_adjustment=5,
    ))
    out = decode_array(binary, _page(struct.pack("<4Q", 1, 6, 4, 4), b"accc"), 4, pa.string())
    assert out.to_pylist() == ["a", None, "ccc", ""]  # the example of the format notes
    with pytest.raises(CorruptFileError, match="monotonic"):
        decode_array(binary, _page(struct.pack("<4Q", 3, 1, 4, 4), b"accc"), 4, pa.string())
    with pytest.raises(CorruptFileError, match="monotonic"):
        decode_array(binary, _page(struct.pack("<4Q", 1, 2, 3, 4), b"acc"), 4, pa.large_string())
