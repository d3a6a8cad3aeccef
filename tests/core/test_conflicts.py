"""Conflict matrix: two writers plan on the same read version; the second commits after the first.

Expected outcomes follow Lance's rules (format notes section 9): "ok" commits on
top, "rebase" commits after merging deletion vectors, "retry" raises the
retryable CommitConflictError, "incompatible" raises IncompatibleTransactionError.
After every successful pair, pylance reads exactly what we read.
"""

from __future__ import annotations

import lance as pylance
import pytest

import airflow_lance.core as lance

from .conflict_cases import READ_VERSION, make_dataset, plan

MATRIX = [
    # mine, theirs, outcome
    ("append", "append", "ok"),
    ("append", "delete_f0", "ok"),
    ("append", "overwrite", "incompatible"),
    ("append", "rewrite_f0_f1", "ok"),
    ("append", "restore", "incompatible"),
    ("append", "reserve", "ok"),
    ("append", "config_a", "ok"),
    ("delete_f0", "append", "ok"),
    ("delete_f0", "delete_f2", "ok"),
    ("delete_f0", "delete_f0_other_rows", "rebase"),
    ("delete_f0", "delete_f0", "retry"),
    ("delete_f0_whole", "delete_f0_other_rows", "retry"),  # both deleted rows 5 and 6
    ("delete_f0_other_rows", "delete_f0_whole", "retry"),
    ("delete_f0", "overwrite", "incompatible"),
    ("delete_f0", "rewrite_f0_f1", "retry"),
    ("delete_f0", "rewrite_f2_f3", "ok"),
    ("delete_f0", "restore", "incompatible"),
    ("delete_f0", "reserve", "ok"),
    ("delete_f0", "config_a", "ok"),
    ("overwrite", "append", "ok"),
    ("overwrite", "delete_f0", "ok"),
    ("overwrite", "overwrite", "ok"),
    ("overwrite", "rewrite_f0_f1", "ok"),
    ("overwrite", "restore", "ok"),
    ("rewrite_f0_f1", "append", "ok"),
    ("rewrite_f0_f1", "delete_f0", "retry"),
    ("rewrite_f0_f1", "delete_f2", "ok"),
    ("rewrite_f0_f1", "overwrite", "incompatible"),
    ("rewrite_f0_f1", "rewrite_f0_f1", "retry"),
    ("rewrite_f0_f1", "rewrite_f2_f3", "ok"),
    ("rewrite_f0_f1", "restore", "incompatible"),
    ("rewrite_f0_f1", "reserve", "ok"),
    ("rewrite_f0_f1", "config_a", "ok"),
    ("restore", "append", "ok"),
    ("restore", "delete_f0", "ok"),
    ("restore", "overwrite", "ok"),
    ("reserve", "append", "ok"),
    ("reserve", "overwrite", "incompatible"),
    ("reserve", "restore", "incompatible"),
    ("config_a", "config_b", "ok"),
    ("config_a", "config_a", "incompatible"),
    ("config_a", "append", "ok"),
]


def _ids(uri: str) -> list[int]:
    return sorted(lance.dataset(uri).to_table(columns=["id"]).column("id").to_pylist())


@pytest.mark.parametrize(("mine", "theirs", "outcome"), MATRIX, ids=[f"{m}-vs-{t}" for m, t, _ in MATRIX])
def test_conflict_matrix(uri, mine, theirs, outcome):
    make_dataset(uri)
    their_op, my_op = plan(theirs, uri), plan(mine, uri)
    lance.LanceDataset.commit(uri, their_op, READ_VERSION)
    after_theirs = _ids(uri)
    if outcome == "incompatible":
        with pytest.raises(lance.IncompatibleTransactionError):
            lance.LanceDataset.commit(uri, my_op, READ_VERSION)
    elif outcome == "retry":
        with pytest.raises(lance.CommitConflictError) as err:
            lance.LanceDataset.commit(uri, my_op, READ_VERSION)
        assert not isinstance(err.value, lance.IncompatibleTransactionError)
    else:
        ds = lance.LanceDataset.commit(uri, my_op, READ_VERSION)
        assert ds.version == READ_VERSION + 2
    if outcome in ("incompatible", "retry"):
        assert lance.dataset(uri).version == READ_VERSION + 1
        assert _ids(uri) == after_theirs
    theirs_view = pylance.dataset(uri).to_table().sort_by("id")
    assert theirs_view.equals(lance.dataset(uri).to_table().sort_by("id"))
    if outcome == "rebase":  # both deletes survive: nothing resurrected
        assert not {0, 1, 2, 5, 6} & set(_ids(uri))


def test_append_ids_are_renumbered_and_max_fragment_id_never_decreases(uri):
    make_dataset(uri)
    a, b = plan("append", uri), plan("append", uri)
    lance.LanceDataset.commit(uri, a, READ_VERSION)
    ds = lance.LanceDataset.commit(uri, b, READ_VERSION)
    assert [f.fragment_id for f in ds.get_fragments()] == [0, 1, 2, 3, 4, 5]
    ds = lance.write_dataset(ds.to_table().slice(0, 1), uri, mode="overwrite")
    assert [f.fragment_id for f in ds.get_fragments()] == [6]
    assert ds.manifest_file.manifest.max_fragment_id == 6
