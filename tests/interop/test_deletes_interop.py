"""Deletion vectors: both encodings written and read, shared with pylance, merged under races."""

from __future__ import annotations

import os

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as ours
from airflow_lance.core.delete import plan_delete


def _table(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "category": pa.array(np.array(["a", "b", "c"])[ids % 3]), "x": pa.array(ids * 0.5)})


def _deletion_suffixes(uri: str) -> set[str]:
    return {name.rsplit(".", 1)[1] for name in os.listdir(os.path.join(uri, "_deletions"))}


@pytest.mark.parametrize(("predicate", "kind"), [("id % 10 = 0", "arrow"), ("id < 6000", "bin")])
def test_pylance_reads_our_deletions(uri, predicate, kind):
    ours.write_dataset(_table(20_000), uri)
    result = ours.dataset(uri).delete(predicate)
    theirs = pylance.dataset(uri)
    assert result == {"num_deleted_rows": 20_000 - theirs.count_rows(), "version": 2}
    assert _deletion_suffixes(uri) == {kind}
    assert theirs.to_table().equals(ours.dataset(uri).to_table())
    assert theirs.to_table().equals(pylance.dataset(uri, version=1).to_table(filter=f"NOT ({predicate})"))
    assert theirs.count_rows(predicate) == 0


@pytest.mark.parametrize("predicate", ["id % 10 = 0", "id < 6000"])
def test_we_read_pylance_deletions(uri, predicate):
    pylance.write_dataset(_table(20_000), uri, data_storage_version="2.0")
    pylance.dataset(uri).delete(predicate)
    assert ours.dataset(uri).to_table().equals(pylance.dataset(uri).to_table())
    assert ours.dataset(uri).count_rows() == pylance.dataset(uri).count_rows()


def test_deleting_every_row_of_a_fragment_removes_it(uri):
    ours.write_dataset(_table(30), uri, max_rows_per_file=10)
    ours.dataset(uri).delete("id >= 10 AND id < 20")
    ds = ours.dataset(uri)
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 2]
    assert pylance.dataset(uri).count_rows() == 20
    assert ds.delete("id = 999") == {"num_deleted_rows": 0, "version": 3}  # committed, as pylance does
    assert pylance.dataset(uri).count_rows() == 20


def test_successive_deletes_merge_with_existing_vector(uri):
    ours.write_dataset(_table(100), uri)
    ours.dataset(uri).delete("id < 10")
    pylance.dataset(uri).delete("id >= 90")
    ours.dataset(uri).delete("id % 2 = 0")
    odd = pc.equal(pc.bit_wise_and(pc.field("id"), 1), 1)
    expected = _table(100).filter((pc.field("id") >= 10) & (pc.field("id") < 90) & odd)
    assert ours.dataset(uri).to_table().equals(expected)
    assert pylance.dataset(uri).to_table().equals(expected)


def test_our_delete_rebases_over_pylance_delete_of_same_fragment(uri):
    ours.write_dataset(_table(1000), uri)
    ds = ours.dataset(uri)
    op, _ = plan_delete(ds.store, [f.metadata for f in ds.get_fragments()], ds.lance_schema, "id < 100", 1)
    pylance.dataset(uri).delete("id >= 900")  # lands as version 2 while ours is in flight
    ours.LanceDataset.commit(uri, op, 1)
    expected = _table(1000).filter((pc.field("id") >= 100) & (pc.field("id") < 900))
    assert ours.dataset(uri).to_table().equals(expected)
    assert pylance.dataset(uri).to_table().equals(expected)


def test_pylance_delete_rebases_over_ours(uri):
    pylance.write_dataset(_table(1000), uri, data_storage_version="2.0")
    stale = pylance.dataset(uri)  # pylance plans on version 1
    ours.dataset(uri).delete("category = 'a'")
    stale.delete("id < 50")
    expected = _table(1000).filter((pc.field("category") != "a") & (pc.field("id") >= 50))
    assert pylance.dataset(uri).to_table().equals(expected)
    assert ours.dataset(uri).to_table().equals(expected)


def test_pylance_appends_while_we_delete_and_reverse(uri):
    ours.write_dataset(_table(100), uri)
    ds = ours.dataset(uri)
    op, _ = plan_delete(ds.store, [f.metadata for f in ds.get_fragments()], ds.lance_schema, "id < 50", 1)
    pylance.write_dataset(_table(10, 100), uri, mode="append")
    ours.LanceDataset.commit(uri, op, 1)
    stale = pylance.dataset(uri)
    ours.write_dataset(_table(5, 200), uri, mode="append")
    stale.delete("id >= 105")  # planned on version 3: our rows 200..204 appended since are not affected
    expected = pa.concat_tables([_table(100), _table(10, 100), _table(5, 200)])
    expected = expected.filter((pc.field("id") >= 50) & ((pc.field("id") < 105) | (pc.field("id") >= 200)))
    assert ours.dataset(uri).to_table().sort_by("id").equals(expected.sort_by("id"))
    assert pylance.dataset(uri).to_table().sort_by("id").equals(expected.sort_by("id"))


@pytest.mark.parametrize(
    "predicate", ["id = ", "nope > 3", "category > 5", "id IN (SELECT 1)"], ids=["syntax", "column", "type", "subquery"]
)
def test_bad_predicates_are_typed_errors_and_change_nothing(uri, predicate):
    ours.write_dataset(_table(10), uri)
    with pytest.raises(ours.InvalidInputError):
        ours.dataset(uri).delete(predicate)
    assert ours.dataset(uri).version == 1
    assert not os.path.exists(os.path.join(uri, "_deletions"))
