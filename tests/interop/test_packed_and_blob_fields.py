"""Packed structs and blob columns: fields pylance 14 stores in layouts of their own.

We read what pylance writes for them (a nullable variable packed struct stores a null row without
bytes: we refused such pages as corrupt). We do not write those layouts: an ordinary column under
that metadata reads as all nulls (packed struct, 2.1/2.2) or not at all (the rest) in pylance, so
every write that would produce one is refused before anything is written, and the dataset stays as
pylance wrote it; deletes and new columns still work.
"""

from __future__ import annotations

import os

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours

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


def _with(field: pa.Field, rows: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + rows)
    if pa.types.is_struct(field.type):
        values = pa.array([{"a": int(i), "b": i / 2} for i in ids], field.type)
    else:
        values = pa.array([bytes([i % 256]) * int(i % 7 * 100) if i % 4 else None for i in ids], field.type)
    return pa.table({"id": ids, "x": values}, schema=pa.schema([pa.field("id", pa.int64()), field]))


SPECIAL = {
    "packed": pa.field("x", FIXED, metadata=PACKED),
    "packed (legacy key)": pa.field("x", FIXED, metadata={"packed": "TRUE"}),
    "blob": pa.field("x", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
}


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("name", list(SPECIAL))
def test_writes_of_fields_we_cannot_store_as_pylance_are_refused(tmp_path, version, name):
    """Before: our files of such fields were unreadable by pylance (or their packed struct read as
    nulls), and our appends, compactions and rewrites into pylance's datasets broke them."""
    field = SPECIAL[name]
    new = str(tmp_path / "new")
    with pytest.raises(ours.UnsupportedFeatureError, match="field 'x' is a (packed struct|blob column)"):
        ours.write_dataset(_with(field, 20), new, data_storage_version=version)
    assert not os.path.exists(new)  # nothing written

    uri = str(tmp_path / "theirs")
    pylance.write_dataset(_with(field, 100), uri, data_storage_version=version, max_rows_per_file=20)
    pylance.dataset(uri).delete("id % 3 = 0")
    before = pylance.dataset(uri).version, sorted(os.listdir(os.path.join(uri, "data")))
    refused = {
        "append": lambda: ours.write_dataset(_with(field, 10, 100), uri, mode="append"),
        "compaction": lambda: ours.dataset(uri).optimize.compact_files(),
        "update": lambda: ours.dataset(uri).update({"id": "id + 1000"}, where="id = 1"),
        "merge insert": lambda: ours.dataset(uri).merge_insert("id").when_not_matched_insert_all().execute(
            _with(field, 5, 200)),
    }
    for what, operation in refused.items():
        # 2.0 packed structs and blobs are not read here either (refused on reading them); a 2.2 blob
        # column is pylance's blob v2 struct, which a table of binaries does not match
        errors = (ours.UnsupportedFeatureError, ours.SchemaMismatchError) if what in ("append", "merge insert") \
            else ours.UnsupportedFeatureError
        with pytest.raises(errors, match="'x'|`x`"):
            operation()
        assert (pylance.dataset(uri).version, sorted(os.listdir(os.path.join(uri, "data")))) == before, what
    expected = pylance.dataset(uri).to_table(columns=["id"])
    ours.dataset(uri).delete("id = 2")
    ours.dataset(uri).add_columns({"twice": "id * 2"})
    table = pylance.dataset(uri).to_table()
    assert table["id"].to_pylist() == [i for i in expected["id"].to_pylist() if i != 2]
    assert table["twice"].to_pylist() == [2 * i for i in table["id"].to_pylist()]
    if name != "blob":
        assert table["x"].to_pylist() == [{"a": i, "b": i / 2} for i in table["id"].to_pylist()]
    assert ours.dataset(uri).to_table(columns=["id", "twice"]).equals(table.select(["id", "twice"]))


def test_a_copy_without_the_metadata_is_written(tmp_path):
    """The way out the error names: the same values without the metadata are an ordinary column."""
    uri = str(tmp_path / "plain")
    table = _with(pa.field("x", FIXED), 50)
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
