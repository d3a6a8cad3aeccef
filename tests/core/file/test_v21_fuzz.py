"""Mutated 2.1/2.2 (and legacy) files: only typed errors, in bounded time.

Real files (written by pylance when it is installed, else by us) are
mutated at random (byte flips, overwritten integers, truncation, field
values in the column metadata) and read; the only acceptable outcomes are
a table or ``CorruptFileError`` / ``UnsupportedFeatureError``, within a
per-file deadline. ``FUZZ_TRIALS`` mutations per file run by default; the
``slow`` variant runs many more (``make stress``).
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import signal
import struct
import sys
import zlib

import numpy as np
import pyarrow as pa
import pytest

from google.protobuf import any_pb2

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core._proto import file2_pb2
from airflow_lance.core.errors import CorruptFileError, UnsupportedFeatureError
from airflow_lance.core.file import LanceFileReader, LanceFileWriter
from airflow_lance.core.schema import LanceSchema

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from v2x_tables import mixed_table  # noqa: E402

EXPECTED = (CorruptFileError, UnsupportedFeatureError)
FUZZ_TRIALS = 120
SLOW_TRIALS = 3000


@contextlib.contextmanager
def _deadline(seconds: int):
    def fail(*_):
        raise TimeoutError("reader hangs")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _table() -> pa.Table:
    table = mixed_table(600, seed=11)
    return table.drop_columns(["vec128", "long_str"]).append_column(
        "long_str", pa.array(["y" * (300 + i) if i % 4 else None for i in range(600)]))


def _files(tmp_path_factory) -> dict[str, tuple[bytes, LanceSchema, dict[int, int]]]:
    """version -> (file bytes, dataset schema, field id -> column)."""
    table = _table()
    out = {}
    try:
        import lance
    except ImportError:  # pragma: no cover - the oracle is a test dependency
        lance = None
    from airflow_lance.core import dataset as open_dataset
    for version in ("2.1", "2.2", "legacy"):
        if lance is None:
            if version == "legacy":
                continue
            schema = LanceSchema.from_arrow(table.schema)
            sink = io.BytesIO()
            writer = LanceFileWriter(sink, schema, version=version, max_page_bytes=4096)
            writer.write_batch(table)
            writer.finish()
            out[version] = (sink.getvalue(), schema, dict(zip(writer.field_ids, writer.column_indices)))
            continue
        uri = str(tmp_path_factory.mktemp(f"fuzz{version}") / "ds.lance")
        data = table.drop_columns(["struct", "nested_struct", "struct_list"]) if version == "legacy" else table
        lance.write_dataset(data, uri, data_storage_version=version)
        ds = open_dataset(uri)
        (fragment,) = ds.manifest_file.manifest.fragments
        (data_file,) = fragment.files
        path = pathlib.Path(uri) / "data" / data_file.path
        mapping = ({f: f for f in data_file.fields} if version == "legacy"
                   else dict(zip(data_file.fields, data_file.column_indices)))
        out[version] = (path.read_bytes(), ds.lance_schema, mapping)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(tmp_path_factory)


def _read(data: bytes, schema: LanceSchema, mapping: dict[int, int]) -> pa.Table:
    reader = LanceFileReader(pa.BufferReader(data), path="fuzz.lance", file_size=len(data))
    return reader.read(schema, column_index=mapping)


def _metadata_start(data: bytes) -> int:
    if data[-8:-4] == b"\x00\x00\x02\x00" and len(data) >= 16:  # legacy: metadata position
        return struct.unpack("<Q", data[-16:-8])[0]
    return struct.unpack("<Q", data[-40:-32])[0]


def _mutate(data: bytes, rng: np.random.Generator) -> bytes:
    buf = bytearray(data)
    meta = min(_metadata_start(data), len(data) - 1)
    kind = int(rng.integers(0, 5))
    if kind == 0:  # truncate
        return bytes(buf[: int(rng.integers(0, len(buf)))])
    low = meta if rng.random() < 0.6 else 0  # metadata is small: aim at it more often
    if kind in (1, 2):  # flip a few bytes
        for _ in range(int(rng.integers(1, 4 if kind == 1 else 12))):
            buf[int(rng.integers(low, len(buf)))] ^= int(rng.integers(1, 256))
        return bytes(buf)
    if kind == 3:  # overwrite an integer with an extreme value
        width = int(rng.choice([1, 2, 4, 8]))
        at = int(rng.integers(low, max(low + 1, len(buf) - width)))
        value = int(rng.choice([0, 1, 2**(8 * width) - 1, 2**(8 * width - 1), int(rng.integers(0, 2**16))]))
        buf[at: at + width] = (value % 2**(8 * width)).to_bytes(width, "little")
        return bytes(buf)
    return bytes(buf[: int(rng.integers(low, len(buf)))] + rng.bytes(int(rng.integers(1, 64))) + buf[-40:])


def _page_field_mutations(data: bytes, rng: np.random.Generator) -> bytes | None:
    """Change one numeric field of a page's metadata (lengths, offsets, sizes)."""
    if data[-8:-4] == b"\x00\x00\x02\x00":
        return None
    cms, cmo, gbo, n_global, n_columns, major, minor, magic = struct.unpack("<QQQIIHH4s", data[-40:])
    column = int(rng.integers(0, n_columns))
    pos, size = struct.unpack_from("<QQ", data, cmo + 16 * column)
    metadata = file2_pb2.ColumnMetadata.FromString(data[pos: pos + size])
    if not metadata.pages:
        return None
    page = metadata.pages[int(rng.integers(0, len(metadata.pages)))]
    choice = int(rng.integers(0, 5))
    value = int(rng.choice([0, 1, 7, 2**31, 2**62]))
    if choice >= 3:  # a scalar inside the page layout (counts, widths, flags, enums)
        packed = any_pb2.Any.FromString(page.encoding.direct.encoding)
        layout = pb.PageLayout.FromString(packed.value)
        scalars = list(_scalar_fields(layout))
        if not scalars:
            return None
        message, field = scalars[int(rng.integers(0, len(scalars)))]
        if field.type == field.TYPE_BOOL:
            setattr(message, field.name, not getattr(message, field.name))
        elif field.type == field.TYPE_BYTES:
            setattr(message, field.name, rng.bytes(int(rng.integers(0, 40))))
        elif field.type == field.TYPE_ENUM:
            setattr(message, field.name, int(rng.integers(0, 8)))
        else:
            limit = 2**32 - 1 if field.type in (field.TYPE_UINT32, field.TYPE_INT32) else 2**63
            setattr(message, field.name, int(rng.choice([0, 1, 3, 8, 64, 1000, limit])) % (limit + 1))
        packed.value = layout.SerializeToString()
        page.encoding.direct.encoding = packed.SerializeToString()
    elif choice == 0:
        page.length = value
    elif choice == 1 and page.buffer_sizes:
        page.buffer_sizes[int(rng.integers(0, len(page.buffer_sizes)))] = value
    elif page.buffer_offsets:
        page.buffer_offsets[int(rng.integers(0, len(page.buffer_offsets)))] = value
    new = metadata.SerializeToString()
    entries = [list(struct.unpack_from("<QQ", data, cmo + 16 * i)) for i in range(n_columns)]
    delta = len(new) - size
    entries[column][1] = len(new)
    for entry in entries[column + 1:]:
        entry[0] += delta
    tables = b"".join(struct.pack("<QQ", *e) for e in entries) + data[gbo:-40]
    footer = struct.pack("<QQQIIHH4s", cms, cmo + delta, gbo + delta, n_global, n_columns, major, minor, magic)
    return data[:pos] + new + data[pos + size:cmo] + tables + footer


def _scalar_fields(message):
    """(message, field) of every set non-repeated scalar in a protobuf tree."""
    for field, value in message.ListFields():
        if field.message_type is not None:
            if field.is_repeated:
                for item in value:
                    yield from _scalar_fields(item)
            else:
                yield from _scalar_fields(value)
        elif not field.is_repeated:
            yield message, field


def _fuzz(data: bytes, schema: LanceSchema, mapping: dict[int, int], trials: int, seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    outcomes = {"ok": 0, "error": 0}
    for trial in range(trials):
        mutated = _page_field_mutations(data, rng) if trial % 4 == 3 else None
        if mutated is None:
            mutated = _mutate(data, rng)
        with _deadline(20):
            try:
                _read(mutated, schema, mapping)
                outcomes["ok"] += 1
            except EXPECTED:
                outcomes["error"] += 1
    return outcomes


@pytest.mark.parametrize("version", ["2.1", "2.2", "legacy"])
def test_real_files_read(files, version):
    if version not in files:
        pytest.skip("legacy files need pylance")
    data, schema, mapping = files[version]
    table = _read(data, schema, mapping)
    assert table.num_rows == 600


@pytest.mark.parametrize("version", ["2.1", "2.2", "legacy"])
def test_fuzzed_files_give_typed_errors(files, version):
    if version not in files:
        pytest.skip("legacy files need pylance")
    outcomes = _fuzz(*files[version], trials=FUZZ_TRIALS, seed=zlib.crc32(version.encode()))
    assert outcomes["error"] > FUZZ_TRIALS // 5


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.1", "2.2", "legacy"])
def test_fuzzed_files_give_typed_errors_long(files, version):
    if version not in files:
        pytest.skip("legacy files need pylance")
    for seed in range(SLOW_TRIALS // 500):
        _fuzz(*files[version], trials=500, seed=1000 + seed)


@pytest.mark.parametrize("cut", [0, 1, 16, 39, 40, 41, 500, -1, -16, -41, -300])
@pytest.mark.parametrize("version", ["2.1", "2.2", "legacy"])
def test_truncated_files(files, version, cut):
    if version not in files:
        pytest.skip("legacy files need pylance")
    data, schema, mapping = files[version]
    with _deadline(20), pytest.raises(EXPECTED):
        _read(data[:cut], schema, mapping)
