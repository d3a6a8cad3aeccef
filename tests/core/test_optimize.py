"""Compaction in the core: planning (Lance's binning), rewriting, committing, and its safety rules."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import pickle
import time
from collections import Counter

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance
from airflow_lance.core import layout, rowids
from airflow_lance.core._proto import rowids_pb2
from airflow_lance.core.deletion import write_deletion_vector
from airflow_lance.core.errors import (
    CommitConflictError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from airflow_lance.core.optimize import Compaction, CompactionPlan, CompactionTask, RewriteResult, compact_files
from airflow_lance.core.transaction import read_transaction_file


def table(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    words = np.array(["alpha", "beta", "gamma", "delta"])[ids % 4]
    return pa.table({
        "id": ids,
        "name": pa.array(np.char.add(words, ids.astype(str))),
        "tags": pa.array([[int(i)] * int(i % 3) for i in ids], pa.list_(pa.int64())),
        "score": pa.array(ids * 0.5, mask=ids % 5 == 0),
    })


def fragments(uri: str, sizes: list[int]) -> None:
    """One fragment per size, appended one by one (ids continue across fragments)."""
    start = 0
    for i, size in enumerate(sizes):
        lance.write_dataset(table(start, size), uri, mode="create" if i == 0 else "append")
        start += size


def data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


def groups(plan: CompactionPlan) -> list[list[int]]:
    return [[f.id for f in task.fragments] for task in plan.tasks]


def test_compaction_merges_small_fragments_keeping_content_and_order(uri):
    lance.write_dataset(table(0, 1000), uri, max_rows_per_file=50)
    before = lance.dataset(uri).to_table()
    metrics = compact_files(uri)
    ds = lance.dataset(uri)
    assert ds.to_table().equals(before)
    assert [f.physical_rows for f in ds.get_fragments()] == [1000]
    assert metrics == lance.CompactionMetrics(
        fragments_removed=20, fragments_added=1, files_removed=20, files_added=1, rows=1000,
        bytes=ds.get_fragments()[0].data_files()[0].file_size_bytes, versions_created=1, version=2,
    )
    # ONE commit: a Rewrite planned on version 1, no separate ReserveFragments version
    assert [v["version"] for v in ds.versions()] == [1, 2]
    txn = read_transaction_file(ds.store, ds.manifest_file.manifest.transaction_file)
    assert (txn.kind, txn.read_version, len(txn.operation.groups)) == ("rewrite", 1, 1)
    assert [f.id for f in txn.operation.groups[0].new_fragments] == [0]  # the id is given at commit...
    assert ds.get_fragments()[0].fragment_id == 20  # ...above every id ever used
    assert ds.manifest_file.manifest.max_fragment_id == 20


def data_bytes(uri: str) -> int:
    return sum(os.path.getsize(os.path.join(uri, "data", name)) for name in data_files(uri))


def referenced_bytes(uri: str, *versions: int) -> int:
    files = {(f.path, f.file_size_bytes) for v in versions for fragment in lance.dataset(uri, v).get_fragments()
             for f in fragment.data_files()}
    return sum(size for _, size in files)


@pytest.mark.parametrize("policy", ["older_than", "retain_versions=1", "retain_versions=2"])
def test_compaction_is_one_version_and_cleanup_frees_the_files_it_replaced(uri, policy):
    lance.write_dataset(table(0, 2000), uri, max_rows_per_file=100)
    lance.write_dataset(table(2000, 50), uri, mode="append")  # version 2: what compaction replaces
    planned = time.time()
    time.sleep(0.2)  # version 2 is older than ``planned``, anything compaction commits is younger
    metrics = compact_files(uri)
    assert (metrics.version, metrics.versions_created) == (3, 1)
    assert [v["version"] for v in lance.dataset(uri).versions()] == [1, 2, 3]
    compacted = referenced_bytes(uri, 3)
    assert data_bytes(uri) == referenced_bytes(uri, 2, 3) > 1.9 * compacted  # storage doubled, for now
    if policy == "older_than":  # versions older than the compaction go; before, its reservation stayed
        lance.cleanup_old_versions(uri, older_than=dt.timedelta(seconds=time.time() - planned))
        kept = [3]
    else:
        retain = int(policy[-1])
        lance.cleanup_old_versions(uri, retain_versions=retain)
        kept = [2, 3][-retain:]
    assert [v["version"] for v in lance.dataset(uri).versions()] == kept
    assert data_bytes(uri) == referenced_bytes(uri, *kept)  # nothing else pinned
    if kept == [3]:
        assert data_bytes(uri) == compacted
    assert lance.dataset(uri).to_table().equals(table(0, 2050))


def test_compaction_materialises_deletions(uri):
    lance.write_dataset(table(0, 600), uri, max_rows_per_file=100)
    lance.dataset(uri).delete("id % 3 = 0 OR id >= 550")
    before = lance.dataset(uri).to_table()
    metrics = compact_files(uri)
    ds = lance.dataset(uri)
    after = ds.to_table()
    assert after.equals(before)  # in order
    assert Counter(after.column("name").to_pylist()) == Counter(before.column("name").to_pylist())
    assert [(f.physical_rows, f.deletion_file()) for f in ds.get_fragments()] == [(before.num_rows, None)]
    assert metrics.files_removed == 6 + 6 and metrics.rows == before.num_rows
    assert ds.manifest_file.manifest.reader_feature_flags & 1 == 0  # no deletion files left


def test_large_fragments_and_single_small_fragments_stay(uri):
    fragments(uri, [200, 10, 200, 10, 10, 200])
    plan = Compaction.plan(uri, target_rows_per_fragment=100)
    assert groups(plan) == [[3, 4]]
    compact_files(uri, target_rows_per_fragment=100)
    ds = lance.dataset(uri)
    # the kept fragments in their order, then the new one (pylance 14's order)
    assert [f.physical_rows for f in ds.get_fragments()] == [200, 10, 200, 200, 20]
    assert ds.to_table().equals(pa.concat_tables([table(0, 410), table(430, 200), table(410, 20)]))


def test_deletion_threshold_decides_whether_a_fragment_is_rewritten_alone(uri):
    fragments(uri, [100, 100])
    lance.dataset(uri).delete("id < 10")  # exactly 10 %: not above the threshold
    assert groups(Compaction.plan(uri, target_rows_per_fragment=50)) == []
    lance.dataset(uri).delete("id = 150")
    lance.dataset(uri).delete("id = 10")  # 11 %
    assert groups(Compaction.plan(uri, target_rows_per_fragment=50)) == [[0]]
    assert groups(Compaction.plan(uri, target_rows_per_fragment=50, materialize_deletions=False)) == []
    assert groups(Compaction.plan(uri, target_rows_per_fragment=50, materialize_deletions_threshold=1.0)) == []
    assert groups(Compaction.plan(uri, target_rows_per_fragment=50, materialize_deletions_threshold=0.0)) == [[0], [1]]


def test_bins_are_split_for_size_and_budgets_keep_whole_tasks(uri):
    fragments(uri, [30] * 10)
    assert groups(Compaction.plan(uri, target_rows_per_fragment=100)) == [[0, 1, 2, 3], [4, 5, 6, 7, 8, 9]]
    assert groups(Compaction.plan(uri, target_rows_per_fragment=100, max_source_fragments=5)) == [[0, 1, 2, 3]]
    assert groups(Compaction.plan(uri, target_rows_per_fragment=100, max_source_rows=100)) == []
    assert groups(Compaction.plan(uri, {"target_rows_per_fragment": 100, "excluded_fragment_ids": [2, 99]})) == [
        [0, 1], [3, 4, 5, 6, 7, 8, 9]  # 210 rows: a second task of 90 would be too small
    ]
    metrics = compact_files(uri, target_rows_per_fragment=100, excluded_fragment_ids=[2])
    assert metrics.fragments_removed == 9 and metrics.fragments_added == 4
    ds = lance.dataset(uri)
    assert [f.physical_rows for f in ds.get_fragments()] == [30, 60, 100, 100, 10]  # files cut at the target
    assert ds.get_fragments()[0].fragment_id == 2
    assert ds.to_table().equals(pa.concat_tables([table(60, 30), table(0, 60), table(90, 210)]))


def test_new_files_are_cut_at_the_target_and_byte_limit(uri):
    lance.write_dataset(table(0, 300), uri, max_rows_per_file=20)
    compact_files(uri, target_rows_per_fragment=120)
    # tasks of 6 and 9 fragments (the remainder joins the last); files are cut at the target
    assert [f.physical_rows for f in lance.dataset(uri).get_fragments()] == [120, 120, 60]
    compact_files(uri, target_rows_per_fragment=1000, max_bytes_per_file=1)
    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) > 2 and ds.to_table().equals(table(0, 300))


def test_nothing_to_compact_commits_nothing(uri):
    lance.write_dataset(table(0, 100), uri)
    assert compact_files(uri) == lance.CompactionMetrics()
    assert lance.dataset(uri).optimize.compact_files() == lance.CompactionMetrics()
    assert lance.dataset(uri).version == 1
    assert Compaction.commit(uri, []) == lance.CompactionMetrics()


def test_distributed_tasks_round_trip_through_json_and_pickle(uri):
    fragments(uri, [40] * 6)
    lance.dataset(uri).delete("id % 10 = 1")
    plan = Compaction.plan(lance.dataset(uri), target_rows_per_fragment=100)
    assert CompactionPlan.from_json(json.dumps(plan.to_json())) == plan
    tasks = [pickle.loads(pickle.dumps(t)) for t in plan.tasks]
    tasks = [CompactionTask.from_json(json.loads(json.dumps(t.to_json()))) for t in tasks]
    results = [t.execute(uri) for t in tasks]
    shipped = [json.dumps(r.to_json()) for r in results]
    assert [RewriteResult.from_json(s) for s in shipped] == results
    assert pickle.loads(pickle.dumps(results[0])) == results[0]
    expected = lance.dataset(uri).to_table()
    metrics = Compaction.commit(uri, shipped)  # JSON accepted as well
    assert metrics.fragments_removed == 6 and metrics.fragments_added == 4  # 2 tasks of 108 rows
    assert lance.dataset(uri).to_table().equals(expected)
    # committing the same results again (a retried task) changes nothing and names the landed version
    version = lance.dataset(uri).version
    assert (metrics.version, metrics.versions_created) == (version, 1)
    lance.write_dataset(table(1000, 3), uri, mode="append")  # the retry comes after another commit
    again = Compaction.commit(uri, results)
    assert again == dataclasses.replace(metrics, versions_created=0)
    assert lance.dataset(uri).version == version + 1


@pytest.mark.parametrize("who", ["ours", "stale handle"])
def test_concurrent_delete_between_plan_and_commit_never_resurrects_rows(uri, who):
    lance.write_dataset(table(0, 400), uri, max_rows_per_file=50)
    plan = Compaction.plan(uri)
    results = [task.execute(uri) for task in plan.tasks]
    lance.dataset(uri).delete("id % 2 = 0")  # lands between plan and commit
    expected = lance.dataset(uri).to_table()
    written = data_files(uri)
    if who == "ours":
        with pytest.raises(CommitConflictError):
            Compaction.commit(uri, results)
    else:  # compact_files on a handle of the planned version: plan, write, commit, conflict
        with pytest.raises(CommitConflictError):
            lance.dataset(uri, 1).optimize.compact_files()
        assert data_files(uri) == written  # the files it wrote were removed again
    assert lance.dataset(uri).to_table().equals(expected)
    assert lance.dataset(uri).count_rows("id % 2 = 0") == 0
    compact_files(uri)  # a fresh plan works
    assert lance.dataset(uri).to_table().equals(expected)


def _two_task_plan(uri: str, **options) -> list[RewriteResult]:
    """Fragments 0-3 (ids 0-99) and 5-8 (ids 500-599) planned as two tasks: fragment 4 (ids 100-499)
    has too many rows to take part, so it splits the candidates."""
    fragments(uri, [25, 25, 25, 25, 400, 25, 25, 25, 25])
    plan = Compaction.plan(uri, target_rows_per_fragment=200, **options)
    assert groups(plan) == [[0, 1, 2, 3], [5, 6, 7, 8]]
    return [task.execute(uri) for task in plan.tasks]


@pytest.mark.parametrize("index", [False, True], ids=["no_index", "btree_remapped"])
def test_skip_conflicting_commits_the_tasks_no_concurrent_commit_touched(uri, index):
    """A concurrent delete in fragment 1 conflicts with the first task only: all-or-nothing (pylance's
    rule, the default) fails, ``skip_conflicting`` commits the second task and removes the first one's
    files; pylance then reads the rows our scan reads (and uses the remapped index)."""
    results = _two_task_plan(uri)
    if index:
        pylance.dataset(uri).create_scalar_index("id", "BTREE")
        results = [task.execute(uri) for task in Compaction.plan(uri, target_rows_per_fragment=200).tasks]
    lance.dataset(uri).delete("id = 30")  # fragment 1, after the plan
    expected = lance.dataset(uri).to_table()
    written = data_files(uri)
    with pytest.raises(CommitConflictError):
        Compaction.commit(uri, results)
    assert data_files(uri) == written and lance.dataset(uri).to_table().equals(expected)
    metrics = Compaction.commit(uri, results, skip_conflicting=True)
    assert (metrics.tasks_skipped_conflict, metrics.fragments_removed, metrics.fragments_added) == (1, 4, 1)
    skipped = {f.path for f in results[0].new_fragments[0].files}
    assert not skipped & data_files(uri)  # the left-out task's files are gone
    ds = lance.dataset(uri)
    assert sorted(f.fragment_id for f in ds.get_fragments()) == [0, 1, 2, 3, 4, 9]
    assert ds.to_table().sort_by("id").equals(expected.sort_by("id"))
    theirs = pylance.dataset(uri)
    assert theirs.to_table().sort_by("id").equals(expected.sort_by("id"))
    if index:
        assert theirs.to_table(filter="id = 550").num_rows == 1 and theirs.to_table(filter="id = 30").num_rows == 0
        assert "ScalarIndexQuery" in theirs.scanner(filter="id = 550").explain_plan()
    # committing the same results again (a retried task) commits nothing and reports the same outcome
    again = Compaction.commit(uri, results, skip_conflicting=True)
    assert (again.version, again.versions_created, again.tasks_skipped_conflict) == (metrics.version, 0, 1)
    assert lance.dataset(uri).version == ds.version


@pytest.mark.parametrize("index", [False, True], ids=["no_index", "btree_remapped"])
def test_skip_conflicting_leaves_out_what_a_delete_landing_during_the_commit_touched(uri, monkeypatch, index):
    """A delete lands between the checks and the Rewrite's commit (after the reservation and the index
    remap): that commit attempt conflicts, its remapped index files are removed, and the next attempt
    commits without the task the delete touched."""
    from airflow_lance.core.optimize import committer

    results = _two_task_plan(uri)
    if index:
        pylance.dataset(uri).create_scalar_index("id", "BTREE")
        results = [task.execute(uri) for task in Compaction.plan(uri, target_rows_per_fragment=200).tasks]
    real, calls = committer.commit_transaction, []

    def delete_first(store, transaction, **kwargs):
        if isinstance(transaction.operation, lance.LanceOperation.Rewrite) and not calls:
            calls.append(len(transaction.operation.rewritten_indices))
            lance.dataset(uri).delete("id = 30")  # a concurrent writer, just before our commit
        return real(store, transaction, **kwargs)

    monkeypatch.setattr(committer, "commit_transaction", delete_first)
    def index_dirs_with_files() -> set[str]:  # on local disk, deleting a file leaves its (empty) directory
        root = os.path.join(uri, "_indices")
        return {d for d in os.listdir(root) if os.listdir(os.path.join(root, d))} if index else set()

    indices_before = index_dirs_with_files()
    metrics = Compaction.commit(uri, results, skip_conflicting=True)
    assert calls == [int(index)] and metrics.tasks_skipped_conflict == 1
    assert metrics.versions_created == 1 + 2 * int(index)  # with the index: two reservations, then the Rewrite
    ds = pylance.dataset(uri)
    assert ds.count_rows() == 599 and ds.count_rows("id = 30") == 0
    if index:
        [segment] = ds.describe_indices()[0].segments
        # the first attempt's remapped index is gone; the second's replaced the original
        assert index_dirs_with_files() - indices_before == {segment.uuid}
        assert ds.to_table(filter="id = 550").num_rows == 1


@pytest.mark.parametrize("seen", [2, 4], ids=["part_of_a_task", "a_whole_task"])
def test_a_concurrent_index_over_a_task_is_remapped_or_the_task_left_out(uri, seen):
    """An index committed after the plan by a writer that had read only the first ``seen`` fragments
    covers the first task's fragments, wholly or in part. Lance retries the Rewrite either way. Over a
    whole task we commit, remapping that index too (a retry of the commit picks it up); over part of a
    task that task is left out and the other commits (not retried in vain against the same index)."""
    fragments(uri, [25] * seen)
    older = lance.dataset(uri)
    start = 25 * seen
    for size in [25] * (4 - seen) + [400, 25, 25, 25, 25]:
        lance.write_dataset(table(start, size), uri, mode="append")
        start += size
    results = [task.execute(uri) for task in Compaction.plan(uri, target_rows_per_fragment=200).tasks]
    assert [[f.id for f in r.old_fragments] for r in results] == [[0, 1, 2, 3], [5, 6, 7, 8]]
    older.create_scalar_index("id", "BTREE")  # covers fragments 0 .. seen - 1
    metrics = Compaction.commit(uri, results, skip_conflicting=True)
    whole = seen == 4
    assert (metrics.tasks_skipped_conflict, metrics.fragments_removed) == ((0, 8) if whole else (1, 4))
    assert metrics.versions_created == (2 if whole else 1)  # remapping reserves the new fragments' ids first
    ds = pylance.dataset(uri)
    assert [f.fragment_id for f in ds.get_fragments()] == ([4, 9, 10] if whole else [0, 1, 2, 3, 4, 9])
    assert ds.count_rows() == 600 and ds.to_table(filter="id = 30")["id"].to_pylist() == [30]
    assert "ScalarIndexQuery" in ds.scanner(filter="id = 30").explain_plan()
    ds.validate()


def test_an_index_merged_during_the_commit_is_remapped_by_the_next_attempt(uri, monkeypatch):
    """pylance merges the BTREE segments (covering both tasks) between our checks and the Rewrite's
    commit: that attempt loses, and the next one remaps the merged segment and lands, leaving no task out."""
    from airflow_lance.core.optimize import committer

    results = _two_task_plan(uri)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    results = [task.execute(uri) for task in Compaction.plan(uri, target_rows_per_fragment=200).tasks]
    real, calls = committer.commit_transaction, []

    def merge_first(store, transaction, **kwargs):
        if isinstance(transaction.operation, lance.LanceOperation.Rewrite) and not calls:
            calls.append(1)
            lance.write_dataset(table(600, 10), uri, mode="append")
            pylance.dataset(uri).optimize.optimize_indices()  # one merged segment over every fragment
        return real(store, transaction, **kwargs)

    monkeypatch.setattr(committer, "commit_transaction", merge_first)
    metrics = Compaction.commit(uri, results, skip_conflicting=True)
    assert (metrics.tasks_skipped_conflict, metrics.fragments_removed, metrics.versions_created) == (0, 8, 3)
    ds = pylance.dataset(uri)
    [segment] = ds.describe_indices()[0].segments
    assert sorted(segment.fragment_ids) == sorted(f.fragment_id for f in ds.get_fragments())
    assert sorted(ds.to_table(filter="id = 30 OR id = 550 OR id = 605")["id"].to_pylist()) == [30, 550, 605]
    ds.validate()


@pytest.mark.parametrize("skip_conflicting", [True, False])
def test_an_index_dropped_during_the_commit_is_not_remapped(uri, monkeypatch, skip_conflicting):
    """pylance drops the BTREE our compaction remaps, between the remap and the Rewrite's commit: that
    attempt conflicts (stricter than Lance, which would commit a rewritten index nothing uses) and its
    remapped files are removed. The next attempt (``skip_conflicting``) commits without the index; all
    or nothing, the commit fails and nothing changes."""
    from airflow_lance.core.optimize import committer

    results = _two_task_plan(uri)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    results = [task.execute(uri) for task in Compaction.plan(uri, target_rows_per_fragment=200).tasks]
    index_root = os.path.join(uri, "_indices")
    real, calls = committer.commit_transaction, []

    def drop_first(store, transaction, **kwargs):
        if isinstance(transaction.operation, lance.LanceOperation.Rewrite) and not calls:
            calls.append(1)
            pylance.dataset(uri).drop_index("id_idx")
        return real(store, transaction, **kwargs)

    monkeypatch.setattr(committer, "commit_transaction", drop_first)
    indices_before = set(os.listdir(index_root))
    if not skip_conflicting:
        with pytest.raises(CommitConflictError):
            Compaction.commit(uri, results)
        assert lance.dataset(uri).describe_indices() == [] and len(lance.dataset(uri).get_fragments()) == 9
    else:
        metrics = Compaction.commit(uri, results, skip_conflicting=True)
        assert (metrics.tasks_skipped_conflict, metrics.fragments_removed, metrics.versions_created) == (0, 8, 2)
        ds = pylance.dataset(uri)
        assert ds.describe_indices() == [] and ds.count_rows() == 600
        ds.validate()
    # the first attempt's remapped index files are gone (an empty directory may stay on local disk)
    assert not [d for d in set(os.listdir(index_root)) - indices_before if os.listdir(os.path.join(index_root, d))]


def test_a_lost_commit_race_no_task_explains_is_not_retried_in_vain(uri, monkeypatch):
    """When the Rewrite's commit fails with a conflict that neither leaves a task out nor adds an index to
    remap (here every commit attempt fails), the next attempt would be the same commit: it stops before
    committing again (one attempt, not twenty), and the results stay committable."""
    from airflow_lance.core.optimize import committer

    results = _two_task_plan(uri)
    attempts = []

    def always_conflicting(store, transaction, **kwargs):
        attempts.append(transaction.read_version)
        raise CommitConflictError("another writer won (injected)")

    monkeypatch.setattr(committer, "commit_transaction", always_conflicting)
    with pytest.raises(CommitConflictError, match="lost the commit race"):
        Compaction.commit(uri, results, skip_conflicting=True)
    assert len(attempts) == 1
    monkeypatch.undo()
    assert Compaction.commit(uri, results, skip_conflicting=True).fragments_removed == 8  # files still there


def test_skip_conflicting_fails_when_every_task_conflicts(uri):
    results = _two_task_plan(uri)
    lance.dataset(uri).delete("id = 30 OR id = 550")  # one row in each task's fragments
    expected, written = lance.dataset(uri).to_table(), data_files(uri)
    new_files = {f.path for r in results for fragment in r.new_fragments for f in fragment.files}
    with pytest.raises(CommitConflictError, match="every task"):
        Compaction.commit(uri, results, skip_conflicting=True)
    assert data_files(uri) == written - new_files and lance.dataset(uri).to_table().equals(expected)


def test_delete_committed_after_a_concurrent_reservation_is_a_conflict_too(uri):
    lance.write_dataset(table(0, 100), uri, max_rows_per_file=10)
    results = [task.execute(uri) for task in Compaction.plan(uri).tasks]
    lance.LanceDataset.commit(uri, lance.LanceOperation.ReserveFragments(1), 1)
    lance.dataset(uri).delete("id = 5")
    with pytest.raises(CommitConflictError):
        Compaction.commit(uri, results)
    assert lance.dataset(uri).count_rows() == 99


def test_append_during_compaction_both_land(uri):
    lance.write_dataset(table(0, 300), uri, max_rows_per_file=30)
    results = [task.execute(uri) for task in Compaction.plan(uri).tasks]
    lance.write_dataset(table(300, 25), uri, mode="append")  # version 2, fragment 10
    metrics = Compaction.commit(uri, results)
    ds = lance.dataset(uri)
    assert (metrics.version, metrics.versions_created, ds.version) == (3, 1, 3)
    assert ds.to_table().equals(pa.concat_tables([table(300, 25), table(0, 300)]))  # pylance 14's order
    assert [f.physical_rows for f in ds.get_fragments()] == [25, 300]
    # the rewritten fragment got its id at commit, above the append's
    assert [f.fragment_id for f in ds.get_fragments()] == [10, 11]
    assert ds.manifest_file.manifest.max_fragment_id == 11
    lance.write_dataset(table(325, 5), uri, mode="append")  # ids never reused
    assert lance.dataset(uri).get_fragments()[-1].fragment_id == 12


def test_overwrite_during_compaction_fails_it(uri):
    lance.write_dataset(table(0, 100), uri, max_rows_per_file=10)
    results = [task.execute(uri) for task in Compaction.plan(uri).tasks]
    lance.write_dataset(table(0, 7), uri, mode="overwrite")
    with pytest.raises(CommitConflictError):
        Compaction.commit(uri, results)
    assert lance.dataset(uri).to_table().equals(table(0, 7)) and lance.dataset(uri).version == 2


@pytest.mark.parametrize(
    "options",
    [
        {"target_rows_per_fragment": 0},
        {"target_rows_per_fragment": -5},
        {"target_rows_per_fragment": "big"},
        {"target_rows_per_fragment": True},
        {"max_bytes_per_file": 0},
        {"materialize_deletions": "yes"},
        {"materialize_deletions_threshold": "0.1"},
        {"materialize_deletions_threshold": float("nan")},
        {"max_source_fragments": 0},
        {"max_source_rows": -1},
        {"excluded_fragment_ids": "1,2"},
        {"excluded_fragment_ids": [1, -2]},
    ],
)
def test_bad_options_are_typed_errors_and_change_nothing(uri, options):
    lance.write_dataset(table(0, 100), uri, max_rows_per_file=10)
    with pytest.raises(InvalidInputError):
        compact_files(uri, **options)
    with pytest.raises(InvalidInputError):
        Compaction.plan(uri, options)
    assert lance.dataset(uri).version == 1 and len(data_files(uri)) == 10


def test_bad_arguments_are_typed_errors(uri):
    lance.write_dataset(table(0, 100), uri, max_rows_per_file=10)
    with pytest.raises(InvalidInputError):
        Compaction.plan(uri, {"num_fragments": 3})
    with pytest.raises(InvalidInputError):
        compact_files(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        CompactionTask.from_json("{not json")
    with pytest.raises(InvalidInputError):
        RewriteResult.from_json({"read_version": 1})
    with pytest.raises(InvalidInputError):
        Compaction.commit(uri, [object()])  # type: ignore[list-item]


def test_tampered_tasks_and_results_are_refused_before_any_commit(uri):
    lance.write_dataset(table(0, 100), uri, max_rows_per_file=10)
    plan = Compaction.plan(uri, target_rows_per_fragment=50)
    task = plan.tasks[0]
    forged = CompactionTask(task.read_version, (task.fragments[0].with_id(7),) + task.fragments[1:], task.options)
    with pytest.raises(InvalidInputError):
        forged.execute(uri)
    results = [t.execute(uri) for t in plan.tasks]
    first, second = results
    bad_inputs = [
        [first, RewriteResult(2, second.old_fragments, second.new_fragments, second.metrics)],  # two plans
        [first, first],  # the same fragments twice
        [RewriteResult(1, first.old_fragments, first.new_fragments[:0], first.metrics)],  # rows lost
        [RewriteResult(1, first.old_fragments, (first.new_fragments[0].with_id(3),), first.metrics)],
        [RewriteResult(1, (), first.new_fragments, first.metrics)],
    ]
    for bad in bad_inputs:
        with pytest.raises(InvalidInputError):
            Compaction.commit(uri, bad)
    os.remove(os.path.join(uri, "data", second.new_fragments[0].files[0].path))
    with pytest.raises(InvalidInputError):
        Compaction.commit(uri, results)  # a new file is missing
    assert lance.dataset(uri).version == 1  # nothing was committed
    Compaction.commit(uri, [first])  # any subset of the tasks may be committed
    assert lance.dataset(uri).to_table().sort_by("id").equals(table(0, 100))


def test_compaction_refuses_formats_it_cannot_write(uri):
    lance.write_dataset(table(0, 40), uri, max_rows_per_file=10)
    manifest = lance.dataset(uri).manifest_file.manifest
    manifest.data_format.version = "2.3"  # what a pylance "next" (2.3) dataset says: not writable
    from airflow_lance.core.manifest import serialize_manifest

    path = os.path.join(uri, lance.dataset(uri).manifest_file.path)
    with open(path, "wb") as handle:
        handle.write(serialize_manifest(manifest, None))
    with pytest.raises(UnsupportedFeatureError):
        compact_files(uri)
    assert lance.dataset(uri).version == 1 and len(data_files(uri)) == 4


def test_dataset_handle_plans_on_its_own_version(uri):
    lance.write_dataset(table(0, 60), uri, max_rows_per_file=20)
    handle = lance.dataset(uri)
    lance.write_dataset(table(60, 20), uri, mode="append")  # newer than the handle
    assert handle.optimize.compact_files(target_rows_per_fragment=100).fragments_removed == 3
    ds = lance.dataset(uri)
    assert [f.physical_rows for f in ds.get_fragments()] == [20, 60]
    assert ds.to_table().equals(pa.concat_tables([table(60, 20), table(0, 60)]))


# -- row id sequences ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        (np.arange(5, 500), "range"),
        (np.delete(np.arange(0, 2000), [7, 900]), "range_with_holes"),
        (np.arange(0, 4000, 3), "range_with_bitmap"),
        (np.array([3, 70_000, 9_000_000_000]), "sorted_array"),
        (np.array([9, 3, 7, 1, 8, 2, 6, 0]), "array"),
    ],
)
def test_row_id_segments_round_trip_with_lance_encodings(values, kind):
    data = rowids.encode_row_ids(values.astype(np.uint64))
    sequence = rowids_pb2.RowIdSequence()
    sequence.ParseFromString(data)
    assert [s.WhichOneof("segment") for s in sequence.segments] == [kind]
    assert np.array_equal(rowids.decode_row_ids(data), values)


def test_row_id_sequences_concatenate_runs_and_decode_pylance_bitmaps():
    values = np.concatenate([np.arange(0, 10), np.arange(20, 30), np.array([5, 6])]).astype(np.uint64)
    sequence = rowids_pb2.RowIdSequence()
    sequence.ParseFromString(rowids.encode_row_ids(values))
    assert len(sequence.segments) == 2 and np.array_equal(rowids.decode_row_ids(sequence.SerializeToString()), values)
    pylance_segment = rowids_pb2.U64Segment()  # written by pylance 14: ids 0..9 without 3 (LSB-first bits)
    pylance_segment.range_with_bitmap.end = 10
    pylance_segment.range_with_bitmap.bitmap = b"\xf7\x03"
    assert rowids.decode_segment(pylance_segment).tolist() == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    versions = np.array([1, 1, 1, 4, 4, 2], dtype=np.uint64)
    assert np.array_equal(rowids.decode_versions(rowids.encode_versions(versions), 6), versions)


def test_layout_names_the_staging_directory():
    assert layout.staging_dir("job-1") == "_airflow_staging/job-1"  # where the Spark job stages results
    assert layout.is_temp_file_name(".tmp-x-123") and layout.is_temp_file_name(".tmpAbC12")
    assert not layout.is_temp_file_name("tmp.lance")


def test_compaction_result_is_readable_after_filter_and_projection(uri):
    lance.write_dataset(table(0, 500), uri, max_rows_per_file=25)
    lance.dataset(uri).delete("name LIKE 'beta%'")
    compact_files(uri)
    ds = lance.dataset(uri)
    expected = table(0, 500).filter(~pc.starts_with(pc.field("name"), "beta"))
    assert ds.to_table(columns=["id", "tags"], filter="id > 100").equals(
        expected.filter(pc.field("id") > 100).select(["id", "tags"])
    )


def test_a_fragment_whose_rows_are_all_deleted_is_simply_removed(uri):
    lance.write_dataset(table(0, 30), uri, max_rows_per_file=10)
    ds = lance.dataset(uri)
    middle = ds.get_fragments()[1].metadata
    deletion = write_deletion_vector(ds.store, middle.id, 1, np.arange(10, dtype=np.uint32))
    emptied = lance.FragmentMetadata(middle.id, middle.files, middle.physical_rows, deletion)
    lance.LanceDataset.commit(uri, lance.LanceOperation.Delete([emptied], [], "id >= 10 AND id < 20"), 1)
    plan = Compaction.plan(uri, target_rows_per_fragment=10)
    assert groups(plan) == [[1]]
    results = [task.execute(uri) for task in plan.tasks]
    assert results[0].new_fragments == () and results[0].metrics.rows == 0
    assert Compaction.commit(uri, results).fragments_removed == 1
    ds = lance.dataset(uri)
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 2]
    assert ds.to_table().equals(pa.concat_tables([table(0, 10), table(20, 10)]))
    again = Compaction.commit(uri, results)  # retried: found in the version that removed the fragment
    assert again == dataclasses.replace(results[0].metrics, version=ds.version)
    assert lance.dataset(uri).version == ds.version
