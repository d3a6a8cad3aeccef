"""Dataset histories (written by pylance) and pylance's view of the rows that changed between two
of their versions: shared by the core ``changes_between`` tests and the Spark ``since_version`` tests.

The oracle: with stable row ids, pylance's ``_rowid`` of both versions (new ids inserted, same id
with other values updated, ids gone deleted); without, the rows' contents (the ``id`` column and
values are unique; an update changes values): rows of the new version whose content the base
version lacks are inserted, the base's rows the new version lacks are deleted.
"""

from __future__ import annotations

import lance as pylance
import numpy as np
import pyarrow as pa

import airflow_lance.core as core


def rows(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table({"id": ids, "v": np.zeros(count, dtype=np.int64), "s": pa.array([f"s{i}" for i in ids])})


def history(uri: str, *, stable: bool, compact_with: str) -> None:
    """Create (4 small fragments), append, update, delete, append, compaction, append, update,
    delete, compaction (merges new rows with old ones)."""
    pylance.write_dataset(rows(0, 400), uri, max_rows_per_file=100, enable_stable_row_ids=stable)
    pylance.write_dataset(rows(400, 60), uri, mode="append", max_rows_per_file=30)
    pylance.dataset(uri).update({"v": "v + 1"}, where="id % 10 = 1")
    pylance.dataset(uri).delete("id % 10 = 2 OR id BETWEEN 100 AND 199")
    pylance.write_dataset(rows(460, 50), uri, mode="append", max_rows_per_file=25)
    compact(uri, compact_with)
    pylance.write_dataset(rows(510, 40), uri, mode="append", max_rows_per_file=20)
    pylance.dataset(uri).update({"v": "v + 10"}, where="id % 10 = 3 AND id > 200")
    pylance.dataset(uri).delete("id % 10 = 4 AND id > 300")
    compact(uri, compact_with)


def compact(uri: str, how: str) -> None:
    before = pylance.dataset(uri).version
    if how == "pylance":
        pylance.dataset(uri).optimize.compact_files(target_rows_per_fragment=250)
    else:
        core.dataset(uri).optimize.compact_files(target_rows_per_fragment=250)
    ds = pylance.dataset(uri)
    # (pylance may commit a fragment id reservation first)
    assert ds.version > before and ds.read_transaction(ds.version).operation.__class__.__name__ == "Rewrite"


def oracle(uri: str, base: int, version: int, stable: bool) -> tuple[list[dict], int, int, int]:
    """(rows to read sorted by id, inserted, updated, deleted) by pylance's reads."""
    old = pylance.dataset(uri, version=base).to_table(with_row_id=True).to_pylist()
    new = pylance.dataset(uri, version=version).to_table(with_row_id=True).to_pylist()
    if stable:
        old_by_id = {r["_rowid"]: r for r in old}
        new_ids = {r["_rowid"] for r in new}
        inserted = [r for r in new if r["_rowid"] not in old_by_id]
        updated = [r for r in new if r["_rowid"] in old_by_id and r != old_by_id[r["_rowid"]]]
        deleted = len(old_by_id.keys() - new_ids)
    else:
        key = lambda r: (r["id"], r["v"], r["s"])  # noqa: E731
        old_keys = {key(r) for r in old}
        new_keys = {key(r) for r in new}
        inserted, updated = [r for r in new if key(r) not in old_keys], []
        deleted = len(old_keys - new_keys)
    rows = sorted(({k: r[k] for k in ("id", "v", "s")} for r in inserted + updated), key=lambda r: r["id"])
    return rows, len(inserted), len(updated), deleted
