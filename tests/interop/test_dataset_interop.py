"""Datasets written by us open in pylance and vice versa, with interleaved writers."""

from __future__ import annotations

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as ours


def _full(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    ids = np.arange(n, dtype=np.int64)
    score = pa.array(rng.normal(size=n), mask=rng.random(n) < 0.1)
    text = pa.array([f"row-{i}-é" if i % 7 else None for i in ids])
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4, dtype=np.float32)), 4)
    tags = pa.array([[f"t{j}" for j in range(i % 3)] if i % 11 else None for i in ids], pa.list_(pa.string()))
    return pa.table({"id": ids, "score": score, "text": text, "vec": vec, "tags": tags})


FULL = _full(4000)


def _table(start: int, n: int) -> pa.Table:
    return FULL.slice(start, n)


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


def test_pylance_reads_what_we_write(uri):
    expected = pa.concat_tables([_table(0, 2500), _table(2500, 100)])
    ours.write_dataset(_table(0, 2500), uri, max_rows_per_file=1000)
    ours.write_dataset(_table(2500, 100), uri, mode="append")
    theirs = pylance.dataset(uri)
    assert theirs.version == 2 and theirs.count_rows() == 2600
    assert theirs.to_table().equals(expected)
    assert theirs.schema.equals(expected.schema)
    assert theirs.to_table(columns=["text", "id"]).equals(expected.select(["text", "id"]))
    assert len(theirs.get_fragments()) == 4
    assert theirs.data_storage_version == "2.2"  # our default, as pylance 14


def test_we_read_what_pylance_writes(uri):
    expected = _table(0, 3000)
    pylance.write_dataset(expected, uri, data_storage_version="2.0", max_rows_per_file=1200)
    ds = ours.dataset(uri)
    assert ds.to_table().equals(expected)
    assert ds.schema.equals(expected.schema)
    assert ds.to_table(columns=["tags", "score"]).equals(expected.select(["tags", "score"]))
    assert ds.count_rows() == 3000 and len(ds.get_fragments()) == 3


def test_interleaved_appends_and_versions_agree(uri):
    ours.write_dataset(_table(0, 100), uri)
    pylance.write_dataset(_table(100, 100), uri, mode="append")
    ours.write_dataset(_table(200, 100), uri, mode="append")
    pylance.write_dataset(_table(300, 100), uri, mode="append")
    expected = _table(0, 400)
    assert _sorted(ours.dataset(uri).to_table()).equals(expected)
    assert _sorted(pylance.dataset(uri).to_table()).equals(expected)
    theirs = pylance.dataset(uri).versions()
    mine = ours.dataset(uri).versions()
    assert [v["version"] for v in mine] == [v["version"] for v in theirs] == [1, 2, 3, 4]
    assert [v["timestamp"] for v in mine] == [v["timestamp"] for v in theirs]
    for a, b in zip(mine, theirs):
        assert {k: a["metadata"][k] for k in b["metadata"]} == b["metadata"]
    assert [f.fragment_id for f in ours.dataset(uri).get_fragments()] == [0, 1, 2, 3]


def test_we_append_to_pylance_dataset_and_pylance_checks_out_old_versions(uri):
    pylance.write_dataset(_table(0, 50), uri, data_storage_version="2.0")
    ours.write_dataset(_table(50, 50), uri, mode="append")
    ours.write_dataset(_table(0, 10), uri, mode="overwrite")
    theirs = pylance.dataset(uri)
    assert theirs.version == 3 and theirs.to_table().equals(_table(0, 10))
    assert pylance.dataset(uri, version=2).to_table().equals(_table(0, 100))
    pylance.write_dataset(_table(10, 5), uri, mode="append")
    assert ours.dataset(uri).to_table().equals(_table(0, 15))


def test_pylance_commits_our_staged_fragments_json(uri):
    ours.write_dataset(_table(0, 10), uri)
    staged = ours.write_fragments(_table(10, 10), uri)
    fragments = [pylance.FragmentMetadata.from_json(__import__("json").dumps(f.to_json())) for f in staged]
    pylance.LanceDataset.commit(uri, pylance.LanceOperation.Append(fragments), read_version=1)
    assert ours.dataset(uri).to_table().equals(_table(0, 20))


def test_tags_are_shared(uri):
    ours.write_dataset(_table(0, 10), uri)
    ours.write_dataset(_table(10, 10), uri, mode="append")
    ours.dataset(uri).tags.create("first", 1)
    assert pylance.dataset(uri, version="first").count_rows() == 10
    pylance.dataset(uri).tags.create("second", 2)
    assert ours.dataset(uri, version="second").count_rows() == 20
    assert set(ours.dataset(uri).tags.list()) == {"first", "second"}


@pytest.mark.parametrize("legacy_names", [True])
def test_v1_named_dataset_is_read_and_appended_in_v1(uri, legacy_names):
    pylance.write_dataset(_table(0, 10), uri, data_storage_version="2.0", enable_v2_manifest_paths=not legacy_names)
    ours.write_dataset(_table(10, 10), uri, mode="append")
    import os

    names = sorted(os.listdir(os.path.join(uri, "_versions")))
    assert "1.manifest" in names and "2.manifest" in names
    assert pylance.dataset(uri).to_table().equals(_table(0, 20))
