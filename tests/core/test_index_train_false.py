"""``train=False``: pylance 14's ``create_scalar_index`` / ``create_index`` commit an *empty* index.

A BTREE, BITMAP or LABEL_LIST is written over no rows (its files, an empty fragment bitmap); an
IVF_FLAT / IVF_PQ entry has no files (as on a dataset without rows). Every fragment stays
unindexed until ``optimize_indices`` builds the index over them. pylance 14 is the oracle, on
identical copies: the entries and decoded files equal its own, before and after optimize, and
each side keeps working over the other's (queries equal full scans, compaction, cleanup).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import uuid

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core._proto import index_pb2
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.indices.metadata import fragment_bitmap, user_indices

from .vector_checks import pylance_nearest_agrees

pytestmark = pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")

SCALAR = [("BTREE", "id", "id >= 590 AND id < 640"), ("BITMAP", "k", "k = 3"),
          ("LABEL_LIST", "tags", "array_has_any(tags, [2])")]
DIM = 8
VECTORS = np.random.default_rng(0).normal(size=(1200, DIM)).astype(np.float32)


def _chunk(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({
        "id": ids,
        "k": pa.array(ids % 13, pa.int64(), mask=ids % 17 == 0),
        "tags": pa.array([[int(v % 7), int(v % 11)] if v % 23 else None for v in ids], pa.list_(pa.int64())),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(VECTORS[start:start + n].reshape(-1)), DIM),
    })


def _copies(tmp_path, rows: int = 800, stable: bool = False) -> tuple[str, str]:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_chunk(0, rows), ours, max_rows_per_file=400, enable_stable_row_ids=stable)
    shutil.copytree(ours, theirs)
    return ours, theirs


def _entries(uri: str) -> list[tuple]:
    """Each index entry as pylance would compare it (uuid and created_at aside); vector details decoded
    (their runtime hints are a map: its order is not fixed)."""
    out = []
    for i in user_indices(lance.dataset(uri).manifest_file):
        details: object = i.index_details.value
        if i.index_details.type_url.endswith("VectorIndexDetails"):
            details = index_pb2.VectorIndexDetails.FromString(i.index_details.value)
        out.append((i.name, list(i.fields), i.fragment_bitmap, i.index_version, i.dataset_version,
                    i.index_details.type_url, details, [(f.path, f.size_bytes) for f in i.files]))
    return out


def _files(uri: str) -> dict[str, tuple[pa.Table, dict]]:
    """Every index file decoded: its rows in a fixed order and its schema metadata."""
    out = {}
    for i in user_indices(lance.dataset(uri).manifest_file):
        folder = os.path.join(uri, "_indices", str(uuid.UUID(bytes=i.uuid.uuid)))
        for f in i.files:
            path = os.path.join(folder, f.path)
            table = LanceFileReader(pa.OSFile(path), path=path).read()
            key = [(c, "ascending") for c in table.schema.names if c != "bitmaps"]
            out[f"{i.name}/{f.path}"] = (table.replace_schema_metadata().sort_by(key), table.schema.metadata)
    return out


def _described(uri: str) -> list[tuple]:
    return [(d.name, d.type_url, d.num_rows_indexed, len(d.segments), d.total_size_bytes)
            for d in pylance.dataset(uri).describe_indices()]


def _scalar_queries_agree(uri: str, query: str, indexed: bool) -> None:
    ds = pylance.dataset(uri)
    got = ds.to_table(filter=query).sort_by("id")
    assert got.equals(ds.to_table(filter=query, use_scalar_index=False).sort_by("id")) and got.num_rows
    assert ("ScalarIndexQuery" in ds.scanner(filter=query).explain_plan()) == indexed


@pytest.mark.parametrize(("kind", "column", "query"), SCALAR)
def test_scalar_train_false_and_optimize_as_pylance(tmp_path, kind, column, query):
    ours, theirs = _copies(tmp_path)
    lance.dataset(ours).create_scalar_index(column, kind, train=False)
    pylance.dataset(theirs).create_scalar_index(column, kind, train=False)
    assert _entries(ours) == _entries(theirs)
    [entry] = _entries(ours)
    assert len(fragment_bitmap(user_indices(lance.dataset(ours).manifest_file)[0])) == 0 and entry[7]
    assert _files(ours) == _files(theirs)
    assert _described(ours) == _described(theirs) and _described(ours)[0][2:4] == (0, 1)
    assert [(d.name, d.type_url, d.num_rows_indexed, len(d.segments), d.total_size_bytes)
            for d in lance.dataset(ours).describe_indices()] == _described(theirs)
    _scalar_queries_agree(ours, query, indexed=False)

    for uri in (ours, theirs):
        pylance.write_dataset(_chunk(800, 300), uri, mode="append")
    lance.dataset(ours).optimize.optimize_indices()
    pylance.dataset(theirs).optimize.optimize_indices()
    assert [e[:6] for e in _entries(ours)] == [e[:6] for e in _entries(theirs)]
    assert sorted(fragment_bitmap(user_indices(lance.dataset(ours).manifest_file)[0])) == [0, 1, 2]
    mine, pylances = _files(ours), _files(theirs)
    assert mine.keys() == pylances.keys()
    for name, (table, metadata) in mine.items():
        if name.endswith("bitmap_page_lookup.lance"):  # bitmaps compared through queries, keys as they are
            assert table.column("keys").equals(pylances[name][0].column("keys")) and metadata == pylances[name][1]
        else:
            assert (table, metadata) == pylances[name], name
    assert [d[:4] for d in _described(ours)] == [d[:4] for d in _described(theirs)] == \
        [(f"{column}_idx", entry[5], 1100, 1)]
    _scalar_queries_agree(ours, query, indexed=True)


def test_btree_train_false_with_stable_row_ids_and_replace(tmp_path):
    """index_version 1 with stable row ids, as pylance; train=False replaces a built index."""
    ours, theirs = _copies(tmp_path, stable=True)
    for uri, module in ((ours, lance), (theirs, pylance)):
        module.dataset(uri).create_scalar_index("id", "BTREE")
        module.dataset(uri).create_scalar_index("id", "BTREE", train=False)
    assert _entries(ours) == _entries(theirs) and _entries(ours)[0][3] == 1
    assert _files(ours) == _files(theirs)
    assert lance.dataset(ours).version == pylance.dataset(theirs).version == 3


def test_each_side_maintains_the_others_empty_scalar_index(tmp_path):
    """pylance's train=False indices under our compaction, optimize and cleanup; pylance's optimize
    over ours."""
    ours, theirs = _copies(tmp_path)
    pylance.dataset(ours).create_scalar_index("id", "BTREE", train=False)
    pylance.dataset(ours).create_scalar_index("k", "BITMAP", train=False)
    lance.dataset(theirs).create_scalar_index("id", "BTREE", train=False)
    lance.dataset(theirs).create_scalar_index("k", "BITMAP", train=False)
    copy = str(tmp_path / "copy")
    shutil.copytree(ours, copy)

    lance.dataset(ours).delete("id % 10 = 3")
    pylance.dataset(copy).delete("id % 10 = 3")
    lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=10_000)
    pylance.dataset(copy).optimize.compact_files(target_rows_per_fragment=10_000)
    assert _entries(ours) == _entries(copy)  # the empty indices stay as they are
    assert [f.fragment_id for f in pylance.dataset(ours).get_fragments()] == [2]
    lance.dataset(ours).cleanup_old_versions(older_than=dt.timedelta(0))
    _scalar_queries_agree(ours, "id >= 590 AND id < 640", indexed=False)
    built_on = [lance.dataset(ours).version, pylance.dataset(copy).version]  # our compaction makes no
    lance.dataset(ours).optimize.optimize_indices()  # ReserveFragments version, pylance's does
    pylance.dataset(copy).optimize.optimize_indices()
    assert [e[:4] + e[5:6] for e in _entries(ours)] == [e[:4] + e[5:6] for e in _entries(copy)]
    assert [[e[4] for e in _entries(uri)] for uri in (ours, copy)] == [[v, v] for v in built_on]
    for query in ("id >= 590 AND id < 640", "k = 3"):
        _scalar_queries_agree(ours, query, indexed=True)

    pylance.dataset(theirs).optimize.optimize_indices()  # pylance builds over our empty indices
    assert [d[2] for d in _described(theirs)] == [800, 800]
    for query in ("id >= 590 AND id < 640", "k = 3"):
        _scalar_queries_agree(theirs, query, indexed=True)


@pytest.mark.parametrize(("kind", "params"), [("IVF_FLAT", {"num_partitions": 2}),
                                              ("IVF_PQ", {"num_partitions": 2, "num_sub_vectors": 2})])
def test_vector_train_false_and_optimize_as_pylance(tmp_path, kind, params):
    """800 rows (enough to train): with train=False no row is read, the entry has no files."""
    ours, theirs = _copies(tmp_path)
    lance.dataset(ours).create_index("vec", kind, train=False, **params)
    pylance.dataset(theirs).create_index("vec", kind, train=False, **params)
    assert _entries(ours) == _entries(theirs)
    assert _entries(ours)[0][7] == [] and not os.path.exists(os.path.join(ours, "_indices"))
    assert _described(ours) == _described(theirs)
    assert [(d.name, d.type_url, d.num_rows_indexed, len(d.segments), d.total_size_bytes)
            for d in lance.dataset(ours).describe_indices()] == _described(theirs)
    pylance_nearest_agrees(ours, VECTORS[3])

    for uri in (ours, theirs):
        pylance.write_dataset(_chunk(800, 300), uri, mode="append")
    lance.dataset(ours).optimize.optimize_indices()
    pylance.dataset(theirs).optimize.optimize_indices()
    assert [e[:7] for e in _entries(ours)] == [e[:7] for e in _entries(theirs)]
    assert [p for p, _ in _entries(ours)[0][7]] == ["auxiliary.idx", "index.idx"]
    assert [d[:4] for d in _described(ours)] == [d[:4] for d in _described(theirs)]
    assert _described(ours)[0][2] == 1100
    pylance_nearest_agrees(ours, VECTORS[3])


def test_vector_train_false_checks_as_pylance(tmp_path):
    """Parameters are still checked (same error types as pylance, nothing written); the rows are
    not read, so rows without vectors or a num_partitions of 0 are no error."""
    ours, theirs = _copies(tmp_path, rows=300)
    for uri, module in ((ours, lance), (theirs, pylance)):
        with pytest.raises(ValueError, match="divisible by num_sub_vectors"):
            module.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=3, train=False)
        with pytest.raises(ValueError, match="Metric foo not supported"):
            module.dataset(uri).create_index("vec", "IVF_FLAT", metric="foo", train=False)
        with pytest.raises(TypeError, match="must be FixedSizeListArray"):
            module.dataset(uri).create_index("id", "IVF_FLAT", train=False)
        with pytest.raises(TypeError, match="LABEL_LIST index column id must be a list"):
            module.dataset(uri).create_scalar_index("id", "LABEL_LIST", train=False)
        assert pylance.dataset(uri).version == 1 and not os.path.exists(os.path.join(uri, "_indices"))
    with pytest.raises(lance.InvalidInputError):
        lance.dataset(ours).create_index("vec", "IVF_PQ", num_partitions=2, num_sub_vectors=3, train=False)
    with pytest.raises(lance.InvalidTypeError, match="train must be a bool"):
        lance.dataset(ours).create_scalar_index("id", train="no")

    for uri, module in ((ours, lance), (theirs, pylance)):  # all vectors null: empty, no error
        module.dataset(uri).update({"vec": "NULL"}, where="id >= 0")
        module.dataset(uri).create_index("vec", "IVF_FLAT", num_partitions=0, train=False)
    assert _entries(ours) == _entries(theirs)


@pytest.mark.parametrize(("kind", "params"), [("IVF_FLAT", {"num_partitions": 2}),
                                              ("IVF_PQ", {"num_partitions": 2, "num_sub_vectors": 2})])
def test_vector_train_false_with_sample_rate_zero_as_pylance(tmp_path, kind, params):
    """pylance 14 takes ``sample_rate=0`` / ``max_iters=0`` without training (recorded in the
    details' runtime hints, nothing read) and refuses them where it would train: a build, and
    optimize_indices building that empty index later (pylance: an OSError; ours InvalidInputError)."""
    ours, theirs = _copies(tmp_path, rows=300)
    zero = {"sample_rate": 0, "max_iters": 0}
    for uri, module in ((ours, lance), (theirs, pylance)):
        with pytest.raises(ValueError, match="sample_rate must be positive and max_iters must be in 1"):
            module.dataset(uri).create_index("vec", kind, **params, **zero)
        module.dataset(uri).create_index("vec", kind, train=False, **params, sample_rate=0)
    assert _entries(ours) == _entries(theirs) and not os.path.exists(os.path.join(ours, "_indices"))
    hints = _entries(ours)[0][6].runtime_hints
    assert (hints["lance.ivf.sample_rate"], hints["lance.ivf.max_iters"]) == ("0", "50")
    pylance_nearest_agrees(ours, VECTORS[3])
    for uri in (ours, theirs):
        pylance.write_dataset(_chunk(300, 100), uri, mode="append")
    with pytest.raises(lance.InvalidInputError, match="got sample_rate=0 and max_iters=50"):
        lance.dataset(ours).optimize_indices()
    with pytest.raises(OSError, match="got sample_rate=0 and max_iters=50"):
        pylance.dataset(theirs).optimize.optimize_indices()
    assert lance.dataset(ours).version == pylance.dataset(theirs).version == 3
    few = _copies(tmp_path / "few", rows=200)
    for uri, module in zip(few, (lance, pylance)):  # nothing to train (IVF_PQ: under 256 vectors): taken
        if kind == "IVF_PQ":
            module.dataset(uri).create_index("vec", kind, **params, **zero)
        else:
            with pytest.raises(ValueError, match="sample_rate must be positive"):
                module.dataset(uri).create_index("vec", kind, **params, **zero)
    assert _entries(few[0]) == _entries(few[1])
    with pytest.raises(lance.InvalidInputError, match="sample_rate must be a non-negative integer"):
        lance.dataset(ours).create_index("vec", kind, train=False, replace=True, **params, sample_rate=-1)


@pytest.mark.parametrize(("column", "kind", "params"), [("k", "BITMAP", {}),
                                                        ("vec", "IVF_PQ", {"num_sub_vectors": 2})])
def test_check_index_and_uncommitted_build_without_training(tmp_path, column, kind, params):
    """The operator's path (check_index, builds_empty_index, build_index_uncommitted; the Spark job's
    check_params) gives the entry create gives, in place of a build."""
    from airflow_lance.core.indices.plan import check_params

    ours, theirs = _copies(tmp_path, rows=300)
    ds = lance.dataset(ours)
    checked = lance.check_index(ds, column, kind, train=False, **params)
    assert lance.builds_empty_index(ds, checked) and check_params(ds, {
        "column": column, "index_type": kind, "train": False, **params}).train is False
    assert not lance.builds_empty_index(ds, lance.check_index(ds, column, kind, **params))
    index, rows = lance.build_index_uncommitted(ds, checked)
    assert rows == 0
    lance.LanceDataset.commit(ours, lance.LanceOperation.CreateIndex(new_indices=[index]), read_version=ds.version)
    getattr(pylance.dataset(theirs), "create_index" if kind == "IVF_PQ" else "create_scalar_index")(
        column, kind, train=False, **params)
    assert _entries(ours) == _entries(theirs) and _files(ours) == _files(theirs)
