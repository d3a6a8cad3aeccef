"""Scalar indices (BTREE, BITMAP), list/describe/drop: pylance 14 is the oracle.

Our indices must be listed, described and used by pylance (its plan shows a ScalarIndexQuery)
and give exactly the rows of a full scan; their files must hold what pylance's hold; pylance's
indices must stay right across our appends, deletes and updates; cleanup keeps the files of
retained versions' indices only.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core.file import LanceFileReader

#: pylance 14 deprecates ``list_indices`` (still there, with the result shape we reproduce).
pytestmark = pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")

ROWS = 9000  # three BTREE pages of 4096 rows


def _data(n: int = ROWS, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    k = rng.integers(0, 60, n)
    null = rng.random(n) < 0.03
    f = np.round(rng.normal(size=n), 1)
    f[rng.random(n) < 0.01] = np.nan
    days = np.datetime64("2020-01-01") + rng.integers(0, 90, n).astype("timedelta64[D]")
    return pa.table({
        "id": np.arange(n, dtype=np.int64),
        "i": pa.array(k, pa.int64(), mask=null),
        "s": pa.array([f"k{v:02d}" for v in k], pa.string(), mask=null),
        "f": pa.array(f, pa.float64(), mask=null),
        "d": pa.array(days, pa.date32(), mask=null),
        "b": pa.array(k % 2 == 0, pa.bool_()),
    })


FILTERS = {
    "i": ["i = 7", "i >= 10 AND i < 20", "i IN (1, 5, 40)", "i IS NULL", "i > 55"],
    "s": ["s = 'k07'", "s >= 'k30' AND s < 'k35'", "s IN ('k01', 'k59')", "s IS NULL"],
    "f": ["f = 0.5", "f > 1.5", "f < -1.0 OR f > 2.0", "f IN (0.1, -0.3)", "f IS NULL"],
    "d": ["d = date '2020-01-05'", "d > date '2020-03-15'", "d IS NULL"],
    "b": ["b = true", "b = false"],
}


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN."""
    return a.schema.equals(b.schema) and a.to_pandas().equals(b.to_pandas())


def _full_scan(ds: pylance.LanceDataset, flt: str) -> pa.Table:
    return ds.scanner(filter=flt, with_row_id=True, use_scalar_index=False).to_table().sort_by("_rowid")


def assert_pylance_uses_index(uri: str, column: str, name: str) -> None:
    """pylance lists the index, plans every filter through it and returns the full scan's rows."""
    ds = pylance.dataset(uri)
    assert name in [i["name"] for i in ds.list_indices()]
    for flt in FILTERS[column]:
        scanner = ds.scanner(filter=flt, with_row_id=True)
        assert "ScalarIndexQuery" in scanner.explain_plan(), (flt, scanner.explain_plan())
        got = scanner.to_table().sort_by("_rowid")
        expected = _full_scan(ds, flt)
        assert expected.num_rows > 0 or flt == "i > 55"
        assert got["_rowid"].equals(expected["_rowid"]) and _same(got, expected), flt


def _index_file(uri: str, index_name: str, file_name: str) -> str:
    [uuid] = [d.segments[0].uuid for d in lance.dataset(uri).describe_indices() if d.name == index_name]
    return os.path.join(uri, "_indices", uuid, file_name)


def _written(uri: str, **kwargs) -> None:
    pylance.write_dataset(_data(), uri, max_rows_per_file=4000, **kwargs)
    ds = pylance.dataset(uri)
    ds.delete("id % 11 = 3")  # deleted rows are not indexed


@pytest.mark.parametrize(("column", "index_type"), [
    ("i", "BTREE"), ("s", "BTREE"), ("f", "BTREE"), ("d", "BTREE"),
    ("i", "BITMAP"), ("s", "BITMAP"), ("b", "BITMAP"),
])
def test_pylance_uses_our_index_and_returns_the_full_scan_rows(uri, column, index_type):
    _written(uri)
    ds = lance.dataset(uri)
    ds.create_scalar_index(column, index_type)
    assert ds.version == 3
    assert_pylance_uses_index(uri, column, f"{column}_idx")
    txn = ds.read_transaction()
    assert isinstance(txn.operation, lance.LanceOperation.CreateIndex) and not txn.operation.removed_indices


def _index_tables(uri: str) -> dict[str, tuple[pa.Table, dict]]:
    out = {}
    for path in glob.glob(os.path.join(uri, "_indices", "*", "*.lance")):
        reader = LanceFileReader(pa.OSFile(path), path=path)
        out[os.path.basename(path)] = (reader.read(), dict(reader.schema.metadata), reader.version)
    return out


@pytest.mark.parametrize("version", ["legacy", "2.0", "2.1", "2.2"])
def test_our_index_files_hold_what_pylance_writes(tmp_path, version):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _written(ours, data_storage_version=version)
    shutil.copytree(ours, theirs)
    for uri, make in ((ours, lance.dataset), (theirs, pylance.dataset)):
        make(uri).create_scalar_index("f", "BTREE")
        make(uri).create_scalar_index("s", "BITMAP")
    mine, pylances = _index_tables(ours), _index_tables(theirs)
    assert sorted(mine) == sorted(pylances) == ["bitmap_page_lookup.lance", "page_data.lance", "page_lookup.lance"]
    for name in mine:
        (a, a_md, a_version), (b, b_md, b_version) = mine[name], pylances[name]
        assert a.schema.equals(b.schema) and a_md == b_md and a_version == b_version, name
        if name == "page_data.lance":  # the order of equal values is unspecified: compare per value
            assert _same(a.select(["values"]), b.select(["values"]))
            key = [("values", "ascending"), ("ids", "ascending")]
            assert _same(a.sort_by(key), b.sort_by(key))
        else:
            assert _same(a, b), name
    p_ours, p_theirs = pylance.dataset(ours), pylance.dataset(theirs)
    strip = [{k: v for k, v in i.items() if k != "uuid"} for i in p_ours.list_indices()]
    assert strip == [{k: v for k, v in i.items() if k != "uuid"} for i in p_theirs.list_indices()]
    for a, b in zip(lance.dataset(ours).describe_indices(), p_theirs.describe_indices()):
        assert (a.name, a.type_url, a.index_type, a.num_rows_indexed, a.fields, a.field_names, a.details) == (
            b.name, b.type_url, b.index_type, b.num_rows_indexed, b.fields, b.field_names, b.details)
        assert [s.index_version for s in a.segments] == [s.index_version for s in b.segments]


def _labels(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 4, n)
    flat = rng.integers(0, 30, int(sizes.sum()))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    items = pa.array([f"t{v}" for v in flat], pa.string(), mask=rng.random(len(flat)) < 0.02)
    labels = pa.ListArray.from_arrays(pa.array(offsets), items, mask=pa.array(rng.random(n) < 0.05))
    return pa.table({"id": np.arange(n, dtype=np.int64), "tags": labels,
                     "nums": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int64()))})


LABEL_FILTERS = ["array_has_any(tags, ['t1', 't7'])", "array_has_all(tags, ['t2', 't3'])",
                 "array_contains(tags, 't5')", "array_has_any(nums, [4])", "NOT array_contains(tags, 't5')"]


def test_label_list_index_matches_pylance_and_is_used(tmp_path):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_labels(3000), ours, max_rows_per_file=1200)
    pylance.dataset(ours).delete("id % 13 = 0")  # deleted null lists are not recorded either
    shutil.copytree(ours, theirs)
    for uri, make in ((ours, lance.dataset), (theirs, pylance.dataset)):
        make(uri).create_scalar_index("tags", "LABEL_LIST")
        make(uri).create_scalar_index("nums", "LABEL_LIST")
    for name in ("tags_idx", "nums_idx"):
        a, b = (LanceFileReader(pa.OSFile(p), path=p) for p in (
            _index_file(ours, name, "bitmap_page_lookup.lance"), _index_file(theirs, name, "bitmap_page_lookup.lance")))
        assert a.read().equals(b.read()) and a.schema.metadata == b.schema.metadata
        assert a.global_buffer(1) == b.global_buffer(1)  # the rows whose list is null
    described = [(d.name, d.index_type, d.num_rows_indexed, [s.index_version for s in d.segments])
                 for d in pylance.dataset(ours).describe_indices()]
    assert described == [(d.name, d.index_type, d.num_rows_indexed, [s.index_version for s in d.segments])
                         for d in pylance.dataset(theirs).describe_indices()]
    ds = pylance.dataset(ours)
    for flt in LABEL_FILTERS:
        scanner = ds.scanner(filter=flt, with_row_id=True)
        assert "ScalarIndexQuery" in scanner.explain_plan(), flt
        got = scanner.to_table().sort_by("_rowid")
        expected = _full_scan(ds, flt)
        assert expected.num_rows > 0 and got.equals(expected), flt


def test_stable_row_ids_index_stores_row_addresses_as_pylance(tmp_path):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_data(300), ours, enable_stable_row_ids=True)
    ds = pylance.dataset(ours)
    ds.delete("i < 10")
    pylance.write_dataset(_data(200, seed=1), ours, mode="append")
    shutil.copytree(ours, theirs)
    lance.dataset(ours).create_scalar_index("i", "BTREE")
    pylance.dataset(theirs).create_scalar_index("i", "BTREE")
    a, b = _index_tables(ours)["page_data.lance"][0], _index_tables(theirs)["page_data.lance"][0]
    assert sorted(a["ids"].to_pylist()) == sorted(b["ids"].to_pylist())
    assert max(a["ids"].to_pylist()) >> 32 == 1  # addresses of fragment 1, not its stable row ids
    versions = [[s.index_version for s in d.describe_indices()[0].segments]
                for d in (pylance.dataset(ours), pylance.dataset(theirs))]
    assert versions == [[1], [1]]
    assert_pylance_uses_index(ours, "i", "i_idx")


def test_indices_stay_right_across_our_appends_deletes_and_updates(uri):
    _written(uri)
    pylance.dataset(uri).create_scalar_index("i", "BTREE")  # pylance's index
    lance.dataset(uri).create_scalar_index("s", "BITMAP")  # ours
    oracle = uri + "-oracle"
    shutil.copytree(uri, oracle)
    for engine, target in ((lance, uri), (pylance, oracle)):
        engine.write_dataset(_data(500, seed=2).set_column(0, "id", pa.array(np.arange(ROWS, ROWS + 500))), target,
                             mode="append")
        engine.dataset(target).delete("id < 4000")  # fragment 0 goes entirely, the others lose rows
        engine.dataset(target).update({"i": "i + 1"}, where="id % 5 = 0")
    p = pylance.dataset(uri)
    listed = {i["name"]: i["fragment_ids"] for i in p.list_indices()}
    # pylance 14 keeps fragment bitmaps as they were (fragment 0 stays: readers mask its rows)
    assert listed == {i["name"]: i["fragment_ids"] for i in pylance.dataset(oracle).list_indices()}
    assert set(listed) == {"i_idx", "s_idx"} and 0 in listed["i_idx"] and 0 in listed["s_idx"]
    assert_pylance_uses_index(uri, "i", "i_idx")
    assert_pylance_uses_index(uri, "s", "s_idx")
    ours = lance.dataset(uri).describe_indices()
    for a, b in zip(ours, p.describe_indices()):
        assert (a.name, a.num_rows_indexed, a.total_size_bytes) == (b.name, b.num_rows_indexed, b.total_size_bytes)
    assert [{**i, "fragment_ids": sorted(i["fragment_ids"])} for i in lance.dataset(uri).list_indices()] == [
        {**i, "fragment_ids": sorted(i["fragment_ids"])} for i in p.list_indices()]


def test_replace_and_drop_commit_what_pylance_commits(uri):
    _written(uri)
    ds = lance.dataset(uri)
    ds.create_scalar_index("i", "BTREE")
    first = ds.list_indices()[0]["uuid"]
    ds.create_scalar_index("i", "BITMAP", name="i_idx", replace=True)
    [index] = ds.list_indices()
    assert index["uuid"] != first and index["type"] == "Bitmap"
    txn = ds.read_transaction()
    assert [str(__import__("uuid").UUID(bytes=i.uuid.uuid)) for i in txn.operation.removed_indices] == [first]
    before = sorted(glob.glob(os.path.join(uri, "_indices", "*")))
    with pytest.raises(lance.IndexExistsError) as raised:
        ds.create_scalar_index("i", "BTREE", name="i_idx", replace=False)
    assert isinstance(raised.value, RuntimeError) and "i_idx" in str(raised.value)
    assert sorted(glob.glob(os.path.join(uri, "_indices", "*"))) == before and ds.latest_version == 4
    ds.create_scalar_index("s", "BTREE")
    ds.drop_index("i_idx")
    txn = ds.read_transaction()
    assert not txn.operation.new_indices and [i.name for i in txn.operation.removed_indices] == ["i_idx"]
    assert txn.operation.removed_indices[0].files  # the full IndexMetadata, as pylance records it
    assert [i["name"] for i in pylance.dataset(uri).list_indices()] == ["s_idx"]
    ds.drop_index("s_idx")
    assert pylance.dataset(uri).list_indices() == [] and ds.manifest_file.index_section is None
    # pylance's own drop of an index we built, and our drop of one pylance built
    ds.create_scalar_index("i", "BTREE")
    pylance.dataset(uri).drop_index("i_idx")
    pylance.dataset(uri).create_scalar_index("s", "BITMAP")
    lance.dataset(uri).drop_index("s_idx")
    assert pylance.dataset(uri).list_indices() == [] and lance.dataset(uri).list_indices() == []


def test_bad_input_raises_typed_errors_before_writing(uri):
    table = _data(50).append_column("l", pa.array([[1, 2]] * 50))
    pylance.write_dataset(table, uri)
    ds = lance.dataset(uri)
    cases = [
        (lambda: ds.create_scalar_index("nope", "BTREE"), lance.ColumnNotFoundError, KeyError),
        (lambda: ds.create_scalar_index("l", "BTREE"), lance.InvalidTypeError, TypeError),
        (lambda: ds.create_scalar_index("i", "FOO"), lance.UnsupportedFeatureError, NotImplementedError),
        (lambda: ds.create_scalar_index("i", "LABEL_LIST"), lance.InvalidTypeError, TypeError),
        (lambda: ds.create_scalar_index("s", "NGRAM"), lance.UnsupportedFeatureError, NotImplementedError),
        (lambda: ds.drop_index("nope"), lance.IndexNotFoundError, RuntimeError),
    ]
    for call, ours, builtin in cases:
        with pytest.raises(ours) as raised:
            call()
        assert isinstance(raised.value, builtin)
    with pytest.raises(KeyError) as raised:
        ds.create_scalar_index("nope", "BTREE")
    assert str(raised.value) == "nope not found in schema"  # pylance's message
    assert ds.latest_version == 1 and not os.path.exists(os.path.join(uri, "_indices"))


def test_concurrent_writes_while_building(uri):
    """A delete that removed a whole fragment and an append land while the index is built: the index
    commits at its read version, covering the removed fragment (its rows are in the index; a bitmap
    fragment missing from the manifest is how readers mask them) and not the appended one, as
    pylance 14 does on an identical copy."""
    _written(uri)
    oracle = uri + "-oracle"
    shutil.copytree(uri, oracle)
    for lib, path in ((lance, uri), (pylance, oracle)):
        builder = lib.dataset(path)
        lib.dataset(path).delete("id < 4000")  # fragment 0 removed after the builder read
        lib.dataset(path).insert(_data(100))  # a new fragment the index does not cover
        builder.create_scalar_index("i", "BTREE")
    [index] = pylance.dataset(uri).list_indices()
    [theirs] = pylance.dataset(oracle).list_indices()
    fragments = [f.fragment_id for f in pylance.dataset(uri).get_fragments()]
    assert sorted(index["fragment_ids"]) == [0, *fragments[:-1]] == sorted(theirs["fragment_ids"])
    assert index["version"] == 2
    assert_pylance_uses_index(uri, "i", "i_idx")


def test_cleanup_keeps_retained_index_files_and_removes_dropped_or_replaced(uri):
    _written(uri)
    ds = lance.dataset(uri)
    ds.create_scalar_index("i", "BTREE")  # v3
    replaced = ds.list_indices()[0]["uuid"]
    ds.create_scalar_index("s", "BITMAP")  # v4
    dropped = [i["uuid"] for i in ds.list_indices() if i["name"] == "s_idx"][0]
    ds.create_scalar_index("i", "BTREE", replace=True)  # v5
    ds.drop_index("s_idx")  # v6
    kept = ds.list_indices()[0]["uuid"]
    tagged = lance.dataset(uri, 4)
    ds.tags.create("keep", 4)
    lance.cleanup_old_versions(uri, older_than=dt.timedelta(0), error_if_tagged_old_versions=False)
    alive = set(os.listdir(os.path.join(uri, "_indices")))
    assert {kept, replaced, dropped} == alive  # version 4 (tagged) still references both old ones
    assert tagged.version == 4
    ds.tags.delete("keep")
    stats = lance.cleanup_old_versions(uri, older_than=dt.timedelta(0))
    assert set(os.listdir(os.path.join(uri, "_indices"))) == {kept}
    assert any(f.startswith(f"_indices/{dropped}/") for f in stats.files)
    assert_pylance_uses_index(uri, "i", "i_idx")


def test_concurrent_builds_keep_one_index_per_name(uri):
    _written(uri)
    a, b, c = lance.dataset(uri), lance.dataset(uri), lance.dataset(uri)
    a.create_scalar_index("i", "BTREE")
    c.create_scalar_index("s", "BITMAP")  # another name: commits next to it without rebuilding
    assert c.read_transaction().read_version == 2
    b.create_scalar_index("i", "BITMAP", name="i_idx")  # same name: rebuilt on the latest version, replacing a's
    txn = b.read_transaction()
    assert txn.read_version == 4 and [i.name for i in txn.operation.removed_indices] == ["i_idx"]
    listed = {d.name: d.index_type for d in pylance.dataset(uri).describe_indices()}
    assert listed == {"i_idx": "Bitmap", "s_idx": "Bitmap"}
    assert_pylance_uses_index(uri, "i", "i_idx")


def test_fast_integer_sort_equals_the_two_key_sort():
    """The packed ``np.sort`` path (integers, dates, timestamps, floats' total-order keys) orders as
    a pyarrow sort by (key, row address), nulls first, including values spanning all 64 bits."""
    import pyarrow.compute as pc

    from airflow_lance.core.indices import sort

    rng = np.random.default_rng(1)
    n = 5000
    addrs = np.sort(rng.integers(0, 1 << 40, n).astype(np.uint64))
    cases = [
        pa.array(rng.integers(-5, 5, n), mask=rng.random(n) < 0.1),
        pa.array(rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64)),
        pa.array(rng.integers(0, 2**64 - 1, n, dtype=np.uint64)),
        pa.array(rng.integers(0, 3, n).astype(np.uint8)),
        pa.array(np.r_[rng.normal(size=n - 4), [np.nan, -np.nan, np.inf, -0.0]], mask=rng.random(n) < 0.1),
        pa.array(rng.integers(0, 100, n).astype(np.float32)),
        pa.array(rng.integers(0, 1000, n).astype("datetime64[us]")),
        pa.array(rng.integers(0, 1000, n).astype(np.int32)).cast(pa.date32()),
        pa.array(rng.integers(-10, 10, n).astype(np.int16), mask=rng.random(n) < 0.5),
        pa.array(np.zeros(0, np.int64)),
    ]
    for values in cases:
        a = addrs[: len(values)]
        table = pa.table({"k": sort.sort_key(values), "r": pa.array(a, pa.uint64())})
        expected = pc.sort_indices(table, sort_keys=[("k", "ascending", "at_start"), ("r", "ascending", "at_start")])
        assert np.array_equal(sort.sort_order(values, a), expected.to_numpy()), values.type



def test_merge_of_sorted_runs_equals_the_full_sort():
    """``merge_order`` (the Spark build's driver merge of per-task sorted runs) gives the positions
    ``sort_order`` gives over the concatenated runs: integer, float, string, bool and nullable keys,
    ties across runs, empty runs, and runs whose address ranges are not ascending (full sort)."""
    from airflow_lance.core.indices import sort

    rng = np.random.default_rng(2)
    n = 6000
    cases = [
        pa.array(rng.integers(0, 40, n), mask=rng.random(n) < 0.1),
        pa.array(rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n, dtype=np.int64)),
        pa.array(np.round(rng.normal(size=n), 1), mask=rng.random(n) < 0.05),
        pa.array([f"k{v:02d}" for v in rng.integers(0, 50, n)], mask=rng.random(n) < 0.05),
        pa.array(rng.random(n) < 0.5),
        pa.array(rng.integers(0, 1000, n).astype("datetime64[us]")),
    ]
    for values in cases:
        for fragments in ([0, 1, 2, 3], [0, 2, 1, 3], [5, 6, 7, 8]):  # [0, 2, 1, 3]: ranges out of order
            bounds = [0, 1000, 1000, 3500, n]  # the second run is empty
            runs_values, runs_addrs = [], []
            for task, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
                chunk = values.slice(start, end - start)
                addrs = (np.uint64(fragments[task]) << np.uint64(32)) + np.arange(end - start, dtype=np.uint64)
                order = sort.sort_order(chunk, addrs)
                runs_values.append(chunk.take(pa.array(order, pa.int64())))
                runs_addrs.append(addrs[order])
            merged = pa.concat_arrays(runs_values)
            addrs = np.concatenate(runs_addrs)
            got = sort.merge_order(merged, addrs, np.diff(bounds))
            assert np.array_equal(got, sort.sort_order(merged, addrs)), (values.type, fragments)
    with pytest.raises(ValueError, match="run lengths"):
        sort.merge_order(pa.array([1, 2]), np.array([0, 1], np.uint64), [1])

def test_delta_segments_written_by_pylance_are_described_as_pylance(uri):
    pylance.write_dataset(_data(300), uri)
    pylance.dataset(uri).create_scalar_index("i", "BTREE")
    lance.dataset(uri).insert(_data(200, seed=3))
    pylance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # a delta index: a 2nd segment
    txn = lance.dataset(uri).read_transaction()  # pylance's CreateIndex, decoded
    assert isinstance(txn.operation, lance.LanceOperation.CreateIndex)
    assert [i.name for i in txn.operation.new_indices] == ["i_idx"] and not txn.operation.removed_indices
    ours, theirs = lance.dataset(uri), pylance.dataset(uri)
    assert [{**i, "fragment_ids": sorted(i["fragment_ids"])} for i in ours.list_indices()] == [
        {**i, "fragment_ids": sorted(i["fragment_ids"])} for i in theirs.list_indices()]
    [a], [b] = ours.describe_indices(), theirs.describe_indices()
    assert (a.name, a.num_rows_indexed, a.total_size_bytes, a.fields, a.field_names) == (
        b.name, b.num_rows_indexed, b.total_size_bytes, b.fields, b.field_names)
    assert [(s.uuid, sorted(s.fragment_ids), s.dataset_version_at_last_update, s.index_version, s.size_bytes,
             s.created_at) for s in a.segments] == [
        (s.uuid, sorted(s.fragment_ids), s.dataset_version_at_last_update, s.index_version, s.size_bytes,
         s.created_at) for s in b.segments]
    ours.drop_index("i_idx")  # every segment goes, in one transaction
    assert len(ours.read_transaction().operation.removed_indices) == 2 and pylance.dataset(uri).describe_indices() == []


def test_index_names_follow_pylance(tmp_path):
    """Default names, replacement and name errors: the same sequence on ours and on pylance."""
    results = {}
    for lib in (lance, pylance):
        uri = str(tmp_path / lib.__name__)
        pylance.write_dataset(pa.table({"k": np.arange(10), "j": np.arange(10)}), uri)
        steps = []
        for column, kind, kwargs in [("k", "BITMAP", {}), ("k", "BTREE", {}), ("k", "BTREE", {}),
                                     ("k", "BTREE", {"replace": False}), ("j", "BTREE", {"name": "k_idx"}),
                                     ("j", "BITMAP", {"name": "k_idx_2", "replace": False}), ("j", "BTREE", {})]:
            try:
                lib.dataset(uri).create_scalar_index(column, kind, **kwargs)
                steps.append(sorted((d.name, d.index_type, tuple(d.field_names), len(d.segments))
                                    for d in pylance.dataset(uri).describe_indices()))
            except Exception as exc:  # noqa: BLE001 - compared with pylance's
                steps.append(type(exc).__name__ if lib is pylance else
                             "RuntimeError" if isinstance(exc, RuntimeError) else repr(exc))
        results[lib.__name__] = steps
    assert results["airflow_lance.core"] == results["lance"]


CORPUS = os.path.join(os.path.dirname(__file__), "..", "fixtures", "lance_corpus")


@pytest.mark.parametrize("release", ["0.18.2", "0.30.0", "4.0.2", "14.0.2"])
@pytest.mark.parametrize(("column", "kind"), [("cat", "BITMAP"), ("cat", "BTREE"), ("id", "BITMAP"),
                                               ("labels", "LABEL_LIST"), ("vec", "IVF_PQ"), ("vec", "IVF_FLAT")])
def test_index_names_on_indices_old_releases_wrote_follow_pylance(tmp_path, release, column, kind):
    """Building an index on a column an old release indexed: the same name (replaced, or taken) as
    pylance 14. Until December 2026 ours took ``{column}_idx_2`` beside an index without details
    (releases before 0.20) or with the vector details' older type URL (before 7.0)."""
    names = {}
    for lib in (pylance, lance):
        uri = str(tmp_path / lib.__name__)
        shutil.copytree(os.path.join(CORPUS, release, "indices.lance"), uri)
        handle = lib.dataset(uri)
        try:
            if kind.startswith("IVF"):
                handle.create_index(column, kind, num_partitions=2,
                                    **({"num_sub_vectors": 2} if kind == "IVF_PQ" else {}))
            else:
                handle.create_scalar_index(column, kind)
        except RuntimeError as exc:  # pylance's and our IndexExistsError
            names[lib.__name__] = f"refused: {'already exists' in str(exc)}"
            continue
        names[lib.__name__] = sorted(i["name"] for i in lance.dataset(uri).list_indices())
    assert names["airflow_lance.core"] == names["lance"]


def test_pylance_commits_over_our_create_index(uri):
    """pylance reads our CreateIndex transaction to rebase its own concurrent commits."""
    _written(uri)
    fragments = pylance.LanceFragment.create(uri, _data(100, seed=4))
    read_version = pylance.dataset(uri).version
    lance.dataset(uri).create_scalar_index("i", "BTREE")
    pylance.LanceDataset.commit(uri, pylance.LanceOperation.Append([fragments]), read_version=read_version)
    ds = pylance.dataset(uri)
    assert ds.version == read_version + 2 and [d.name for d in ds.describe_indices()] == ["i_idx"]
    assert_pylance_uses_index(uri, "i", "i_idx")


def test_fragments_updated_in_place_leave_only_the_indices_on_the_updated_fields_as_pylance(uri):
    """An Update committed with ``fields_modified`` (pylance's rewrite-columns form, here with the
    fragment's files unchanged) takes the updated fragment out of the bitmaps of the indices on those
    fields only, in both engines."""
    _written(uri)
    pylance.dataset(uri).create_scalar_index("i", "BTREE")
    pylance.dataset(uri).create_scalar_index("s", "BITMAP")
    oracle = uri + "-oracle"
    shutil.copytree(uri, oracle)
    field = {f.name: f.id for f in lance.dataset(uri).lance_schema.fields}["s"]
    mine = lance.dataset(uri)
    first = mine.get_fragments()[0].metadata
    lance.LanceDataset.commit(uri, lance.LanceOperation.Update(
        updated_fragments=[first], fields_modified=[field], update_mode="rewrite_columns"), read_version=mine.version)
    theirs = pylance.dataset(oracle)
    pylance.LanceDataset.commit(oracle, pylance.LanceOperation.Update(
        updated_fragments=[theirs.get_fragments()[0].metadata], fields_modified=[field], update_mode="rewrite_columns"),
        read_version=theirs.version)
    listed = [{i["name"]: sorted(i["fragment_ids"]) for i in pylance.dataset(u).list_indices()} for u in (uri, oracle)]
    assert listed[0] == listed[1]
    assert 0 in listed[0]["i_idx"] and 0 not in listed[0]["s_idx"]


def test_an_index_built_on_an_older_version_commits_over_updates_that_rewrote_rows_as_pylance(uri):
    """pylance's upsert and update of the indexed column, which rewrote rows (old rows masked by
    deletion vectors, new rows in new fragments), do not make an index built before them rebuild:
    pylance 14 commits it at its read version, and so do we. Both engines then list the same
    fragments for it and answer every filter through it as a full scan."""
    _written(uri)
    oracle = uri + "-oracle"
    shutil.copytree(uri, oracle)
    source = _data(30, seed=9).set_column(0, "id", pa.array([*range(0, 9000, 400), *range(20_000, 20_007)],
                                                              pa.int64()))
    for lib, path in ((lance, uri), (pylance, oracle)):
        builder = lib.dataset(path)
        read_version = builder.version
        pylance.dataset(path).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
        pylance.dataset(path).update({"i": "i + 100"}, where="id < 30")
        builder.create_scalar_index("i", "BTREE")
        assert lib.dataset(path).read_transaction(read_version + 3).read_version == read_version, lib.__name__
    listed = [{i["name"]: sorted(i["fragment_ids"]) for i in pylance.dataset(u).list_indices()} for u in (uri, oracle)]
    assert listed[0] == listed[1]
    for path in (uri, oracle):
        assert_pylance_uses_index(path, "i", "i_idx")
    ours = lance.dataset(uri)
    for flt in FILTERS["i"] + ["i > 100"]:
        assert _same(ours.to_table(filter=flt).sort_by("id"), pylance.dataset(uri).to_table(filter=flt).sort_by("id"))


def test_an_index_committed_over_an_update_in_place_of_its_column_leaves_that_fragment_out_as_pylance(uri):
    """pylance 14's merge insert rewrites columns in place when it only updates (an Update in
    ``rewrite_columns`` mode naming the fields it changed). An index built before that commits at its
    read version in both engines, without the updated fragment in its bitmap when the update changed
    its column (the index holds the old values there), with it otherwise."""
    _written(uri)
    oracle = uri + "-oracle"
    shutil.copytree(uri, oracle)
    field = {f.name: f.id for f in lance.dataset(uri).lance_schema.fields}["i"]
    for lib, path in ((lance, uri), (pylance, oracle)):
        builders = lib.dataset(path), lib.dataset(path)
        read_version = builders[0].version
        first = pylance.dataset(path).get_fragments()[0].metadata
        pylance.LanceDataset.commit(path, pylance.LanceOperation.Update(
            updated_fragments=[first], fields_modified=[field], update_mode="rewrite_columns"), read_version=read_version)
        builders[0].create_scalar_index("i", "BTREE")
        builders[1].create_scalar_index("s", "BTREE")
        for version in (read_version + 2, read_version + 3):
            assert lib.dataset(path).read_transaction(version).read_version == read_version, lib.__name__
    listed = [{i["name"]: sorted(i["fragment_ids"]) for i in pylance.dataset(u).list_indices()} for u in (uri, oracle)]
    assert listed[0] == listed[1]
    assert 0 not in listed[0]["i_idx"] and 0 in listed[0]["s_idx"]
    assert_pylance_uses_index(uri, "i", "i_idx")
