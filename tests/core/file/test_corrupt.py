"""Malformed data files: only CorruptFileError / UnsupportedFeatureError, never a hang."""

from __future__ import annotations

import contextlib
import io
import signal
import struct

import numpy as np
import pyarrow as pa
import pytest

from airflow_lance.core.errors import CorruptFileError, UnsupportedFeatureError
from airflow_lance.core.file import LanceFileReader, LanceFileWriter
from airflow_lance.core.schema import LanceSchema

EXPECTED = (CorruptFileError, UnsupportedFeatureError)


@pytest.fixture(scope="module")
def good_file() -> bytes:
    n = 300
    table = pa.table({
        "i": pa.array([i if i % 5 else None for i in range(n)], pa.int64()),
        "s": pa.array([f"v{i}" if i % 3 else None for i in range(n)]),
        "l": pa.array([[i, None] if i % 4 else None for i in range(n)], pa.list_(pa.int16())),
        "st": pa.array([{"x": i, "y": [str(i)]} for i in range(n)]),
        "v": pa.array([[1.0, 2.0]] * n, pa.list_(pa.float32(), 2)),
        "b": pa.array([i % 2 == 0 for i in range(n)]),
        "d": pa.array([("a", "b", None)[i % 3] for i in range(n)]).dictionary_encode(),
    })
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), max_page_bytes=512)
    for batch in table.to_batches(max_chunksize=100):
        writer.write_batch(batch)
    writer.finish()
    return sink.getvalue()


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


def _open_and_read(data: bytes, file_size: int | None = None) -> pa.Table:
    reader = LanceFileReader(pa.BufferReader(data), path="bad.lance", file_size=file_size)
    return reader.read()


def test_good_file_reads(good_file):
    assert _open_and_read(good_file).num_rows == 300


@pytest.mark.parametrize("cut", [0, 1, 39, 40, 41, 100, 1000, -1, -39, -40, -41, -200])
def test_truncated(good_file, cut):
    data = good_file[:cut]
    with pytest.raises(CorruptFileError, match="bad.lance"):
        _open_and_read(data)


def test_size_mismatch(good_file):
    with pytest.raises(CorruptFileError, match="expected"):
        _open_and_read(good_file, file_size=len(good_file) + 1)


def test_bad_magic(good_file):
    with pytest.raises(CorruptFileError, match="magic"):
        _open_and_read(good_file[:-4] + b"LANX")


@pytest.mark.parametrize("version,error", [((2, 3), UnsupportedFeatureError), ((1, 0), UnsupportedFeatureError),
                                           ((2, 1), EXPECTED), ((0, 2), CorruptFileError), ((2, 0), None)])
def test_versions(good_file, version, error):
    data = good_file[:-8] + struct.pack("<HH", *version) + b"LANC"
    if error is None:
        assert _open_and_read(data).num_rows == 300
    else:
        with pytest.raises(error):
            _open_and_read(data)


@pytest.mark.parametrize("field", range(5))
@pytest.mark.parametrize("value", [0, 1, 2**31 - 1, 2**32 - 1, 2**63, 2**64 - 1])
def test_garbage_footer_values(good_file, field, value):
    cms, cmo, gbo, n_global, n_columns = struct.unpack("<QQQII", good_file[-40:-8])
    values = [cms, cmo, gbo, n_global, n_columns]
    values[field] = value if field < 3 else value % 2**32
    data = good_file[:-40] + struct.pack("<QQQII", *values) + good_file[-8:]
    with _deadline(20), contextlib.suppress(*EXPECTED):
        _open_and_read(data)


def _flip_trials(good_file: bytes, start: int, trials: int, seed: int) -> dict[str, int]:
    rng = np.random.default_rng(seed)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(trials):
        data = bytearray(good_file)
        for _ in range(rng.integers(1, 4)):
            position = int(rng.integers(start, len(data)))
            data[position] ^= int(rng.integers(1, 256))
        try:
            _open_and_read(bytes(data))
            outcomes["ok"] += 1
        except EXPECTED:
            outcomes["error"] += 1
    return outcomes


def test_random_flips_in_metadata(good_file):
    cms = struct.unpack("<Q", good_file[-40:-32])[0]
    gb_pos = struct.unpack("<Q", good_file[-56:-48])[0]
    with _deadline(60):
        outcomes = _flip_trials(good_file, min(cms, gb_pos), 1500, seed=1)
    assert outcomes["error"] > 100


def test_random_flips_anywhere(good_file):
    with _deadline(60):
        _flip_trials(good_file, 0, 500, seed=2)


def _with_column_metadata(data: bytes, column: int, metadata: bytes) -> bytes:
    """``data`` with one column's metadata replaced (later offsets shifted)."""
    cms, cmo, gbo, n_global, n_columns, major, minor, magic = struct.unpack("<QQQIIHH4s", data[-40:])
    entries = [list(struct.unpack_from("<QQ", data, cmo + 16 * i)) for i in range(n_columns)]
    pos, size = entries[column]
    delta = len(metadata) - size
    entries[column][1] = len(metadata)
    for entry in entries[column + 1:]:
        entry[0] += delta
    body = data[:pos] + metadata + data[pos + size:cmo]
    tables = b"".join(struct.pack("<QQ", *e) for e in entries) + data[gbo:-40]
    footer = struct.pack("<QQQIIHH4s", cms, cmo + delta, gbo + delta, n_global, n_columns, major, minor, magic)
    return body + tables + footer


def test_page_buffer_outside_data_region(good_file):
    reader = LanceFileReader(pa.BufferReader(good_file), path="bad.lance")
    metadata = reader.column_metadata(0)
    metadata.pages[0].buffer_offsets[0] = len(good_file)
    data = _with_column_metadata(good_file, 0, metadata.SerializeToString())
    with pytest.raises(CorruptFileError, match="outside the data region"):
        _open_and_read(data)


def _shrink_first_buffer(page) -> None:
    if page.buffer_sizes:
        page.buffer_sizes[0] = 1
    else:
        page.length += 7


@pytest.mark.parametrize("mutate", [
    lambda page: setattr(page, "length", page.length + 1),
    lambda page: setattr(page, "length", 2**62),
    _shrink_first_buffer,
    lambda page: page.encoding.direct.__setattr__("encoding", b"\x0a\x03abc"),
    lambda page: page.encoding.direct.__setattr__("encoding", b"\xff\xff"),
])
@pytest.mark.parametrize("column", range(11))
def test_inconsistent_pages(good_file, mutate, column):
    reader = LanceFileReader(pa.BufferReader(good_file), path="bad.lance")
    metadata = reader.column_metadata(column)
    mutate(metadata.pages[0])
    data = _with_column_metadata(good_file, column, metadata.SerializeToString())
    with _deadline(20), pytest.raises(EXPECTED):
        _open_and_read(data)


def test_random_flips_in_pylance_file(pylance_file):
    n = 400
    schema = pa.schema([
        pa.field("cat", pa.string()),
        pa.field("z", pa.string(), metadata={"lance-encoding:compression": "zstd"}),
        pa.field("l", pa.list_(pa.int64())),
    ])
    table = pa.table({
        "cat": [("a", "b", None)[i % 3] for i in range(n)],  # auto-dictionary
        "z": [f"q{i}" for i in range(n)],
        "l": [[i] * (i % 3) for i in range(n)],
    }, schema=schema)
    _, data_path, _, _ = pylance_file(table, max_page_bytes=1024)
    data = data_path.read_bytes()
    assert _open_and_read(data).equals(table)
    with _deadline(60):
        _flip_trials(data, 0, 300, seed=3)
        _flip_trials(data, struct.unpack("<Q", data[-40:-32])[0], 300, seed=4)
