"""IVF_PQ with ``num_bits=4`` as pylance 14 writes it: two 4-bit codes a byte (``byte j =
code[2j] | code[2j+1] << 4``), 16 codewords per sub-vector, bytes transposed per partition.

pylance 14 is the oracle: its 4-bit files decode to the layout we write, ours hold its schemas and
metadata, it lists, describes and uses our index with its own recall, and optimize_indices and
compaction of a 4-bit index (ours or pylance's) write what pylance writes on a copy.
"""

from __future__ import annotations

import json
import os
import shutil

import lance as pylance
import numpy as np
import pytest

import airflow_lance.core as lance
from airflow_lance.core._proto import index_pb2
from airflow_lance.core.errors import CorruptFileError
from airflow_lance.core.indices import ivf, kmeans, pq
from airflow_lance.core.indices.plan import check_index

from .test_vector_indices import _compare_recall, _files, _ivf, _write_with_pylance
from .test_vector_indices import _vectors as _blobs
from .test_vector_maintenance import _knn, _segments, _table, _uses_index

pytestmark = pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")

FOUR = {"num_bits": 4, "num_sub_vectors": 8}


def test_pack_is_lances_nibble_order():
    codes = np.array([[1, 2, 3, 4], [15, 0, 7, 9]], np.uint8)
    packed = pq.pack(codes, 4)
    assert packed.tolist() == [[0x21, 0x43], [0x0F, 0x97]]
    assert (pq.unpack(packed, 4) == codes).all() and pq.code_width(8, 4) == 4


def test_storage_num_bits_reads_the_width_and_refuses_what_it_cannot_read():
    def meta(nbits):
        return {"storage_metadata": json.dumps([json.dumps({"num_sub_vectors": 4, "nbits": nbits})])}
    assert (pq.storage_num_bits(meta(4)), pq.storage_num_bits(meta(8)), pq.storage_num_bits({})) == (4, 8, 8)
    for bad in (meta(5), meta("4"), {"storage_metadata": "not json"}, {"storage_metadata": "[]"}):
        with pytest.raises(CorruptFileError):
            pq.storage_num_bits(bad)
    with pytest.raises(CorruptFileError, match="tensor type"):  # a bfloat16 centroids/codebook tensor
        ivf.tensor_array(index_pb2.Tensor(data_type=index_pb2.Tensor.BFLOAT16, shape=[1], data=b"\0" * 2))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_4bit_files_hold_what_pylance_writes(tmp_path, dtype):
    """Same schemas, metadata (``nbits`` 4, ``__pq_code`` of num_sub_vectors / 2 bytes), codebook
    shape [16, dim] (in the vectors' type) and manifest entry; and pylance's stored bytes are the
    codes computed from its own codebook, packed and transposed per partition as we write them."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    vectors = _blobs(3000, dim=16).astype(dtype)
    _write_with_pylance(ours, vectors)
    shutil.copytree(ours, theirs)
    params = {"num_partitions": 4, "metric": "l2"} | FOUR
    lance.dataset(ours).create_index("vec", "IVF_PQ", **params)
    pylance.dataset(theirs).create_index("vec", "IVF_PQ", **params)
    mine, pylances = _files(ours), _files(theirs)
    for name in mine:
        a, b = mine[name], pylances[name]
        assert a.schema.to_arrow().equals(b.schema.to_arrow()) and a.schema.metadata == b.schema.metadata, name
    assert mine["auxiliary.idx"].schema.to_arrow().field("__pq_code").type.list_size == 4
    assert b'\\"nbits\\":4' in mine["auxiliary.idx"].schema.metadata["storage_metadata"]
    books = []
    for reader in (mine["auxiliary.idx"], pylances["auxiliary.idx"]):
        tensor = index_pb2.Tensor()
        tensor.ParseFromString(reader.global_buffer(2))
        assert list(tensor.shape) == [16, 16] and index_pb2.Tensor.DataType.Name(tensor.data_type) == dtype.upper()
        books.append(ivf.tensor_array(tensor).reshape(8, 16, 2))
    for uri, files, book in ((theirs, pylances, books[1]), (ours, mine, books[0])):
        aux = files["auxiliary.idx"]
        table, layout = aux.read(), _ivf(aux)
        centroids = ivf.tensor_array(_ivf(files["index.idx"]).centroids_tensor)
        ids = table["_rowid"].to_numpy()
        x = vectors[(ids >> 32) * 3000 + (ids & 0xFFFFFFFF)].astype(ivf.compute_dtype(dtype))
        parts = np.repeat(np.arange(4), layout.lengths)
        assert (kmeans.assign(x, centroids, "l2")[0] == parts).mean() > 0.99, uri
        residuals = ivf.residuals(x, centroids, parts, dtype)
        expected = pq.transpose_partitions(pq.pack(pq.encode(residuals, book), 4),
                                           np.array(layout.lengths))
        stored = np.stack(table["__pq_code"].to_numpy(zero_copy_only=False))
        assert (stored == expected).mean() > 0.99, uri
    described = [d.details for d in (pylance.dataset(ours).describe_indices()[0],
                                     pylance.dataset(theirs).describe_indices()[0])]
    assert described[0] == described[1] and described[0]["compression"]["num_bits"] == 4, described


@pytest.mark.parametrize("metric", ["l2", pytest.param("cosine", marks=pytest.mark.slow),
                                    pytest.param("dot", marks=pytest.mark.slow)])
def test_pylance_uses_our_4bit_index_with_the_recall_of_its_own(tmp_path, metric):
    ours, theirs = _compare_recall(tmp_path, "IVF_PQ", metric, 3000, 100, {"num_partitions": 16} | FOUR,
                                   nprobes=4, builds=8, dim=16)
    print(f"recall@10 IVF_PQ 4-bit {metric}: ours {ours:.3f}, pylance {theirs:.3f}")
    assert ours >= theirs - 0.02, (ours, theirs)
    assert ours > (0.15 if metric == "dot" else 0.3), ours  # dot: pylance's own is as low


@pytest.mark.parametrize(("builder", "metric", "merge", "stable"), [
    ("pylance", "l2", 0, False), ("ours", "cosine", 1, False),
    pytest.param("pylance", "dot", None, True, marks=pytest.mark.slow),
])
def test_4bit_index_optimized_and_compacted_as_pylance(tmp_path, builder, metric, merge, stable):
    """A 4-bit index (ours or pylance's): optimize_indices (a delta, a merge, the default) and
    then compaction write what pylance 14 writes on a copy, and its queries use the index."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    pylance.write_dataset(_table(0, 2400), ours, max_rows_per_file=600, enable_stable_row_ids=stable)
    (lance.dataset if builder == "ours" else pylance.dataset)(ours).create_index(
        "vec", "IVF_PQ", metric=metric, num_partitions=2, num_sub_vectors=4, num_bits=4)
    lance.dataset(ours).delete("id % 7 = 0")
    lance.dataset(ours).insert(_table(2400, 2700))
    shutil.copytree(ours, theirs)
    lance.dataset(ours).optimize_indices(num_indices_to_merge=merge)
    pylance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=merge)
    mine = _segments(ours)
    assert mine == _segments(theirs) and len(mine) == (2 if merge == 0 else 1)
    assert _uses_index(ours, metric)
    lance.dataset(ours).optimize.compact_files(target_rows_per_fragment=100_000)
    pylance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100_000)
    assert _segments(ours) == _segments(theirs)
    assert _uses_index(ours, metric)
    for q in _blobs(5, dim=16, seed=9):
        assert _knn(ours, q, metric, 2).tolist() == _knn(theirs, q, metric, 2).tolist()


def test_4bit_parameters_as_pylance(tmp_path):
    """Odd num_sub_vectors with 4 bits, and num_bits other than 4 or 8, are refused as pylance 14
    refuses them (RuntimeError) before anything is written; too few vectors (under 16) give the
    empty index; IVF_PQ trains one partition per 256 vectors, at least one."""
    uri = str(tmp_path / "d")
    _write_with_pylance(uri, _blobs(600, dim=16))
    for kwargs in ({"num_sub_vectors": 1, "num_bits": 4}, {"num_sub_vectors": 4, "num_bits": 5}):
        with pytest.raises(lance.IndexParamsError) as raised:
            lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=2, **kwargs)
        assert isinstance(raised.value, RuntimeError)
        with pytest.raises(RuntimeError) as expected:
            pylance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=2, **kwargs)
        assert str(raised.value) in str(expected.value)
        with pytest.raises(lance.IndexParamsError):  # the operator's check, before a Spark job is submitted
            check_index(lance.dataset(uri), "vec", "IVF_PQ", num_partitions=2, **kwargs)
    assert lance.dataset(uri).version == 2 and not os.path.exists(os.path.join(uri, "_indices"))
    lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=4, num_sub_vectors=4, num_bits=4)
    [partitions] = [len(_ivf(_files(uri)["index.idx"]).lengths)]
    assert partitions == 2  # 553 live vectors: 553 // 256, as pylance ("training 2 of the 4")
    small = str(tmp_path / "small")
    _write_with_pylance(small, _blobs(16, dim=16))  # 14 live rows: under 16
    lance.dataset(small).create_index("vec", "IVF_PQ", num_partitions=1, num_sub_vectors=4, num_bits=4)
    [index] = pylance.dataset(small).list_indices()
    assert not index["fragment_ids"] and not os.path.exists(os.path.join(small, "_indices"))
