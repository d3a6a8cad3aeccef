"""Blob v2 columns, pylance 14's ``lance.blob.v2`` (``lance.blob_field`` / ``lance.blob_array``, and any
``lance-encoding:blob`` field of a 2.2 dataset): values inline in the data file, in shared pack files,
in dedicated files beside it, or references to external objects. Before, we refused to read them and
every write into such a dataset (append, update, merge insert, compaction). pylance 14 is the oracle:
its ``take_blobs`` gives the bytes our reads give as the logical struct's ``data``."""

from __future__ import annotations

import datetime as dt
import os

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest
from lance.blob import Blob

import airflow_lance.core as ours

NOW = dt.timedelta(0)
FIELD = pylance.blob_field("img", inline_size_threshold=64, dedicated_size_threshold=3000, pack_file_size_threshold=9000)
SCHEMA = pa.schema([pa.field("id", pa.int64()), FIELD])


def _payload(i: int) -> Blob | None:
    """Inline, packed and dedicated values, empty ones and nulls."""
    if i % 11 == 4:
        return None
    if i % 13 == 6:
        return Blob.empty()
    size = (i * 397) % 5000 if i % 3 else i % 64
    return Blob.from_bytes(bytes([i % 251]) * size)


def _table(start: int, rows: int, external: str | None = None) -> pa.Table:
    values = [_payload(i) for i in range(start, start + rows)]
    if external is not None:  # a whole external object and a range of it
        values[1], values[2] = Blob.from_uri(external), Blob.from_uri(external, 5, 10)
    return pa.table({"id": pa.array(range(start, start + rows), pa.int64()), "img": pylance.blob_array(values)},
                    schema=SCHEMA)


def _bytes(value: Blob | None, external: bytes = b"") -> bytes | None:
    if value is None:
        return None
    if value.uri is not None:
        return external if value.position is None else external[value.position:value.position + value.size]
    return value.data


def _pylance_blobs(uri: str) -> dict[int, bytes | None]:
    """id -> bytes, as pylance's take_blobs reads them."""
    ds = pylance.dataset(uri)
    ids = ds.to_table(columns=["id"]).column("id").to_pylist()
    blobs = ds.take_blobs("img", indices=list(range(len(ids))))
    return {i: None if b is None else b.read() for i, b in zip(ids, blobs)}


def _our_values(uri: str, **read) -> dict[int, dict | None]:
    table = ours.dataset(uri).to_table(**read)
    return dict(zip(table.column("id").to_pylist(), table.column("img").to_pylist()))


def _external(tmp_path) -> tuple[str, bytes]:
    path = tmp_path / "external.bin"
    path.write_bytes(bytes(range(256)) * 4)
    return f"file://{path}", path.read_bytes()


def _sidecars(uri: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), uri) for d, _, names in os.walk(os.path.join(uri, "data"))
                  for n in names if n.endswith(".blob"))


def test_we_read_pylances_blob_v2_columns(tmp_path):
    uri = str(tmp_path / "theirs")
    external, external_bytes = _external(tmp_path)
    pylance.write_dataset(_table(0, 60, external), uri, max_rows_per_file=25, allow_external_blob_outside_bases=True)
    pylance.write_dataset(_table(60, 20), uri, mode="append")
    pylance.dataset(uri).delete("id % 7 = 0")
    kinds = set(pylance.dataset(uri).to_table().column("img").combine_chunks().field("kind").to_pylist())
    assert kinds - {None} == {0, 1, 2, 3} and _sidecars(uri)  # inline, packed, dedicated, external
    values = _our_values(uri)
    stored = {i: v if v is None or v["uri"] is None else None for i, v in values.items()}
    expected = _pylance_blobs(uri)
    assert {i: None if v is None else v["data"] for i, v in stored.items() if i not in (1, 2)} == \
        {i: b for i, b in expected.items() if i not in (1, 2)}
    assert values[1] == {"data": None, "uri": external, "position": None, "size": None}
    assert values[2] == {"data": None, "uri": external, "position": 5, "size": 10}
    assert expected[1] == external_bytes and expected[2] == external_bytes[5:15]  # what the references mean
    # rows read by position and by filter decode only their own blobs
    ds = ours.dataset(uri)
    taken = ds.take([3, 10, 40, 55], columns=["id", "img"]).to_pylist()
    assert [(r["id"], r["img"] and r["img"]["data"]) for r in taken] == [(r["id"], expected[r["id"]]) for r in taken]
    assert _our_values(uri, filter="id > 50 AND id < 60") == {i: v for i, v in values.items() if 50 < i < 60}
    assert ds.to_table(columns=["id"]).equals(pylance.dataset(uri).to_table(columns=["id"]))


def test_pylance_reads_our_blob_v2_columns_as_it_writes_them(tmp_path):
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    external, external_bytes = _external(tmp_path)
    table = _table(0, 60, external)
    ours.write_dataset(table, mine, max_rows_per_file=25)
    pylance.write_dataset(table, theirs, max_rows_per_file=25, allow_external_blob_outside_bases=True)
    expected = {i: _bytes(v, external_bytes) for i, v in zip(range(60), [_payload(i) for i in range(60)])}
    expected[1], expected[2] = external_bytes, external_bytes[5:15]
    assert _pylance_blobs(mine) == expected == _pylance_blobs(theirs)
    assert pylance.dataset(mine).schema == pylance.dataset(theirs).schema
    fields = [(f.id, f.parent_id, f.name, f.logical_type, dict(f.metadata)) for f in
              ours.dataset(mine).manifest_file.manifest.fields]
    assert fields == [(f.id, f.parent_id, f.name, f.logical_type, dict(f.metadata)) for f in
                      ours.dataset(theirs).manifest_file.manifest.fields]
    # the same decisions: each value's kind and size, and as many pack and dedicated files
    def described(uri: str) -> list:
        return [(d and (d["kind"], d["size"], d["blob_uri"])) for d in pylance.dataset(uri).to_table().column(
            "img").to_pylist()]
    assert described(mine) == described(theirs)
    assert len(_sidecars(mine)) == len(_sidecars(theirs))
    assert _our_values(mine) == _our_values(theirs)


def test_we_modify_pylances_blob_dataset_as_pylance_does(tmp_path):
    """A day of changes on a dataset pylance wrote: our append, delete, update, merge insert, compaction
    and cleanup; pylance reads every blob, then appends and compacts itself, and we read that."""
    uri = str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, 60), uri, max_rows_per_file=20)
    expected = {i: _bytes(_payload(i)) for i in range(60)}
    ours.write_dataset(_table(60, 30), uri, mode="append", max_rows_per_file=10)
    expected.update({i: _bytes(_payload(i)) for i in range(60, 90)})
    ours.dataset(uri).delete("id % 5 = 0")
    expected = {i: b for i, b in expected.items() if i % 5}
    ours.dataset(uri).update({"id": "id + 1000"}, where="id = 3 OR id = 61")
    expected[1003], expected[1061] = expected.pop(3), expected.pop(61)
    changed = _table(85, 10)  # 85..89 update (85 was deleted: inserted again), 90..94 insert
    ours.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(changed)
    expected.update({i: _bytes(_payload(i)) for i in range(85, 95)})
    metrics = ours.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    assert metrics.fragments_removed > 1
    ours.dataset(uri).cleanup_old_versions(older_than=NOW, delete_unverified=True)
    assert _pylance_blobs(uri) == expected
    assert {i: v and v["data"] for i, v in _our_values(uri).items()} == expected
    live = {os.path.dirname(p) for p in _sidecars(uri)}  # only the compacted file's sidecars are left
    assert live == {"data/" + f.metadata.files[0].path.removesuffix(".lance")
                    for f in ours.dataset(uri).get_fragments()} & live and len(live) == 1

    pylance.write_dataset(_table(200, 30), uri, mode="append")
    pylance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    expected.update({i: _bytes(_payload(i)) for i in range(200, 230)})
    assert {i: v and v["data"] for i, v in _our_values(uri).items()} == expected == _pylance_blobs(uri)


def test_external_references_survive_our_compaction(tmp_path):
    uri = str(tmp_path / "theirs")
    external, external_bytes = _external(tmp_path)
    pylance.write_dataset(_table(0, 40, external), uri, max_rows_per_file=10, allow_external_blob_outside_bases=True)
    pylance.dataset(uri).delete("id = 9")
    before = _pylance_blobs(uri)
    ours.dataset(uri).optimize.compact_files()
    assert _pylance_blobs(uri) == before and before[1] == external_bytes and before[2] == external_bytes[5:15]
    description = pylance.dataset(uri).to_table(filter="id = 2").column("img").to_pylist()[0]
    assert (description["kind"], description["position"], description["size"]) == (3, 5, 10)


def test_blob_metadata_on_binaries_in_2_2_is_blob_v2_as_in_pylance(tmp_path):
    """``lance-encoding:blob`` on a large_binary field of a 2.2 dataset: pylance 14 stores a blob v2
    column of struct<data, uri> (refused here before); appends of such binaries go into it."""
    field = pa.field("x", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    schema = pa.schema([pa.field("id", pa.int64()), field])

    def rows(start: int, n: int) -> pa.Table:
        return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                         "x": pa.array([None if i % 5 == 1 else bytes([i]) * (i * 999) for i in range(start, start + n)],
                                       pa.large_binary())}, schema=schema)

    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    ours.write_dataset(rows(0, 20), mine, data_storage_version="2.2")
    pylance.write_dataset(rows(0, 20), theirs, data_storage_version="2.2")
    for uri in (mine, theirs):
        ours.write_dataset(rows(20, 10), uri, mode="append")
        assert pylance.dataset(uri).schema == pylance.dataset(theirs).schema
        blobs = pylance.dataset(uri).take_blobs("x", indices=list(range(30)))
        assert [None if b is None else b.read() for b in blobs] == rows(0, 30).column("x").to_pylist()
        assert ours.dataset(uri).to_table().column("x").combine_chunks().field("data").to_pylist() == \
            rows(0, 30).column("x").to_pylist()
    # into a plain binary column of a 2.2 dataset such a field is refused, by pylance too (it converts
    # the field to blob v2, which then does not match), and nothing is written
    plain = str(tmp_path / "plain")
    pylance.write_dataset(pa.table({"id": pa.array([0], pa.int64()), "x": pa.array([b"a"], pa.large_binary())}),
                          plain, data_storage_version="2.2")
    for library in (pylance, ours):
        with pytest.raises((OSError, ValueError), match="Append with different schema"):
            library.write_dataset(rows(1, 2), plain, mode="append")
    assert pylance.dataset(plain).version == 1


@pytest.mark.parametrize("value, message", [
    ({"data": b"x", "uri": "s3://b/k", "position": None, "size": None}, "both data and a uri"),
    ({"data": None, "uri": None, "position": None, "size": None}, "neither data nor a uri"),
    ({"data": None, "uri": "relative/path.bin", "position": None, "size": None}, "absolute URIs"),
    ({"data": b"x", "uri": None, "position": 1, "size": 2}, "range of a uri"),
    ({"data": None, "uri": "s3://b/k", "position": 1, "size": 0}, "size above 0"),
])
def test_bad_blob_values_are_refused_before_anything_is_committed(tmp_path, value, message):
    uri = str(tmp_path / "ds")
    ours.write_dataset(_table(0, 5), uri)
    before = pylance.dataset(uri).version
    storage = FIELD.type.storage_type
    bad = pa.table({"id": pa.array([99], pa.int64()),
                    "img": pa.ExtensionArray.from_storage(FIELD.type, pa.array([value], storage))}, schema=SCHEMA)
    with pytest.raises(ours.InvalidInputError, match=message):
        ours.write_dataset(bad, uri, mode="append")
    assert pylance.dataset(uri).version == before and ours.dataset(uri).count_rows() == 5


def test_blob_v2_outside_2_2_and_nested_is_refused(tmp_path):
    with pytest.raises(ours.UnsupportedFeatureError, match="2.2 files only"):
        ours.write_dataset(_table(0, 3), str(tmp_path / "old"), data_storage_version="2.1")
    nested = pa.table({"s": pa.StructArray.from_arrays([_table(0, 3).column("img").combine_chunks()],
                                                       fields=[FIELD])})
    with pytest.raises(ours.UnsupportedFeatureError, match="inside other fields"):
        ours.write_dataset(nested, str(tmp_path / "nested"))
    assert not os.path.exists(tmp_path / "old") and not os.path.exists(tmp_path / "nested")


def test_a_missing_sidecar_is_a_typed_error(tmp_path):
    uri = str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, 30), uri)
    os.remove(os.path.join(uri, _sidecars(uri)[0]))
    with pytest.raises(ours.DataFileNotFoundError, match=r"\.blob"):
        ours.dataset(uri).to_table()
    assert ours.dataset(uri).to_table(columns=["id"]).num_rows == 30  # other columns read as before
    assert np.array_equal(ours.dataset(uri).to_table(columns=["id"]).column("id").to_numpy(), np.arange(30))


def test_take_blobs_gives_files_as_pylance(tmp_path):
    """``take_blobs`` by indices, row ids and addresses: the same bytes as pylance's, read whole, in
    pieces and by ranges; None for nulls; external references read from the referenced range."""
    uri = str(tmp_path / "theirs")
    external, external_bytes = _external(tmp_path)
    pylance.write_dataset(_table(0, 60, external), uri, max_rows_per_file=25, allow_external_blob_outside_bases=True)
    pylance.dataset(uri).delete("id % 7 = 0")
    theirs, mine = pylance.dataset(uri), ours.dataset(uri)
    indices = [0, 1, 2, 3, 10, 40, 50]  # ids 1, 2 (external), 3, 4 (null), ...: every kind
    expected = [None if b is None else b.read() for b in theirs.take_blobs("img", indices=indices)]
    files = mine.take_blobs("img", indices=indices)
    assert [None if f is None else f.read() for f in files] == expected
    assert expected[0] == external_bytes and expected[1] == external_bytes[5:15] and expected[3] is None
    big = next(f for f in mine.take_blobs("img", indices=indices) if f is not None and f.size() > 3000)
    assert big.read(100) + big.read() == big.read_range(0, big.size()) and big.tell() == big.size()
    big.seek(-10, 2)
    assert big.read() == big.read_range(big.size() - 10, 10) and big.read_ranges([(0, 3), (5, 2)])[1] == \
        big.read_range(5, 2)
    addresses = theirs.to_table(columns=[], with_row_address=True).column("_rowaddr").to_pylist()
    picked = [addresses[i] for i in indices]
    assert [None if f is None else f.read() for f in mine.take_blobs("img", addresses=picked)] == expected
    assert [None if f is None else f.read() for f in mine.take_blobs("img", ids=picked)] == expected
    with pytest.raises(ours.InvalidInputError, match="exactly one"):
        mine.take_blobs("img", ids=[0], indices=[0])
    with pytest.raises(ours.InvalidInputError, match="not a blob column"):
        mine.take_blobs("id", indices=[0])
