"""Compaction and cleanup against the pylance oracle: same plans, same files removed, readable both ways,
no deleted row ever comes back, and pylance's indices stay correct."""

from __future__ import annotations

import datetime as dt
import os
import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring
import pytest
from lance.commit import CommitConflictError as PylanceCommitConflict
from lance.optimize import Compaction as PylanceCompaction

import airflow_lance.core as ours
from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import CommitConflictError, UnsupportedFeatureError
from airflow_lance.core.optimize import Compaction, CompactionTask

NOW = dt.timedelta(0)


def table(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.table({
        "id": ids,
        "name": pa.array(np.char.add("n", ids.astype(str))),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 4).astype(np.float32)), 4),
        "score": pa.array(ids * 0.25, mask=ids % 7 == 0),
    })


def pylance_fragments(uri: str, sizes: list[int], **kwargs) -> None:
    start = 0
    for i, size in enumerate(sizes):
        if i == 0:
            pylance.write_dataset(table(0, size), uri, data_storage_version="2.0", **kwargs)
        else:
            pylance.write_dataset(table(start, size), uri, mode="append")
        start += size


def files(uri: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), uri) for d, _, names in os.walk(uri) for n in names}


def index_fragments(uri: str) -> set[int]:
    """Fragment ids the dataset's only index covers."""
    section = table_pb2.IndexSection()
    section.ParseFromString(ours.dataset(uri).manifest_file.index_section)
    (index,) = section.indices
    return set(pyroaring.BitMap.deserialize(index.fragment_bitmap))


def same_rows(filter: str, ds: pylance.LanceDataset, key: str = "id") -> bool:
    """An index-backed query returns the rows of a full scan."""
    indexed = ds.to_table(filter=filter).sort_by(key)
    scanned = ds.to_table(filter=filter, use_scalar_index=False).sort_by(key)
    return indexed.equals(scanned) and indexed.num_rows == ds.count_rows(filter)


@pytest.mark.parametrize("deletes", [None, "id % 3 = 0 OR id < 40"])
def test_pylance_reads_our_compaction(uri, deletes):
    ours.write_dataset(table(0, 800), uri, max_rows_per_file=40)
    if deletes:
        pylance.dataset(uri).delete(deletes)
    before, version = pylance.dataset(uri).to_table(), pylance.dataset(uri).version
    metrics = ours.compact_files(uri, target_rows_per_fragment=500)
    ds = pylance.dataset(uri)
    assert ds.to_table().equals(before)
    assert [f.count_rows() for f in ds.get_fragments()] == [f.physical_rows for f in ours.dataset(uri).get_fragments()]
    assert metrics.rows == before.num_rows == ds.count_rows()
    # ONE version: a Rewrite whose new fragments got their ids at commit, above every id used before
    assert ds.version == version + 1 == metrics.version and metrics.versions_created == 1
    assert all(f.deletion_file() is None for f in ds.get_fragments())
    assert [t.operation.__class__.__name__ for t in ds.get_transactions(1)] == ["Rewrite"]
    ids = [f.fragment_id for f in ds.get_fragments()]
    max_id = ours.dataset(uri).manifest_file.manifest.max_fragment_id
    assert ids == list(range(20, 20 + len(ids))) and max_id == ids[-1]
    pylance.write_dataset(table(800, 10), uri, mode="append")  # pylance keeps writing on top...
    ds = pylance.dataset(uri)
    assert [f.fragment_id for f in ds.get_fragments()] == ids + [max_id + 1]
    assert ds.to_table().equals(pa.concat_tables([before, table(800, 10)]))
    ds.optimize.compact_files(target_rows_per_fragment=10_000)  # ...compacts...
    assert ds.cleanup_old_versions(older_than=NOW).old_versions == ds.version - 1  # ...and cleans up
    assert pylance.dataset(uri).to_table().equals(ours.dataset(uri).to_table())
    assert ours.dataset(uri).to_table().equals(pa.concat_tables([before, table(800, 10)]))


def test_pylance_compacts_our_datasets(uri):
    ours.write_dataset(table(0, 500), uri, max_rows_per_file=25)
    ours.dataset(uri).delete("id % 10 = 3")
    before = ours.dataset(uri).to_table()
    pylance.dataset(uri).optimize.compact_files()
    assert ours.dataset(uri).to_table().equals(before)
    assert len(ours.dataset(uri).get_fragments()) == 1
    ours.write_dataset(table(500, 5), uri, mode="append")
    assert pylance.dataset(uri).count_rows() == before.num_rows + 5


def test_we_compact_pylance_datasets_with_multi_file_fragments(uri):
    pylance_fragments(uri, [30] * 8)
    pylance.dataset(uri).add_columns({"double": "id * 2"})  # a second data file per fragment
    pylance.dataset(uri).delete("id % 5 = 1")
    before = pylance.dataset(uri).to_table()
    metrics = ours.compact_files(uri, target_rows_per_fragment=200)
    ds = pylance.dataset(uri)
    assert ds.to_table().equals(before) and ours.dataset(uri).to_table().equals(before)
    assert metrics.fragments_removed == 8 and all(len(f.data_files()) == 1 for f in ds.get_fragments())


@pytest.mark.parametrize(
    "options",
    [
        {"target_rows_per_fragment": 100},
        {"target_rows_per_fragment": 100, "materialize_deletions_threshold": 0.2},
        {"target_rows_per_fragment": 100, "excluded_fragment_ids": [3]},
        {"target_rows_per_fragment": 100, "max_source_fragments": 5},
        {"target_rows_per_fragment": 100, "max_source_rows": 150},
        {"target_rows_per_fragment": 60},
        {"target_rows_per_fragment": 60, "materialize_deletions": False},
    ],
)
def test_plans_match_pylance(uri, options):
    pylance_fragments(uri, [30] * 10 + [200, 10, 10, 200, 15, 200, 40, 40, 40])
    pylance.dataset(uri).delete("(id >= 300 AND id < 330) OR id = 521")
    theirs = [[f.id for f in task.fragments] for task in PylanceCompaction.plan(pylance.dataset(uri), options).tasks]
    mine = [[f.id for f in task.fragments] for task in Compaction.plan(uri, options).tasks]
    assert mine == theirs


def test_delete_by_pylance_between_plan_and_commit_is_a_conflict(uri):
    pylance_fragments(uri, [50] * 6)
    results = [task.execute(uri) for task in Compaction.plan(uri).tasks]
    pylance.dataset(uri).delete("id >= 100 AND id < 120")
    expected = pylance.dataset(uri).to_table()
    with pytest.raises(CommitConflictError):
        Compaction.commit(uri, results)
    assert pylance.dataset(uri).to_table().equals(expected)
    assert pylance.dataset(uri).count_rows("id >= 100 AND id < 120") == 0
    ours.compact_files(uri)
    assert pylance.dataset(uri).to_table().equals(expected)


def test_pylance_delete_planned_before_our_rewrite_is_refused_by_pylance(uri):
    ours.write_dataset(table(0, 300), uri, max_rows_per_file=30)
    updated = pylance.dataset(uri).get_fragment(0).delete("id < 20")  # planned on version 1
    ours.compact_files(uri)  # our Rewrite of fragment 0 lands first
    with pytest.raises(PylanceCommitConflict, match="Rewrite"):
        pylance.LanceDataset.commit(uri, pylance.LanceOperation.Delete([updated], [], "id < 20"), read_version=1)
    assert pylance.dataset(uri).to_table().equals(table(0, 300))  # the refused delete left no trace
    pylance.dataset(uri).delete("id < 20")  # redone on the new version
    assert ours.dataset(uri).to_table().equals(table(20, 280))


def test_append_by_pylance_during_compaction_both_land(uri):
    pylance_fragments(uri, [40] * 5)
    results = [task.execute(uri) for task in Compaction.plan(uri).tasks]
    pylance.write_dataset(table(200, 7), uri, mode="append")  # fragment 5
    assert Compaction.commit(uri, results).version == 7
    ds = pylance.dataset(uri)  # pylance 14's own compaction gives this order too: kept fragments, then new ones
    assert ds.to_table().equals(pa.concat_tables([table(200, 7), table(0, 200)]))
    assert [(f.fragment_id, f.count_rows()) for f in ds.get_fragments()] == [(5, 7), (6, 200)]


def test_pylance_append_planned_before_our_compaction_lands_after_it(uri):
    """pylance checks its Append against our Rewrite (new fragments with id 0 in the transaction)."""
    pylance_fragments(uri, [40] * 5)
    appended = pylance.LanceFragment.create(uri, table(200, 7))  # planned on version 5
    ours.compact_files(uri)  # version 6
    pylance.LanceDataset.commit(uri, pylance.LanceOperation.Append([appended]), read_version=5)
    ds = pylance.dataset(uri)
    assert ds.version == 7 and ds.to_table().equals(table(0, 207))
    assert [(f.fragment_id, f.count_rows()) for f in ds.get_fragments()] == [(5, 200), (6, 7)]


def test_one_version_compaction_keeps_stable_row_ids_and_pylance_carries_on(uri):
    pylance.write_dataset(table(0, 50), uri, max_rows_per_file=10, data_storage_version="2.0",
                          enable_stable_row_ids=True)
    ours.write_dataset(table(50, 30), uri, mode="append", max_rows_per_file=10)
    pylance.dataset(uri).delete("id % 4 = 1")
    columns = ["id", "name", "_rowid", "_row_created_at_version"]
    before, version = pylance.dataset(uri).to_table(columns=columns), pylance.dataset(uri).version
    metrics = ours.compact_files(uri)
    ds = pylance.dataset(uri)
    assert (ds.version, metrics.version, metrics.fragments_added) == (version + 1, version + 1, 1)
    assert ds.to_table(columns=columns).equals(before)  # same rows, same row ids, same order
    assert [f.fragment_id for f in ds.get_fragments()] == [8]
    pylance.write_dataset(table(80, 5), uri, mode="append")
    ds = pylance.dataset(uri)
    assert [f.fragment_id for f in ds.get_fragments()] == [8, 9]
    assert ds.to_table(columns=["_rowid"]).column(0).to_pylist()[-5:] == list(range(80, 85))
    ds.optimize.compact_files()
    ds.cleanup_old_versions(older_than=NOW)
    expected = pa.concat_tables([before.select(["id", "name", "_rowid"]),
                                 table(80, 5).select(["id", "name"]).append_column("_rowid", pa.array(
                                     np.arange(80, 85, dtype=np.uint64)))])
    assert pylance.dataset(uri).to_table(columns=["id", "name", "_rowid"]).equals(expected)
    assert ours.dataset(uri).to_table(columns=["id", "name"]).equals(expected.select(["id", "name"]))


@pytest.mark.parametrize("stable", [False, True])
def test_pylance_scalar_index_stays_correct(uri, stable):
    pylance.write_dataset(table(0, 400), uri, max_rows_per_file=50, data_storage_version="2.0",
                          enable_stable_row_ids=stable)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    for i in range(5):
        ours.write_dataset(table(400 + 20 * i, 20), uri, mode="append")
    ours.dataset(uri).delete("id % 9 = 0")
    rowids_before = pylance.dataset(uri).to_table(columns=["id"], with_row_id=True)
    metrics = ours.compact_files(uri, target_rows_per_fragment=1000)
    # the indexed fragments are compacted too (indexed and unindexed ones apart) and the index is
    # remapped (also with stable row ids: pylance's btree stores row addresses); ids 13, 14 were reserved
    assert metrics.fragments_skipped_indexed == 0 and metrics.fragments_removed == 13
    assert (metrics.fragments_added, metrics.versions_created) == (2, 2)
    ours.write_dataset(table(1000, 10), uri, mode="append")
    ds = pylance.dataset(uri)
    assert index_fragments(uri) == {13}
    assert [f.fragment_id for f in ds.get_fragments()] == [13, 14, 15]
    for query in ["id = 45", "id < 120", "id >= 390 AND id < 430", "id IN (1, 9, 50, 401, 1005)", "id > 250"]:
        assert same_rows(query, ds), query
    assert "ScalarIndexQuery" in ds.scanner(filter="id < 120").explain_plan()
    if stable:  # surviving rows keep their ids
        after = ds.to_table(columns=["id"], with_row_id=True).filter(pc.field("id") < 1000)
        assert after.sort_by("id").equals(rowids_before.sort_by("id"))


def test_a_rewrite_of_indexed_fragments_remaps_the_index(uri):
    """A Rewrite of some of the indexed fragments: the index covers the new one (remapped), stable row ids too."""
    pylance.write_dataset(table(0, 200), uri, max_rows_per_file=50, data_storage_version="2.0",
                          enable_stable_row_ids=True)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    old = [f.metadata for f in ours.dataset(uri).get_fragments()[:2]]  # a rewrite through the task API
    result = CompactionTask(2, tuple(old)).execute(uri)  # version 2 has the index
    Compaction.commit(uri, [result])
    ds = pylance.dataset(uri)
    assert index_fragments(uri) == {2, 3, 4}
    for query in ["id = 45", "id < 120", "id > 20"]:
        assert same_rows(query, ds), query


def test_stable_row_ids_and_row_versions_move_with_the_rows(uri):
    pylance.write_dataset(table(0, 30), uri, max_rows_per_file=10, data_storage_version="2.0",
                          enable_stable_row_ids=True)
    pylance.write_dataset(table(30, 10), uri, mode="append")
    pylance.dataset(uri).update({"score": "score + 100"}, where="id = 5 OR id = 33")
    pylance.dataset(uri).delete("id % 7 = 3")
    columns = ["id", "score", "_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
    before = pylance.dataset(uri).to_table(columns=columns).sort_by("_rowid")
    metrics = ours.compact_files(uri)
    assert metrics.fragments_added == 1
    assert pylance.dataset(uri).to_table(columns=columns).sort_by("_rowid").equals(before)
    pylance.write_dataset(table(40, 5), uri, mode="append")  # new ids continue after the old ones
    ids = pylance.dataset(uri).to_table(columns=["id"], with_row_id=True).column("_rowid").to_pylist()
    assert len(set(ids)) == len(ids) and max(ids) == 44


# -- cleanup -----------------------------------------------------------------------------------


def _history(uri: str) -> None:
    pylance.write_dataset(pa.table({"a": np.arange(100)}), uri, data_storage_version="2.0", max_rows_per_file=20)
    pylance.dataset(uri).delete("a < 5")
    ours.write_dataset(pa.table({"a": np.arange(100, 110)}), uri, mode="append")
    ours.dataset(uri).delete("a % 3 = 0")
    pylance.dataset(uri).optimize.compact_files()
    pylance.dataset(uri).create_scalar_index("a", "BTREE")
    pylance.write_dataset(pa.table({"a": np.arange(7)}), uri, mode="overwrite")
    pylance.dataset(uri).create_scalar_index("a", "BTREE", replace=True)
    ours.write_dataset(pa.table({"a": np.arange(7, 9)}), uri, mode="append")


@pytest.mark.parametrize(
    "policy",
    [
        {"older_than": NOW},
        {"retain_versions": 3},
        {"retain_versions": 8},
        {"older_than": NOW, "tag": 4},
        {"older_than": NOW, "tag": 7},
        {"older_than": NOW, "delete_unverified": True},
    ],
)
def test_cleanup_removes_what_pylance_removes_and_every_kept_version_still_reads(uri, tmp_path, policy):
    _history(uri)
    policy = dict(policy)
    tag = policy.pop("tag", None)
    if tag is not None:
        pylance.dataset(uri).tags.create("keep", tag)
        policy["error_if_tagged_old_versions"] = False
    with open(os.path.join(uri, "data", "orphan.lance"), "wb") as handle:  # a young unreferenced file
        handle.write(b"orphan")
    old = os.path.getmtime(os.path.join(uri, "_versions", "latest_version_hint.json")) - 1
    os.utime(os.path.join(uri, "data", "orphan.lance"), (old, old))
    theirs = str(tmp_path / "theirs.lance")
    shutil.copytree(uri, theirs)
    contents = {v["version"]: pylance.dataset(uri, v["version"]).to_table() for v in pylance.dataset(uri).versions()}
    expected = pylance.dataset(theirs).cleanup_old_versions(**policy)
    stats = ours.cleanup_old_versions(uri, **policy)
    assert files(uri) == files(theirs)
    assert sorted(os.listdir(os.path.join(uri, "_indices"))) == sorted(os.listdir(os.path.join(theirs, "_indices")))
    assert (stats.old_versions, stats.data_files_removed, stats.transaction_files_removed,
            stats.deletion_files_removed, stats.index_files_removed, stats.bytes_removed) == (
        expected.old_versions, expected.data_files_removed, expected.transaction_files_removed,
        expected.deletion_files_removed, expected.index_files_removed, expected.bytes_removed)
    kept = [v["version"] for v in pylance.dataset(uri).versions()]
    assert kept == [v["version"] for v in pylance.dataset(theirs).versions()] and kept[-1] == 10
    for version in kept:
        assert pylance.dataset(uri, version).to_table().equals(contents[version])
        assert ours.dataset(uri, version).to_table().equals(contents[version])
    assert same_rows("a < 4", pylance.dataset(uri), "a")


def _blob_history(uri: str) -> None:
    """pylance 14 blob v2 columns: inline, packed and dedicated payloads (the last two in
    ``data/{stem}/*.blob`` sidecars), a delete that drops a whole fragment, a compaction that
    rewrites the sidecars, and our delete and append of other columns' rows."""
    field = pylance.blob_field("img", inline_size_threshold=16, dedicated_size_threshold=2000)
    schema = pa.schema([pa.field("id", pa.int64()), field])

    def rows(start: int, n: int) -> pa.Table:
        payloads = [bytes([i % 256]) * ((i * 397) % 4000) for i in range(start, start + n)]
        return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "img": pylance.blob_array(payloads)},
                        schema=schema)

    pylance.write_dataset(rows(0, 30), uri, max_rows_per_file=10)
    pylance.write_dataset(rows(30, 10), uri, mode="append")
    pylance.dataset(uri).delete("id < 10 OR id = 33")
    ours.dataset(uri).delete("id = 12")
    pylance.dataset(uri).optimize.compact_files()
    pylance.write_dataset(rows(40, 10), uri, mode="append")
    ours.dataset(uri).delete("id = 41")


def _blobs(uri: str, version: int) -> list[bytes]:
    ds = pylance.dataset(uri, version)
    return [blob.read() for blob in ds.take_blobs("img", indices=list(range(ds.count_rows())))]


@pytest.mark.parametrize("policy", [{"older_than": NOW}, {"retain_versions": 3},
                                    {"older_than": NOW, "delete_unverified": True}])
def test_cleanup_removes_blob_sidecars_with_their_data_files_as_pylance(uri, tmp_path, policy):
    """A data file's blob v2 sidecars go when it goes (before, they stayed forever) and stay while any
    kept version references it; an unreferenced sidecar is unverified, as any unreferenced file."""
    _blob_history(uri)
    orphans = {"data/" + "1" * 24 + "f" * 26 + "/00000000000000000000000000000001.blob": 1,
               "data/" + "0" * 24 + "e" * 26 + "/10000000000000000000000000000000.blob": 30}
    latest = os.path.getmtime(os.path.join(uri, "_versions", "latest_version_hint.json"))
    for path, days in orphans.items():  # a failed write's sidecars: a young one and a month-old one
        os.makedirs(os.path.dirname(os.path.join(uri, path)))
        with open(os.path.join(uri, path), "wb") as handle:
            handle.write(b"orphan" * 100)
        when = latest - 1 if days == 1 else latest - days * 86400
        os.utime(os.path.join(uri, path), (when, when))
    theirs = str(tmp_path / "theirs.lance")
    shutil.copytree(uri, theirs)
    versions = [v["version"] for v in pylance.dataset(uri).versions()]
    contents = {v: (pylance.dataset(uri, v).to_table(columns=["id"]), _blobs(uri, v)) for v in versions}
    expected = pylance.dataset(theirs).cleanup_old_versions(**policy)
    dry = ours.cleanup_old_versions(uri, dry_run=True, **policy)
    stats = ours.cleanup_old_versions(uri, **policy)
    assert files(uri) == files(theirs) and sorted(dry.files) == sorted(stats.files)
    assert any(path.endswith(".blob") for path in stats.files)
    assert (stats.old_versions, stats.data_files_removed, stats.bytes_removed) == (
        expected.old_versions, expected.data_files_removed, expected.bytes_removed)
    kept = [v["version"] for v in pylance.dataset(uri).versions()]
    assert kept == [v["version"] for v in pylance.dataset(theirs).versions()] and len(kept) < len(versions)
    for version in kept:
        assert (pylance.dataset(uri, version).to_table(columns=["id"]), _blobs(uri, version)) == contents[version]
        assert ours.dataset(uri, version).to_table(columns=["id"]).equals(contents[version][0])
    data = os.path.join(uri, "data")  # no sidecar directory is left empty
    assert all(os.listdir(os.path.join(data, d)) for d in os.listdir(data) if os.path.isdir(os.path.join(data, d)))


def test_pylance_cleanup_after_our_compaction_keeps_our_dataset_whole(uri):
    ours.write_dataset(table(0, 300), uri, max_rows_per_file=20)
    ours.dataset(uri).delete("id % 6 = 0")
    expected = ours.dataset(uri).to_table()
    ours.compact_files(uri)
    stats = pylance.dataset(uri).cleanup_old_versions(older_than=NOW)
    assert stats.data_files_removed == 15 and stats.old_versions == 2  # the write and the delete
    assert ours.dataset(uri).to_table().equals(expected) and pylance.dataset(uri).to_table().equals(expected)


def test_deferred_index_remapping_is_refused_before_anything_is_written(uri):
    pylance_fragments(uri, [20] * 10)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    pylance.write_dataset(table(200, 60), uri, mode="append", max_rows_per_file=20)
    pylance.dataset(uri).optimize.compact_files(defer_index_remap=True, target_rows_per_fragment=100)
    pylance.write_dataset(table(300, 60), uri, mode="append", max_rows_per_file=20)
    version, before = pylance.dataset(uri).version, files(uri)
    with pytest.raises(UnsupportedFeatureError, match="fragment reuse"):
        ours.compact_files(uri, target_rows_per_fragment=100)
    assert pylance.dataset(uri).version == version and files(uri) == before
