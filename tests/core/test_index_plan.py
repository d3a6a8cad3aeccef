"""The index build in steps (what the Spark job distributes) equals the one-piece build, and
``check_index`` / ``build_index_uncommitted`` (the operator's local mode) refuse bad input before
writing and build what ``create_scalar_index`` / ``create_index`` commit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core._proto import index_pb2
from airflow_lance.core.indices import ivf
from airflow_lance.core.indices.plan import check_params


@pytest.mark.parametrize(("index_type", "metric"), [("IVF_PQ", "l2"), ("IVF_PQ", "dot"), ("IVF_FLAT", "cosine")])
def test_ivf_in_steps_equals_the_one_piece_build(index_type: str, metric: str) -> None:
    rng = np.random.default_rng(5)
    vectors = (rng.normal(size=(6, 8))[rng.integers(0, 6, 3000)] + rng.normal(size=(3000, 8))).astype(np.float32)
    row_ids = np.arange(3000, dtype=np.uint64) * 3
    params = ivf.VectorIndexParams(index_type, metric, 6, 4 if index_type == "IVF_PQ" else None, sample_rate=64,
                                   max_iters=10)
    whole = ivf.build(vectors, row_ids, params, np.random.default_rng(1))
    prepared = ivf.prepare(vectors, metric)
    model, _, _ = ivf.train(prepared, params, np.random.default_rng(1))
    parts = [ivf.encode(prepared[start:start + 700], model) for start in range(0, 3000, 700)]  # per "fragment"
    merged = ivf.EncodedPart(np.concatenate([p.labels for p in parts]), sum(p.loss for p in parts),
                             np.concatenate([p.values for p in parts]))
    steps = ivf.assemble(model, merged, row_ids)
    assert steps[ivf.AUXILIARY_NAME] == whole[ivf.AUXILIARY_NAME]
    ours, theirs = (index_pb2.IVF.FromString(files[ivf.INDEX_NAME].global_buffers[0]) for files in (steps, whole))
    assert ours.centroids_tensor == theirs.centroids_tensor
    assert ours.loss == pytest.approx(theirs.loss, rel=1e-9)
    assert steps[ivf.INDEX_NAME].table == whole[ivf.INDEX_NAME].table


def _dataset(uri: str) -> lance.LanceDataset:
    rng = np.random.default_rng(0)
    table = pa.table({"id": pa.array(rng.permutation(1200)), "label": [f"l{i % 5}" for i in range(1200)],
                      "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=1200 * 8), pa.float32()), 8)})
    ds = lance.write_dataset(table, uri, max_rows_per_file=400)
    ds.delete("id % 10 = 3")
    return lance.dataset(uri)


@pytest.mark.parametrize(("column", "index_type", "kwargs", "error", "words"), [
    ("id", "HNSW", {}, lance.UnsupportedFeatureError, "unknown index type"),
    ("nope", "BTREE", {}, lance.ColumnNotFoundError, "nope"),
    ("vec", "BITMAP", {}, lance.InvalidTypeError, "vec"),
    ("label", "IVF_PQ", {}, lance.InvalidTypeError, "label"),
    ("id", "BTREE", {"num_partitions": 4}, lance.InvalidInputError, "vector indices only"),
    ("vec", "IVF_PQ", {"num_sub_vectors": 3}, lance.InvalidInputError, "divisible"),
])
def test_check_index_refuses_bad_input(uri: str, column: str, index_type: str, kwargs: dict, error: type,
                                       words: str) -> None:
    ds = _dataset(uri)
    with pytest.raises(error, match=words):
        lance.check_index(ds, column, index_type, **kwargs)


def test_check_index_refuses_a_taken_name_without_replace(uri: str) -> None:
    ds = _dataset(uri)
    ds.create_scalar_index("id", "BTREE")
    with pytest.raises(lance.IndexExistsError, match="id_idx"):
        lance.check_index(ds, "id", "BTREE")
    assert [i.name for i in lance.check_index(ds, "id", "BTREE", replace=True).removed] == ["id_idx"]


def test_build_index_uncommitted_writes_what_create_scalar_index_commits(uri: str, tmp_path) -> None:
    ds = _dataset(uri)
    checked = lance.check_index(ds, "id", "BTREE")
    index, rows = lance.build_index_uncommitted(ds, checked)
    assert rows == ds.count_rows() and lance.missing_index_files(ds, index) == []
    assert lance.decode_index(lance.encode_index(index)) == index
    assert ds.version == 2  # nothing committed
    committed = lance.LanceDataset.commit(uri, lance.LanceOperation.CreateIndex(new_indices=[index]), ds.version)
    other = _dataset(str(tmp_path / "other"))
    other.create_scalar_index("id", "BTREE")
    ours, theirs = (d.describe_indices()[0] for d in (committed, other))
    assert (ours.name, ours.index_type, ours.num_rows_indexed) == (theirs.name, theirs.index_type,
                                                                   theirs.num_rows_indexed)
    assert lance.index_uuid(index) == ours.segments[0].uuid
    assert committed.to_table(filter="id < 50").num_rows == ds.to_table(filter="id < 50").num_rows


def test_check_index_refuses_rows_without_a_vector_before_anything_runs(uri: str) -> None:
    """Live rows whose vectors are all null cannot train IVF: ``check_index`` (the operator's check
    in both modes, and the Spark job's ``check_params``) raises the local build's typed error before
    anything is written. Too few vectors for PQ are no error: pylance 14 and we commit an empty
    index (tests/core/test_empty_vector_index.py)."""
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(20 * 8), pa.float32()), 8)
    table = pa.table({"id": pa.array(np.arange(20)), "vec": pa.nulls(20, vec.type)})
    ds = lance.write_dataset(table, uri)
    with pytest.raises(lance.InvalidInputError) as local:
        ds.create_index("vec", "IVF_FLAT")
    for check in (lambda: lance.check_index(ds, "vec", "IVF_FLAT"),
                  lambda: check_params(ds, {"column": "vec", "index_type": "IVF_FLAT"})):
        with pytest.raises(lance.InvalidInputError) as early:
            check()
        assert isinstance(early.value, ValueError) and str(early.value) == str(local.value)
    assert "no non-null, finite vectors" in str(local.value)
    assert lance.check_index(ds, "vec", "IVF_PQ", num_sub_vectors=2).vector.index_type == "IVF_PQ"  # empty index
    assert lance.dataset(uri).version == ds.version and not (lance.dataset(uri).list_indices())
