"""Index maintenance: compaction remaps scalar indices, optimize_indices folds new fragments in.

pylance 14 is the oracle: after our appends, optimize_indices, compaction (with and without
stable row ids), deletes and cleanup, its indexed queries (plan shows a ScalarIndexQuery) equal
full scans, on indices we built and on indices it built; our remapped index files hold what its
own compaction writes; its compaction and optimize_indices keep working over ours.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance
from airflow_lance.core._proto import transaction_pb2
from airflow_lance.core.errors import CommitConflictError, IndexNotFoundError, InvalidInputError
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.indices import unindexed_rows
from airflow_lance.core.indices.remap import AddressMap

pytestmark = pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")

QUERIES = ["k = 7", "k IS NULL", "id >= 3990 AND id < 4020", "s = 'v3'", "array_has_any(tags, [2])",
           "array_has_any(tags, [11])", "id IN (1, 999, 2500, 4999)"]


def _chunk(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    k = ids % 13
    return pa.table({
        "id": ids,
        "k": pa.array(k, pa.int64(), mask=ids % 17 == 0),
        "s": pa.array([f"v{v % 5}" for v in ids], pa.string()),
        "tags": pa.array([[int(v % 7), int(v % 11)] if v % 23 else None for v in ids], pa.list_(pa.int64())),
    })


def _check(uri: str, expect_indexed: bool = True) -> None:
    ds = pylance.dataset(uri)
    for query in QUERIES:
        indexed = ds.to_table(filter=query).sort_by("id")
        full = ds.to_table(filter=query, use_scalar_index=False).sort_by("id")
        assert indexed.equals(full), query
        if expect_indexed and not query.startswith("s "):
            assert "ScalarIndexQuery" in ds.scanner(filter=query).explain_plan(), query


def _indexed_dataset(uri: str, stable: bool, pylance_index: bool = True) -> None:
    for i in range(4):
        lance.write_dataset(_chunk(i * 1250, 1250), uri, mode="append" if i else "create",
                            enable_stable_row_ids=stable, max_rows_per_file=625)
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("k", "BITMAP")
    ds.create_scalar_index("tags", "LABEL_LIST")
    if pylance_index:  # an index pylance built, maintained by us
        pylance.dataset(uri).create_scalar_index("k", "BTREE", name="k_btree")
    lance.dataset(uri).delete("id % 10 = 3")


def _index_files(uri: str, names: list[str]) -> dict[str, pa.Table]:
    out = {}
    for index in lance.dataset(uri).list_indices():
        if index["name"] in names:
            for path in glob.glob(os.path.join(uri, "_indices", index["uuid"], "*.lance")):
                reader = LanceFileReader(pa.OSFile(path), path=path)
                table = reader.read()
                key = [(c, "ascending") for c in table.schema.names if c != "bitmaps"]
                out[f"{index['name']}/{os.path.basename(path)}"] = table.sort_by(key)
    return out


def _last_txn(uri: str) -> transaction_pb2.Transaction:
    ds = lance.dataset(uri)
    txn = transaction_pb2.Transaction()
    with open(os.path.join(uri, "_transactions", ds.manifest_file.manifest.transaction_file), "rb") as f:
        txn.ParseFromString(f.read())
    return txn


@pytest.mark.parametrize("stable", [False, True])
def test_compaction_remaps_indices_as_pylance(tmp_path, stable):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _indexed_dataset(ours, stable)
    shutil.copytree(ours, theirs)
    metrics = lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=100_000)
    pylance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100_000)
    assert metrics.fragments_skipped_indexed == 0 and metrics.versions_created == 2
    a, b = pylance.dataset(ours), pylance.dataset(theirs)
    assert a.version == b.version and [f.fragment_id for f in a.get_fragments()] == [8]
    shape = [(i["name"], i["type"], i["fields"], i["version"], i["fragment_ids"]) for i in a.list_indices()]
    assert shape == [(i["name"], i["type"], i["fields"], i["version"], i["fragment_ids"]) for i in b.list_indices()]
    txn_a, txn_b = _last_txn(ours), _last_txn(theirs)
    summary = [
        [(i.new_index_details.type_url, i.new_index_version, [f.path for f in i.new_index_files])
         for i in t.rewrite.rewritten_indices] for t in (txn_a, txn_b)
    ]
    assert sorted(summary[0]) == sorted(summary[1]) and len(summary[0]) == (2 if stable else 4)  # stable: BTREEs only
    names = [i["name"] for i in a.list_indices()]
    mine, pylances = _index_files(ours, names), _index_files(theirs, names)
    assert sorted(mine) == sorted(pylances)
    for name in mine:
        if name.endswith("bitmap_page_lookup.lance"):  # bitmaps compared decoded, keys as they are
            assert mine[name].column("keys").equals(pylances[name].column("keys")), name
        else:
            assert mine[name].equals(pylances[name]), name
    _check(ours, expect_indexed=False)
    for query in ("k = 7", "array_has_any(tags, [2])"):
        assert "ScalarIndexQuery" in pylance.dataset(ours).scanner(filter=query).explain_plan(), query
    for uri in (ours, theirs):  # pylance keeps working over our remapped indices (and the reverse)
        lance.write_dataset(_chunk(5000, 700), uri, mode="append")
        pylance.dataset(uri).optimize.optimize_indices()
        lance.dataset(uri).delete("id % 10 = 4")
        pylance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100_000)
        _check(uri)
    lance.write_dataset(_chunk(6000, 300), theirs, mode="append")
    lance.dataset(theirs).optimize_indices(num_indices_to_merge=0)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100_000)
    lance.dataset(theirs).cleanup_old_versions(older_than=dt.timedelta(0))
    _check(theirs)


def test_address_map_moves_live_rows_and_drops_deleted_ones(tmp_path):
    uri = str(tmp_path / "d")
    lance.write_dataset(_chunk(0, 30), uri, max_rows_per_file=10)
    lance.dataset(uri).delete("id = 12 OR id = 15")
    old = [f.metadata for f in lance.dataset(uri).get_fragments()]
    new = [lance.fragment.FragmentMetadata(9, old[1].files, 18)]
    mapping = AddressMap.build(lance.dataset(uri).store, [(old[1:], new)])
    addrs = np.array([5, (1 << 32) | 1, (1 << 32) | 2, (1 << 32) | 3, (2 << 32) | 9], np.uint64)
    keep, moved = mapping.apply(addrs)
    assert keep.tolist() == [True, True, False, True, True]
    assert moved.tolist() == [5, (9 << 32) | 1, (9 << 32) | 2, (9 << 32) | 17]


def test_an_index_we_cannot_remap_keeps_its_fragments(tmp_path):
    uri = str(tmp_path / "d")
    for i in range(3):
        lance.write_dataset(_chunk(i * 100, 100), uri, mode="append" if i else "create")
    pylance.dataset(uri).create_scalar_index("s", "INVERTED")  # full text: not remapped here
    lance.write_dataset(_chunk(300, 100), uri, mode="append")
    lance.write_dataset(_chunk(400, 100), uri, mode="append")
    metrics = lance.dataset(uri).optimize.compact_files()
    assert (metrics.fragments_skipped_indexed, metrics.fragments_removed, metrics.versions_created) == (3, 2, 1)
    ds = pylance.dataset(uri)
    assert [sorted(i["fragment_ids"]) for i in ds.list_indices()] == [[0, 1, 2]]
    assert ds.to_table(full_text_query="v3").num_rows == 100


def _ngram_postings(uri: str) -> dict[int, list[int]]:
    """token -> row addresses (or stable row ids) of the dataset's NGRAM index."""
    import pyroaring

    index = next(i for i in lance.dataset(uri).list_indices() if i["type"] == "NGram")
    path = os.path.join(uri, "_indices", index["uuid"], "ngram_postings.lance")
    table = LanceFileReader(pa.OSFile(path), path=path).read()
    return {token: sorted(pyroaring.BitMap64.deserialize(data)) for token, data in
            zip(table.column("tokens").to_pylist(), table.column("posting_list").to_pylist())}


@pytest.mark.parametrize("stable", [False, True])
def test_compaction_remaps_ngram_and_leaves_zone_indices_as_pylance(tmp_path, stable):
    """NGRAM posting lists are remapped as pylance 14 remaps them (addresses; stable row ids stay),
    ZONEMAP and BLOOMFILTER files are left as they are, their fragment bitmaps as pylance leaves them
    (kept; with stable row ids without the rewritten fragments). Before, any of these indices kept
    compaction off the fragments it covered."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")

    def chunk(start: int, n: int) -> pa.Table:
        table = _chunk(start, n)
        return table.append_column("text", pa.array([f"value{i % 5} item{i % 7}" for i in range(start, start + n)]))

    for i in range(3):
        lance.write_dataset(chunk(i * 400, 400), ours, mode="append" if i else "create", enable_stable_row_ids=stable)
    ds = pylance.dataset(ours)
    ds.create_scalar_index("text", "NGRAM")
    ds.create_scalar_index("id", "ZONEMAP")
    ds.create_scalar_index("k", "BLOOMFILTER")
    lance.dataset(ours).delete("id % 3 = 0")
    lance.write_dataset(chunk(1200, 100), ours, mode="append")  # not indexed
    shutil.copytree(ours, theirs)
    metrics = lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=100_000)
    pylance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100_000)
    assert metrics.fragments_skipped_indexed == 0 and metrics.fragments_removed == 3  # the indexed ones, together
    assert [f.fragment_id for f in pylance.dataset(ours).get_fragments()] == \
        [f.fragment_id for f in pylance.dataset(theirs).get_fragments()]
    shape = [[(i["name"], i["type"], sorted(i["fragment_ids"])) for i in pylance.dataset(uri).list_indices()]
             for uri in (ours, theirs)]
    assert shape[0] == shape[1]
    assert _ngram_postings(ours) == _ngram_postings(theirs)
    uuids = [sorted(i["uuid"] for i in lance.dataset(uri).list_indices() if i["type"] != "NGram")
             for uri in (ours, theirs)]
    assert uuids[0] == uuids[1]  # zone indices untouched: the same files
    ds = pylance.dataset(ours)
    for query in ("contains(text, 'value3')", "contains(text, 'item6')", "id > 700", "k = 3"):
        assert ds.to_table(filter=query).sort_by("id").equals(
            ds.to_table(filter=query, use_scalar_index=False).sort_by("id")), query
    assert "ScalarIndexQuery" in ds.scanner(filter="contains(text, 'value3')").explain_plan()


@pytest.mark.parametrize("stable", [False, True])
def test_optimize_indices_as_pylance(tmp_path, stable):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for uri, open_ in ((ours, lance.dataset), (theirs, pylance.dataset)):
        lance.write_dataset(_chunk(0, 1000), uri, enable_stable_row_ids=stable)
        open_(uri).create_scalar_index("id", "BTREE")
        open_(uri).create_scalar_index("tags", "LABEL_LIST")
        for i, merge in enumerate([0, None, 0, 2]):
            lance.write_dataset(_chunk(1000 + 300 * i, 300), uri, mode="append")
            lance.dataset(uri).delete(f"id = {1000 + 300 * i + 5}")
            open_(uri).optimize.optimize_indices(num_indices_to_merge=merge)
            shape = [(x["name"], x["version"], sorted(x["fragment_ids"])) for x in pylance.dataset(uri).list_indices()]
            if uri == theirs:
                assert shape == expected[i], (i, merge, shape, expected[i])
            else:
                expected = locals().get("expected", []) + [shape]
        _check(uri, expect_indexed=False)
    ds = lance.dataset(ours)
    lance.write_dataset(_chunk(5000, 50), ours, mode="append")
    assert unindexed_rows(lance.dataset(ours), "id_idx") == 50
    version = lance.dataset(ours).version
    lance.dataset(ours).optimize_indices(retrain=True)
    assert [len(d.segments) for d in pylance.dataset(ours).describe_indices()] == [1, 1]
    lance.dataset(ours).optimize_indices()  # nothing left to fold in: no new version
    assert lance.dataset(ours).version == version + 1
    with pytest.raises(IndexNotFoundError):
        ds.optimize_indices(index_names=["nope"])
    with pytest.raises(InvalidInputError):
        ds.optimize_indices(num_indices_to_merge=-1)
    assert pc.sum(pylance.dataset(ours).to_table(filter="id >= 5000", columns=["id"]).column(0)).as_py() == sum(
        range(5000, 5050))


def test_a_rewrite_mixing_indexed_and_unindexed_fragments_is_refused(tmp_path):
    uri = str(tmp_path / "d")
    lance.write_dataset(_chunk(0, 100), uri)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.write_dataset(_chunk(100, 100), uri, mode="append")
    ds = lance.dataset(uri)
    result = lance.CompactionTask(ds.version, tuple(f.metadata for f in ds.get_fragments())).execute(uri)
    with pytest.raises(InvalidInputError, match="mixes fragments"):
        lance.Compaction.commit(uri, [result])
    assert lance.dataset(uri).version == ds.version


def test_an_index_built_during_compaction_over_part_of_a_group_is_a_conflict(tmp_path):
    """A writer that read the dataset before the last append commits an index covering the fragments it
    saw while a compaction of all of them runs: the compaction's commit is a retryable conflict (found
    by the mixed-writers stress test; it was an InvalidInputError, which no retry loop re-plans), and a
    new plan keeps the indexed fragment apart."""
    uri = str(tmp_path / "d")
    lance.write_dataset(_chunk(0, 100), uri)
    older = lance.dataset(uri)
    lance.write_dataset(_chunk(100, 100), uri, mode="append")
    ds = lance.dataset(uri)
    result = lance.CompactionTask(ds.version, tuple(f.metadata for f in ds.get_fragments())).execute(uri)
    older.create_scalar_index("id", "BTREE")  # covers fragment 0 only
    with pytest.raises(CommitConflictError, match="re-plan"):
        lance.Compaction.commit(uri, [result])
    lance.dataset(uri).optimize.compact_files()  # the new plan mixes nothing
    assert [f.fragment_id for f in lance.dataset(uri).get_fragments()] == [0, 1]
    theirs = pylance.dataset(uri)
    assert theirs.to_table(filter="id = 150")["id"].to_pylist() == [150]
    assert sorted(theirs.to_table()["id"].to_pylist()) == list(range(200))


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable_row_ids"])
def test_an_append_between_the_reservation_and_the_rewrite_keeps_fragments_in_id_order(tmp_path, monkeypatch,
                                                                                      stable):
    """A compaction remapping an index reserves its new fragments' ids, then commits the Rewrite: an
    append landing in between takes higher ids, and the manifest must still list fragments by id, as
    Lance sorts them (pylance's ``validate`` failed on ours; found by the mixed-writers stress test)."""
    uri = str(tmp_path / "d")
    for i in range(3):
        lance.write_dataset(_chunk(i * 100, 100), uri, mode="append" if i else "create", enable_stable_row_ids=stable)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.dataset(uri).delete("id % 7 = 3")
    build = AddressMap.build

    def append_first(*args, **kwargs):  # a real pylance append between the two commits
        pylance.write_dataset(_chunk(300, 10), uri, mode="append")
        return build(*args, **kwargs)

    monkeypatch.setattr(AddressMap, "build", append_first)
    lance.dataset(uri).optimize.compact_files()
    ids = [f.fragment_id for f in lance.dataset(uri).get_fragments()]
    assert ids == sorted(ids) and len(ids) == 2
    theirs = pylance.dataset(uri)
    theirs.validate()
    want = sorted(i for i in range(310) if i % 7 != 3 or i >= 300)
    assert sorted(theirs.to_table()["id"].to_pylist()) == want
    for key, found in ((151, [151]), (150, []), (304, [304])):  # through the remapped index
        assert theirs.to_table(filter=f"id = {key}")["id"].to_pylist() == found


def test_bitmap_and_label_list_hold_stable_row_ids_as_pylance(tmp_path):
    """With stable row ids pylance 14's BITMAP and LABEL_LIST hold row ids (kept by compaction), not addresses."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for i in range(3):
        lance.write_dataset(_chunk(i * 400, 400), ours, mode="append" if i else "create", enable_stable_row_ids=True)
    lance.dataset(ours).delete("id % 5 = 1")
    lance.dataset(ours).optimize.compact_files()  # row ids no longer equal addresses
    lance.write_dataset(_chunk(1200, 100), ours, mode="append")
    shutil.copytree(ours, theirs)
    for uri, open_ in ((ours, lance.dataset), (theirs, pylance.dataset)):
        open_(uri).create_scalar_index("k", "BITMAP")
        open_(uri).create_scalar_index("tags", "LABEL_LIST")
    mine, pylances = _index_files(ours, ["k_idx", "tags_idx"]), _index_files(theirs, ["k_idx", "tags_idx"])
    assert sorted(mine) == sorted(pylances) == ["k_idx/bitmap_page_lookup.lance", "tags_idx/bitmap_page_lookup.lance"]
    for name in mine:
        assert mine[name].equals(pylances[name]), name
    _check(ours, expect_indexed=False)
    for query in ("k = 7", "array_has_any(tags, [2])"):
        assert "ScalarIndexQuery" in pylance.dataset(ours).scanner(filter=query).explain_plan(), query


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable_row_ids"])
def test_an_index_delta_over_other_fragments_commits_beside_a_compaction_as_pylance(tmp_path, stable):
    """While a compaction of the small indexed fragments runs, ``optimize_indices`` commits a delta over
    an appended fragment the compaction does not touch: the compaction still commits (Lance's rule: only
    a new index covering a rewritten fragment conflicts; we used to retry over any new index, so beside
    pylance writers that keep optimising, compaction hardly ever landed), as pylance's does on an
    identical copy. Over the fragments it rewrites, pylance retries; our commit remaps that delta too."""
    uri, oracle = str(tmp_path / "d"), str(tmp_path / "oracle")
    for i in range(4):
        pylance.write_dataset(_chunk(i * 100, 100), uri, mode="append" if i else "create", enable_stable_row_ids=stable)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    pylance.write_dataset(_chunk(400, 5000), uri, mode="append")  # fragment 4: not a compaction candidate
    shutil.copytree(uri, oracle)
    from lance.optimize import Compaction as PylanceCompaction

    for engine, compaction, path in ((lance, lance.Compaction, uri), (pylance, PylanceCompaction, oracle)):
        ds = engine.dataset(path)
        plan = compaction.plan(ds, {"target_rows_per_fragment": 1000})
        assert [[f.id for f in t.fragments] for t in plan.tasks] == [[0, 1, 2, 3]]
        results = [task.execute(ds) for task in plan.tasks]
        pylance.dataset(path).optimize.optimize_indices(num_indices_to_merge=0)  # a delta over fragment 4
        compaction.commit(ds, results)
    segments = [sorted(sorted(s.fragment_ids) for s in pylance.dataset(u).describe_indices()[0].segments)
                for u in (uri, oracle)]
    assert segments[0] == segments[1] == [[4], [5]]
    assert sorted(pylance.dataset(uri).to_table(filter="id < 200 OR id = 4000")["id"].to_pylist()) == [
        *range(200), 4000]
    # a delta over the fragments the compaction rewrites: pylance retries, our commit remaps that delta too
    for i in range(2):
        lance.write_dataset(_chunk(10_000 + i * 10, 10), uri, mode="append")  # fragments 6, 7
    ds = lance.dataset(uri)
    results = [t.execute(ds) for t in lance.Compaction.plan(ds, target_rows_per_fragment=1000).tasks]
    assert [[f.id for f in r.old_fragments] for r in results] == [[6, 7]]
    pylance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # a delta over 6 and 7
    metrics = lance.Compaction.commit(ds, results)
    theirs = pylance.dataset(uri)
    assert metrics.versions_created == 2 and [f.fragment_id for f in theirs.get_fragments()][-1] == 8
    assert sorted(sorted(s.fragment_ids) for s in theirs.describe_indices()[0].segments) == [[4], [5], [8]]
    assert theirs.to_table(filter="id = 10015")["id"].to_pylist() == [10015]
    assert "ScalarIndexQuery" in theirs.scanner(filter="id = 10015").explain_plan()
    theirs.validate()


@pytest.mark.parametrize("covers", ["whole_group", "part_of_the_group"])
def test_a_row_id_index_built_during_compaction_with_stable_row_ids_moves_with_it(tmp_path, covers):
    """With stable row ids a BITMAP index holds row ids, which a compaction keeps: one committed by pylance
    while a compaction of the fragments it covers runs needs no remap, so the compaction commits and
    moves its bitmap to the new fragment (pylance retries); queries through it equal a full scan. One
    that covers part of a group (built on an older version) is a conflict, as in Lance."""
    uri = str(tmp_path / "d")
    for i in range(4):
        pylance.write_dataset(_chunk(i * 100, 100), uri, mode="append" if i else "create", enable_stable_row_ids=True)
        if i == 1:
            older = pylance.dataset(uri)
    ds = lance.dataset(uri)
    results = [t.execute(ds) for t in lance.Compaction.plan(ds, target_rows_per_fragment=1000).tasks]
    assert [[f.id for f in r.old_fragments] for r in results] == [[0, 1, 2, 3]]
    (pylance.dataset(uri) if covers == "whole_group" else older).create_scalar_index("k", "BITMAP")
    if covers == "part_of_the_group":
        with pytest.raises(CommitConflictError):
            lance.Compaction.commit(ds, results)
        return
    lance.Compaction.commit(ds, results)
    theirs = pylance.dataset(uri)
    assert [f.fragment_id for f in theirs.get_fragments()] == [4]
    assert [sorted(s.fragment_ids) for s in theirs.describe_indices()[0].segments] == [[4]]
    for flt in ("k = 3", "k IN (1, 12)", "k IS NULL"):
        assert "ScalarIndexQuery" in theirs.scanner(filter=flt).explain_plan()
        assert theirs.to_table(filter=flt).equals(theirs.to_table(filter=flt, use_scalar_index=False))
    theirs.validate()


def test_compaction_commits_over_index_merges_that_replaced_one_another(tmp_path):
    """pylance merges its BTREE segments twice while our compaction of the fragments they cover runs: the
    first merged segment is already replaced when we commit, so only the second one, which our commit
    remaps, matters (we used to retry over the first: beside writers optimising every second, no
    compaction landed for minutes)."""
    uri = str(tmp_path / "d")
    for i in range(4):
        pylance.write_dataset(_chunk(i * 100, 100), uri, mode="append" if i else "create")
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    ds = lance.dataset(uri)
    results = [t.execute(ds) for t in lance.Compaction.plan(ds, target_rows_per_fragment=1000).tasks]
    assert [[f.id for f in r.old_fragments] for r in results] == [[0, 1, 2, 3]]
    for start in (400, 5400):  # each append, then a merge of the segment with it
        pylance.write_dataset(_chunk(start, 5000), uri, mode="append")
        pylance.dataset(uri).optimize.optimize_indices()
    metrics = lance.Compaction.commit(ds, results, skip_conflicting=True)
    assert (metrics.tasks_skipped_conflict, metrics.versions_created) == (0, 2)
    theirs = pylance.dataset(uri)
    [segment] = theirs.describe_indices()[0].segments
    assert sorted(segment.fragment_ids) == [4, 5, 6]
    assert sorted(theirs.to_table(filter="id = 150 OR id = 4500")["id"].to_pylist()) == [150, 4500]
    assert "ScalarIndexQuery" in theirs.scanner(filter="id = 150").explain_plan()
    theirs.validate()
