"""Compaction of fragments covered by full-text, HNSW and RaBitQ indices on datasets with stable row ids.

Those indices hold row ids, and stable row ids survive a rewrite: pylance 14 compacts the fragments
they cover, keeps the index files (same uuid) and moves the fragment bitmap to the new fragments.
Ours does the same; without stable row ids it leaves those fragments alone (it cannot remap the
indices; ``test_index_maintenance.py::test_an_index_we_cannot_remap_keeps_its_fragments``).
pylance 14 is the oracle: the same compaction of an identical copy gives the same fragments,
indices, rows and row ids, and pylance's full-text and vector searches find the same rows in
both, none of them deleted.
"""

from __future__ import annotations

import datetime as dt
import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance

pytestmark = [pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")]

WORDS = np.array(["apple", "banana", "cherry", "delta", "echo", "fox", "golf"])
DIM = 16

INDICES = {
    "INVERTED": ("text", {"index_type": "INVERTED"}),
    "INVERTED with positions": ("text", {"index_type": "INVERTED", "with_position": True}),
    "IVF_HNSW_SQ": ("vec", {"index_type": "IVF_HNSW_SQ", "num_partitions": 2}),
    "IVF_HNSW_PQ": ("vec", {"index_type": "IVF_HNSW_PQ", "num_partitions": 2, "num_sub_vectors": 4}),
    "IVF_RQ": ("vec", {"index_type": "IVF_RQ", "num_partitions": 2}),
}


def _table(start: int, stop: int) -> pa.Table:
    ids = np.arange(start, stop)
    rng = np.random.default_rng(start)
    return pa.table({
        "id": ids,
        "text": [f"{WORDS[i % 7]} {WORDS[(i * 3) % 7]} doc{i}" for i in ids],
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(len(ids) * DIM).astype(np.float32)), DIM),
    })


def _create(uri: str, kind: str) -> None:
    column, options = INDICES[kind]
    options = dict(options)
    index_type = options.pop("index_type")
    ds = pylance.dataset(uri)
    if index_type == "INVERTED":
        ds.create_scalar_index(column, index_type, **options)
    else:
        ds.create_index(column, index_type, **options)


def _indices(uri: str) -> list[tuple[str, str, list[int]]]:
    return sorted((i["name"], i["uuid"], sorted(i["fragment_ids"])) for i in pylance.dataset(uri).list_indices())


def _rows(uri: str) -> pa.Table:
    return pylance.dataset(uri).to_table(columns=["id", "text"], with_row_id=True).sort_by("id")


def _found(uri: str, kind: str) -> list[int]:
    ds = pylance.dataset(uri)
    if kind.startswith("INVERTED"):
        hits = ds.to_table(full_text_query="banana", columns=["id"])
    else:
        query = _table(0, 1).column("vec")[0].values.to_numpy()
        hits = ds.to_table(nearest={"column": "vec", "q": query, "k": 20, "nprobes": 2}, columns=["id"])
    return sorted(hits.column("id").to_pylist())


@pytest.mark.parametrize("kind", list(INDICES))
def test_compaction_keeps_row_id_indices_as_pylance(tmp_path, kind):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, 600), ours, max_rows_per_file=100, enable_stable_row_ids=True)
    _create(ours, kind)
    lance.write_dataset(_table(600, 650), ours, mode="append")
    lance.write_dataset(_table(650, 700), ours, mode="append")
    lance.dataset(ours).delete("id % 10 = 3")
    before = _indices(ours)
    shutil.copytree(ours, theirs)

    metrics = lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=10_000)
    pylance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=10_000)

    assert metrics.fragments_skipped_indexed == 0 and metrics.fragments_removed == 8
    # indexed and unindexed fragments are compacted apart; the index files stay, its bitmap moves
    assert [f.physical_rows for f in pylance.dataset(ours).get_fragments()] == [540, 90]
    assert [f.fragment_id for f in pylance.dataset(ours).get_fragments()] == [
        f.fragment_id for f in pylance.dataset(theirs).get_fragments()]
    assert _indices(ours) == _indices(theirs)
    [(name, uuid, fragments)] = _indices(ours)
    assert (name, uuid) == before[0][:2] and fragments == [pylance.dataset(ours).get_fragments()[0].fragment_id]
    assert _rows(ours).equals(_rows(theirs))  # row ids kept
    found = _found(ours, kind)
    assert found == _found(theirs, kind) and found and not [i for i in found if i % 10 == 3]
    if kind.startswith("INVERTED"):  # every live matching row, through the index
        expected = pc.filter(_rows(ours), pc.match_substring(_rows(ours)["text"], "banana"))
        assert found == sorted(expected.column("id").to_pylist())

    # pylance writes and compacts on after us
    pylance.write_dataset(_table(700, 720), ours, mode="append")
    pylance.dataset(ours).delete("id = 11")
    pylance.dataset(ours).optimize.compact_files(target_rows_per_fragment=10_000)
    assert 11 not in _found(ours, kind)
    assert lance.dataset(ours).count_rows() == pylance.dataset(ours).count_rows() == 700 - 70 + 20 - 1


def test_without_stable_row_ids_those_fragments_stay(tmp_path):
    uri = str(tmp_path / "d")
    pylance.write_dataset(_table(0, 300), uri, max_rows_per_file=100)
    _create(uri, "IVF_HNSW_SQ")
    lance.write_dataset(_table(300, 350), uri, mode="append")
    lance.write_dataset(_table(350, 400), uri, mode="append")
    lance.dataset(uri).delete("id % 10 = 3")
    before = _indices(uri)
    metrics = lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=10_000)
    assert (metrics.fragments_skipped_indexed, metrics.fragments_removed) == (3, 2)
    assert _indices(uri) == before


@pytest.mark.parametrize("days", [20, pytest.param(120, marks=pytest.mark.slow)])
def test_days_of_appends_deletes_index_updates_and_our_maintenance(tmp_path, days):
    """A dataset with stable row ids, a full-text and an HNSW index: every day rows are appended
    (by pylance and by us in turn) and deleted, pylance folds the new rows into its indices every
    other day, and we compact and clean up. Every day pylance's full-text search finds exactly the
    live matching rows, its vector search no deleted row, and every row keeps the id it was given."""
    uri = str(tmp_path / "d")
    pylance.write_dataset(_table(0, 400), uri, max_rows_per_file=100, enable_stable_row_ids=True)
    _create(uri, "INVERTED")
    _create(uri, "IVF_HNSW_SQ")
    row_ids = dict(zip(*(_rows(uri).column(c).to_pylist() for c in ("id", "_rowid")), strict=True))
    next_id, deleted = 400, set()
    for day in range(days):
        batch = _table(next_id, next_id + 60)
        if day % 2:
            pylance.write_dataset(batch, uri, mode="append", max_rows_per_file=30)
        else:
            lance.write_dataset(batch, uri, mode="append", max_rows_per_file=30)
        next_id += 60
        lance.dataset(uri).delete(f"id % 13 = {day % 13}")
        deleted |= {i for i in range(next_id) if i % 13 == day % 13}
        if day % 2:
            pylance.dataset(uri).optimize.optimize_indices()
        metrics = lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=250)
        assert metrics.fragments_skipped_indexed == 0 and metrics.fragments_removed >= 3
        # indexed fragments compacted too: about one fragment per 250 rows, and more where fragments
        # covered by different index segments stay apart (as pylance keeps them)
        ds = pylance.dataset(uri)
        assert len(ds.get_fragments()) <= ds.count_rows() // 250 + len(ds.list_indices()) + 2
        if day % 3 == 2:
            lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))

        live = _rows(uri)
        assert lance.dataset(uri).to_table(columns=["id", "text"]).sort_by("id").equals(live.select(["id", "text"]))
        for rid, row in zip(live.column("_rowid").to_pylist(), live.column("id").to_pylist(), strict=True):
            assert row_ids.setdefault(row, rid) == rid, (day, row)
        expected = sorted(pc.filter(live, pc.match_substring(live["text"], "banana")).column("id").to_pylist())
        assert _found(uri, "INVERTED") == expected, day
        assert set(live.column("id").to_pylist()) == set(range(next_id)) - deleted
        found = set(_found(uri, "IVF_HNSW_SQ"))
        assert found and not found & deleted, day


@pytest.mark.parametrize("concurrent", ["index update", "append and index update", "delete in a rewritten fragment"])
def test_concurrent_pylance_work_during_our_compaction(tmp_path, concurrent):
    """pylance commits between our compaction's plan and its commit. Its ``optimize_indices`` (full-text
    and HNSW segments, which hold row ids here and cover each of our groups whole) lets our commit land,
    moving their bitmaps to the new fragments (pylance itself retries there); a delete in a rewritten
    fragment makes our commit a typed conflict that changes nothing, its files are discarded, and a new
    plan commits. Searches stay exact throughout."""
    uri = str(tmp_path / "d")
    pylance.write_dataset(_table(0, 300), uri, max_rows_per_file=50, enable_stable_row_ids=True)
    _create(uri, "INVERTED")
    _create(uri, "IVF_HNSW_SQ")
    lance.write_dataset(_table(300, 340), uri, mode="append")
    lance.dataset(uri).delete("id % 10 = 3")
    plan = lance.Compaction.plan(uri, target_rows_per_fragment=1000)
    results = [task.execute(uri) for task in plan.tasks]
    dead = {i for i in range(340) if i % 10 == 3}
    if concurrent == "index update":
        pylance.dataset(uri).optimize.optimize_indices()
    elif concurrent == "append and index update":
        pylance.write_dataset(_table(340, 380), uri, mode="append")
        pylance.dataset(uri).optimize.optimize_indices()
    else:
        pylance.dataset(uri).delete("id = 11")
        dead.add(11)
    version = pylance.dataset(uri).version
    if concurrent != "delete in a rewritten fragment":
        metrics = lance.Compaction.commit(uri, results)
        assert (metrics.versions_created, pylance.dataset(uri).version) == (1, version + 1)
        pylance.dataset(uri).validate()
    else:
        with pytest.raises(lance.CommitConflictError):
            lance.Compaction.commit(uri, results)
        assert pylance.dataset(uri).version == version
        assert lance.Compaction.discard(uri, results) > 0

    def exact() -> None:
        live = _rows(uri)
        assert set(live.column("id").to_pylist()).isdisjoint(dead)
        expected = sorted(pc.filter(live, pc.match_substring(live["text"], "banana")).column("id").to_pylist())
        assert _found(uri, "INVERTED") == expected
        assert not set(_found(uri, "IVF_HNSW_SQ")) & dead

    exact()
    metrics = lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    assert metrics.fragments_skipped_indexed == 0
    assert metrics.fragments_removed > 0 or concurrent != "delete in a rewritten fragment"
    exact()
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    exact()
