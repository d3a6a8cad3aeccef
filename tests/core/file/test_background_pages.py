"""2.1+ pages encoded on the background page encoder: same contents, pages in order, bounded, errors raised."""

from __future__ import annotations

import io
import subprocess
import sys

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest
import zstandard
from google.protobuf import any_pb2

from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core.file import LanceFileReader, LanceFileWriter
from airflow_lance.core.file import writer as file_writer
from airflow_lance.core.file.v21 import write as v21_write
from airflow_lance.core.schema import LanceSchema


def _table(rows: int, seed: int = 3) -> pa.Table:
    """Every kind of leaf the encoder treats apart: compressible and random strings (with nulls),
    dictionary strings, bit-packed integers, nullable floats, lists, vectors, a struct."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefgh ", dtype=np.uint8)
    lengths = rng.integers(0, 60, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    text = pa.StringArray.from_buffers(rows, pa.py_buffer(offsets),
                                       pa.py_buffer(letters[rng.integers(0, len(letters), int(offsets[-1]))]))
    text = pa.array(text.to_numpy(zero_copy_only=False), pa.string(), mask=rng.random(rows) < 0.1)
    tag_counts = rng.integers(0, 4, rows)
    tag_offsets = np.concatenate([[0], np.cumsum(tag_counts)]).astype(np.int32)
    tags = pa.array([f"tag_{i}" for i in range(30)]).take(pa.array(rng.integers(0, 30, int(tag_offsets[-1]))))
    return pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "text": text,
        "random": pa.array([rng.bytes(24) for _ in range(rows)], pa.large_binary()),
        "category": pa.array(["red", "green", "blue"]).take(pa.array(rng.integers(0, 3, rows))),
        "score": pa.array(rng.normal(size=rows), mask=rng.random(rows) < 0.05),
        "tags": pa.ListArray.from_arrays(pa.array(tag_offsets), tags),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 8, dtype=np.float32)), 8),
        "meta": pa.StructArray.from_arrays([text, pa.array(rng.integers(0, 100, rows))], ["note", "n"]),
    })


def _write(table: pa.Table, version: str, *, batch_rows: int = 2000, max_page_bytes: int = 20_000) -> bytes:
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), max_page_bytes=max_page_bytes,
                             version=version)
    for batch in table.to_batches(max_chunksize=batch_rows):
        writer.write_batch(batch)
    writer.finish()
    return sink.getvalue()


def _read(data: bytes) -> pa.Table:
    return LanceFileReader(pa.BufferReader(data), path="test.lance").read()


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_background_pages_read_like_pages_encoded_in_place(tmp_path, monkeypatch, version):
    """Every page encoded in the background (many pages per column in flight at once): the file
    reads back as the table in our reader and in pylance's, and holds the same pages, in the same
    order per column, as a file whose pages were all encoded in place."""
    table = _table(40_000)
    monkeypatch.setattr(file_writer, "BACKGROUND_PAGE_BYTES", 1 << 40)
    in_place = _write(table, version, max_page_bytes=64_000)
    monkeypatch.setattr(file_writer, "BACKGROUND_PAGE_BYTES", 1)
    background = _write(table, version, max_page_bytes=64_000)
    assert _read(background).equals(table)
    path = tmp_path / "background.lance"
    path.write_bytes(background)
    theirs = pylance.file.LanceFileReader(str(path))
    assert theirs.read_all().to_table().equals(table.cast(theirs.metadata().schema))

    def pages(data: bytes) -> list[list[tuple[int, bytes]]]:
        reader = LanceFileReader(pa.BufferReader(data), path="test.lance")
        return [[(page.length, page.encoding.direct.encoding) for page in reader.column_metadata(column).pages]
                for column in range(reader.num_columns)]

    assert pages(background) == pages(in_place)
    text_pages = pages(background)[1]
    assert len(text_pages) > 2 * file_writer.ENCODING_PAGES  # more pages than may be in flight
    compressions = {pb.PageLayout.FromString(any_pb2.Any.FromString(encoding).value)
                    .mini_block_layout.value_compression.WhichOneof("compression")
                    for _, encoding in text_pages[:-1]}  # the last page is too small to compress
    assert compressions == ({"general"} if version == "2.2" else {"variable"})  # 2.2: zstd chunks


def test_pages_in_flight_are_bounded_and_counted(monkeypatch):
    """At most ``ENCODING_PAGES`` pages' worth of bytes are in flight after a batch, and
    ``bytes_written`` counts them (files are rolled on it)."""
    monkeypatch.setattr(file_writer, "BACKGROUND_PAGE_BYTES", 1)
    table = _table(8000).select(["text", "random", "id"])
    max_page_bytes = 10_000
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), max_page_bytes=max_page_bytes, version="2.2")
    in_flight = []
    for batch in table.to_batches(max_chunksize=500):
        before = writer.bytes_written
        writer.write_batch(batch)
        in_flight.append(writer._encoding_bytes)
        assert writer._encoding_bytes <= file_writer.ENCODING_PAGES * max_page_bytes
        assert writer.bytes_written >= before + batch.nbytes * 0.5  # nothing handed over is uncounted
    assert max(in_flight) > max_page_bytes  # several pages were in flight at once
    writer.finish()
    assert writer._encoding_bytes == 0
    assert _read(sink.getvalue()).equals(table)


def test_an_error_in_the_background_is_raised_and_the_file_refused(monkeypatch):
    monkeypatch.setattr(file_writer, "BACKGROUND_PAGE_BYTES", 1)
    encode_page = v21_write.encode_page

    def failing(nodes, leaf, *args):
        if pa.types.is_string(leaf.type):
            raise MemoryError("no memory for this page")
        return encode_page(nodes, leaf, *args)

    monkeypatch.setattr(v21_write, "encode_page", failing)
    table = _table(4000).select(["id", "text"])
    writer = LanceFileWriter(io.BytesIO(), LanceSchema.from_arrow(table.schema), max_page_bytes=5000, version="2.2")
    with pytest.raises(MemoryError, match="no memory for this page"):
        for batch in table.to_batches(max_chunksize=500):
            writer.write_batch(batch)
        writer.finish()
    with pytest.raises(Exception, match="discard this file|after finish"):
        writer.finish()


_FORK_SCRIPT = """
import io, os, sys
import numpy as np, pyarrow as pa
from airflow_lance.core.file import LanceFileReader, LanceFileWriter, writer as file_writer
from airflow_lance.core.schema import LanceSchema

file_writer.BACKGROUND_PAGE_BYTES = 1
table = pa.table({"text": pa.array([f"row {i} " * (i % 7) for i in range(20000)]), "id": np.arange(20000)})

def write_and_read():
    sink = io.BytesIO()
    writer = LanceFileWriter(sink, LanceSchema.from_arrow(table.schema), max_page_bytes=8000, version="2.2")
    for batch in table.to_batches(max_chunksize=1000):
        writer.write_batch(batch)
    writer.finish()
    return LanceFileReader(pa.BufferReader(sink.getvalue()), path="x").read().equals(table)

assert write_and_read()  # the parent's encoder threads are running
pid = os.fork()
if pid == 0:
    os._exit(0 if write_and_read() else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_writes_with_its_own_encoder():
    """A process forked after the parent's encoder threads started (Airflow's task runner, Spark's
    Python daemon) gets an encoder of its own instead of waiting on threads it does not have.
    (In a fresh interpreter: pylance, imported here, warns on fork.)"""
    result = subprocess.run([sys.executable, "-c", _FORK_SCRIPT], check=False, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_zstd_chunks_match_without_the_batch_codec_call(monkeypatch):
    """The cffi backend of ``zstandard`` (PyPy) has no ``multi_compress_to_buffer``: chunks are then
    compressed one by one, to the same bytes."""
    rng = np.random.default_rng(5)
    raw = np.frombuffer(b"abcdefgh ", dtype=np.uint8)[rng.integers(0, 9, 300_000)]
    sizes = rng.integers(1, 30_000, 40)
    sizes = sizes[np.cumsum(sizes) <= len(raw)]
    raw = raw[: int(sizes.sum())].copy()
    batched = v21_write.compress_chunks(raw, sizes, 0.9)
    monkeypatch.setattr(zstandard, "backend_features", set())
    one_by_one = v21_write.compress_chunks(raw, sizes, 0.9)
    assert batched is not None and one_by_one is not None
    assert batched[0].tobytes() == one_by_one[0].tobytes()
    assert batched[1].tolist() == one_by_one[1].tolist()
    position, decompressor, bounds = 0, zstandard.ZstdDecompressor(), np.concatenate([[0], np.cumsum(sizes)])
    for index, size in enumerate(batched[1].tolist()):
        chunk = batched[0][position: position + size].tobytes()
        assert int.from_bytes(chunk[:8], "little") == sizes[index]
        assert decompressor.decompress(chunk[8:]) == raw[bounds[index]: bounds[index + 1]].tobytes()
        position += size
    assert position == len(batched[0])
