"""``changes_between``: rows inserted/updated/deleted between two versions, against the difference
pylance's reads of the two versions show (no Spark).

The oracle: with stable row ids, pylance's ``_rowid`` of both versions (new ids inserted, same id
with other values updated, ids gone deleted); without, the rows' contents (the ``id`` column and
values are unique; an update changes values): rows of the new version whose content the base
version lacks are inserted, the base's rows the new version lacks are deleted. Compactions in
between (pylance's and ours) must not make old rows look new.
"""

from __future__ import annotations

import datetime
import pathlib
import sys

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as core
from airflow_lance.core.changes import changes_between
from airflow_lance.core.fragment_read import FragmentReader

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from change_cases import history as _history, oracle as _oracle, rows as _rows  # noqa: E402


def _read(uri: str, version: int, selections) -> list[dict]:
    ds = core.dataset(uri, version)
    reader = FragmentReader(ds, ["id", "v", "s"])
    by_id = {f.id: f for f in ds._fragments}
    tables = [reader.read(by_id[fid], offsets=offsets) for fid, offsets in selections.items()]
    rows = pa.concat_tables(tables).to_pylist() if tables else []
    return sorted(rows, key=lambda r: r["id"])


@pytest.mark.parametrize("compact_with", ["pylance", "core"])
@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable_row_ids"])
def test_changes_equal_pylance_difference(tmp_path, stable: bool, compact_with: str) -> None:
    uri = str(tmp_path / "ds.lance")
    _history(uri, stable=stable, compact_with=compact_with)
    latest = pylance.dataset(uri).version
    assert latest >= 10
    checked = 0
    for base in range(1, latest + 1):
        for version in range(base, latest + 1):
            changes = changes_between(core.dataset(uri, version), base)
            rows, inserted, updated, deleted = _oracle(uri, base, version, stable)
            assert (changes.inserted, changes.updated, changes.deleted) == (inserted, updated, deleted), \
                (base, version)
            assert _read(uri, version, changes.selections()) == rows, (base, version)
            checked += 1
    assert checked == latest * (latest + 1) // 2


def test_compacted_old_rows_are_not_new(tmp_path) -> None:
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_rows(0, 300), uri, max_rows_per_file=50)
    pylance.dataset(uri).delete("id % 3 = 0")
    pylance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    changes = changes_between(core.dataset(uri), 2)
    assert (changes.inserted, changes.updated, changes.deleted) == (0, 0, 0)
    assert changes.selections() == {}
    # rows appended after the base and compacted together with old ones: only they are new
    base = pylance.dataset(uri).version
    pylance.write_dataset(_rows(300, 7), uri, mode="append")
    pylance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    changes = changes_between(core.dataset(uri), base)
    assert (changes.inserted, changes.deleted) == (7, 0)
    (fragment_id, offsets), = changes.selections().items()
    assert offsets is not None and offsets.tolist() == list(range(200, 207))
    assert [r["id"] for r in _read(uri, changes.version, changes.selections())] == list(range(300, 307))


def test_overwrite_makes_every_row_new(tmp_path) -> None:
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_rows(0, 30), uri)
    pylance.write_dataset(_rows(5, 10), uri, mode="overwrite")
    changes = changes_between(core.dataset(uri), 1)
    assert (changes.inserted, changes.updated, changes.deleted) == (10, 0, 30)
    assert changes.counts() == {"base_version": 1, "version": 2, "inserted": 10, "updated": 0, "deleted": 30}


def test_bad_bases(tmp_path) -> None:
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_rows(0, 30), uri)
    pylance.write_dataset(_rows(30, 5), uri, mode="append")
    pylance.dataset(uri).tags.create("first", 1)
    assert changes_between(core.dataset(uri), "first").inserted == 5
    assert changes_between(core.dataset(uri), 2).selections() == {}
    with pytest.raises(core.InvalidInputError, match="after the version read"):
        changes_between(core.dataset(uri, 1), 2)
    with pytest.raises(core.VersionNotFoundError):
        changes_between(core.dataset(uri), 9)
    with pytest.raises(core.TagNotFoundError):
        changes_between(core.dataset(uri), "nope")
    with pytest.raises(core.InvalidInputError):
        changes_between(core.dataset(uri), 1.5)


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable_row_ids"])
def test_cleaned_up_versions(tmp_path, stable: bool) -> None:
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_rows(0, 30), uri, enable_stable_row_ids=stable)
    for start in (30, 40, 50):
        pylance.write_dataset(_rows(start, 10), uri, mode="append")
    pylance.dataset(uri).tags.create("kept", 2)
    core.dataset(uri).cleanup_old_versions(older_than=datetime.timedelta(0), retain_versions=1,
                                              error_if_tagged_old_versions=False)
    assert [v["version"] for v in core.dataset(uri).versions()] == [2, 4]  # the tagged one and the latest
    with pytest.raises(core.VersionNotFoundError):  # the base itself is gone
        changes_between(core.dataset(uri), 1)
    if stable:  # row ids and versions suffice: the versions in between are not needed
        assert changes_between(core.dataset(uri), "kept").counts()["inserted"] == 20
    else:
        with pytest.raises(core.VersionNotFoundError, match="version 3 .* is gone"):
            changes_between(core.dataset(uri), "kept")


def test_since_version_zero_is_every_row(tmp_path) -> None:
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_rows(0, 30), uri, max_rows_per_file=10)
    pylance.dataset(uri).delete("id < 10")  # a whole fragment goes
    changes = changes_between(core.dataset(uri), 0)
    assert changes.counts() == {"base_version": 0, "version": 2, "inserted": 20, "updated": 0, "deleted": 0}
    assert [r["id"] for r in _read(uri, 2, changes.selections())] == list(range(10, 30))


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable_row_ids"])
def test_restores_in_between(tmp_path, stable: bool) -> None:
    uri = str(tmp_path / "ds.lance")
    pylance.write_dataset(_rows(0, 40), uri, max_rows_per_file=10, enable_stable_row_ids=stable)  # v1
    pylance.write_dataset(_rows(40, 10), uri, mode="append")  # v2
    pylance.dataset(uri).delete("id < 25")  # v3
    pylance.write_dataset(_rows(50, 5), uri, mode="append")  # v4
    pylance.dataset(uri).update({"v": "v + 1"}, where="id % 5 = 0")  # v5
    pylance.dataset(uri, version=2).restore()  # v6 = v2 again: deleted rows back, the update undone
    pylance.dataset(uri, version=1).restore()  # v7 = v1 again
    pylance.dataset(uri, version=5).restore()  # v8 = v5 again
    latest = pylance.dataset(uri).version
    assert latest == 8
    for base in range(1, latest + 1):
        for version in range(base, latest + 1):
            changes = changes_between(core.dataset(uri, version), base)
            rows, inserted, updated, deleted = _oracle(uri, base, version, stable)
            assert (changes.inserted, changes.updated, changes.deleted) == (inserted, updated, deleted), \
                (base, version)
            assert _read(uri, version, changes.selections()) == rows, (base, version)
