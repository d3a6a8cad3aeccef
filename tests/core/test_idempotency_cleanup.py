"""The idempotency look-back lives with cleanup: removed versions are skipped, never a conflict."""

from __future__ import annotations

import os

import pytest
from cleanup_retry_cases import append, build_and_clean_up, ids, one_row, run_retry_after_cleanup

import airflow_lance.core as lance
from airflow_lance.core import layout


def test_idempotent_retry_after_cleanup_on_local_disk(uri):
    run_retry_after_cleanup(uri, {})


def test_idempotent_retry_after_cleanup_in_memory():
    run_retry_after_cleanup("memory://retry-after-cleanup/ds.lance", {}, oracle=False)


def test_a_tagged_version_behind_the_cleaned_up_gap_is_still_searched(uri):
    lance.write_dataset(one_row(1), uri)
    for version in range(2, 6):
        append(uri, {}, version, version - 1, f"run-{version}")
    lance.dataset(uri).tags.create("keep", 2)
    lance.cleanup_old_versions(uri, retain_versions=2, error_if_tagged_old_versions=False)
    assert [v["version"] for v in lance.dataset(uri).versions()] == [2, 4, 5]
    assert append(uri, {}, 2, 5, "run-2").version == 2  # found behind the gap of versions 1 and 3
    search = lance.find_landed_version(lance.dataset(uri).store, "run-3")
    assert (search.version, search.searched, search.cleaned_up) == (None, 3, True)
    assert append(uri, {}, 6, 5, "run-6").version == 6
    assert ids(uri, {}) == [1, 2, 3, 4, 5, 6]


def test_a_kept_version_whose_transaction_file_is_gone_is_not_ours_and_the_search_goes_on(uri):
    lance.write_dataset(one_row(1), uri)
    for version in range(2, 5):
        append(uri, {}, version, version - 1, f"run-{version}")
    ds = lance.dataset(uri)
    os.remove(os.path.join(uri, layout.transaction_file_path(ds.manifest_file.manifest.transaction_file)))
    assert append(uri, {}, 3, 4, "run-3").version == 3  # version 4 (no transaction) skipped
    assert append(uri, {}, 5, 4, "run-5").version == 5
    assert lance.find_landed_version(ds.store, "run-4").cleaned_up is False  # the manifest is still there
    assert ids(uri, {}) == [1, 2, 3, 4, 5]


def test_without_cleanup_the_window_is_the_whole_lookback(uri):
    lance.write_dataset(one_row(1), uri)
    append(uri, {}, 2, 1, "run-2")
    search = lance.find_landed_version(lance.dataset(uri).store, "run-2")  # the latest: read first, nothing listed
    assert (search.version, search.first, search.last, search.searched, search.cleaned_up) == (2, 1, 2, 1, False)
    search = lance.find_landed_version(lance.dataset(uri).store, "")  # only a key-less version 1: no match
    assert (search.version, search.searched, search.cleaned_up) == (None, 2, False)
    search = lance.find_landed_version(lance.dataset(uri).store, "other", lookback=1)
    assert (search.version, search.first, search.last, search.searched, search.cleaned_up) == (None, 2, 2, 1, False)
    assert "not found in versions 2..2" in search.describe() and "cleanup" not in search.describe()


def test_a_concurrent_version_removed_by_cleanup_is_a_retryable_conflict_that_says_so(uri):
    build_and_clean_up(uri, {})  # versions 4 and 5 are left
    fragments = lance.write_fragments(one_row(9), uri)
    with pytest.raises(lance.CommitConflictError) as caught:
        lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), 2, idempotency_key="late")
    message = str(caught.value)
    assert "version 3" in message and "after read version 2" in message
    assert "removed by a cleanup of old versions" in message and "re-read the dataset and retry" in message
    assert lance.dataset(uri).version == 5
    # The retry re-reads the dataset: the same fragments commit on top of version 5.
    again = lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), 5, idempotency_key="late")
    assert again.version == 6 and ids(uri, {}) == [1, 2, 3, 4, 5, 9]


def test_a_rebase_onto_a_cleaned_up_read_version_is_a_retryable_conflict_that_says_so(uri):
    from .conflict_cases import READ_VERSION, make_dataset, plan

    make_dataset(uri)
    theirs, mine = plan("delete_f0_other_rows", uri), plan("delete_f0", uri)  # needs a rebase
    lance.LanceDataset.commit(uri, theirs, READ_VERSION)
    lance.cleanup_old_versions(uri, retain_versions=1)  # the read version (2) is gone, version 3 stays
    with pytest.raises(lance.CommitConflictError) as caught:
        lance.LanceDataset.commit(uri, mine, READ_VERSION)
    assert not isinstance(caught.value, lance.IncompatibleTransactionError)
    assert "read version 2" in str(caught.value) and "was removed by a cleanup" in str(caught.value)
    assert lance.dataset(uri).version == 3
