"""The key-broadcast plan's executor-side pieces without Spark: key lookups (one integer key by
binary search, other keys by hash join, null keys matching nothing), the ambiguity check, and
which specs the plan takes. The plan end to end runs in tests/airflow/operators/test_merge_insert.py."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_lance.core import AmbiguousMergeInsertError
from airflow_lance.spark import merge_keys
from airflow_lance.spark.merge_insert_spec import MergeInsertJobSpec
from airflow_lance.spark.spec import SourceSpec


def _pairs(keys: dict[str, pa.Array], addresses: list[int]) -> pa.Table:
    return pa.table({**keys, "_rowaddr": pa.array(addresses, pa.uint64())})


@pytest.mark.parametrize("key_type", [pa.int64(), pa.int32(), pa.uint64(), pa.string()])
def test_one_key_lookup_finds_addresses_and_null_keys_match_nothing(key_type: pa.DataType) -> None:
    values = [9, 3, 7, 1 << 40] if key_type in (pa.int64(), pa.uint64()) else [9, 3, 7, 11]
    cast = (lambda v: [None if x is None else str(x) for x in v]) if key_type == pa.string() else (lambda v: v)
    index = merge_keys.KeyIndex(_pairs({"k": pa.array(cast(values), key_type)}, [90, 30, 70, (5 << 32) | 4]), ["k"])
    assert (index.sorted is not None or index.dense is not None) == pa.types.is_integer(key_type)
    probe = pa.table({"k": pa.array(cast([7, None, 8, values[3], 3, 3, 0]), key_type)})
    assert index.addresses(probe).tolist() == [70, -1, -1, (5 << 32) | 4, 30, 30, -1]
    assert index.addresses(probe.slice(0, 0)).tolist() == []


@pytest.mark.parametrize("key_type", [pa.int64(), pa.int16(), pa.uint64()])
def test_dense_and_sorted_lookups_of_one_integer_key_agree(key_type: pa.DataType) -> None:
    rng = np.random.default_rng(7)
    low = {pa.int64(): -(1 << 62), pa.int16(): -30000, pa.uint64(): (1 << 64) - 50_000}[key_type]
    keys = np.sort(rng.choice(20_000, 3_000, replace=False)) + low if key_type != pa.uint64() else \
        np.sort(rng.choice(20_000, 3_000, replace=False)).astype(np.uint64) + np.uint64(low)
    pairs = _pairs({"k": pa.array(keys, key_type)}, list(range(100, 3_100)))
    dense, sparse = merge_keys.KeyIndex(pairs, ["k"]), merge_keys.KeyIndex(pairs, ["k"])
    sparse.dense = None
    sparse.sorted, sparse.values = np.sort(keys), np.arange(100, 3_100)[np.argsort(keys, kind="stable")]
    assert dense.dense is not None and dense.sorted is None
    probe_values = [None if i % 11 == 0 else keys[0] + i if key_type != pa.uint64() else keys[0] + np.uint64(i)
                    for i in range(25_000)] + [keys[0] - 1, keys[-1]]
    probe = pa.table({"k": pa.array(probe_values, key_type)})
    found = dense.addresses(probe)
    assert found.tolist() == sparse.addresses(probe).tolist()
    assert (found >= 0).sum() == 3_000 - sum(1 for i, k in enumerate(keys) if (k - keys[0]) % 11 == 0) + 1


def test_a_repeated_integer_key_is_looked_up_in_the_sorted_array_first_pair_first() -> None:
    index = merge_keys.KeyIndex(_pairs({"k": pa.array([4, 2, 4], pa.int64())}, [40, 20, 41]), ["k"])
    assert index.dense is None and index.sorted is not None
    assert index.addresses(pa.table({"k": pa.array([4, 2, 3], pa.int64())})).tolist() == [40, 20, -1]


def test_several_keys_are_looked_up_together() -> None:
    pairs = _pairs({"a": pa.array([1, 1, 2], pa.int64()), "b": pa.array(["x", "y", "x"])}, [10, 11, 20])
    index = merge_keys.KeyIndex(pairs, ["a", "b"])
    probe = pa.table({"a": pa.array([2, 1, 1, None, 2], pa.int64()), "b": pa.array(["x", "y", "z", "x", None])})
    assert index.addresses(probe).tolist() == [20, 11, -1, -1, -1]


def test_no_pairs_match_nothing() -> None:
    index = merge_keys.KeyIndex(_pairs({"k": pa.array([], pa.int64())}, []), ["k"])
    assert index.addresses(pa.table({"k": pa.array([1, 2], pa.int64())})).tolist() == [-1, -1]


def test_a_repeated_source_key_is_ambiguous_only_where_it_matches() -> None:
    source = pa.table({"k": pa.array([1, 2, 2, 5, 5, None, None], pa.int64())})
    matched = _pairs({"k": pa.array([1, 2], pa.int64())}, [np.uint64(7), np.uint64(8)])
    with pytest.raises(AmbiguousMergeInsertError, match=r"\{'k': 2\}"):
        merge_keys._ambiguity(source, matched, ["k"])
    merge_keys._ambiguity(source, matched.slice(0, 1), ["k"])  # 5 repeats but matches nothing; nulls never match


def test_the_plan_takes_full_sources_without_conditions_or_deletes_by_source() -> None:
    def spec(**kwargs: object) -> MergeInsertJobSpec:
        return MergeInsertJobSpec(uri="/x.lance", read_version=1, source=SourceSpec.from_fields(path="/s.parquet"),
                                  on=("id",), staging_root="/x.lance", staging_name="s.json", **kwargs)

    names = ["id", "v"]
    assert merge_keys.applies(spec(), ["v", "id"], names)
    assert merge_keys.applies(spec(when_not_matched_insert_all=False), names, names)
    assert merge_keys.applies(spec(when_matched_update_all=False), names, names)
    assert not merge_keys.applies(spec(), ["id"], names)  # a partial source: updated rows keep target columns
    assert not merge_keys.applies(spec(matched_condition="source.v > target.v"), names, names)
    assert not merge_keys.applies(spec(when_not_matched_by_source_delete=True), names, names)


@pytest.mark.parametrize("key_type", [pa.int64(), pa.uint32(), pa.string(), pa.float64()])
def test_distinct_keys_and_matched_source_rows_equal_arrows_group_by_and_join(key_type: pa.DataType) -> None:
    rng = np.random.default_rng(3)
    values = [None if i % 13 == 0 else int(v) for i, v in enumerate(rng.integers(0, 500, 2_000))]
    cast = (lambda v: None if v is None else str(v)) if key_type == pa.string() else (lambda v: v)
    source = pa.table({"k": pa.array([cast(v) for v in values], key_type)})
    non_null = merge_keys._non_null(source, ["k"])
    expected = non_null.group_by(["k"]).aggregate([]).sort_by("k")
    assert merge_keys._distinct(non_null, ["k"]).sort_by("k").equals(expected)
    assert merge_keys._distinct(non_null.sort_by("k"), ["k"]).sort_by("k").equals(expected)  # already sorted
    matched = _pairs({"k": pa.array([cast(v) for v in range(0, 600, 3)] * 2, key_type)}, list(range(400)))
    semi = source.join(matched.select(["k"]), keys=["k"], join_type="left semi").num_rows
    assert merge_keys._matched_source_rows(source, matched, ["k"]) == semi > 0
    assert merge_keys._matched_source_rows(source, matched.slice(0, 0), ["k"]) == 0


def test_pack_balances_weights_over_the_bins_keeping_order() -> None:
    weighted = [(30.0, "write"), *[(16.0, f"match{i}") for i in range(10)]]
    bins = merge_keys.pack(weighted, 2)
    assert sorted(x for b in bins for x in b) == sorted(item for _, item in weighted)
    loads = [sum(w for w, item in weighted if item in b) for b in bins]
    assert max(loads) - min(loads) <= 16
    assert all(b == sorted(b, key=[item for _, item in weighted].index) for b in bins)
    assert merge_keys.pack(weighted[:1], 4) == [["write"]]
    assert merge_keys.pack([], 2) == []
