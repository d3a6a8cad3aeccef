"""Packed structs and blob columns: fields pylance 14 stores in layouts of their own.

We read what pylance writes for them (a nullable 2.2 variable packed struct stores a null row
without bytes, which we refused as corrupt; 2.0 packed structs and blobs we refused outright), and
we write packed structs and 2.0/2.1 blob columns in pylance's layouts (before, ordinary columns
under that metadata, which pylance read as all nulls or not at all). 2.2 blob columns are pylance
14's blob v2 (``tests/interop/test_blob_v2.py``).
"""

from __future__ import annotations

import os
import pathlib
import struct

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

from google.protobuf import any_pb2

import airflow_lance.core as ours
from airflow_lance.core._proto import encodings_v2_0_pb2 as enc20
from airflow_lance.core._proto import encodings_v2_1_pb2 as pb
from airflow_lance.core._proto import file2_pb2

PACKED = {"lance-encoding:packed": "true"}
FIXED = pa.struct([pa.field("a", pa.int32(), False), pa.field("b", pa.float64(), False)])
VARIABLE = pa.struct([pa.field("a", pa.uint8(), False), pa.field("s", pa.string(), False),
                      pa.field("n", pa.uint64(), False), pa.field("t", pa.large_binary(), False)])


def _packed(dtype: pa.StructType, rows: int, null_share: float, seed: int, long: bool = False) -> pa.Array:
    rng = np.random.default_rng(seed)
    values = []
    for i in range(rows):
        if rng.random() < null_share:
            values.append(None)
        elif dtype == FIXED:
            values.append({"a": i, "b": i / 2})
        else:
            values.append({"a": i % 256, "s": "x" * int(rng.integers(0, 3000 if long else 40)), "n": i * 7,
                           "t": bytes(int(rng.integers(0, 5)))})
    return pa.array(values, dtype)


CASES = [("2.1", FIXED, 0.3, False), ("2.1", FIXED, 1.0, False), ("2.2", FIXED, 0.3, False),
         ("2.2", VARIABLE, 0.0, False), ("2.2", VARIABLE, 0.3, False), ("2.2", VARIABLE, 1.0, False),
         ("2.2", VARIABLE, 0.2, True)]


@pytest.mark.parametrize(("version", "dtype", "null_share", "long"), CASES,
                         ids=[f"{v}-{d.num_fields}-{n}-{'long' if lg else 'short'}" for v, d, n, lg in CASES])
def test_we_read_pylances_packed_structs_with_null_rows(tmp_path, version, dtype, null_share, long, loops):
    """Packed structs (2.2 variable ones only: 2.1 refuses them), top level and in lists, with null
    rows: read whole, by take and filtered as pylance reads them."""
    rows = 3000
    values = _packed(dtype, rows, null_share, seed=rows + int(null_share * 10), long=long)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", dtype, metadata=PACKED),
                        pa.field("l", pa.list_(pa.field("item", dtype, metadata=PACKED)))])
    lists = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)), values)
    table = pa.table({"id": np.arange(rows), "p": values, "l": lists}, schema=schema)
    uri = str(tmp_path / "packed")
    pylance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=1000)
    expected = pylance.dataset(uri).to_table()
    assert expected.equals(table)
    assert ours.dataset(uri).to_table().equals(expected)
    taken = np.array([0, 1, 2, 999, 1000, 1500, 2999])
    assert ours.dataset(uri).take(taken).equals(expected.take(taken))
    assert ours.dataset(uri).to_table(filter="id >= 1500").equals(expected.slice(1500))


def _value_layouts(uri: str) -> list[str]:
    """Each column's value layout in a dataset's first data file, without its sizes (2.0: the
    page encoding; 2.1+: the layout kind and value compression)."""
    path = sorted(pathlib.Path(uri, "data").glob("*.lance"))[0]
    data = path.read_bytes()
    _, cmo, _, _, columns, major, minor, _ = struct.unpack("<QQQIIHH4s", data[-40:])
    out = []
    for column in range(columns):
        position, size = struct.unpack_from("<QQ", data, cmo + 16 * column)
        page = file2_pb2.ColumnMetadata.FromString(data[position: position + size]).pages[0]
        raw = any_pb2.Any.FromString(page.encoding.direct.encoding).value
        if (major, minor) == (0, 3):
            out.append(str(enc20.ArrayEncoding.FromString(raw)))
            continue
        layout = pb.PageLayout.FromString(raw)
        which = layout.WhichOneof("layout")
        body = getattr(layout, which)
        value = str(body.value_compression) if body.DESCRIPTOR.fields_by_name.get("value_compression") else ""
        out.append(which + " " + value)
    return out


WRITES = [("2.0", FIXED, 0.0), ("2.1", FIXED, 0.0), ("2.1", FIXED, 0.3), ("2.2", FIXED, 0.3),
          ("2.2", VARIABLE, 0.0), ("2.2", VARIABLE, 0.3), ("2.2", VARIABLE, 1.0)]


@pytest.mark.parametrize(("version", "dtype", "null_share"), WRITES,
                         ids=[f"{v}-{d.num_fields}-{n}" for v, d, n in WRITES])
def test_we_write_packed_structs_as_pylance(tmp_path, version, dtype, null_share):
    """Packed structs, top level and in lists, in the value layouts pylance writes for the same data
    (2.0: its page encoding byte for byte; 2.1/2.2: ``packed_struct`` in mini-blocks,
    ``variable_packed_struct`` in full-zip pages), with pylance's data file field lists. Before,
    we wrote ordinary struct columns under the metadata, and pylance read them as all nulls."""
    rows = 3000
    values = _packed(dtype, rows, null_share, seed=1)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", dtype, metadata=PACKED),
                        pa.field("l", pa.list_(pa.field("item", dtype, metadata=PACKED)))])
    lists = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)), values)
    table = pa.table({"id": np.arange(rows), "p": values, "l": lists}, schema=schema)
    mine, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ours.write_dataset(table, mine, data_storage_version=version, max_rows_per_file=1000)
    pylance.write_dataset(table, theirs, data_storage_version=version, max_rows_per_file=1000)
    assert pylance.dataset(mine).to_table().equals(table)
    assert ours.dataset(mine).to_table().equals(table)
    assert _value_layouts(mine)[1:] == _value_layouts(theirs)[1:]  # ``id``: bit-packed by pylance
    assert [f.metadata.files[0].fields for f in pylance.dataset(mine).get_fragments()] == [
        f.metadata.files[0].fields for f in pylance.dataset(theirs).get_fragments()]


def _with(field: pa.Field, rows: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + rows)
    if pa.types.is_struct(field.type):
        values = pa.array([{"a": int(i), "b": i / 2} for i in ids], field.type)
    else:
        values = pa.array([bytes([i % 256]) * int(i % 7 * 100) if i % 4 else None for i in ids], field.type)
    return pa.table({"id": ids, "x": values}, schema=pa.schema([pa.field("id", pa.int64()), field]))


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("metadata", [PACKED, {"packed": "TRUE"}])
def test_we_modify_pylances_datasets_with_packed_structs(tmp_path, version, metadata):
    """Append, update, merge insert and compaction of a dataset pylance wrote with a packed struct:
    pylance reads what we meant (before: the rows we wrote read as nulls in 2.1/2.2, not at all in 2.0)."""
    field = pa.field("x", FIXED, metadata=metadata)
    uri = str(tmp_path / "theirs")
    pylance.write_dataset(_with(field, 100), uri, data_storage_version=version, max_rows_per_file=20)
    pylance.dataset(uri).delete("id % 3 = 0")
    ours.write_dataset(_with(field, 10, 100), uri, mode="append")
    ours.dataset(uri).update({"id": "id + 1000"}, where="id = 1")
    ours.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _with(field, 5, 105).set_column(1, "x", pa.array([{"a": -i, "b": -1.0} for i in range(5)], FIXED)))
    metrics = ours.dataset(uri).optimize.compact_files()
    assert metrics.fragments_removed > 1
    ids = [i for i in range(110) if i % 3 or i >= 100]
    expected = {i: {"a": i, "b": i / 2} for i in ids}
    expected[1001] = expected.pop(1)
    expected.update({105 + i: {"a": -i, "b": -1.0} for i in range(5)})
    table = pylance.dataset(uri).to_table()
    assert dict(zip(table["id"].to_pylist(), table["x"].to_pylist())) == expected and table.num_rows == len(expected)
    assert ours.dataset(uri).to_table().equals(table)


def _packed_field(*children: pa.Field) -> pa.Field:
    return pa.field("x", pa.struct(list(children)), metadata=PACKED)


REFUSED = {
    "string in 2.1": (["2.1"], _packed_field(pa.field("a", pa.int32(), False), pa.field("s", pa.string(), False)),
                      "pylance packs strings and binaries from 2.2 on"),
    "boolean": (["2.0", "2.1", "2.2"], _packed_field(pa.field("a", pa.int32(), False), pa.field("b", pa.bool_())),
                "of type bool"),
    "wide": (["2.1", "2.2"], _packed_field(*[pa.field(f"f{i}", pa.float64(), False) for i in range(40)]),
             "more than 256 bytes per value"),
    "no fields": (["2.0", "2.1", "2.2"], _packed_field(), "with no fields"),  # pylance: a panic, all nulls
    "blob of strings": (["2.0", "2.1"], pa.field("x", pa.string(), metadata={"lance-encoding:blob": "true"}),
                        "large_binary values only"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_fields_we_cannot_store_as_pylance_are_refused_before_writing(tmp_path, name):
    """Packed structs pylance does not pack either, and blobs of other types than large_binary:
    refused before anything is written (before, our files of them were unreadable by pylance)."""
    versions, field, message = REFUSED[name]
    for version in versions:
        new = str(tmp_path / f"new-{version}")
        with pytest.raises(ours.UnsupportedFeatureError, match=message):
            ours.write_dataset(pa.table({"x": pa.nulls(3, field.type)}, schema=pa.schema([field])), new,
                               data_storage_version=version)
        assert not os.path.exists(new)  # nothing written


def _payloads(rows: int, start: int, seed: int) -> list[bytes | None]:
    rng = np.random.default_rng(seed)
    return [None if i % 9 == 4 else b"" if i % 13 == 5 else rng.bytes(int(rng.integers(1, 20_000)))
            for i in range(start, start + rows)]


def _blob_table(ids: np.ndarray, payloads: list, nested: bool) -> pa.Table:
    field = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    columns = {"id": pa.array(ids, pa.int64()), "b": pa.array(payloads, pa.large_binary())}
    fields = [pa.field("id", pa.int64()), field]
    if nested:  # 2.1: a blob below a struct with nulls
        columns["s"] = pa.StructArray.from_arrays([columns["b"]], fields=[field], mask=pa.array(ids % 7 == 3))
        fields.append(pa.field("s", pa.struct([field])))
    return pa.table(columns, schema=pa.schema(fields))


def _blobs(uri: str) -> dict[int, bytes | None]:
    ds = pylance.dataset(uri)
    ids = ds.to_table(columns=["id"])["id"].to_pylist()
    return dict(zip(ids, [None if blob is None else blob.read()
                          for blob in ds.take_blobs("b", indices=list(range(len(ids))))]))


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_we_write_and_modify_blob_columns_as_pylance(tmp_path, version):
    """Blob columns (``lance-encoding:blob``) in 2.0 and 2.1 files: the values' bytes out of line,
    the pages of (position, size) descriptions pylance writes, an empty value (0, 0), a null one
    (1, 0) in 2.0 and (its definition level << 16, 0) in 2.1. pylance's ``take_blobs`` reads what we
    wrote, and after our append, update, merge insert and compaction of a dataset pylance wrote, it
    reads every row's bytes as meant (before, all of these were refused)."""
    rows = 400
    nested = version == "2.1"
    payloads = _payloads(rows, 0, seed=1)
    table = _blob_table(np.arange(rows), payloads, nested)
    mine = str(tmp_path / "ours")
    ours.write_dataset(table, mine, data_storage_version=version, max_rows_per_file=150)
    assert _blobs(mine) == dict(enumerate(payloads))
    assert pylance.dataset(mine).to_table(columns=["b"])["b"].type == pa.struct(
        [("position", pa.uint64()), ("size", pa.uint64())])  # pylance's descriptions of them
    assert ours.dataset(mine).to_table().equals(table)
    if nested:
        assert pylance.dataset(mine).to_table(columns=["s"])["s"].is_null().to_pylist() == (
            np.arange(rows) % 7 == 3).tolist()

    uri = str(tmp_path / "theirs")
    pylance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=100)
    pylance.dataset(uri).delete("id % 5 = 0")
    expected = {i: p for i, p in enumerate(payloads) if i % 5}
    more = _payloads(50, rows, seed=2)
    ours.write_dataset(_blob_table(np.arange(rows, rows + 50), more, nested), uri, mode="append")
    expected.update(zip(range(rows, rows + 50), more))
    ours.dataset(uri).update({"id": "id + 10000"}, where="id < 20")
    for i in [i for i in list(expected) if i < 20]:
        expected[i + 10000] = expected.pop(i)
    changed = _payloads(10, 1000, seed=3)
    source = _blob_table(np.arange(440, 460), changed + _payloads(10, 2000, seed=4), nested)
    ours.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
    expected.update(zip(source["id"].to_pylist(), source["b"].to_pylist()))
    assert ours.dataset(uri).optimize.compact_files().fragments_removed > 1
    assert _blobs(uri) == expected
    assert dict(zip(*ours.dataset(uri).to_table(columns=["id", "b"]).to_pydict().values())) == expected


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_nulls_in_a_packed_structs_fields_fail_the_write_and_leave_nothing(tmp_path, version):
    """pylance refuses them too (it has nowhere to store them)."""
    field = _packed_field(pa.field("a", pa.int32()), pa.field("b", pa.float64()))
    table = pa.table({"x": pa.array([{"a": 1, "b": 1.0}, {"a": None, "b": 2.0}], field.type)},
                     schema=pa.schema([field]))
    uri = str(tmp_path / "nulls")
    with pytest.raises(ours.UnsupportedFeatureError, match="packed struct field 'a' holds nulls"):
        ours.write_dataset(table, uri, data_storage_version=version)
    assert not os.path.exists(os.path.join(uri, "_versions")) and not os.listdir(os.path.join(uri, "data"))


def test_a_copy_without_the_metadata_is_written(tmp_path):
    """The way out the error names: the same values without the metadata are an ordinary column."""
    uri = str(tmp_path / "plain")
    table = _with(pa.field("x", pa.large_binary()), 50)
    ours.write_dataset(table, uri)
    assert pylance.dataset(uri).to_table().equals(table)


def test_we_read_pylances_2_0_packed_structs_and_blobs(tmp_path):
    """Format 2.0 keeps a packed struct's children side by side in one column and a blob column as
    (file position, size) descriptions of bytes stored elsewhere in the file (a null: position 1,
    size 0). We refused both; now they read as pylance reads the struct and as its ``take_blobs``
    reads the bytes, whole, by take (only the taken values' bytes are fetched) and filtered."""
    rows = 6000
    rng = np.random.default_rng(5)
    packed = pa.struct([pa.field("a", pa.int32(), False), pa.field("f", pa.float32()),
                        pa.field("u", pa.uint8()), pa.field("h", pa.binary(3)), pa.field("t", pa.timestamp("us"))])
    sizes = rng.choice([0, 1, 100, 5000, 300_000], rows, p=[0.1, 0.3, 0.4, 0.19, 0.01])
    payloads = [None if i % 11 == 3 else rng.bytes(int(sizes[i])) for i in range(rows)]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", packed, metadata={"packed": "true"}),
                        pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})])
    table = pa.table({
        "id": np.arange(rows),
        "p": pa.StructArray.from_arrays(
            [pa.array(np.arange(rows, dtype=np.int32)), pa.array(rng.random(rows).astype(np.float32)),
             pa.array((np.arange(rows) % 256).astype(np.uint8)),
             pa.array([i.to_bytes(3, "little") for i in range(rows)], pa.binary(3)),
             pa.array(np.arange(rows) * 1_000_000, pa.timestamp("us"))], fields=list(packed)),
        "b": pa.array(payloads, pa.large_binary()),
    }, schema=schema)
    uri = str(tmp_path / "packed_2_0")
    pylance.write_dataset(table, uri, data_storage_version="2.0", max_rows_per_file=2500)
    pylance.dataset(uri).delete("id % 7 = 0")
    theirs = pylance.dataset(uri)
    expected = theirs.to_table(columns=["id", "p"])
    live = expected["id"].to_numpy()
    blobs = [payloads[i] for i in live]
    mine = ours.dataset(uri).to_table()
    assert mine.select(["id", "p"]).equals(expected)
    assert mine["b"].to_pylist() == blobs
    assert [None if b is None else b.read() for b in theirs.take_blobs("b", indices=list(range(40)))] == blobs[:40]
    picked = np.array([0, 1, 2, 3, 2499, 2500, len(live) - 1])
    taken = ours.dataset(uri).take(picked)
    assert taken.select(["id", "p"]).equals(expected.take(picked))
    assert taken["b"].to_pylist() == [blobs[i] for i in picked]
    filtered = ours.dataset(uri).to_table(filter="p.a >= 3000")
    assert filtered["id"].to_pylist() == [i for i in live.tolist() if i >= 3000]
    assert filtered["b"].to_pylist() == [payloads[i] for i in filtered["id"].to_pylist()]
