"""Version cleanup: what is kept (latest, recent, tagged, referenced, in flight) and what goes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import time

import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core import layout
from airflow_lance.core.errors import CorruptFileError, DatasetNotFoundError, InvalidInputError

NOW = dt.timedelta(0)
DAY = 24 * 3600


def table(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.table({"id": ids, "text": pa.array(np.char.add("t", ids.astype(str)))})


def history(uri: str) -> dict[int, pa.Table]:
    """Versions 1..5: create, append, delete, overwrite, append. Returns each version's content."""
    lance.write_dataset(table(0, 30), uri, max_rows_per_file=10)
    lance.write_dataset(table(30, 10), uri, mode="append")
    lance.dataset(uri).delete("id % 4 = 0")
    lance.write_dataset(table(100, 20), uri, mode="overwrite", max_rows_per_file=10)
    lance.write_dataset(table(120, 5), uri, mode="append")
    return {v: lance.dataset(uri, v).to_table() for v in range(1, 6)}


def tree(uri: str) -> dict[str, tuple[int, int]]:
    """Every file under the dataset: relative path -> (size, mtime_ns)."""
    out = {}
    for directory, _, names in os.walk(uri):
        for name in names:
            path = os.path.join(directory, name)
            stat = os.stat(path)
            out[os.path.relpath(path, uri)] = (stat.st_size, stat.st_mtime_ns)
    return out


def referenced_by(uri: str, versions: list[int]) -> set[str]:
    """Files the given versions reference (data, deletion, transaction), relative to the root."""
    files = set()
    for version in versions:
        ds = lance.dataset(uri, version)
        manifest = ds.manifest_file.manifest
        files.add(ds.manifest_file.path)
        files.add(layout.transaction_file_path(manifest.transaction_file))
        for fragment in manifest.fragments:
            files.update(layout.data_file_path(f.path) for f in fragment.files)
            if fragment.HasField("deletion_file"):
                d = fragment.deletion_file
                files.add(layout.deletion_file_path(fragment.id, d.read_version, d.id, d.file_type))
    return files


def put(uri: str, path: str, mtime: float, data: bytes = b"x") -> str:
    full = os.path.join(uri, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as handle:
        handle.write(data)
    os.utime(full, (mtime, mtime))
    return path


def commit_time(uri: str, version: int) -> float:
    ts = lance.dataset(uri, version).manifest_file.manifest.timestamp
    return ts.seconds + ts.nanos / 1e9


def test_removes_old_versions_and_exactly_the_files_only_they_reference(uri):
    contents = history(uri)
    before = tree(uri)
    stats = lance.cleanup_old_versions(uri, older_than=NOW)
    after = tree(uri)
    removed = set(before) - set(after)
    assert [v["version"] for v in lance.dataset(uri).versions()] == [5]
    assert set(after) == referenced_by(uri, [5]) | {layout.LATEST_VERSION_HINT}
    assert sorted(stats.files) == sorted(removed) and stats.files_removed == len(removed)
    assert stats.files[:4] == [layout.manifest_path(v, layout.ManifestNamingScheme.V2) for v in (1, 2, 3, 4)]
    assert stats.bytes_removed == sum(before[p][0] for p in removed)
    assert (stats.old_versions, stats.transaction_files_removed, stats.deletion_files_removed) == (4, 4, 4)
    assert stats.data_files_removed == 4  # v1's three files and v2's one (v4's live on in v5)
    assert stats.failed_deletes == 0 and not stats.dry_run
    assert lance.dataset(uri).to_table().equals(contents[5])
    assert lance.cleanup_old_versions(uri, older_than=NOW).files == []  # nothing left to do
    lance.write_dataset(table(200, 3), uri, mode="append")  # the dataset keeps working
    assert lance.dataset(uri).count_rows() == 28


def test_default_policy_keeps_recent_versions_and_retain_versions_keeps_the_last_n(uri):
    contents = history(uri)
    before = tree(uri)
    assert lance.cleanup_old_versions(uri).files == []  # 14 days by default
    assert lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(hours=1)).files == []
    assert tree(uri) == before
    stats = lance.dataset(uri).cleanup_old_versions(retain_versions=2)
    assert stats.old_versions == 3
    assert [v["version"] for v in lance.dataset(uri).versions()] == [4, 5]
    for version in (4, 5):
        assert lance.dataset(uri, version).to_table().equals(contents[version])
    # both limits given: a version must be old by both
    assert lance.cleanup_old_versions(uri, retain_versions=1, older_than=dt.timedelta(days=1)).files == []


def test_an_old_handle_keeps_every_newer_version(uri):
    contents = history(uri)
    stats = lance.dataset(uri, 3).cleanup_old_versions(older_than=NOW)
    assert stats.old_versions == 2
    assert [v["version"] for v in lance.dataset(uri).versions()] == [3, 4, 5]
    for version in (3, 4, 5):
        assert lance.dataset(uri, version).to_table().equals(contents[version])


def test_tagged_versions_raise_by_default_and_are_kept_with_their_files(uri):
    contents = history(uri)
    lance.dataset(uri).tags.create("release", 2)
    before = tree(uri)
    with pytest.raises(lance.TaggedVersionsError, match="release|2"):
        lance.cleanup_old_versions(uri, older_than=NOW)
    assert tree(uri) == before  # nothing deleted
    stats = lance.cleanup_old_versions(uri, older_than=NOW, error_if_tagged_old_versions=False)
    assert stats.old_versions == 3
    assert [v["version"] for v in lance.dataset(uri).versions()] == [2, 5]
    # files only versions 3 and 4 used go although they are newer than the kept version 2 (lance #8705)
    assert set(tree(uri)) == referenced_by(uri, [2, 5]) | {layout.LATEST_VERSION_HINT, layout.tag_path("release")}
    assert lance.dataset(uri, "release").to_table().equals(contents[2])
    assert lance.dataset(uri).to_table().equals(contents[5])


def test_versions_branches_start_from_are_kept(uri):
    contents = history(uri)
    put(uri, f"{layout.BRANCHES_DIR}/dev.json", time.time(),
        json.dumps({"parentBranch": None, "parentVersion": 3, "createAt": 0, "manifestSize": 1}).encode())
    lance.cleanup_old_versions(uri, older_than=NOW)
    assert [v["version"] for v in lance.dataset(uri).versions()] == [3, 5]
    assert lance.dataset(uri, 3).to_table().equals(contents[3])


UNVERIFIED = [
    "data/orphan.lance",
    "data/.tmp-0011.lance-4f5e",
    "_deletions/7-3-123.arrow",
    "_transactions/9-orphan.txn",
    "_versions/.tmpAbC123",
    "_indices/1b4e28ba-2fa1-11d2-883f-0016d3cca427/page_data.lance",
    f"{layout.STAGING_DIR}/job-42/fragments-0.json",
]
NEVER = ["data/notes.txt", "data/sub/x.lance", "elsewhere/y.lance", "_versions/18446744073709551615.manifest-1b4e"]


def test_unverified_files_need_seven_days_or_delete_unverified(uri):
    history(uri)
    latest = commit_time(uri, 5)
    young = [put(uri, p.replace("orphan", "young"), latest - 3600) for p in UNVERIFIED]
    aged = [put(uri, p.replace("orphan", "aged").replace("job-42", "job-41").replace("9-", "8-")
                .replace(".tmpAbC123", ".tmpOld").replace("7-3", "6-3").replace("1b4e", "2c5f").replace("-4f5e", "-9"),
                latest - 8 * DAY) for p in UNVERIFIED]
    kept = [put(uri, p, latest - 30 * DAY) for p in NEVER]
    stats = lance.cleanup_old_versions(uri, older_than=NOW)
    files = set(tree(uri))
    assert set(aged) <= set(stats.files) and not set(aged) & files
    assert not os.path.exists(os.path.join(uri, layout.STAGING_DIR, "job-41"))  # emptied directories go too
    assert not os.path.exists(os.path.join(uri, "_indices", "2c5f28ba-2fa1-11d2-883f-0016d3cca427"))
    assert set(young) <= files and set(kept) <= files
    stats = lance.cleanup_old_versions(uri, older_than=NOW, delete_unverified=True)
    assert sorted(stats.files) == sorted(young)
    assert set(kept) <= set(tree(uri))


def test_files_newer_than_the_oldest_kept_version_survive_even_delete_unverified(uri):
    history(uri)
    oldest_kept = commit_time(uri, 4)
    in_flight = [put(uri, p, oldest_kept + 0.5) for p in UNVERIFIED]
    older = [put(uri, p.replace("orphan", "older").replace("job-42", "job-1"), oldest_kept - 5) for p in UNVERIFIED[:1]]
    stats = lance.cleanup_old_versions(uri, retain_versions=2, delete_unverified=True)
    files = set(tree(uri))
    assert set(in_flight) <= files
    assert set(older) <= set(stats.files) and not set(older) & files


def test_dry_run_deletes_nothing_and_lists_exactly_what_a_real_run_deletes(uri, tmp_path):
    history(uri)
    lance.dataset(uri).tags.create("keep", 3)
    latest = commit_time(uri, 5)
    for p in UNVERIFIED:
        put(uri, p, latest - 8 * DAY)
    copy = str(tmp_path / "copy.lance")
    shutil.copytree(uri, copy)  # copy2 keeps the mtimes
    before = tree(uri)
    dry = lance.cleanup_old_versions(uri, older_than=NOW, dry_run=True, error_if_tagged_old_versions=False)
    assert tree(uri) == before
    real = lance.cleanup_old_versions(copy, older_than=NOW, error_if_tagged_old_versions=False)
    assert dry.dry_run and dry.files and dry.files == real.files
    assert dataclasses.replace(dry, dry_run=False) == real
    assert set(before) - set(tree(copy)) == set(real.files)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"older_than": dt.timedelta(days=-1)},
        {"older_than": 5},
        {"retain_versions": 0},
        {"retain_versions": -2},
        {"retain_versions": True},
        {"retain_versions": 1.5},
    ],
)
def test_bad_policy_is_a_typed_error_and_deletes_nothing(uri, kwargs):
    history(uri)
    before = tree(uri)
    with pytest.raises(InvalidInputError):
        lance.cleanup_old_versions(uri, **kwargs)
    assert tree(uri) == before


def test_a_corrupt_manifest_stops_cleanup_before_anything_is_deleted(uri):
    history(uri)
    path = os.path.join(uri, layout.manifest_path(2, layout.ManifestNamingScheme.V2))
    with open(path, "r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        handle.write(b"XXXX")
    before = tree(uri)
    with pytest.raises(CorruptFileError):
        lance.cleanup_old_versions(uri, older_than=NOW)
    assert tree(uri) == before


def test_missing_dataset(tmp_path):
    with pytest.raises(DatasetNotFoundError):
        lance.cleanup_old_versions(str(tmp_path / "nothing.lance"))


def test_cleanup_after_compaction_reclaims_the_small_files(uri):
    lance.write_dataset(table(0, 200), uri, max_rows_per_file=10)
    lance.dataset(uri).delete("id < 15")
    expected = lance.dataset(uri).to_table()
    lance.compact_files(uri)
    stats = lance.cleanup_old_versions(uri, older_than=NOW)
    assert stats.data_files_removed == 20 and stats.deletion_files_removed == 1 and stats.old_versions == 2
    assert len(os.listdir(os.path.join(uri, "data"))) == 1
    assert lance.dataset(uri).to_table().equals(expected)
