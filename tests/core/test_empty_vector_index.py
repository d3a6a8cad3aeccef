"""Empty vector indices: pylance 14 commits an IVF index with no files on too few vectors.

``create_index(..., "IVF_PQ")`` on fewer than 256 vectors (any IVF type on none) does not raise in
pylance 14: it commits an ``IndexMetadata`` with no files, an empty fragment bitmap, the usual
details and ``index_version`` 1, ``dataset_version`` the version read. A later ``optimize_indices``
builds the full index over every fragment. Every operation of ours must work on such a dataset
(pylance's or ours), and our create/optimize must do the same as pylance on identical copies.
"""

from __future__ import annotations

import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance
from airflow_lance.core.indices.metadata import fragment_bitmap, user_indices

from .vector_checks import pylance_nearest_agrees

pytestmark = [pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")]

DIM = 8
VECTORS = np.random.default_rng(0).normal(size=(2000, DIM)).astype(np.float32)


def _table(start: int, stop: int) -> pa.Table:
    return pa.table({"id": np.arange(start, stop, dtype=np.int64),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(VECTORS[start:stop].reshape(-1)), DIM)})


def _entries(uri: str) -> list[tuple]:
    return [(i.name, [f.path for f in i.files], sorted(fragment_bitmap(i)), i.index_version, i.dataset_version,
             i.index_details.type_url, i.fragment_bitmap)
            for i in user_indices(lance.dataset(uri).manifest_file)]


def _pylance_queries_agree(uri: str) -> None:
    ds = pylance.dataset(uri)
    assert ds.to_table(filter="id >= 0").num_rows == ds.count_rows()
    pylance_nearest_agrees(uri, VECTORS[3])


@pytest.mark.parametrize(("kind", "rows"), [("IVF_PQ", 20), ("IVF_FLAT", 0)])
def test_our_operations_on_a_pylance_empty_vector_index(tmp_path, kind, rows):
    uri = str(tmp_path / "t")
    pylance.write_dataset(_table(0, rows), uri, max_rows_per_file=10)
    params = {"num_sub_vectors": 2} if kind == "IVF_PQ" else {}
    pylance.dataset(uri).create_index("vec", kind, **params)
    [entry] = _entries(uri)
    assert entry[1:5] == ([], [], 1, 1)

    ds = lance.dataset(uri)
    [listed] = ds.list_indices()
    assert listed["type"] == kind and len(listed["fragment_ids"]) == 0
    assert [d.num_rows_indexed for d in ds.describe_indices()] == \
        [d.num_rows_indexed for d in pylance.dataset(uri).describe_indices()] == [0]
    ds.insert(_table(rows, rows + 300))
    ds.delete("id % 7 = 0")
    ds.optimize.compact_files(target_rows_per_fragment=150)
    assert _entries(uri)[0][1:3] == ([], [])
    _pylance_queries_agree(uri)

    copy = str(tmp_path / "copy")
    shutil.copytree(uri, copy)
    lance.dataset(uri).optimize.optimize_indices()
    pylance.dataset(copy).optimize.optimize_indices()
    ours, theirs = _entries(uri), _entries(copy)
    assert [e[0:1] + e[2:6] for e in ours] == [e[0:1] + e[2:6] for e in theirs]
    assert sorted(ours[0][1]) == sorted(theirs[0][1]) == ["auxiliary.idx", "index.idx"]
    _pylance_queries_agree(uri)

    ds = lance.dataset(uri)
    ds.cleanup_old_versions(older_than=__import__("datetime").timedelta(0))
    _pylance_queries_agree(uri)
    assert pylance.dataset(uri).to_table().num_rows == lance.dataset(uri).count_rows()


def _details(uri: str) -> list:
    from airflow_lance.core._proto import index_pb2
    out = []
    for i in user_indices(lance.dataset(uri).manifest_file):
        details = index_pb2.VectorIndexDetails()
        details.ParseFromString(i.index_details.value)
        out.append(details)
    return out


@pytest.mark.parametrize(("kind", "rows", "added"), [
    ("IVF_PQ", 20, 300),  # too few to train PQ, then enough
    ("IVF_PQ", 10, 100),  # still too few after the append: optimize commits a new empty entry
    ("IVF_FLAT", 0, 300),  # no rows at all
    ("IVF_PQ", 0, 300),
])
def test_create_and_optimize_an_empty_vector_index_as_pylance(tmp_path, kind, rows, added):
    """The daily DAG: create the table and index with a few rows, append and optimize later."""
    uri, copy = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, rows), uri, max_rows_per_file=10)
    shutil.copytree(uri, copy)
    params = {"num_sub_vectors": 2} if kind == "IVF_PQ" else {}
    lance.dataset(uri).create_index("vec", kind, **params)
    pylance.dataset(copy).create_index("vec", kind, **params)
    ours, theirs = _entries(uri), _entries(copy)
    assert [e[:6] + (e[6],) for e in ours] == [e[:6] + (e[6],) for e in theirs]  # fragment bitmap bytes too
    assert _details(uri) == _details(copy)
    assert not (tmp_path / "ours" / "_indices").exists()
    assert [(i["name"], i["type"], i["version"]) for i in pylance.dataset(uri).list_indices()] == \
        [(i["name"], i["type"], i["version"]) for i in pylance.dataset(copy).list_indices()]
    with pytest.raises(lance.IndexExistsError):
        lance.dataset(uri).create_index("vec", kind, **params)

    for target in (uri, copy):
        pylance.write_dataset(_table(rows, rows + added), target, mode="append", max_rows_per_file=150)
    lance.dataset(uri).optimize.optimize_indices()
    pylance.dataset(copy).optimize.optimize_indices()
    ours, theirs = _entries(uri), _entries(copy)
    assert [e[:6] for e in ours] == [e[:6] for e in theirs]
    assert lance.dataset(uri).version == pylance.dataset(copy).version
    assert [d.num_rows_indexed for d in pylance.dataset(uri).describe_indices()] == \
        [d.num_rows_indexed for d in pylance.dataset(copy).describe_indices()]
    ours_stats = pylance.dataset(uri).stats.index_stats("vec_idx")
    theirs_stats = pylance.dataset(copy).stats.index_stats("vec_idx")
    assert ours_stats["num_indexed_rows"] == theirs_stats["num_indexed_rows"]
    assert [i.get("num_partitions") for i in ours_stats["indices"]] == \
        [i.get("num_partitions") for i in theirs_stats["indices"]]
    _pylance_queries_agree(uri)


def test_pq_on_enough_rows_but_too_few_vectors_is_empty_as_pylance(tmp_path):
    """300 live rows, 100 non-null vectors: pylance 14 commits the empty entry (IVF_FLAT on rows
    without any vector raises, tests/core/test_index_plan.py)."""
    table = _table(0, 300)
    vec = pc.if_else(pa.array(np.arange(300) >= 100), pa.nulls(300, table.schema.field("vec").type),
                     table.column("vec").combine_chunks())
    uri, copy = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(table.set_column(1, "vec", vec), uri, max_rows_per_file=100)
    shutil.copytree(uri, copy)
    lance.dataset(uri).create_index("vec", "IVF_PQ", num_sub_vectors=2)
    pylance.dataset(copy).create_index("vec", "IVF_PQ", num_sub_vectors=2)
    assert [e[1:] for e in _entries(uri)] == [e[1:] for e in _entries(copy)]
    assert _entries(uri)[0][1:3] == ([], [])
