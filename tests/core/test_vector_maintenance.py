"""Vector index maintenance: compaction remaps IVF_FLAT/IVF_PQ, optimize_indices folds new rows in.

pylance 14 is the oracle: the same compaction or optimize_indices run by pylance on a copy of
the dataset writes the same index contents (row ids, vectors or PQ codes, partitions, centroids,
codebook, manifest entry) as ours; after our deletes, appends, optimize_indices, compaction (with
and without stable row ids) and cleanup, pylance's vector queries go through the index (no flat
search over unindexed fragments) and, over every partition, IVF_FLAT returns the exact kNN ids;
pylance keeps compacting and optimizing after us.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as lance
from airflow_lance.core._proto import index_pb2
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.indices import btree, ivf, remap, vector_remap
from airflow_lance.core.indices.metadata import fragment_bitmap, index_uuid, user_indices
from airflow_lance.core.indices.vector_optimize import _load

pytestmark = [pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")]

DIM = 16
K = 10


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    """Gaussian blobs, not normalized (l2, cosine and dot rank differently)."""
    centers = np.random.default_rng(100).normal(size=(12, DIM)) * 3
    rng = np.random.default_rng(seed)
    return (centers[rng.integers(0, 12, n)] + rng.normal(size=(n, DIM))).astype(np.float32)


VECTORS = _vectors(6000)


def _table(start: int, stop: int, dtype: str = "float32") -> pa.Table:
    vectors = VECTORS[start:stop].astype(dtype)
    return pa.table({"id": np.arange(start, stop, dtype=np.int64),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM)})


def _params(kind: str, partitions: int) -> dict:
    return {"num_partitions": partitions} | ({"num_sub_vectors": 4} if kind == "IVF_PQ" else {})


def _segments(uri: str) -> list[tuple]:
    """Per segment: manifest entry facts and the decoded files (PQ codes untransposed)."""
    ds = lance.dataset(uri)
    out = []
    for index in user_indices(ds.manifest_file):
        if index.index_details.type_url != ivf.TYPE_URL:
            continue
        s = _load(ds.store, index)
        out.append((index.name, index.dataset_version, sorted(fragment_bitmap(index)), index.index_version,
                    index.index_details.value, s.labels.tolist(), s.ids.tolist(), s.payload.tobytes(),
                    s.centroids.tobytes(), s.aux_buffers[1:], s.aux_metadata, s.index_metadata))
    return out


def _live(uri: str) -> np.ndarray:
    return np.sort(pylance.dataset(uri).to_table(columns=["id"])["id"].to_numpy())


def _knn(uri: str, q: np.ndarray, metric: str, nprobes: int) -> np.ndarray:
    return pylance.dataset(uri).to_table(
        nearest={"column": "vec", "q": q, "k": K, "nprobes": nprobes, "metric": metric}, columns=["id"]
    )["id"].to_numpy()


def _exact(live: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    x = VECTORS[live].astype(np.float64)
    q = q.astype(np.float64)
    if metric == "l2":
        d = ((x - q) ** 2).sum(1)
    elif metric == "cosine":
        d = 1 - x @ q / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
    else:
        d = -(x @ q)
    return live[np.argsort(d, kind="stable")[:K]]


def _recall(uri: str, metric: str, nprobes: int, queries: np.ndarray) -> float:
    live = _live(uri)
    return float(np.mean([len(set(_knn(uri, q, metric, nprobes)) & set(_exact(live, q, metric))) / K
                          for q in queries]))


def _uses_index(uri: str, metric: str, q: np.ndarray = VECTORS[1]) -> bool:
    plan = pylance.dataset(uri).scanner(nearest={"column": "vec", "q": q, "k": K, "metric": metric}
                                        ).explain_plan()
    return "ANNIvfPartition" in plan and "KNNVectorDistance" not in plan  # no flat search over unindexed rows


def _check_exact(uri: str, metric: str, partitions: int) -> None:
    """IVF_FLAT over every partition returns the exact kNN of the live rows."""
    live = _live(uri)
    for q in _vectors(8, seed=5):
        assert _knn(uri, q, metric, partitions).tolist() == _exact(live, q, metric).tolist()


def _indexed(uri: str, kind: str, metric: str, stable: bool, builder: str, partitions: int = 4,
             rows: int = 2400) -> None:
    pylance.write_dataset(_table(0, rows), uri, max_rows_per_file=rows // 4, enable_stable_row_ids=stable)
    opened = lance.dataset if builder == "ours" else pylance.dataset
    opened(uri).create_index("vec", kind, metric=metric, **_params(kind, partitions))
    lance.dataset(uri).delete("id % 7 = 0")  # our delete: the index still lists these rows


COMPACTIONS = [("IVF_FLAT", "l2", False, "ours"), ("IVF_PQ", "l2", False, "pylance"),
               ("IVF_FLAT", "cosine", True, "pylance"), ("IVF_PQ", "dot", True, "ours"),
               # pylance's IVF_SQ (we do not build it): remapped too since December 2026, before left alone
               ("IVF_SQ", "l2", False, "pylance"), ("IVF_SQ", "cosine", True, "pylance")]


@pytest.mark.parametrize(("kind", "metric", "stable", "builder"), COMPACTIONS)
def test_compaction_remaps_vector_indices_as_pylance(tmp_path, kind, metric, stable, builder):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _indexed(ours, kind, metric, stable, builder)
    shutil.copytree(ours, theirs)
    queries = _vectors(20, seed=3)
    before = _recall(ours, metric, 4, queries)
    [old] = lance.dataset(ours).list_indices()
    metrics = lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=100_000)
    pylance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100_000)
    assert (metrics.fragments_removed, metrics.fragments_added, metrics.fragments_skipped_indexed) == (4, 1, 0)
    [new] = lance.dataset(ours).list_indices()
    [expected] = lance.dataset(theirs).list_indices()
    assert set(new["fragment_ids"]) == set(expected["fragment_ids"]) == {
        f.fragment_id for f in lance.dataset(ours).get_fragments()}
    # without stable row ids a new index (new uuid, rows remapped, deleted ones dropped); with
    # them the index holds stable row ids: same uuid, only the fragment bitmap moves
    assert (new["uuid"] == old["uuid"]) is stable and (expected["uuid"] == old["uuid"]) is stable
    assert _segments(ours) == _segments(theirs)
    if not stable:
        txn = lance.dataset(ours).read_transaction().operation
        [rewritten] = txn.rewritten_indices
        assert (rewritten.old_id, rewritten.new_id) == (old["uuid"], new["uuid"])
        assert sorted(f.path for f in rewritten.new_index_files) == ["auxiliary.idx", "index.idx"]
        assert len(_segments(ours)[0][6]) == len(_live(ours))  # deleted rows left the index
    assert _uses_index(ours, metric)
    if kind == "IVF_FLAT" and not stable:
        _check_exact(ours, metric, 4)
    for q in queries:  # the same index: the same answers as after pylance's compaction
        assert _knn(ours, q, metric, 4).tolist() == _knn(theirs, q, metric, 4).tolist()
    if not stable:  # stable row ids: the index keeps the ids of rows deleted before the compaction
        # and pylance 14 (its own compaction too, see above) then returns fewer than k rows
        assert _recall(ours, metric, 4, queries) >= before - 0.02
    # pylance keeps maintaining it: appends, its optimize_indices and compaction after ours
    lance.write_dataset(_table(2400, 2700), ours, mode="append")
    pylance.dataset(ours).optimize.optimize_indices()
    lance.dataset(ours).delete("id % 11 = 0")
    pylance.dataset(ours).optimize.compact_files(target_rows_per_fragment=100_000)
    assert _uses_index(ours, metric)
    if kind == "IVF_FLAT" and not stable:
        _check_exact(ours, metric, 4)


OPTIMIZES = [("IVF_FLAT", "l2", "ours", None, False), ("IVF_FLAT", "cosine", "pylance", 1, True),
             ("IVF_PQ", "l2", "pylance", 0, False), ("IVF_PQ", "dot", "ours", 1, False),
             ("IVF_PQ", "cosine", "pylance", None, True)]


@pytest.mark.parametrize(("kind", "metric", "builder", "merge", "stable"), OPTIMIZES)
def test_optimize_indices_folds_new_rows_in_as_pylance(tmp_path, kind, metric, builder, merge, stable):
    """Two appends folded in: with 0 a delta segment, with 1 one merged segment, by default a delta
    or, where partitions hold under a quarter of the target size (IVF_FLAT 1024, IVF_PQ 2048 rows
    with the added ones), those partitions joined into the others and all segments merged; the
    same rows, partitions, vectors or codes, centroids, codebook and manifest entry as pylance's."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    partitions = 4 if merge is None else 2
    _indexed(ours, kind, metric, stable, builder, partitions=partitions, rows=4000)
    queries = _vectors(40, seed=4)
    before = _recall(ours, metric, partitions, queries)  # the index alone, before the appends
    lance.dataset(ours).insert(_table(4000, 4300))
    lance.dataset(ours).insert(_table(4300, 4500))
    shutil.copytree(ours, theirs)
    assert not _uses_index(ours, metric)  # the appended rows are searched flat
    lance.dataset(ours).optimize_indices(num_indices_to_merge=merge)
    pylance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=merge)
    mine, pylances = _segments(ours), _segments(theirs)
    if merge is not None:
        assert len(mine) == (1 if merge else 2)
    elif kind == "IVF_PQ":  # 4 x ~1100 rows < 2048: partitions joined down to one, one segment
        assert len(mine) == 1 and len(mine[0][8]) == 4 * DIM
    assert mine == pylances
    assert _uses_index(ours, metric)
    if kind == "IVF_FLAT" and not stable:
        _check_exact(ours, metric, partitions)
    recall = _recall(ours, metric, partitions, queries)
    assert recall == _recall(theirs, metric, partitions, queries)
    # pylance 14 PQ-encodes the rows it adds to a dot index by inner product, and re-encodes the
    # rows of joined partitions against farther centroids: its recall drops there, ours equally
    if metric != "dot" and (merge is not None or kind == "IVF_FLAT"):
        assert recall >= before - 0.05, (recall, before)  # PQ: 500 more rows compete in the same cells
    loss = [index_pb2.IVF() for _ in range(2)]
    for message, uri in zip(loss, (ours, theirs)):
        index = user_indices(lance.dataset(uri).manifest_file)[-1]
        reader = lance.dataset(uri).store.open_input(f"_indices/{index_uuid(index)}/index.idx")
        message.ParseFromString(LanceFileReader(reader, path="index.idx").global_buffer(1))
    assert loss[0].loss == pytest.approx(loss[1].loss, rel=1e-5)  # the new rows' assignment loss
    # nothing left to fold in: no new version; then pylance optimizes over ours
    version = lance.dataset(ours).version
    lance.dataset(ours).optimize_indices()
    assert lance.dataset(ours).version == version
    lance.dataset(ours).insert(_table(4500, 4700))
    pylance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=1)
    assert _uses_index(ours, metric)


def test_retrain_rebuilds_the_vector_index(tmp_path):
    uri = str(tmp_path / "d")
    _indexed(uri, "IVF_FLAT", "l2", False, "pylance", partitions=2, rows=2000)
    lance.dataset(uri).insert(_table(2000, 2300))
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    assert len(_segments(uri)) == 2
    lance.dataset(uri).insert(_table(2300, 2500))
    lance.dataset(uri).optimize_indices(retrain=True)
    [segment] = _segments(uri)
    ds = lance.dataset(uri)
    # pylance 14 retrains with the default partition count for the rows now there (2214 // 4096 -> 1)
    assert segment[1] == ds.version - 1 and segment[2] == sorted(f.fragment_id for f in ds.get_fragments())
    assert len(segment[6]) == len(_live(uri)) and len(segment[8]) == DIM * 4
    _check_exact(uri, "l2", 1)


def test_cleanup_keeps_the_index_files_of_retained_versions(tmp_path):
    uri = str(tmp_path / "d")
    _indexed(uri, "IVF_PQ", "l2", False, "ours", partitions=2, rows=2000)
    lance.dataset(uri).insert(_table(2000, 2300))
    lance.dataset(uri).optimize_indices(num_indices_to_merge=0)  # a delta segment
    # the four indexed fragments (a seventh of their rows deleted) become one: the first
    # segment is remapped, the delta's fragment needs no compaction
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100_000)
    referenced = {i["uuid"] for i in lance.dataset(uri).list_indices()}
    assert len(referenced) == 2 and len(os.listdir(os.path.join(uri, "_indices"))) == 3
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert set(os.listdir(os.path.join(uri, "_indices"))) == referenced
    for uuid in referenced:
        assert sorted(os.listdir(os.path.join(uri, "_indices", uuid))) == ["auxiliary.idx", "index.idx"]
    assert _uses_index(uri, "l2")
    live = _live(uri)
    got = _knn(uri, VECTORS[5], "l2", 2)
    assert set(got) <= set(live) and len(got) == K
    # a retained older version keeps its index files too
    lance.dataset(uri).insert(_table(2300, 2400))
    lance.dataset(uri).optimize_indices(num_indices_to_merge=2)
    kept = lance.dataset(uri).version
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    assert referenced <= set(os.listdir(os.path.join(uri, "_indices")))
    assert _uses_index(uri, "l2") and pylance.dataset(uri, version=kept - 1).list_indices()


@pytest.mark.parametrize("kind", ["IVF_HNSW_SQ", "IVF_RQ", "IVF_SQ"])
def test_vector_indices_we_cannot_maintain_are_left_alone(tmp_path, kind):
    """HNSW graphs and RaBitQ codes are neither remapped nor optimized here; IVF_SQ is remapped by
    compaction (``test_compaction_remaps_vector_indices_as_pylance``) but new rows are not folded in."""
    uri = str(tmp_path / "d")
    pylance.write_dataset(_table(0, 1200), uri, max_rows_per_file=300)
    pylance.dataset(uri).create_index("vec", kind, num_partitions=2)
    [index] = user_indices(lance.dataset(uri).manifest_file)
    assert vector_remap.can_remap(index) is (kind == "IVF_SQ") and not vector_remap.is_flat_or_pq(index)
    lance.dataset(uri).delete("id % 3 = 0")
    lance.dataset(uri).insert(_table(1200, 1300))
    version = lance.dataset(uri).version
    lance.dataset(uri).optimize_indices()
    assert lance.dataset(uri).version == version  # nothing committed
    if kind == "IVF_SQ":
        return
    metrics = lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100_000)
    assert metrics.fragments_skipped_indexed == 4
    [after] = pylance.dataset(uri).list_indices()
    assert after["uuid"] == index_uuid(index) and sorted(after["fragment_ids"]) == [0, 1, 2, 3]
    got = pylance.dataset(uri).to_table(nearest={"column": "vec", "q": VECTORS[4], "k": K, "nprobes": 2})
    assert pc.min(got["id"]).as_py() >= 0 and got.num_rows == K


@pytest.mark.parametrize("stable", [False, True])
def test_compaction_with_scalar_and_several_vector_indices(tmp_path, stable):
    """Our IVF_PQ with a delta segment, pylance's IVF_FLAT and a BTREE on one dataset: our
    compaction leaves every index as pylance's own compaction does."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _indexed(ours, "IVF_PQ", "l2", stable, "ours", partitions=2, rows=2400)
    lance.dataset(ours).create_scalar_index("id", "BTREE")
    pylance.dataset(ours).create_index("vec", "IVF_FLAT", name="flat", num_partitions=3)
    lance.dataset(ours).insert(_table(2400, 2600))
    lance.dataset(ours).optimize_indices(index_names=["vec_idx"], num_indices_to_merge=0)
    lance.dataset(ours).delete("id % 5 = 1")
    shutil.copytree(ours, theirs)
    metrics = lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=100_000)
    pylance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100_000)
    assert (metrics.fragments_removed, metrics.fragments_added, metrics.fragments_skipped_indexed) == (5, 2, 0)

    def shape(uri: str) -> list:
        return sorted((i["name"], sorted(i["fragment_ids"])) for i in pylance.dataset(uri).list_indices())

    def key(segment: tuple) -> tuple:
        return segment[0], segment[2]

    assert shape(ours) == shape(theirs) and len(shape(ours)) == 4
    assert sorted(_segments(ours), key=key) == sorted(_segments(theirs), key=key)
    for q in _vectors(5, seed=9):
        assert _knn(ours, q, "l2", 3).tolist() == _knn(theirs, q, "l2", 3).tolist()
    assert "ScalarIndexQuery" in pylance.dataset(ours).scanner(filter="id = 2500").explain_plan()
    assert pylance.dataset(ours).to_table(filter="id = 2500").num_rows == 1


WIDTHS = [("float16", "IVF_FLAT", "cosine", "pylance", None), ("float16", "IVF_PQ", "l2", "ours", 0),
          ("float64", "IVF_PQ", "dot", "pylance", 1), ("float64", "IVF_FLAT", "l2", "ours", None)]


@pytest.mark.parametrize(("dtype", "kind", "metric", "builder", "merge"), WIDTHS)
def test_float16_and_float64_indices_are_optimized_and_compacted_as_pylance(tmp_path, dtype, kind, metric,
                                                                             builder, merge):
    """IVF indices on float16/float64 vectors (ours or pylance's): optimize_indices (a delta, a
    merge, the default's join) and then compaction write what pylance 14 writes on a copy (vectors,
    centroids and codebook in that type), and pylance's queries go through the index."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, 2400, dtype), ours, max_rows_per_file=600)
    (lance.dataset if builder == "ours" else pylance.dataset)(ours).create_index(
        "vec", kind, metric=metric, **_params(kind, 2 if merge is not None else 4))
    lance.dataset(ours).delete("id % 7 = 0")
    lance.dataset(ours).insert(_table(2400, 2700, dtype))
    shutil.copytree(ours, theirs)
    lance.dataset(ours).optimize_indices(num_indices_to_merge=merge)
    pylance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=merge)
    mine = _segments(ours)
    assert mine == _segments(theirs) and len(mine) == (2 if merge == 0 else 1)
    aux = _load(lance.dataset(ours).store, user_indices(lance.dataset(ours).manifest_file)[-1])
    assert aux.aux_schema.field(1).type.value_type == (pa.uint8() if kind == "IVF_PQ" else pa.from_numpy_dtype(dtype))
    assert index_pb2.Tensor.DataType.Name(aux.index_message.centroids_tensor.data_type) == dtype.upper()
    assert _uses_index(ours, metric, VECTORS[1].astype(dtype))
    lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=100_000)
    pylance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100_000)
    assert _segments(ours) == _segments(theirs)
    for q in _vectors(5, seed=9).astype(dtype):
        assert _knn(ours, q, metric, 4).tolist() == _knn(theirs, q, metric, 4).tolist()


SPLIT_DIM = 8
SPLIT_CENTERS = np.array([[8.0] * 8, [-8.0] * 8, [8.0] * 4 + [-8.0] * 4], np.float32)


def _blobs(sizes: list[int], seed: int, stretch: float = 1.0) -> np.ndarray:
    """Rows around the three centres (the first blob stretched along the first axis)."""
    rng = np.random.default_rng(seed)
    scale = np.ones(SPLIT_DIM, np.float32)
    scale[0] = stretch
    return np.concatenate([rng.normal(size=(n, SPLIT_DIM)) * (scale if i == 0 else 1) + SPLIT_CENTERS[i]
                           for i, n in enumerate(sizes)]).astype(np.float32)


@pytest.mark.parametrize(("kind", "metric", "builder", "grown", "stable"), [
    ("IVF_FLAT", "l2", "pylance", 17_000, False), ("IVF_PQ", "cosine", "ours", 33_000, True),
    ("IVF_PQ", "dot", "pylance", 33_000, False)])
def test_optimize_indices_splits_a_grown_partition_as_pylance(tmp_path, kind, metric, builder, grown, stable):
    """A partition grown past 4x the target size (IVF_FLAT 4096, IVF_PQ 8192 rows) is split by the
    default optimize_indices, as pylance 14 does: into ceil(rows / target) partitions by k-means,
    the first keeping its id, the others appended; the other partitions (under a quarter of the
    target: a split comes before any join) and their rows stay; all segments merge into one. The
    k-means differs (random): compared are the partition count, the unsplit partitions (rows,
    vectors or codes, centroids), the rows of the split one as a whole, each row's nearest centroid."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    vectors = np.concatenate([_blobs([600, 600, 600], 0), _blobs([100, 100, 100], 1), _blobs([grown, 0, 0], 2, 3.0)])

    def rows(start: int, stop: int) -> pa.Table:
        return pa.table({"id": np.arange(start, stop, dtype=np.int64), "vec": pa.FixedSizeListArray.from_arrays(
            pa.array(vectors[start:stop].reshape(-1)), SPLIT_DIM)})

    pylance.write_dataset(rows(0, 1800), ours, enable_stable_row_ids=stable)
    params = {"num_partitions": 3} | ({"num_sub_vectors": 2} if kind == "IVF_PQ" else {})
    if builder == "ours":
        lance.dataset(ours).create_index("vec", kind, metric=metric, **params)
    else:  # given centroids: one per blob (pylance's k-means may put two in one blob)
        unit = SPLIT_CENTERS / np.linalg.norm(SPLIT_CENTERS, axis=1, keepdims=True)
        pylance.dataset(ours).create_index("vec", kind, metric=metric, ivf_centroids=unit if metric == "dot" else
                                           SPLIT_CENTERS, **params)
    lance.dataset(ours).insert(rows(1800, 2100))
    lance.dataset(ours).optimize_indices(num_indices_to_merge=0)  # a delta segment
    lance.dataset(ours).insert(rows(2100, len(vectors)))
    lance.dataset(ours).delete("id < 2100 AND id % 9 = 0")  # the index still lists these rows
    shutil.copytree(ours, theirs)
    [old, _] = [_load(lance.dataset(ours).store, i) for i in user_indices(lance.dataset(ours).manifest_file)]
    lance.dataset(ours).optimize_indices()
    pylance.dataset(theirs).optimize.optimize_indices()
    results = []
    for uri in (ours, theirs):
        ds = lance.dataset(uri)
        [index] = [i for i in user_indices(ds.manifest_file) if i.index_details.type_url == ivf.TYPE_URL]
        segment = _load(ds.store, index)
        results.append((index.dataset_version, sorted(fragment_bitmap(index)), segment))
    (version, fragments, mine), (their_version, their_fragments, expected) = results
    assert (version, fragments) == (their_version, their_fragments) == (1, [0, 1, 2])
    split = int(np.argmax(old.centroids @ SPLIT_CENTERS[0] / np.linalg.norm(old.centroids, axis=1)))  # the grown one
    k = len(mine.centroids)
    assert k == len(expected.centroids) > 3  # ceil(rows / target) partitions in place of the grown one
    group = [split] + list(range(3, k))
    for p in range(3):
        if p != split:  # rebuilt from the live rows (re-encoded), none moved here
            assert mine.ids[mine.labels == p].tolist() == expected.ids[expected.labels == p].tolist()
            assert mine.payload[mine.labels == p].tobytes() == expected.payload[expected.labels == p].tobytes()
            assert mine.centroids[p].tobytes() == expected.centroids[p].tobytes() == old.centroids[p].tobytes()
    assert sorted(mine.ids[np.isin(mine.labels, group)]) == sorted(expected.ids[np.isin(expected.labels, group)])
    assert np.bincount(mine.labels, minlength=k).min() > 0
    table = pylance.dataset(ours).to_table(columns=["vec"], with_row_id=True)
    where = np.argsort(table["_rowid"].to_numpy())
    stored = np.stack(table["vec"].to_numpy(zero_copy_only=False))[where]
    x = stored[np.searchsorted(table["_rowid"].to_numpy()[where], mine.ids)]
    if metric == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    if metric == "dot":
        nearest = (x @ mine.centroids.T).argmax(1)
    else:
        nearest = ((x[:, None] - mine.centroids[None]) ** 2).sum(-1).argmin(1)
    assert (nearest == mine.labels).mean() > 0.999  # each row in its nearest partition (float ties aside)
    loss = [s.index_message.loss for s in (mine, expected)]
    assert loss[0] == pytest.approx(loss[1], rel=1e-5)  # the new rows' loss against the old centroids
    assert _uses_index(ours, metric, vectors[1])
    if kind == "IVF_FLAT":
        live = pylance.dataset(ours).to_table(columns=["id", "vec"])
        ids, x = live["id"].to_numpy(), np.stack(live["vec"].to_numpy(zero_copy_only=False)).astype(np.float64)
        for q in _blobs([3, 3, 2], 7):
            got = pylance.dataset(ours).to_table(nearest={"column": "vec", "q": q, "k": K, "nprobes": k},
                                                 columns=["id"])
            assert got["id"].to_numpy().tolist() == ids[np.argsort(((x - q) ** 2).sum(1), kind="stable")[:K]].tolist()
    lance.dataset(ours).insert(rows(0, 50).set_column(0, "id", pa.array(np.arange(50, dtype=np.int64) + 10**6)))
    pylance.dataset(ours).optimize.optimize_indices(num_indices_to_merge=1)  # pylance carries on after ours
    assert _uses_index(ours, metric, vectors[1])


def _line(positions: list[float], sizes: list[int], seed: int) -> np.ndarray:
    """Blobs (std 1) centred on a line through the origin at ``positions``."""
    rng = np.random.default_rng(seed)
    direction = np.ones(SPLIT_DIM, np.float32) / np.sqrt(SPLIT_DIM)
    return np.concatenate([rng.normal(size=(n, SPLIT_DIM)) + p * direction
                           for p, n in zip(positions, sizes)]).astype(np.float32)


@pytest.mark.parametrize(("positions", "built", "added", "delete", "expected"), [
    # issue 21's case: p1 and p2 small (700 rows each); p1 joins p2 (its nearest), p2's rows
    # would push p0 past 4x the target size (16384): p2 stays, with p1's live rows
    (None, None, None, "id % 9 = 0", ([15811, 1322], [0, 2])),
    # smallest first: p2 (300) fills p3 up to 16384, the rest goes to p1 (the next nearest);
    # then p1's rows fit nowhere (p0 and p3 full): p1 stays with them
    ([0, 5, 100, 110], [16000, 600, 300, 16100], [0, 0, 0, 10], "id < 16000 AND id % 5 = 0",
     ([15914, 712, 16384], [0, 1, 3])),
    # counted once, before any join: p3 (350) joins p2 (then 1050 rows), p2 still joins p0
    ([0, 10, 25, 45], [3000, 400, 700, 350], [10, 10, 10, 10], "id % 5 = 0", ([4192], [0])),
    # no room for p1's rows in p0 (16300 rows): nothing joined, a delta segment as without small partitions
    ([0, 100], [16300, 500], [0, 10], "id % 5 = 0", ([16300, 500], [0, 1])),
])
def test_optimize_indices_joins_small_partitions_as_pylance(tmp_path, positions, built, added, delete, expected):
    """Partitions under a quarter of the target size (IVF_FLAT: 1024 rows, deleted ones counted)
    are joined smallest first, as pylance 14 does; each row goes to the nearest remaining
    centroid holding fewer than 4x the target size (16384), and a partition whose rows find no
    room stays (none joined: a delta segment). The same partitions, centroids and rows (in order)
    as pylance's."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    if positions is None:  # three blobs, a delta segment, then 17000 rows into p0
        vectors = np.concatenate([_blobs([600, 600, 600], 0), _blobs([100, 100, 100], 1),
                                  _blobs([17_000, 0, 0], 2, 3.0)])
        centres, first, second = SPLIT_CENTERS, 1800, 2100
    else:
        vectors = np.concatenate([_line(positions, built, 0), _line(positions, added, 1)])
        direction = np.ones(SPLIT_DIM, np.float32) / np.sqrt(SPLIT_DIM)
        centres = np.array(positions, np.float32)[:, None] * direction
        first = second = sum(built)

    def rows(start: int, stop: int) -> pa.Table:
        return pa.table({"id": np.arange(start, stop, dtype=np.int64), "vec": pa.FixedSizeListArray.from_arrays(
            pa.array(vectors[start:stop].reshape(-1)), SPLIT_DIM)})

    pylance.write_dataset(rows(0, first), ours, max_rows_per_file=-(-first // 3))
    pylance.dataset(ours).create_index("vec", "IVF_FLAT", num_partitions=len(centres), ivf_centroids=centres)
    if second > first:
        lance.dataset(ours).insert(rows(first, second))
        lance.dataset(ours).optimize_indices(num_indices_to_merge=0)  # a delta segment
    lance.dataset(ours).insert(rows(second, len(vectors)))
    lance.dataset(ours).delete(delete)  # the index still lists these rows
    shutil.copytree(ours, theirs)
    lance.dataset(ours).optimize_indices()
    pylance.dataset(theirs).optimize.optimize_indices()
    mine, pylances = _segments(ours), _segments(theirs)
    assert mine == pylances and len(mine) == (2 if expected[1] == list(range(len(centres))) else 1)
    segment = _load(lance.dataset(ours).store, user_indices(lance.dataset(ours).manifest_file)[0])
    kept = [int(((centres - c) ** 2).sum(1).argmin()) for c in segment.centroids]
    assert (np.bincount(segment.labels).tolist(), kept) == expected


@pytest.mark.parametrize("grown", [[0], [0, 1]])
def test_optimize_indices_split_rebuilds_the_64_nearest_partitions_as_pylance(tmp_path, grown):
    """80 partitions on a line, the grown ones (17000 rows each, past 4x the target size) split:
    the 64 partitions nearest a split one's old centroid (Lance's REASSIGN_RANGE; another split
    partition among them takes a place) are rebuilt from their live rows, the farther ones keep
    the rows deleted since, as pylance 14 does: partitions 1-64 (grown p0) or 2-64 (grown p0
    and p1) rebuilt, 65-79 untouched, with the same rows and vectors as pylance's."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    k = 80
    centres = (np.arange(k, dtype=np.float32)[:, None] * 10 * np.ones(SPLIT_DIM, np.float32) / np.sqrt(SPLIT_DIM))
    rng = np.random.default_rng(0)
    built = [600] + [100] * (k - 1)
    vectors = np.concatenate([rng.normal(size=(n, SPLIT_DIM)) * 0.5 + centres[i] for i, n in enumerate(built)]
                             + [rng.normal(size=(17_000, SPLIT_DIM)) * 0.5 + centres[g] for g in grown])
    vectors = vectors.astype(np.float32)
    n = sum(built)
    table = pa.table({"id": np.arange(len(vectors)), "vec": pa.FixedSizeListArray.from_arrays(
        pa.array(vectors.reshape(-1)), SPLIT_DIM)})
    pylance.write_dataset(table.slice(0, n), ours)
    pylance.dataset(ours).create_index("vec", "IVF_FLAT", num_partitions=k, ivf_centroids=centres)
    lance.dataset(ours).insert(table.slice(n))
    lance.dataset(ours).delete(f"id < {n} AND id % 9 = 0")  # the index still lists these rows
    shutil.copytree(ours, theirs)
    lance.dataset(ours).optimize_indices()
    pylance.dataset(theirs).optimize.optimize_indices()
    live = pylance.dataset(ours).to_table(columns=[], with_row_id=True)["_rowid"].to_numpy()
    results = []
    for uri in (ours, theirs):
        ds = lance.dataset(uri)
        [index] = user_indices(ds.manifest_file)
        segment = _load(ds.store, index)
        dead = np.bincount(segment.labels[~np.isin(segment.ids, live)], minlength=k)[:k]
        results.append((segment, np.flatnonzero(dead).tolist()))
    (mine, stale), (expected, their_stale) = results
    assert stale == their_stale == list(range(65, k))
    assert len(mine.centroids) == len(expected.centroids) == k + 4 * len(grown)  # ceil(17600 / 4096) = 5 ways
    for p in range(len(grown), k):  # rebuilt or untouched: the same rows, vectors and centroid
        assert mine.ids[mine.labels == p].tolist() == expected.ids[expected.labels == p].tolist()
        assert mine.payload[mine.labels == p].tobytes() == expected.payload[expected.labels == p].tobytes()
        assert mine.centroids[p].tobytes() == expected.centroids[p].tobytes()


@pytest.mark.parametrize("engine", ["ours", "pylance"])
def test_searches_after_whole_fragments_leave_return_k_rows_as_pylance(tmp_path, engine):
    """Our delete and update of every row of a fragment keep the index's fragment bitmap as pylance 14
    does, so pylance masks the rows the index still holds for the removed fragment: a search returns k
    live rows. (We used to drop the fragment from the bitmap; pylance then returned the removed rows'
    entries, which read back as nothing: fewer than k rows. Found by the mixed-writers stress test.)"""
    uri = str(tmp_path / "d")
    pylance.write_dataset(_table(0, 2000), uri, max_rows_per_file=500)
    pylance.dataset(uri).create_index("vec", "IVF_PQ", **_params("IVF_PQ", 2))
    engines = {"ours": lance, "pylance": pylance}
    engines[engine].dataset(uri).delete("id < 500")  # fragment 0 leaves the manifest
    engines[engine].dataset(uri).update({"id": "id + 100000"}, where="id >= 500 AND id < 1000")  # fragment 1 too
    assert [f.fragment_id for f in pylance.dataset(uri).get_fragments()] == [2, 3, 4]
    [segment] = pylance.dataset(uri).describe_indices()[0].segments
    assert sorted(segment.fragment_ids) == [0, 1, 2, 3]
    live = set(_live(uri).tolist())
    for q in VECTORS[0:1000:50]:  # the nearest rows of these were in the fragments that left
        found = _knn(uri, q, "l2", 2)
        assert len(found) == K and set(found.tolist()) <= live


@pytest.mark.parametrize("build", ["create_index", "optimize_indices"])
def test_an_index_built_while_a_delete_removes_a_fragment_keeps_it_masked_as_pylance(tmp_path, build):
    """An index (or optimised delta) built on a version whose fragment a concurrent delete then removed
    keeps that fragment in its bitmap when it commits, as pylance 14 does, so pylance masks the rows the
    index holds for it: searches return k live rows. (We used to cut the bitmap down to the fragments
    that still existed: every such search gave fewer than k rows. Found by the Airflow maintenance test
    beside pylance writers.)"""
    uri = str(tmp_path / "d")
    pylance.write_dataset(_table(0, 2000), uri, max_rows_per_file=500)
    if build == "optimize_indices":
        pylance.dataset(uri, version=1).create_index("vec", "IVF_PQ", **_params("IVF_PQ", 2))
        pylance.write_dataset(_table(2000, 3000), uri, mode="append", max_rows_per_file=500)  # fragments 4, 5
    oracle = str(tmp_path / "oracle")
    shutil.copytree(uri, oracle)
    for engine, path in ((lance, uri), (pylance, oracle)):
        builder = engine.dataset(path)
        gone = "id >= 2000 AND id < 2500" if build == "optimize_indices" else "id < 500"
        pylance.dataset(path).delete(gone)  # a fragment the build covers leaves the manifest
        if build == "create_index":
            builder.create_index("vec", "IVF_PQ", **_params("IVF_PQ", 2))
        else:
            builder.optimize.optimize_indices()
    expected = sorted(f for s in pylance.dataset(oracle).describe_indices()[0].segments for f in s.fragment_ids)
    assert sorted(f for s in pylance.dataset(uri).describe_indices()[0].segments for f in s.fragment_ids) == expected
    live = set(_live(uri).tolist())
    for q in VECTORS[0:3000:50]:
        found = _knn(uri, q, "l2", 2)
        assert len(found) == K and set(found.tolist()) <= live


@pytest.mark.parametrize("steps", [
    ["delete:id < 1000", "delete:id < 1500", "delete:id < 5000"],  # segments empty one by one, then all
    ["delete:id < 5000"],  # every segment of each name empty at once
    ["update:id < 1500", "delete:id >= 1500"],
    ["update:id >= 0"],
    ["delete:id < 300", "update:id >= 1000"],
], ids=["one_by_one", "all_at_once", "update_then_delete", "update_all", "partial"])
def test_empty_index_segments_go_as_pylance_drops_them(tmp_path, steps):
    """Deletes and updates keep fragment bitmaps and drop index segments as pylance 14 does: of several
    segments of one name, those covering no existing fragment go while another covers one, else the
    oldest stays; a lone segment stays (vector ones too). Compared on identical copies, after each step."""
    def build(uri: str) -> None:
        pylance.write_dataset(_table(0, 1000), uri, max_rows_per_file=500)
        pylance.dataset(uri).create_index("vec", "IVF_PQ", **_params("IVF_PQ", 2))
        pylance.dataset(uri).create_scalar_index("id", "BTREE")
        pylance.write_dataset(_table(1000, 1500), uri, mode="append")
        pylance.dataset(uri).create_index("vec", "IVF_PQ", name="second", replace=True, **_params("IVF_PQ", 2))
        pylance.write_dataset(_table(1500, 2000), uri, mode="append")
        pylance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # a segment per name more

    def shape(uri: str) -> list[tuple]:
        return sorted((i["name"], i["type"], sorted(i["fragment_ids"])) for i in pylance.dataset(uri).list_indices())

    mine, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    build(mine)
    shutil.copytree(mine, theirs)
    assert len(shape(mine)) == 6
    for step in steps:
        kind, predicate = step.split(":")
        for engine, uri in ((lance, mine), (pylance, theirs)):
            if kind == "delete":
                engine.dataset(uri).delete(predicate)
            else:
                engine.dataset(uri).update({"id": "id + 100000"}, where=predicate)
        assert shape(mine) == shape(theirs), step


def _updated_in_place(uri: str, stable: bool = False) -> None:
    """2,000 rows in fragments 0-3 under an IVF_PQ index and a BTREE on ``id``; then pylance's merge
    insert of two columns of two rows of fragment 1 rewrites them in place, which takes fragment 1 out
    of the vector index's bitmap while the index keeps its (now stale) rows."""
    table = _table(0, 2000).append_column("x", pa.array(np.arange(2000, dtype=np.int64)))
    pylance.write_dataset(table, uri, max_rows_per_file=500, enable_stable_row_ids=stable)
    pylance.dataset(uri).create_index("vec", "IVF_PQ", **_params("IVF_PQ", 2))
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    source = _table(510, 530).filter(pc.is_in(pc.field("id"), pa.array([510, 520])))
    pylance.dataset(uri).merge_insert("id").when_matched_update_all().execute(source)
    [vector] = [i for i in pylance.dataset(uri).describe_indices() if i.name == "vec_idx"]
    assert [sorted(s.fragment_ids) for s in vector.segments] == [[0, 2, 3]]


def _stale_rows(uri: str) -> list[list[int]]:
    """Per vector index segment: the fragments it holds rows of that its bitmap does not name."""
    ds = lance.dataset(uri)
    out = []
    for index in user_indices(ds.manifest_file):
        if index.index_details.type_url == ivf.TYPE_URL:
            held = set((_load(ds.store, index).ids >> np.uint64(32)).tolist())
            out.append(sorted(held - set(fragment_bitmap(index))))
    return out


def _k_live_rows(uri: str, queries: np.ndarray) -> None:
    live = set(_live(uri).tolist())
    for q in queries:
        found = _knn(uri, q, "l2", 2)
        assert len(found) == K and set(found.tolist()) <= live


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable"])
@pytest.mark.parametrize("merge", [1, None], ids=["merge_one", "join"])
def test_merged_segments_leave_out_rows_updated_in_place_as_pylance(tmp_path, merge, stable):
    """optimize_indices merging segments (``num_indices_to_merge=1``, or the join of small partitions
    by default) leaves out the rows a segment holds of fragments its bitmap no longer names, as
    pylance 14 does: the fragment's current rows join as unindexed ones. We used to keep the stale
    rows too: every row of the fragment twice. Found by the maintenance test beside pylance writers."""
    uri, oracle = str(tmp_path / "d"), str(tmp_path / "oracle")
    _updated_in_place(uri, stable)
    shutil.copytree(uri, oracle)
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=merge)
    pylance.dataset(oracle).optimize.optimize_indices(num_indices_to_merge=merge)
    [mine], [theirs] = _segments(uri), _segments(oracle)
    assert mine[2] == theirs[2] == [0, 1, 2, 3]
    assert sorted(mine[6]) == sorted(theirs[6])  # row addresses, each once
    assert len(set(mine[6])) == len(mine[6]) == 2000
    _k_live_rows(uri, VECTORS[500:1000:25])


@pytest.mark.parametrize("rewrite", ["with_covered_fragments", "alone"])
def test_compaction_drops_stale_rows_outside_the_bitmap(tmp_path, rewrite):
    """A compaction rewriting a fragment a segment holds stale rows of (fragment 1 above, which a delta
    now covers) drops those rows instead of moving them: with them, the old segment held rows of the
    new fragment outside its bitmap beside the delta's current ones, and pylance's searches returned
    fewer than k rows (pylance 14's own compaction moves them, as we did). ``alone``: no rewritten
    group touches the old segment's bitmap; it is remapped all the same, else it kept rows of a
    removed fragment its bitmap lacks, which pylance does not mask. Found by the maintenance test
    beside pylance writers."""
    uri, oracle = str(tmp_path / "d"), str(tmp_path / "oracle")
    _updated_in_place(uri)
    assert _stale_rows(uri) == [[1]]
    shutil.copytree(uri, oracle)
    # fragments 0-3 compacted into 4-6 (a group per bitmap), or fragment 1 alone into 4
    gone, target = ("id % 4 = 0", 1000) if rewrite == "with_covered_fragments" else \
        ("id % 4 = 0 AND id >= 500 AND id < 1000", 500)
    for engine, path in ((lance, uri), (pylance, oracle)):
        engine.dataset(path).optimize.optimize_indices(num_indices_to_merge=0)  # a delta over fragment 1
        engine.dataset(path).delete(gone)
        engine.dataset(path).optimize.compact_files(target_rows_per_fragment=target)
    fragments = [f.fragment_id for f in pylance.dataset(uri).get_fragments()]
    assert fragments == [f.fragment_id for f in pylance.dataset(oracle).get_fragments()]
    assert fragments == ([4, 5, 6] if rewrite == "with_covered_fragments" else [0, 2, 3, 4])
    assert _stale_rows(oracle) != [[], []]  # pylance's compaction moved (or kept) the stale rows
    assert _stale_rows(uri) == [[], []]
    assert pylance.dataset(uri).validate() is None
    _k_live_rows(uri, VECTORS[500:1000:10])


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable"])
def test_a_merged_segment_keeps_removed_fragments_in_its_bitmap_as_pylance(tmp_path, stable):
    """optimize_indices merging segments gives the merged one the whole bitmaps of those it merges, removed
    fragments included, as pylance 14 does: the rows it still holds of a removed fragment stay masked. We
    used to keep only the fragments the dataset still had; pylance then returned those rows' entries, which
    read back as nothing: every search near them gave fewer than k rows."""
    uri, oracle = str(tmp_path / "d"), str(tmp_path / "oracle")
    pylance.write_dataset(_table(0, 2000), uri, max_rows_per_file=500, enable_stable_row_ids=stable)
    pylance.dataset(uri).create_index("vec", "IVF_PQ", **_params("IVF_PQ", 2))
    pylance.write_dataset(_table(2000, 2300), uri, mode="append")
    pylance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # a delta over fragment 4
    pylance.dataset(uri).delete("id < 500")  # fragment 0 leaves the dataset
    shutil.copytree(uri, oracle)
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=2)
    pylance.dataset(oracle).optimize.optimize_indices(num_indices_to_merge=2)
    [mine], [theirs] = _segments(uri), _segments(oracle)
    assert mine[2] == theirs[2] == [0, 1, 2, 3, 4]
    assert sorted(mine[6]) == sorted(theirs[6])
    live = set(_live(uri).tolist())
    for q in VECTORS[0:1000:25]:  # the nearest rows of the first half were in fragment 0
        found = _knn(uri, q, "l2", 2)
        assert len(found) == K and set(found.tolist()) <= live


def test_compaction_drops_stale_scalar_rows_outside_the_bitmap(tmp_path):
    """The same for a scalar index: pylance's merge insert of ``id`` and ``x`` rewrites ``x`` of fragment 1
    in place, which leaves the bitmap of the BTREE on ``x`` while the BTREE keeps its old rows. Our
    compaction drops them (pylance 14's moves them to the new fragment, outside the bitmap); answers
    through the index stay those of a scan."""
    uri = str(tmp_path / "d")
    table = pa.table({"id": np.arange(2000, dtype=np.int64), "x": np.arange(2000, dtype=np.int64),
                      "y": np.zeros(2000, np.int64)})  # a column the merge insert leaves out: in place
    pylance.write_dataset(table, uri, max_rows_per_file=500)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    pylance.dataset(uri).create_scalar_index("x", "BTREE")
    source = pa.table({"id": pa.array([510, 520], pa.int64()), "x": pa.array([-1, -2], pa.int64())})
    pylance.dataset(uri).merge_insert("id").when_matched_update_all().execute(source)
    [x_before] = [i for i in pylance.dataset(uri).describe_indices() if i.name == "x_idx"]
    assert [sorted(s.fragment_ids) for s in x_before.segments] == [[0, 2, 3]]
    pylance.dataset(uri).delete("id % 4 = 0")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    ds = lance.dataset(uri)
    [x_idx] = [i for i in user_indices(ds.manifest_file) if i.name == "x_idx"]
    held = remap._read(ds.store, x_idx, btree.PAGES_NAME).read().column("ids").to_numpy() >> np.uint64(32)
    assert set(held.tolist()) == set(fragment_bitmap(x_idx)) == {4, 6}  # fragment 1 became 5: not indexed
    assert pylance.dataset(uri).to_table(filter="x = 510").num_rows == 0
    assert pylance.dataset(uri).to_table(filter="x = -1", columns=["id"])["id"].to_pylist() == [510]
    assert pylance.dataset(uri).count_rows("x >= 500 AND x < 530") == 21
