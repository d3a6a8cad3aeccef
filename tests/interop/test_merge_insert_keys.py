"""merge_insert builder completeness and pylance 14's inserted-keys conflict rule, side by side.

With ``on`` equal to the schema's unenforced primary key, pylance 14 writes the keys a merge
inserted into the Update transaction (a bloom filter, ``Update.inserted_rows``); a concurrent
merge_insert that may have inserted the same key conflicts and is redone on the new version
(the key then matches), disjoint keys both commit. Without a primary key, two concurrent
inserts of one key both insert it (pylance does the same). The oracle is pylance on an
identical copy; the filter bytes we write equal pylance's.
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

import airflow_lance.core as ours
from airflow_lance.core._proto import transaction_pb2
from airflow_lance.core.errors import InvalidInputError, MergeInsertMatchedError

PK = {"lance-schema:unenforced-primary-key": "true"}


def _schema(key_type: pa.DataType = pa.int64(), primary: bool = True) -> pa.Schema:
    return pa.schema([pa.field("id", key_type, nullable=False, metadata=PK if primary else None),
                      pa.field("v", pa.string())])


def _table(ids, values, schema: pa.Schema) -> pa.Table:
    return pa.table({"id": pa.array(ids, schema.field("id").type), "v": pa.array(values, pa.string())}, schema=schema)


def _copies(tmp_path, schema: pa.Schema, n: int = 20) -> tuple[str, str]:
    oracle, mine = str(tmp_path / "oracle.lance"), str(tmp_path / "ours.lance")
    key_type = schema.field("id").type
    textual = pa.types.is_string(key_type) or pa.types.is_large_string(key_type) or pa.types.is_binary(key_type)
    ids = [f"k{i}" for i in range(n)] if textual else list(range(n))
    pylance.write_dataset(_table(ids, [f"v{i}" for i in range(n)], schema), oracle, max_rows_per_file=10)
    shutil.copytree(oracle, mine)
    return oracle, mine


def _last_update(uri: str) -> transaction_pb2.Transaction.Update:
    files = glob.glob(os.path.join(uri, "_transactions", "*.txn"))
    newest = max(files, key=lambda p: int(os.path.basename(p).split("-")[0]))
    txn = transaction_pb2.Transaction()
    with open(newest, "rb") as f:
        txn.ParseFromString(f.read())
    assert txn.WhichOneof("operation") == "update"
    return txn.update


def _rows(uri: str) -> dict:
    return pylance.dataset(uri).to_table().sort_by("id").to_pydict()


def _upsert(ds, source):
    return ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)


KEY_TYPES = {
    "int64": (pa.int64(), [3, 100, 101, -5]),
    "int32": (pa.int32(), [3, 100, 101, -5]),
    "uint64": (pa.uint64(), [3, 100, 2**63 + 7]),
    "uint32": (pa.uint32(), [3, 100, 2**31 + 9]),
    "string": (pa.string(), ["k3", "new", "a much longer key than thirty-two bytes, to hash in stripes", ""]),
    "large_string": (pa.large_string(), ["k3", "x" * 70, "é"]),
    "binary": (pa.binary(), [b"k3", b"\x00\x01", b"z" * 33]),
    "int16 (not hashed)": (pa.int16(), [3, 100]),
}


@pytest.mark.parametrize("name", list(KEY_TYPES))
def test_inserted_keys_filter_equals_pylance(tmp_path, name):
    key_type, keys = KEY_TYPES[name]
    schema = _schema(key_type)
    oracle, mine = _copies(tmp_path, schema)
    source = _table(keys, [f"n{i}" for i in range(len(keys))], schema)
    expected = _upsert(pylance.dataset(oracle), source)
    assert _upsert(ours.dataset(mine), source) == expected
    theirs, mine_update = _last_update(oracle), _last_update(mine)
    assert theirs.HasField("inserted_rows") and mine_update.HasField("inserted_rows")
    assert mine_update.inserted_rows.SerializeToString() == theirs.inserted_rows.SerializeToString()
    assert _rows(mine) == _rows(oracle)


def test_composite_primary_key_equals_pylance(tmp_path):
    position = "lance-schema:unenforced-primary-key:position"
    schema = pa.schema([
        pa.field("a", pa.int64(), nullable=False, metadata={**PK, position: "0"}),
        pa.field("b", pa.string(), nullable=False, metadata={**PK, position: "1"}),
        pa.field("v", pa.float64()),
    ])
    base = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "v": [1.0, 2.0, 3.0]}, schema=schema)
    oracle, mine = str(tmp_path / "oracle.lance"), str(tmp_path / "ours.lance")
    pylance.write_dataset(base, oracle)
    shutil.copytree(oracle, mine)
    source = pa.table({"a": [1, 7, 9, 8], "b": ["x", "q", "r", ""], "v": [9.0, 9.0, 9.0, 9.0]}, schema=schema)

    def run(ds):  # position 0 ranks after position 1 in pylance 14: the key is (b, a)
        return ds.merge_insert(["b", "a"]).when_matched_update_all().when_not_matched_insert_all().execute(source)

    assert run(ours.dataset(mine)) == run(pylance.dataset(oracle))
    theirs, mine_update = _last_update(oracle), _last_update(mine)
    assert list(theirs.inserted_rows.field_ids) == [1, 0]
    assert mine_update.inserted_rows.SerializeToString() == theirs.inserted_rows.SerializeToString()


def test_no_filter_without_primary_key_or_for_matched_delete_only(tmp_path):
    oracle, mine = _copies(tmp_path / "plain", _schema(primary=False))
    source = _table([3, 50], ["a", "b"], _schema(primary=False))
    for uri, lib in ((oracle, pylance), (mine, ours)):
        _upsert(lib.dataset(uri), source)
        assert not _last_update(uri).HasField("inserted_rows")
    oracle, mine = _copies(tmp_path / "pk", _schema())
    for uri, lib in ((oracle, pylance), (mine, ours)):
        lib.dataset(uri).merge_insert("id").when_matched_delete().execute(_table([3, 50], ["a", "b"], _schema()))
        assert not _last_update(uri).HasField("inserted_rows")
        lib.dataset(uri).merge_insert("id").when_matched_update_all().execute(_table([4], ["a"], _schema()))
        assert _last_update(uri).HasField("inserted_rows")  # an update-only merge: an empty filter


WRITERS = {"ours": ours, "pylance": pylance}


@pytest.mark.parametrize("first,second", [("ours", "ours"), ("pylance", "ours"), ("ours", "pylance")])
def test_concurrent_inserts_of_one_key_conflict_and_the_later_is_redone(tmp_path, first, second):
    schema = _schema()
    oracle, mine = _copies(tmp_path, schema)
    a, b = _table([100, 5], ["first", "first"], schema), _table([100, 6], ["second", "second"], schema)
    # the oracle: one after the other
    _upsert(pylance.dataset(oracle), a)
    expected_stats = _upsert(pylance.dataset(oracle), b)
    # concurrently: both handles plan on version 1
    h1, h2 = WRITERS[first].dataset(mine), WRITERS[second].dataset(mine)
    assert _upsert(h1, a) == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert _upsert(h2, b) == expected_stats == {"num_inserted_rows": 0, "num_updated_rows": 2, "num_deleted_rows": 0}
    assert _rows(mine) == _rows(oracle)
    assert _rows(mine)["id"].count(100) == 1
    assert ours.dataset(mine).to_table().sort_by("id").to_pydict() == _rows(oracle)


@pytest.mark.parametrize("first,second", [("ours", "ours"), ("pylance", "ours"), ("ours", "pylance")])
def test_concurrent_inserts_of_disjoint_keys_both_commit(tmp_path, first, second):
    schema = _schema()
    oracle, mine = _copies(tmp_path, schema)
    a, b = _table([100, 101], ["first"] * 2, schema), _table([200, 201], ["second"] * 2, schema)
    _upsert(pylance.dataset(oracle), a)
    _upsert(pylance.dataset(oracle), b)
    h1, h2 = WRITERS[first].dataset(mine), WRITERS[second].dataset(mine)
    assert _upsert(h1, a)["num_inserted_rows"] == 2
    assert _upsert(h2, b)["num_inserted_rows"] == 2
    assert _rows(mine) == _rows(oracle)
    if second == "ours":  # no retry: the second commit was planned on version 1
        assert ours.dataset(mine).read_transaction(3).read_version == 1


def test_without_primary_key_concurrent_inserts_both_insert_as_pylance(tmp_path):
    schema = _schema(primary=False)
    results = {}
    for lib_name in ("ours", "pylance"):
        uri = str(tmp_path / f"{lib_name}.lance")
        pylance.write_dataset(_table([1, 2], ["a", "b"], schema), uri)
        lib = WRITERS[lib_name]
        h1, h2 = lib.dataset(uri), lib.dataset(uri)
        _upsert(h1, _table([10], ["x"], schema))
        _upsert(h2, _table([10], ["y"], schema))
        results[lib_name] = _rows(uri)
    assert results["ours"] == results["pylance"]
    assert results["ours"]["id"].count(10) == 2


@pytest.mark.parametrize("writer", ["ours", "pylance"])
def test_primary_key_merge_against_a_concurrent_append_is_redone(tmp_path, writer):
    schema = _schema()
    oracle, mine = _copies(tmp_path, schema)
    appended = _table([100], ["appended"], schema)
    source = _table([100, 101], ["merged", "merged"], schema)
    pylance.dataset(oracle).insert(appended)
    expected = _upsert(pylance.dataset(oracle), source)
    handle = ours.dataset(mine)
    WRITERS[writer].dataset(mine).insert(appended)
    assert _upsert(handle, source) == expected == {"num_inserted_rows": 1, "num_updated_rows": 1,
                                                    "num_deleted_rows": 0}
    assert _rows(mine) == _rows(oracle)


def test_pylance_reads_our_inserted_keys_filter(tmp_path):
    """pylance's own merge, planned before ours committed, conflicts on our filter and is redone."""
    schema = _schema()
    _, mine = _copies(tmp_path, schema)
    theirs = pylance.dataset(mine)
    _upsert(ours.dataset(mine), _table([100], ["ours"], schema))
    assert _upsert(theirs, _table([100], ["pylance"], schema))["num_updated_rows"] == 1
    assert _rows(mine)["id"].count(100) == 1
    assert [t.operation.__class__.__name__ for t in pylance.dataset(mine).get_transactions()][:2] == ["Update"] * 2


# -- when_matched_fail, retry_timeout, use_index ---------------------------------------------

def test_when_matched_fail_side_by_side(tmp_path):
    schema = _schema()
    oracle, mine = _copies(tmp_path, schema)
    clash = _table([3, 100], ["x", "y"], schema)
    with pytest.raises(OSError, match="found matching row with key values: id = 3"):
        pylance.dataset(oracle).merge_insert("id").when_matched_fail().when_not_matched_insert_all().execute(clash)
    handle = ours.dataset(mine)
    with pytest.raises(MergeInsertMatchedError, match="found matching row with key values: id = 3") as info:
        handle.merge_insert("id").when_matched_fail().when_not_matched_insert_all().execute(clash)
    assert isinstance(info.value, OSError) and isinstance(info.value, InvalidInputError)
    assert handle.version == ours.dataset(mine).version == pylance.dataset(oracle).version == 1
    assert sorted(os.listdir(os.path.join(mine, "data"))) == sorted(os.listdir(os.path.join(oracle, "data")))
    # the last when_matched_* wins
    for lib, uri in ((pylance, oracle), (ours, mine)):
        with pytest.raises(OSError):
            lib.dataset(uri).merge_insert("id").when_matched_update_all().when_matched_fail().execute(clash)
    fresh = _table([100, 101], ["y", "z"], schema)
    for lib, uri in ((pylance, oracle), (ours, mine)):
        assert lib.dataset(uri).merge_insert("id").when_matched_fail().when_not_matched_insert_all().execute(
            fresh) == {"num_inserted_rows": 2, "num_updated_rows": 0, "num_deleted_rows": 0}
        # fail alone with nothing matched: an empty commit, as pylance
        assert lib.dataset(uri).merge_insert("id").when_matched_fail().execute(_table([500], ["q"], schema)) == {
            "num_inserted_rows": 0, "num_updated_rows": 0, "num_deleted_rows": 0}
        assert lib.dataset(uri).merge_insert("id").when_matched_fail().when_matched_update_all().execute(
            _table([3], ["upd"], schema))["num_updated_rows"] == 1
    assert _rows(mine) == _rows(oracle)
    assert ours.dataset(mine).version == pylance.dataset(oracle).version


@pytest.mark.parametrize("bad", [5, "30s", None])
def test_retry_timeout_and_use_index_types_as_pylance(tmp_path, bad):
    schema = _schema()
    oracle, mine = _copies(tmp_path, schema)
    for lib, uri in ((pylance, oracle), (ours, mine)):
        builder = lib.dataset(uri).merge_insert("id")
        with pytest.raises(TypeError):
            builder.retry_timeout(bad)
        with pytest.raises(TypeError):
            builder.use_index(bad if bad is not None else 1)
        with pytest.raises(ValueError):
            builder.retry_timeout(dt.timedelta(seconds=-1))
        chained = builder.retry_timeout(dt.timedelta(seconds=5)).use_index(False).when_matched_update_all()
        assert chained.when_not_matched_insert_all().execute(_table([3, 100], ["a", "b"], schema)) == {
            "num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert _rows(mine) == _rows(oracle)


@pytest.mark.parametrize("limit", ["conflict_retries", "retry_timeout"])
def test_one_attempt_then_the_conflict_is_raised_when_retries_are_spent(tmp_path, limit):
    schema = _schema()
    _, mine = _copies(tmp_path, schema)
    handle = ours.dataset(mine)
    _upsert(ours.dataset(mine), _table([100], ["first"], schema))
    from airflow_lance.core.errors import CommitConflictError

    builder = handle.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    builder = builder.conflict_retries(0) if limit == "conflict_retries" else builder.retry_timeout(dt.timedelta(0))
    with pytest.raises(CommitConflictError):
        builder.execute(_table([100], ["second"], schema))
    assert _rows(mine)["v"][_rows(mine)["id"].index(100)] == "first"
    assert np.array(_rows(mine)["id"]).tolist().count(100) == 1


def test_our_transaction_model_round_trips_pylance_filter(tmp_path):
    schema = _schema()
    oracle, _ = _copies(tmp_path, schema)
    _upsert(pylance.dataset(oracle), _table([100, 3], ["x", "y"], schema))
    txn = ours.dataset(oracle).read_transaction(2)
    theirs = _last_update(oracle)
    assert txn.operation.inserted_rows_filter is not None
    assert txn.operation.inserted_rows_filter.field_ids == [0]
    assert txn.to_pb().update.inserted_rows.SerializeToString() == theirs.inserted_rows.SerializeToString()
