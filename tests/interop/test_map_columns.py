"""Map columns, which pylance 14 writes in 2.2 files (a list of (key, value) entries, logical type
``map``): before, a dataset with one could not even be opened here ("field 'm' of type 'map' cannot
have children"). pylance 14 is the oracle, both ways."""

from __future__ import annotations

import os

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours

NESTED = pa.list_(pa.struct([("x", pa.map_(pa.string(), pa.float64()))]))


def _table(start: int, rows: int) -> pa.Table:
    ids = range(start, start + rows)
    maps = [None if i % 7 == 3 else [(f"k{j}", None if (i + j) % 5 == 0 else i * 10 + j) for j in range(i % 4)]
            for i in ids]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "m": pa.array(maps, pa.map_(pa.string(), pa.int32())),  # null maps, empty maps, null values
        "by_number": pa.array([{i: f"v{i}"} for i in ids], pa.map_(pa.int64(), pa.string())),
        "nested": pa.array([[{"x": [("a", float(i))] * (i % 2)}] if i % 3 else [] for i in ids], NESTED),
    })


def _fields(uri: str) -> list[tuple]:
    return [(f.name, f.parent_id, f.logical_type, f.nullable) for f in ours.dataset(uri).manifest_file.manifest.fields]


def test_we_read_and_write_maps_as_pylance(tmp_path):
    table = _table(0, 3000)
    theirs, mine = str(tmp_path / "theirs"), str(tmp_path / "ours")
    pylance.write_dataset(table, theirs, max_rows_per_file=1000)
    ours.write_dataset(table, mine, max_rows_per_file=1000)
    expected = pylance.dataset(theirs).to_table()
    assert expected.equals(table)
    assert ours.dataset(theirs).to_table().equals(table)
    taken = np.array([0, 1, 3, 999, 1000, 2999])
    assert ours.dataset(theirs).take(taken).equals(table.take(taken))
    assert ours.dataset(theirs).to_table(columns=["m", "id"], filter="id >= 1500").equals(
        table.select(["m", "id"]).slice(1500))
    assert pylance.dataset(mine).to_table().equals(table)
    assert _fields(mine) == _fields(theirs)  # map > entries (not null) > key (not null), value


def test_we_modify_pylances_dataset_with_maps(tmp_path):
    uri = str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, 300), uri, max_rows_per_file=100)
    ours.write_dataset(_table(300, 50), uri, mode="append")
    ours.dataset(uri).delete("id % 11 = 0")
    ours.dataset(uri).update({"id": "id + 10000"}, where="id = 1")
    changed = _table(340, 20)
    ours.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(changed)
    assert ours.dataset(uri).optimize.compact_files().fragments_removed > 1
    rows = {row["id"]: row for row in _table(0, 350).to_pylist() if row["id"] % 11}
    rows[10001] = {**rows.pop(1), "id": 10001}
    rows.update((row["id"], row) for row in changed.to_pylist())
    expected = [rows[key] for key in sorted(rows)]
    got = pylance.dataset(uri).to_table().sort_by("id")
    assert got.to_pylist() == expected
    assert ours.dataset(uri).to_table().sort_by("id").equals(got)


@pytest.mark.parametrize("version", ["legacy", "2.0", "2.1"])
def test_maps_before_2_2_are_refused_before_writing(tmp_path, version):
    """pylance writes maps from 2.2 on (it fails on them in 2.0 and 2.1)."""
    uri = str(tmp_path / "old")
    with pytest.raises(ours.UnsupportedFeatureError, match="map"):
        ours.write_dataset(_table(0, 10), uri, data_storage_version=version)
    assert not os.path.exists(os.path.join(uri, "_versions"))
