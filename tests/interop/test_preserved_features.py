"""Features we do not own survive our commits: indices, config, stable row ids."""

from __future__ import annotations

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import airflow_lance.core as ours


def _table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "bucket": pa.array(ids % 7)})


def test_btree_index_stays_correct_after_our_appends_and_deletes(uri):
    pylance.write_dataset(_table(0, 3000), uri, data_storage_version="2.0", max_rows_per_file=1000)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")
    ours.write_dataset(_table(3000, 500), uri, mode="append")
    ours.dataset(uri).delete("id >= 1000 AND id < 2000")
    ours.dataset(uri).delete("id % 3 = 0 AND id < 1000")
    theirs = pylance.dataset(uri)
    assert len(theirs.describe_indices()) == 1
    for predicate in ("id = 10", "id = 12", "id = 1500", "id = 3100", "id >= 990 AND id < 1010", "id > 2995"):
        indexed = theirs.to_table(filter=predicate).sort_by("id")
        scanned = theirs.to_table(filter=predicate, use_scalar_index=False).sort_by("id")
        assert indexed.equals(scanned), predicate
        assert ours.dataset(uri).to_table(filter=predicate).sort_by("id").equals(scanned)
    # fragment 1 (ids 1000..1999) was removed entirely; as in pylance 14 the index's bitmap still names
    # it (bitmaps are immutable: readers mask the rows of fragments that are gone)
    [segment] = theirs.describe_indices()[0].segments
    assert sorted(segment.fragment_ids) == [0, 1, 2]


def test_config_and_table_metadata_are_copied_forward(uri):
    pylance.write_dataset(_table(0, 10), uri, data_storage_version="2.0")
    pylance.dataset(uri).update_config({"team": "ml"})
    ours.write_dataset(_table(10, 10), uri, mode="append")
    ours.dataset(uri).delete("id = 3")
    assert dict(ours.dataset(uri).manifest_file.manifest.config) == {"team": "ml"}


def test_stable_row_ids_are_assigned_like_pylance(uri):
    pylance.write_dataset(_table(0, 10), uri, data_storage_version="2.0", enable_stable_row_ids=True,
                          max_rows_per_file=6)
    ours.write_dataset(_table(10, 10), uri, mode="append")
    pylance.write_dataset(_table(20, 5), uri, mode="append")
    ours.dataset(uri).delete("id = 12")
    theirs = pylance.dataset(uri)
    rows = theirs.to_table(with_row_id=True)
    assert rows.column("_rowid").to_pylist() == [i for i in range(25) if i != 12]
    assert rows.column("id").to_pylist() == [i for i in range(25) if i != 12]
    assert ours.dataset(uri).manifest_file.manifest.next_row_id == 25
    assert ours.dataset(uri).to_table().equals(theirs.to_table())
    assert theirs.to_table(filter=pc.field("id") == 15).num_rows == 1
