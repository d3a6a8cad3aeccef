"""Every ordered pair of writes, the second planned before the first commits, against pylance 14.

For each pair (``mine``, ``theirs``) of the operations in :data:`OPS`, on identical copies of one
dataset written by pylance (three fragments, a BTREE on ``id``, an IVF_FLAT on ``v``, a small
unindexed append): a handle of each engine is opened, pylance commits ``theirs``, then ``mine`` runs
through the old handle, so its plan read the old version and its commit goes through the conflict
rules. The oracle is pylance doing the two one after the other on a third copy.

Checked for our engine, in every pair:

* when it commits, the table equals pylance's when pylance's old handle committed too, else (we
  re-planned on the latest version where pylance refused) the serial replay's;
* when it refuses, the error is one of the core's, nothing was committed (but the fragment ids a
  compaction reserved before its Rewrite lost, as pylance's), and pylance refused too (or the pair is
  in :data:`STRICTER`, each with its reason);
* either way pylance's ``validate()`` passes on the result, its scalar-index lookups equal scans,
  its vector searches through the index equal flat searches, and our reader reads what pylance reads.

The second test turns it round: pylance's old handle commits over what our core committed, and must
decide and end as it does over its own transaction.

``make test`` runs a fifth of the pairs of the first test and an eighth of the second (every operation
on both sides, half with stable row ids); ``make stress`` runs them all, with and without stable row ids.
"""

from __future__ import annotations

import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours


def _vectors(ids) -> pa.FixedSizeListArray:
    table = np.random.default_rng(7).standard_normal((1000, 8)).astype(np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(table[np.asarray(ids) % 1000].ravel()), 8)


def _rows(ids, offset: int = 0) -> pa.Table:
    ids = np.asarray(ids, np.int64)
    return pa.table({"id": ids, "a": ids + offset, "s": [f"n{i}" for i in ids], "v": _vectors(ids)})


def _upsert(ds, table: pa.Table, *, matched=True, not_matched=True, by_source=None):
    builder = ds.merge_insert("id")
    if matched:
        builder = builder.when_matched_update_all()
    if not_matched:
        builder = builder.when_not_matched_insert_all()
    if by_source:
        builder = builder.when_not_matched_by_source_delete(by_source)
    return builder.execute(table)


#: The same call through a handle of either engine.
OPS = {
    "append": lambda ds: ds.insert(_rows([100, 101])),
    "delete rows": lambda ds: ds.delete("id = 1"),
    "delete a fragment": lambda ds: ds.delete("id < 20"),
    "delete all": lambda ds: ds.delete("true"),
    "update a row": lambda ds: ds.update({"a": "a + 100"}, "id = 5"),
    "update another row": lambda ds: ds.update({"a": "a + 1000"}, "id = 6"),
    "update all": lambda ds: ds.update({"a": "a + 7"}),
    # a subset of the columns with a BTREE on the key: pylance updates in place (rewrite_columns)
    "update in place": lambda ds: _upsert(ds, pa.table({"id": pa.array([9], pa.int64()),
                                                         "a": pa.array([900], pa.int64())}), not_matched=False),
    "upsert": lambda ds: _upsert(ds, _rows([7, 200], 5000)),
    "upsert, delete by source": lambda ds: _upsert(ds, _rows([3, 300], 10), by_source="id > 50"),
    "insert if missing": lambda ds: _upsert(ds, _rows([4, 400]), matched=False),
    "add a column": lambda ds: ds.add_columns({"z": "a * 2"}),
    "add a null column": lambda ds: ds.add_columns(pa.field("n", pa.float64())),
    "drop a column": lambda ds: ds.drop_columns(["s"]),
    "rename a column": lambda ds: ds.alter_columns({"path": "s", "name": "s2"}),
    "cast a column": lambda ds: ds.alter_columns({"path": "a", "data_type": pa.int32()}),
    "restore": lambda ds: ds.checkout_version(1).restore(),
    "BTREE index": lambda ds: ds.create_scalar_index("a", "BTREE"),
    "BITMAP index": lambda ds: ds.create_scalar_index("s", "BITMAP"),
    "IVF_FLAT index": lambda ds: ds.create_index("v", "IVF_FLAT", num_partitions=2, replace=True),
    "compaction": lambda ds: ds.optimize.compact_files(target_rows_per_fragment=100),
    "optimize indices": lambda ds: ds.optimize.optimize_indices(),
    "drop an index": lambda ds: ds.drop_index("id_idx"),
    "config": lambda ds: ds.update_config({"k": "v"}),
}

#: Pairs where we refuse and pylance commits: (mine, theirs) -> why.
STRICTER = {
    ("append", "drop a column"): "the rows hold a column the dataset no longer has (SchemaMismatchError)",
    ("append", "rename a column"): "the rows' columns no longer match the dataset's (SchemaMismatchError)",
    ("append", "cast a column"): "the rows' int64 `a` is no longer the dataset's int32 (SchemaMismatchError); "
                                 "pylance commits them under the old field id and their `a` reads as null",
    ("BITMAP index", "drop a column"): "the column is gone; pylance commits an index its validate() rejects",
    ("BITMAP index", "rename a column"): "we check the column name on the latest version",
    ("drop an index", "drop an index"): "already dropped: IndexNotFoundError, where pylance commits a no-op",
}


#: pylance 14's own bug: its old handle builds the index on the column's old field id and commits it
#: over the cast or drop; every filtered scan then fails ("Index referenced a field ... which did not
#: exist in the schema"). Ours re-plans on the new field id, or refuses the dropped column.
PYLANCE_BREAKS = {("BTREE index", "cast a column"), ("BITMAP index", "drop a column")}


def _base(uri: str, stable: bool) -> None:
    table = _rows(np.arange(60))
    table = table.set_column(2, "s", pa.array([f"s{i % 7}" for i in range(60)]))
    pylance.write_dataset(table, uri, max_rows_per_file=20, enable_stable_row_ids=stable)
    ds = pylance.dataset(uri)
    ds.create_scalar_index("id", "BTREE")
    ds.create_index("v", "IVF_FLAT", num_partitions=2)
    pylance.write_dataset(_rows([60, 61]), uri, mode="append")


def _run(op: str, ds) -> BaseException | None:
    try:
        OPS[op](ds)
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return exc
    return None


def _table(uri: str) -> pa.Table:
    return pylance.dataset(uri).to_table().sort_by("id")


def _indices_answer_like_scans(uri: str) -> None:
    ds = pylance.dataset(uri)
    ds.validate()
    names = ds.schema.names
    for index in ds.describe_indices():
        [column] = index.field_names
        if column not in names:
            continue
        if column == "v":
            for q in range(0, 62, 7):
                query = {"column": "v", "q": np.asarray(_vectors([q]).flatten(), np.float32), "k": 5}
                found = ds.to_table(nearest={**query, "nprobes": 2}, columns=["id"]).column("id").to_pylist()
                flat = ds.to_table(nearest={**query, "use_index": False}, columns=["id"]).column("id").to_pylist()
                assert sorted(found) == sorted(flat), (index.name, q)
            continue
        for value in sorted(set(ds.to_table(columns=[column]).column(column).to_pylist()), key=str):
            literal = f"'{value}'" if isinstance(value, str) else str(value)
            where = f"{column} = {literal}" if value is not None else f"{column} IS NULL"
            found = ds.to_table(filter=where, columns=["id"]).column("id").to_pylist()
            scanned = ds.to_table(filter=where, columns=["id"], use_scalar_index=False).column("id").to_pylist()
            assert sorted(found) == sorted(scanned), (index.name, where)


def _pairs(stride: int) -> list:
    """Every (mine, theirs, stable row ids); the quick ones (``make test``) are every ``stride``-th
    diagonal, so that each operation is on both sides, half of them with stable row ids."""
    names = list(OPS)
    params = []
    for i, mine in enumerate(names):
        for j, theirs in enumerate(names):
            for stable in (False, True):
                quick = (i + j) % stride == (stride // 2 if stable else 0)
                params.append(pytest.param(mine, theirs, stable, marks=() if quick else pytest.mark.slow,
                                           id=f"{mine}-over-{theirs}{'-stable' if stable else ''}"))
    return params


@pytest.mark.parametrize(("mine", "theirs", "stable"), _pairs(5))
def test_a_write_planned_before_a_concurrent_pylance_write(tmp_path, mine, theirs, stable):
    base = str(tmp_path / "base.lance")
    _base(base, stable)
    copies = {engine: str(tmp_path / f"{engine}.lance") for engine in ("pylance", "ours", "serial")}
    for uri in copies.values():
        shutil.copytree(base, uri)
    handles = {"pylance": pylance.dataset(copies["pylance"]), "ours": ours.dataset(copies["ours"])}
    for engine in ("pylance", "ours", "serial"):
        assert _run(theirs, pylance.dataset(copies[engine])) is None
    after_theirs = pylance.dataset(copies["ours"]).version
    serial_error = _run(mine, pylance.dataset(copies["serial"]))
    outcome = {engine: _run(mine, handles[engine]) for engine in ("pylance", "ours")}

    error = outcome["ours"]
    if error is not None:
        assert isinstance(error, ours.LanceError), repr(error)
        latest = ours.dataset(copies["ours"])
        left = [latest.read_transaction(v).kind for v in range(after_theirs + 1, latest.version + 1)]
        # only fragment-id reservations of a compaction that remaps indices, which pylance leaves too
        assert set(left) <= {"reserve_fragments"}, f"a refused write committed: {left}"
        assert outcome["pylance"] is not None or (mine, theirs) in STRICTER, (
            f"we refused where pylance committed: {error!r}")
    else:
        assert (mine, theirs) not in STRICTER, "a pair listed as stricter committed: update STRICTER"
        if outcome["pylance"] is None:  # both committed over theirs: the same result
            assert _table(copies["ours"]).equals(_table(copies["pylance"]))
        else:  # pylance refused, we re-planned on the latest version: as if run after theirs
            assert serial_error is None
            assert _table(copies["ours"]).equals(_table(copies["serial"]))
    _indices_answer_like_scans(copies["ours"])
    assert ours.dataset(copies["ours"]).to_table().sort_by("id").equals(_table(copies["ours"]))


@pytest.mark.parametrize(("mine", "theirs", "stable"), _pairs(8))
def test_a_pylance_write_planned_before_our_concurrent_write(tmp_path, mine, theirs, stable):
    """The other way round: pylance's old handle commits over what our core committed. Its conflict
    resolver reads our transaction files; it must decide as it does over its own transaction, and
    end with the same table."""
    base = str(tmp_path / "base.lance")
    _base(base, stable)
    copies = {engine: str(tmp_path / f"{engine}.lance") for engine in ("pylance", "ours")}
    for uri in copies.values():
        shutil.copytree(base, uri)
    handles = {engine: pylance.dataset(uri) for engine, uri in copies.items()}
    assert _run(theirs, pylance.dataset(copies["pylance"])) is None
    assert _run(theirs, ours.dataset(copies["ours"])) is None
    outcome = {engine: _run(mine, handles[engine]) for engine in copies}
    assert (outcome["ours"] is None) == (outcome["pylance"] is None), (
        f"pylance over our transaction: {outcome['ours']!r}; over its own: {outcome['pylance']!r}")
    if outcome["ours"] is None:
        assert _table(copies["ours"]).equals(_table(copies["pylance"]))
    if (mine, theirs) in PYLANCE_BREAKS:  # over its own transaction as over ours
        for uri in copies.values():
            with pytest.raises(ValueError, match="did not exist in the schema"):
                _indices_answer_like_scans(uri)
        return
    _indices_answer_like_scans(copies["ours"])
