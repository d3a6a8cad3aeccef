"""Legacy (0.1) data files and datasets written by us, checked against pylance 14 (the oracle).

pylance 14 still creates (``data_storage_version="legacy"``), appends to, deletes from and
compacts legacy datasets; so do we. Our files are compared with pylance's for the same data
byte for byte, up to the per-batch statistics pylance adds after the page table (we store none).
"""

from __future__ import annotations

import glob
import os
import pathlib
import struct
import sys

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as ours
from airflow_lance.core._proto import file_pb2, table_pb2
from airflow_lance.core.manifest import read_latest_manifest
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import open_store

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from v2x_tables import mixed_table  # noqa: E402

MIXED = mixed_table(4000)


def _extra_types(n: int) -> pa.Table:
    """Types pylance writes to legacy files that ``mixed_table`` lacks."""
    idx = np.arange(n)
    nulls = idx % 9 == 4
    return pa.table({
        "u8": pa.array((idx % 256).astype(np.uint8)),
        "i16": pa.array((idx - 500).astype(np.int16)),
        "u32": pa.array(idx.astype(np.uint32) * 7),
        "u64": pa.array(idx.astype(np.uint64) * 2**40),
        "f64": pa.array(idx / 3.0),
        "time32": pa.array((idx * 1000 % 86_400_000).astype(np.int32), pa.time32("ms")),
        "time64": pa.array(idx * 1_000_003, pa.time64("ns")),
        "duration": pa.array(idx - 10, pa.duration("s")),
        "date64": pa.array(idx * 86_400_000, pa.date64()),
        "ts_ns": pa.array(idx * 10**9 + 7, pa.timestamp("ns")),
        "ts_tz": pa.array(idx, pa.timestamp("s", "Europe/Berlin"), mask=nulls),
        "dec256": pa.array(idx - 100).cast(pa.decimal256(40, 5)),
        "fsb3": pa.array([bytes([i % 256, 1, 2]) for i in range(n)], pa.binary(3)),
        "large_bin": pa.array([b"\x00" * (i % 5) for i in range(n)], pa.large_binary()),
        "large_list_str": pa.array([[str(i)] * (i % 3) for i in range(n)], pa.large_list(pa.string())),
        "fsl_bool": pa.array([[i % 2 == 0, True, None] for i in range(n)], pa.list_(pa.bool_(), 3)),
        "dict_int": pa.array((idx % 4 * 10).astype(np.int32)).dictionary_encode(),
        "dict_i8_keys": pa.DictionaryArray.from_arrays(pa.array((idx % 3).astype(np.int8)),
                                                       pa.array(["lo", "mid", "hi"])),
        "dict_large": pa.array([("α", "β")[i % 2] for i in range(n)], pa.large_string()).dictionary_encode(),
        "struct": pa.array([{"p": i % 5, "q": [float(i)]} for i in range(n)]),
        "struct_dict": pa.StructArray.from_arrays(
            [pa.array([("u", "v")[i % 2] for i in range(n)]).dictionary_encode(), pa.array(idx)], ["dd", "k"]),
        "list_dict": pa.ListArray.from_arrays(
            pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)),
            pa.array([("m", "n", "o")[i % 3] for i in range(2 * n)]).dictionary_encode()),
    })


EXTRA = _extra_types(3000)
TABLES = {"mixed": MIXED, "extra": EXTRA}


def _legacy_parts(path: str) -> tuple[bytes, file_pb2.Metadata, table_pb2.Manifest]:
    """File bytes, Metadata and embedded Manifest of a legacy data file."""
    data = pathlib.Path(path).read_bytes()
    position, major, minor, magic = struct.unpack("<QHH4s", data[-16:])
    assert (major, minor, magic) == (0, 2, b"LANC")

    def message(at: int, msg):
        (size,) = struct.unpack_from("<I", data, at)
        msg.ParseFromString(data[at + 4:at + 4 + size])
        return msg

    metadata = message(position, file_pb2.Metadata())
    return data, metadata, message(metadata.manifest_position, table_pb2.Manifest())


def _data_files(uri: str) -> list[tuple[str, table_pb2.DataFile]]:
    manifest = read_latest_manifest(open_store(uri)).manifest
    return [(os.path.join(uri, "data", f.path), f) for fragment in manifest.fragments for f in fragment.files]


def _dictionary_bytes(data: bytes, field: file_pb2.Field, value_type: pa.DataType) -> bytes:
    """The stored dictionary values of ``field`` (binary: the bytes and positions relative to them)."""
    offset, length = field.dictionary.offset, field.dictionary.length
    if pa.types.is_primitive(value_type):
        return data[offset:offset + length * value_type.bit_width // 8]
    positions = np.frombuffer(data, "<i8", length + 1, offset)
    return data[positions[0]:positions[-1]] + (positions - positions[0]).tobytes()


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


def _assert_same_rows(mine: pa.Table, theirs: pa.Table) -> None:
    assert mine.column_names == theirs.column_names
    differing = [n for n in mine.column_names if not _decoded(mine.column(n)).equals(_decoded(theirs.column(n)))]
    assert differing == []


@pytest.mark.parametrize("name", sorted(TABLES))
def test_files_are_pylance_files_byte_for_byte(tmp_path, name):
    """Every type, several 1024-row batches, two files: pages, page table, dictionary values and
    schema equal pylance's for the same data; pylance reads our dataset as it reads its own."""
    table = TABLES[name]
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    ours.write_dataset(table, mine, data_storage_version="legacy", max_rows_per_file=2048)
    pylance.write_dataset(table, theirs, data_storage_version="legacy", max_rows_per_file=2048)

    assert pylance.dataset(mine).data_storage_version == "0.1"
    mine_files, their_files = _data_files(mine), _data_files(theirs)
    assert len(mine_files) == len(their_files) == 2
    schema = LanceSchema.from_fields(read_latest_manifest(open_store(mine)).manifest.fields)
    for (my_path, my_file), (their_path, their_file) in zip(mine_files, their_files):
        assert list(my_file.fields) == list(their_file.fields)
        assert list(my_file.column_indices) == list(their_file.column_indices) == []
        assert (my_file.file_major_version, my_file.file_minor_version) == (0, 2)
        assert my_file.file_size_bytes == os.path.getsize(my_path)
        my_data, my_meta, my_manifest = _legacy_parts(my_path)
        their_data, their_meta, their_manifest = _legacy_parts(their_path)
        assert list(my_meta.batch_offsets) == list(their_meta.batch_offsets)
        batches = len(my_meta.batch_offsets) - 1  # 1024 rows each, the last one shorter
        table_end = my_meta.page_table_position + 16 * (max(my_file.fields) + 1) * batches
        assert my_meta.page_table_position == their_meta.page_table_position
        assert my_data[:table_end] == their_data[:table_end]  # every page and the page table
        assert not my_meta.HasField("statistics")
        assert len(my_manifest.fields) == len(their_manifest.fields)
        for my_field, their_field in zip(my_manifest.fields, their_manifest.fields):
            assert my_field.HasField("dictionary") == their_field.HasField("dictionary")
            if my_field.HasField("dictionary"):
                assert my_field.dictionary.length == their_field.dictionary.length
                value_type = schema.arrow_field(my_field.id).type.value_type
                assert _dictionary_bytes(my_data, my_field, value_type) == \
                    _dictionary_bytes(their_data, their_field, value_type)
            my_field.ClearField("dictionary")
            their_field.ClearField("dictionary")
            assert my_field == their_field
        assert my_manifest.data_format == their_manifest.data_format

    _assert_same_rows(pylance.dataset(mine).to_table(), pylance.dataset(theirs).to_table())
    _assert_same_rows(ours.dataset(mine).to_table(), pylance.dataset(mine).to_table())
    # the table manifest carries the dictionary values, as pylance's does
    my_dicts = read_latest_manifest(open_store(mine)).dictionaries
    their_dicts = read_latest_manifest(open_store(theirs)).dictionaries
    assert sorted(my_dicts) == sorted(their_dicts) and my_dicts
    assert all(my_dicts[k].to_arrow().equals(their_dicts[k].to_arrow()) for k in my_dicts)


def test_nulls_read_back_as_pylance_reads_its_own(tmp_path):
    table = pa.table({
        "i": pa.array([1, None, 3], pa.int32()),
        "b": pa.array([True, None, True]),
        "s": pa.array(["a", None, ""]),
        "l": pa.array([[1], None, []], pa.list_(pa.int8())),
        "st": pa.array([{"x": 1, "y": "p"}, None, {"x": None, "y": None}]),
        "v": pa.array([[1.0, 2.0], None, [3.0, None]], pa.list_(pa.float32(), 2)),
        "n": pa.nulls(3),
    })
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    ours.write_dataset(table, mine, data_storage_version="0.1")  # "0.1" is an alias of "legacy"
    pylance.write_dataset(table, theirs, data_storage_version="legacy")
    read = pylance.dataset(mine).to_table()
    assert read.equals(pylance.dataset(theirs).to_table())
    assert read.to_pydict() == {
        "i": [1, 0, 3], "b": [True, False, True], "s": ["a", None, None], "l": [[1], [], []],
        "st": [{"x": 1, "y": "p"}, {"x": 0, "y": None}, {"x": 0, "y": None}],
        "v": [[1.0, 2.0], [0.0, 0.0], [3.0, 0.0]], "n": [None, None, None],
    }
    assert ours.dataset(mine).to_table().equals(read)


def _rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count)
    return pa.table({
        "id": pa.array(ids),
        "name": pa.array([f"n{i}" for i in ids]),
        "color": pa.DictionaryArray.from_arrays(pa.array((ids % 3).astype(np.int32)),
                                                pa.array(["red", "green", "blue"])),
        "tags": pa.array([[int(i)] * int(i % 3) for i in ids], pa.list_(pa.int64())),
    })


def _versions(uri: str) -> set[tuple[int, int]]:
    return {(f.file_major_version, f.file_minor_version) for _, f in _data_files(uri)}


def test_append_delete_compact_a_dataset_pylance_wrote(tmp_path):
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_rows(0, 3000), uri, data_storage_version="legacy", max_rows_per_file=1000)

    ours.write_dataset(_rows(3000, 2500), uri, mode="append", max_rows_per_file=2048)
    expected = _rows(0, 5500)
    assert _versions(uri) == {(0, 2)}
    assert pylance.dataset(uri).to_table().equals(expected)
    assert ours.dataset(uri).to_table().equals(expected)

    ours.dataset(uri).delete("id % 4 = 1 OR id BETWEEN 100 AND 2990")
    expected = expected.filter(pc.invert(pc.or_(pc.equal(pc.bit_wise_and(expected["id"], 3), 1),
                                                pc.and_(pc.greater_equal(expected["id"], 100),
                                                        pc.less_equal(expected["id"], 2990)))))
    assert pylance.dataset(uri).to_table().equals(expected)

    metrics = ours.compact_files(uri)
    assert metrics.fragments_removed >= 2
    assert _versions(uri) == {(0, 2)}
    assert pylance.dataset(uri).data_storage_version == "0.1"
    assert pylance.dataset(uri).to_table().equals(expected)
    assert ours.dataset(uri).to_table().equals(expected)

    pylance.write_dataset(_rows(9000, 10), uri, mode="append")  # pylance carries on after us
    expected = pa.concat_tables([expected, _rows(9000, 10)])
    assert pylance.dataset(uri).to_table().equals(expected)
    assert ours.dataset(uri).to_table().equals(expected)
    ours.write_dataset(_rows(9100, 5), uri, mode="append")
    assert pylance.dataset(uri).to_table().equals(pa.concat_tables([expected, _rows(9100, 5)]))


def test_append_with_another_dictionary_is_refused_before_writing_as_pylance_refuses(tmp_path):
    uri = str(tmp_path / "ds.lance")
    ours.write_dataset(_rows(0, 10), uri, data_storage_version="legacy")
    other = _rows(10, 5).set_column(2, "color", pa.array(["red", "pink", "red", "red", "red"]).dictionary_encode())
    with pytest.raises(OSError, match="dictionary for `color` did not match"):
        pylance.write_dataset(other, uri, mode="append")
    before = sorted(os.listdir(os.path.join(uri, "data")))
    with pytest.raises(ours.SchemaMismatchError, match="dictionary for `color` did not match") as caught:
        ours.write_dataset(other, uri, mode="append")
    assert isinstance(caught.value, OSError)
    assert sorted(os.listdir(os.path.join(uri, "data"))) == before
    assert pylance.dataset(uri).to_table().equals(_rows(0, 10))


def test_batches_with_other_dictionaries_are_rekeyed_onto_the_files_dictionary(tmp_path):
    """pylance stores every batch's keys against the first batch's values (reading back wrong
    values); we re-key them, and refuse a value the dictionary lacks."""
    first = pa.record_batch({"d": pa.array(["a", "b", "c"]).dictionary_encode()})
    second = pa.record_batch({"d": pa.array(["c", "a", None]).dictionary_encode()})  # dictionary [c, a]
    reader = pa.RecordBatchReader.from_batches(first.schema, [first, second])
    uri = str(tmp_path / "ds.lance")
    ours.write_dataset(reader, uri, data_storage_version="legacy")
    assert pylance.dataset(uri).to_table()["d"].to_pylist() == ["a", "b", "c", "c", "a", "a"]  # null key: 0

    third = pa.record_batch({"d": pa.array(["a", "z"]).dictionary_encode()})
    with pytest.raises(ours.SchemaMismatchError, match=r"\['z'\]"):
        ours.write_dataset(pa.RecordBatchReader.from_batches(first.schema, [first, third]),
                           str(tmp_path / "other.lance"), data_storage_version="legacy")


def test_overwrite_takes_the_new_data_dictionary(tmp_path):
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_rows(0, 10), uri, data_storage_version="legacy")
    new = pa.table({"color": pa.array(["x", "y", "x"]).dictionary_encode(), "n": pa.array([1, 2, 3])})
    ours.write_dataset(new, uri, mode="overwrite")
    assert pylance.dataset(uri).data_storage_version == "0.1"
    assert pylance.dataset(uri).to_table().equals(new)
    assert read_latest_manifest(open_store(uri)).dictionaries[0].to_arrow().to_pylist() == ["x", "y"]


def test_write_fragments_then_commit_creates_a_legacy_dataset(tmp_path):
    """The Spark writer's path: data files first, one commit later; the table manifest takes the
    dictionary values from the files."""
    uri = str(tmp_path / "ds.lance")
    fragments = ours.write_fragments(_rows(0, 1500), uri, mode="create", data_storage_version="legacy",
                                     max_rows_per_file=1024)
    fragments += ours.write_fragments(_rows(1500, 100), uri, mode="create", data_storage_version="legacy")
    ours.LanceDataset.commit(uri, ours.LanceOperation.Overwrite(_rows(0, 1).schema, fragments))
    assert pylance.dataset(uri).data_storage_version == "0.1"
    assert pylance.dataset(uri).to_table().equals(_rows(0, 1600))
    appended = ours.write_fragments(_rows(1600, 10), uri, mode="append")
    ours.LanceDataset.commit(uri, ours.LanceOperation.Append(appended), read_version=1)
    assert pylance.dataset(uri).to_table().equals(_rows(0, 1610))


def test_files_are_cut_at_max_rows_per_file(tmp_path):
    """max_rows_per_file below 1024 rows: one batch per file, as pylance groups them."""
    uri = str(tmp_path / "ds.lance")
    ours.write_dataset(_rows(0, 2100), uri, data_storage_version="legacy", max_rows_per_file=1000)
    fragments = pylance.dataset(uri).get_fragments()
    assert [f.count_rows() for f in fragments] == [1000, 1000, 100]
    assert len(glob.glob(os.path.join(uri, "data", "*.lance"))) == 3


def test_fragments_with_different_dictionaries_are_not_committed_together(tmp_path):
    """Two writers of one new legacy dataset (e.g. two Spark tasks) that saw different dictionaries:
    the commit refuses, since pylance would read one task's keys against the other's values."""
    uri = str(tmp_path / "ds.lance")
    one = pa.table({"d": pa.array(["a", "b"]).dictionary_encode()})
    two = pa.table({"d": pa.array(["b", "a"]).dictionary_encode()})
    fragments = ours.write_fragments(one, uri, mode="create", data_storage_version="legacy")
    fragments += ours.write_fragments(two, uri, mode="create", data_storage_version="legacy")
    with pytest.raises(ours.SchemaMismatchError, match="other dictionary values for field 'd'"):
        ours.LanceDataset.commit(uri, ours.LanceOperation.Overwrite(one.schema, fragments))
    assert not os.path.exists(os.path.join(uri, "_versions")) or not any(
        name.endswith(".manifest") for name in os.listdir(os.path.join(uri, "_versions")))


def test_pylance_filters_our_files_without_statistics(tmp_path):
    """pylance prunes legacy batches with per-batch statistics when a file has them; ours have none."""
    uri = str(tmp_path / "ds.lance")
    ours.write_dataset(_rows(0, 5000), uri, data_storage_version="legacy")
    ds = pylance.dataset(uri)
    assert ds.scanner(filter="id BETWEEN 1000 AND 1100", use_stats=True).to_table().equals(_rows(1000, 101))
    assert ds.to_table(filter="id > 4000 AND name < 'n4500'").equals(_rows(4001, 499))
    assert ds.count_rows("color = 'green'") == len(range(1, 5000, 3))
