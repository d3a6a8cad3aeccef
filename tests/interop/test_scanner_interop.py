"""Scans, take and row-id lookups side by side with pylance on the same datasets.

Each dataset is written by pylance (2.0 / 2.2, with deletions, with stable row ids after a
compaction), then read by both libraries with the same options: tables, row ids, row
addresses and counts must be equal.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_lance import core
from airflow_lance.core.errors import InvalidInputError, LanceError, NegativeIndexError, RowIndexError
from airflow_lance.core.scanner import has_stable_row_ids

lance = pytest.importorskip("lance")

N = 300


def _table(n: int = N) -> pa.Table:
    ids = np.arange(n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "x": pa.array(ids * 0.5),
            "s": pa.array([f"s{i % 17}" for i in ids]),
            "st": pa.StructArray.from_arrays([pa.array(ids % 5), pa.array([f"n{i}" for i in ids])], ["k", "name"]),
        }
    )


KINDS = ["2.0", "2.2", "2.0-stable", "2.2-stable", "ours-2.0", "ours-2.2"]


@pytest.fixture(params=KINDS)
def pair(request, tmp_path):
    """(pylance handle, our handle) on one dataset with deletions in several fragments."""
    uri = str(tmp_path / "ds")
    if request.param.startswith("ours-"):  # written and deleted from by us
        ds = core.write_dataset(_table(), uri, max_rows_per_file=64, data_storage_version=request.param[5:])
        ds.delete("id % 7 = 3 or (id >= 64 and id < 128)")
        return lance.dataset(uri), core.dataset(uri)
    version, _, stable = request.param.partition("-")
    ds = lance.write_dataset(
        _table(), uri, max_rows_per_file=64, data_storage_version=version, enable_stable_row_ids=bool(stable)
    )
    ds.delete("id % 7 = 3 or (id >= 64 and id < 128)")  # fragment 1 emptied, others with holes
    if stable:
        ds.optimize.compact_files(target_rows_per_fragment=100)  # moves rows: ids != addresses
        ds.delete("id % 11 = 0")
        ds = lance.dataset(uri)
    return ds, core.dataset(uri)


SCANS = [
    {},
    {"with_row_id": True},
    {"with_row_address": True},
    {"with_row_id": True, "with_row_address": True},
    {"columns": ["s", "id"], "with_row_address": True, "with_row_id": True},
    {"columns": ["_rowid", "id"]},
    {"columns": ["id", "_rowaddr"], "with_row_id": True},
    {"columns": {"double": "x * 2", "ident": "id"}, "with_row_id": True},
    {"columns": [], "with_row_id": True},
    {"filter": "id > 150", "limit": 20},
    {"filter": "id > 150", "limit": 20, "offset": 7, "with_row_id": True},
    {"filter": "s = 's3'", "offset": 3},
    {"limit": 10},
    {"limit": 10, "offset": 150},
    {"offset": 150},
    {"offset": 10_000},
    {"limit": 0},
    {"filter": "_rowid > 100", "with_row_id": True, "columns": ["id"]},
    {"filter": "st.k = 2", "columns": ["id", "st"]},
    {"batch_size": 7, "columns": ["id"]},
]


@pytest.mark.parametrize("options", SCANS, ids=[str(o) for o in SCANS])
def test_scanner_to_table_matches_pylance(pair, options):
    theirs, ours = pair
    expected = theirs.scanner(**options).to_table()
    assert ours.scanner(**options).to_table().equals(expected)
    assert ours.to_table(**options).equals(expected)
    batches = list(ours.to_batches(**options))
    assert pa.Table.from_batches(batches, schema=expected.schema).equals(expected)
    reader = ours.scanner(**options).to_reader()
    assert reader.read_all().equals(expected)
    if "batch_size" in options:
        assert all(b.num_rows <= options["batch_size"] for b in batches)


def test_row_ids_and_addresses_match_pylance(pair):
    theirs, ours = pair
    cols = ["_rowid", "_rowaddr", "id"]
    expected = theirs.to_table(columns=cols)
    got = ours.to_table(columns=cols)
    assert got.equals(expected)
    addresses = np.asarray(got["_rowaddr"])
    fragments = {f.fragment_id for f in ours.get_fragments()}
    assert set((addresses >> 32).tolist()) <= fragments


@pytest.mark.parametrize("filter", [None, "id > 150", "s = 's3' and id < 200", "id < 0"])
def test_count_rows_matches_pylance(pair, filter):
    theirs, ours = pair
    assert ours.scanner(filter=filter).count_rows() == theirs.scanner(filter=filter).count_rows()
    assert ours.count_rows(filter) == theirs.count_rows(filter)


def test_fragments_option_matches_pylance(pair):
    theirs, ours = pair
    picked_theirs = theirs.get_fragments()[-1:]
    picked_ours = [f for f in ours.get_fragments() if f.fragment_id == picked_theirs[0].fragment_id]
    expected = theirs.scanner(fragments=picked_theirs, with_row_id=True, with_row_address=True).to_table()
    assert ours.scanner(fragments=picked_ours, with_row_id=True, with_row_address=True).to_table().equals(expected)


def test_take_matches_pylance(pair):
    theirs, ours = pair
    total = theirs.count_rows()
    rng = np.random.default_rng(7)
    indices = rng.integers(0, total, 50).tolist() + [0, total - 1, 5, 5]
    assert ours.take(indices).equals(theirs.take(indices))
    assert ours.take(pa.array(indices), columns=["s"]).equals(theirs.take(pa.array(indices), columns=["s"]))
    assert ours.take(indices, columns={"y": "id + 1"}).equals(theirs.take(indices, columns={"y": "id + 1"}))
    assert ours.take(indices, columns=["_rowid", "id"]).equals(theirs.take(indices, columns=["_rowid", "id"]))
    assert ours.take([], columns=["id"]).equals(theirs.take([], columns=["id"]))


def test_take_rows_matches_pylance(pair):
    theirs, ours = pair
    live = theirs.to_table(columns=["_rowid"])["_rowid"].to_pylist()
    if has_stable_row_ids(ours):
        deleted_or_absent = [3, 66, 10_000]  # deleted rows, an id never assigned
    else:
        deleted_or_absent = [3, 10, (1 << 32) | 6, 1_000 << 32]  # deleted rows, removed/missing fragments
    ids = live[::9] + deleted_or_absent + live[:3] + live[5:6]
    for columns in (None, ["id"], ["id", "_rowid", "_rowaddr"], {"z": "x + 1"}):
        assert ours._take_rows(ids, columns).equals(theirs._take_rows(ids, columns))
    if not has_stable_row_ids(ours):  # an address past its (existing) fragment's rows
        with pytest.raises(OSError):
            theirs._take_rows([0, 70])
        with pytest.raises(RowIndexError):
            ours._take_rows([0, 70])


def test_take_bad_input_is_typed_like_pylance(pair):
    theirs, ours = pair
    total = theirs.count_rows()
    with pytest.raises(OSError):
        theirs.take([total])
    with pytest.raises(RowIndexError) as info:
        ours.take([1, total])
    assert isinstance(info.value, OSError) and isinstance(info.value, LanceError)
    with pytest.raises(OverflowError):
        theirs.take([-1])
    with pytest.raises(NegativeIndexError) as info:
        ours.take([-1])
    assert isinstance(info.value, OverflowError)
    with pytest.raises(InvalidInputError):
        ours.take(["a"])
    with pytest.raises(InvalidInputError, match="unknown column"):
        ours.take([0], columns=["nope"])


def test_scan_bad_input_is_typed(pair):
    theirs, ours = pair
    with pytest.raises(ValueError):
        theirs.scanner(limit=3).count_rows()
    with pytest.raises(InvalidInputError, match="limit/offset"):
        ours.scanner(limit=3).count_rows()
    for options in ({"limit": -1}, {"offset": -2}, {"batch_size": 0}, {"columns": "id"},
                    {"columns": ["nope"]}, {"filter": "nope > 1"}, {"fragments": [1]}):
        with pytest.raises(InvalidInputError):
            ours.scanner(**options).to_table()
    with pytest.raises(NotImplementedError):
        ours.scanner(nearest={"column": "x", "q": [1.0], "k": 1})


# -- the filter language: what pylance's tests use -------------------------------------------


def _typed_table() -> pa.Table:
    import datetime as dt

    day, moment = dt.date, dt.datetime
    n = 8
    return pa.table(
        {
            "i": pa.array(range(n), pa.int64()),
            "tags": pa.array([["a", "b"], None, [], ["c", None], ["a"], ["b", "b"], ["z"], ["a", "c"]]),
            "n": pa.array([[1, 2], [3], None, [], [2, 2], [5, 1], [0], [3, 4]], pa.list_(pa.int32())),
            "d": pa.array([day(2020, 1, 1), day(2030, 1, 1), None, day(2020, 1, 1), day(2099, 1, 1),
                           day(1999, 5, 5), day(2100, 1, 1), day(2001, 1, 1)]),
            "ts": pa.array([moment(2020, 1, 1), moment(2030, 1, 1), None, moment(2020, 1, 1),
                            moment(2099, 1, 1), moment(1999, 1, 1), moment(2200, 1, 1), moment(2001, 1, 1)]),
            "bin": pa.array([b"\x01\xab", b"\x02", None, b"", b"\x01\xab", b"\xff", b"\x00", b"\x02"]),
            "st": pa.array([{"a": {"b": 1}}, {"a": {"b": 2}}, {"a": {"b": None}}, {"a": {"b": 1}}, {"a": {"b": 2}},
                            {"a": {"b": 3}}, {"a": {"b": 1}}, {"a": {"b": None}}]),
        }
    )


FILTERS = [
    "array_has_any(tags, ['a','z'])", "not array_has_any(tags, ['a','z'])", "array_has_all(tags, ['a','b'])",
    "not array_has_all(tags, ['a'])", "array_contains(tags, 'c')", "not array_contains(tags, 'c')",
    "array_has(n, 2)", "array_has_any(n, [2, 3])", "array_has_any(n, [1.5, 2])", "array_has_all(n, [2, 2])",
    "array_has_all(n, [])", "array_has_any(tags, [])", "not array_has_any(tags, [])", "array_contains(tags, NULL)",
    "array_has_any(tags, ['c', NULL])", "array_has_all(tags, ['c', NULL])", "array_contains(tags, 'z') is null",
    "array_length(n) = 2", "array_length(n) is null", "cardinality(n) = 2", "tags[1] = 'a'", "n[2] = 2",
    "n[5] is null", "n[0] is null", "tags[1] is null", "tags[i] = 'a'", "n[i - 2] = 3", "n[i - 2] is null",
    "tags[i] is null", "n[-1] = 2", "tags[-2] = 'a'",
    "d < current_date", "d < CURRENT_DATE()", "d >= current_date", "ts < now()", "ts > now()",
    "current_timestamp > ts", "d > date '2025-01-01'", "ts > timestamp '2025-01-01 00:00:00'",
    "bin = X'01ab'", "bin = x''", "bin != X'02'", "bin = X'FF'",
    "st['a']['b'] = 2", "st.a.b = 2", "st['a'] is null", "st.a.b is null",
]


@pytest.fixture(scope="module", params=["2.0", "2.2"])
def typed_pair(request, tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("typed") / "ds")
    ds = lance.write_dataset(_typed_table(), uri, data_storage_version=request.param, max_rows_per_file=3)
    ds.delete("i = 4")
    return lance.dataset(uri), core.dataset(uri)


@pytest.mark.parametrize("filter", FILTERS)
def test_filter_functions_match_pylance(typed_pair, filter):
    theirs, ours = typed_pair
    expected = theirs.to_table(filter=filter, with_row_id=True)
    assert ours.to_table(filter=filter, with_row_id=True).equals(expected)
    assert ours.count_rows(filter) == theirs.count_rows(filter)


@pytest.mark.parametrize(
    ("filter", "message"),
    [
        ("array_contains(n, 'x')", "cannot look for string values in a list of int32"),
        ("array_has_any(i, [1])", "needs a list column, but i is int64"),
        ("array_has_any(n, i)", "second argument must be a list literal"),
        ("st['zz'] = 1", "struct st has no field 'zz'"),
        ("i[1] = 1", r"needs a list column"),
        ("tags[d] = 'a'", "a list index must be an integer"),
    ],
)
def test_bad_filter_functions_are_typed_errors(typed_pair, filter, message):
    theirs, ours = typed_pair
    with pytest.raises(ValueError):
        theirs.to_table(filter=filter)
    with pytest.raises(InvalidInputError, match=message):
        ours.to_table(filter=filter)


@pytest.mark.parametrize(
    "projection",
    [{"a": "u8 + 1"}, {"b": "i32 + 1"}, {"c": "u64 + 1"}, {"d": "u64 * 2"}, {"e": "1 - u8"}, {"f": "u8 - 2"},
     {"g": "i32 / 2"}, {"h": "u64 % 2"}],
)
def test_projection_literals_take_the_column_type_as_in_pylance(tmp_path, projection):
    uri = str(tmp_path / "ds")
    data = pa.table({"u8": pa.array([1, 2, 255], pa.uint8()), "i32": pa.array([1, -2, 7], pa.int32()),
                     "u64": pa.array([1, 2, 2**63], pa.uint64())})
    theirs = lance.write_dataset(data, uri)
    assert core.dataset(uri).to_table(columns=projection).equals(theirs.to_table(columns=projection))


@pytest.mark.parametrize("projection", [{"e": "u8 + 300"}, {"j": "-1 + u8"}, {"i": "u8 * 1.5"}, {"k": "u8 * 1.0"}])
def test_projection_literal_out_of_column_range_is_typed(tmp_path, projection):
    uri = str(tmp_path / "ds")
    theirs = lance.write_dataset(pa.table({"u8": pa.array([1, 2], pa.uint8())}), uri)
    with pytest.raises(ValueError):
        theirs.to_table(columns=projection)
    with pytest.raises(InvalidInputError, match="cannot be converted to the type of u8"):
        core.dataset(uri).to_table(columns=projection)


def test_row_id_in_a_projection_matches_pylance(pair):
    theirs, ours = pair
    options = {"columns": {"r": "_rowid + 1", "half": "x / 2"}, "with_row_id": True, "filter": "id > 20"}
    assert ours.to_table(**options).equals(theirs.to_table(**options))


@pytest.mark.parametrize("projection", [{"f": "f32 + 1"}, {"g": "f64 * 2"}, {"h": "f32 / 3"}, {"k": "f32 - 0.5"}])
def test_projection_float_literals_match_pylance(tmp_path, projection):
    uri = str(tmp_path / "ds")
    data = pa.table({"f32": pa.array([1.5, -2.25], pa.float32()), "f64": pa.array([0.1, 3.0]),
                     "u8": pa.array([1, 2], pa.uint8())})
    theirs = lance.write_dataset(data, uri)
    assert core.dataset(uri).to_table(columns=projection).equals(theirs.to_table(columns=projection))


@pytest.mark.parametrize(("start", "end"), [(0, 10), (60, 140), (150, 10_000), (5, 5)])
def test_slice_matches_pylance(pair, start, end):
    theirs, ours = pair
    assert ours.slice(start, end).equals(theirs.slice(start, end))
    assert ours.slice(start, end, columns=["s"]).equals(theirs.slice(start, end, columns=["s"]))


@pytest.mark.parametrize(("start", "end"), [(-1, 3), (5, 2)])
def test_bad_slice_is_typed(pair, start, end):
    theirs, ours = pair
    with pytest.raises(ValueError):
        theirs.slice(start, end)
    with pytest.raises(InvalidInputError):
        ours.slice(start, end)


def test_count_rows_keywords_match_pylance(pair):
    """pylance 14's ``count_rows(filter, **kwargs)`` ignores the keywords; the scanner's uses them."""
    theirs, ours = pair
    picked = [f.fragment_id for f in theirs.get_fragments()][:2]
    mine, its = [ours.get_fragment(i) for i in picked], [theirs.get_fragment(i) for i in picked]
    assert ours.count_rows("id > 10", fragments=mine) == theirs.count_rows("id > 10", fragments=its)
    assert ours.scanner(filter="id > 10", fragments=mine).count_rows() == (
        theirs.scanner(filter="id > 10", fragments=its).count_rows()
    )
