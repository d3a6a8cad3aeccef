"""Tables written by LanceDB (the ``lancedb`` package, its own Lance inside): we read them as pylance 14 and
LanceDB do, and after our commits LanceDB still reads them, searches them through its indices and writes to them.

A LanceDB table is a Lance dataset (``<db>/<name>.lance``) that LanceDB builds with indices of its own
choosing: here IVF_PQ on the vectors, full-text search (FTS) on the text, BTREE, BITMAP and LABEL_LIST, after
an append, a delete, an update, a merge-insert and ``optimize()`` (compaction, index optimisation and cleanup).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as ours

lancedb = pytest.importorskip("lancedb", reason="lancedb is a test dependency")

DIM = 32
TOPICS = ["cats", "dogs", "birds", "fish"]


def _rows(start: int, n: int, seed: int, word: str = "more") -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * DIM, dtype=np.float32)), DIM),
        "text": pa.array([f"document {i} about {TOPICS[i % 4]} and {word}" for i in ids]),
        "category": pa.array([f"cat{i % 7}" for i in ids]),
        "tags": pa.array([[f"t{i % 5}", f"t{i % 3}"] for i in ids], pa.list_(pa.string())),
    })


def _make_table(root: Path, *, fts: bool) -> str:
    """A LanceDB table with a history; returns the dataset's uri."""
    from lancedb.index import FTS, Bitmap, BTree, IvfPq, LabelList

    db = lancedb.connect(str(root))
    table = db.create_table("items", _rows(0, 4000, seed=1))
    table.create_index("vector", config=IvfPq(distance_type="l2", num_partitions=8, num_sub_vectors=8))
    if fts:
        table.create_index("text", config=FTS())
    table.create_index("id", config=BTree())
    table.create_index("category", config=Bitmap())
    table.create_index("tags", config=LabelList())
    table.add(_rows(4000, 800, seed=2))
    table.delete("id % 10 = 3")
    table.update(where="id < 100", values={"category": "updated"})
    table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        _rows(4700, 200, seed=3))
    table.optimize()
    return str(root / "items.lance")


@pytest.fixture(scope="module")
def lancedb_tables(tmp_path_factory) -> dict[bool, Path]:
    """{with FTS: database directory}, written once; tests work on copies."""
    out = {}
    for fts in (True, False):
        root = tmp_path_factory.mktemp(f"lancedb-{'fts' if fts else 'plain'}")
        _make_table(root, fts=fts)
        out[fts] = root
    return out


def _copy(source: Path, tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "db"
    shutil.copytree(source, root)
    return root, str(root / "items.lance")


def _by_id(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


@pytest.mark.parametrize("fts", [True, False])
def test_we_read_lancedb_tables_as_pylance_and_lancedb(lancedb_tables, fts):
    uri = str(lancedb_tables[fts] / "items.lance")
    mine = ours.dataset(uri)
    theirs = pylance.dataset(uri)
    assert mine.version == theirs.version and mine.data_storage_version == theirs.data_storage_version
    assert mine.to_table().equals(theirs.to_table())
    assert _by_id(mine.to_table()).equals(_by_id(lancedb.connect(str(lancedb_tables[fts])).open_table("items")
                                                 .to_arrow()))
    for version in (1, theirs.version // 2, theirs.version):
        assert ours.dataset(uri, version=version).to_table().equals(pylance.dataset(uri, version=version).to_table())
    wanted = "category = 'cat3' AND id > 1000"
    assert mine.to_table(filter=wanted).equals(theirs.to_table(filter=wanted))
    assert {i["name"] for i in mine.list_indices()} >= {"vector_idx", "id_idx", "category_idx", "tags_idx"}


def _nearest_id(table, vector: np.ndarray) -> int:
    hit = table.search(vector).limit(1).nprobes(8).refine_factor(50).to_arrow()
    return int(hit.column("id")[0].as_py())


@pytest.mark.parametrize("fts", [True, False])
def test_our_commits_leave_what_lancedb_reads_and_searches(lancedb_tables, tmp_path, fts):
    """Our append, delete, update, compaction and cleanup on a LanceDB table: pylance 14 and LanceDB read
    the intended rows, LanceDB's vector, full-text and scalar-filtered searches find them (through its
    remapped indices where we compacted indexed fragments), and LanceDB writes on after us."""
    root, uri = _copy(lancedb_tables[fts], tmp_path)
    added = _rows(10_000, 300, seed=4, word="zebras")
    ours.write_dataset(added, uri, mode="append")
    ours.dataset(uri).delete("id % 10 = 7")
    ours.dataset(uri).update({"category": "'moved'"}, where="id >= 10290")
    metrics = ours.dataset(uri).optimize.compact_files(target_rows_per_fragment=1_000_000)
    if fts:
        # an FTS index's row ids cannot be remapped here: fragments it covers are left as they are
        assert metrics.fragments_skipped_indexed > 0
    else:
        assert metrics.fragments_removed > 1 and metrics.fragments_skipped_indexed == 0
    ours.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))

    expected = _by_id(pylance.dataset(uri).to_table())
    assert _by_id(ours.dataset(uri).to_table()).equals(expected)
    assert pc.sum(pc.equal(pc.modulo(expected["id"], 10), 7)).as_py() in (None, 0)
    table = lancedb.connect(str(root)).open_table("items")
    assert table.count_rows() == expected.num_rows
    assert _by_id(table.to_arrow()).equals(expected)

    # vector search through the (remapped) IVF_PQ index: an existing row's own vector finds it
    live = expected.filter(pc.is_in(expected["id"], pa.array([5, 2001, 4100, 10_004, 10_295])))
    for row in live.to_pylist():
        assert _nearest_id(table, np.array(row["vector"], np.float32)) == row["id"]
    if fts:
        found = table.search("zebras", query_type="fts").limit(1000).to_arrow()
        assert sorted(found.column("id").to_pylist()) == sorted(
            i for i in range(10_000, 10_300) if i % 10 != 7)
    for where in ("category = 'cat3'", "category = 'moved'", "array_has_any(tags, ['t4'])", "id = 10005"):
        got = table.search().where(where).limit(100_000).to_arrow()
        assert sorted(got.column("id").to_pylist()) == sorted(
            pylance.dataset(uri).to_table(columns=["id"], filter=where).column("id").to_pylist()), where

    table.add(_rows(20_000, 10, seed=5))
    table.optimize()
    assert ours.dataset(uri).count_rows() == expected.num_rows + 10
    assert ours.dataset(uri).to_table().equals(pylance.dataset(uri).to_table())
