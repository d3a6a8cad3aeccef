"""The idempotent retry after cleanup, as one scenario every store runs (core level, pylance as the oracle).

Versions 1..5: a create, then appends with idempotency keys ``run-2`` .. ``run-5`` (one row each).
``cleanup_old_versions(retain_versions=2)`` leaves versions 4 and 5. Then:

(a) a commit with a new key lands (before issue 15 it failed with "version 3 was cleaned up");
(b) a commit with the key of a kept version returns that version and adds nothing;
(c) a commit with the key of a cleaned-up version cannot be recognised: it commits again (the
    documented limit: a cleanup window shorter than the retry window can duplicate a write).
"""

from __future__ import annotations

from collections.abc import Mapping

import lance as pylance
import pyarrow as pa

import airflow_lance.core as lance


def one_row(value: int) -> pa.Table:
    return pa.table({"id": pa.array([value], pa.int64())})


def append(uri: str, options: Mapping[str, str], value: int, read_version: int, key: str) -> lance.LanceDataset:
    fragments = lance.write_fragments(one_row(value), uri, storage_options=options)
    return lance.LanceDataset.commit(
        uri, lance.LanceOperation.Append(fragments), read_version, storage_options=options, idempotency_key=key
    )


def build_and_clean_up(uri: str, options: Mapping[str, str]) -> None:
    """Versions 1..5 (keys run-2..run-5), then a cleanup that keeps versions 4 and 5."""
    lance.write_dataset(one_row(1), uri, storage_options=options)
    for version in range(2, 6):
        assert append(uri, options, version, version - 1, f"run-{version}").version == version
    stats = lance.cleanup_old_versions(uri, retain_versions=2, storage_options=options)
    assert stats.old_versions == 3
    assert [v["version"] for v in lance.dataset(uri, storage_options=options).versions()] == [4, 5]


def ids(uri: str, options: Mapping[str, str], oracle: bool = True) -> list[int]:
    """Row ids per pylance (the oracle; ours for ``memory://``, which pylance cannot see), sorted."""
    ds = pylance.dataset(uri, storage_options=dict(options)) if oracle else lance.dataset(uri, storage_options=options)
    return sorted(ds.to_table()["id"].to_pylist())


def run_retry_after_cleanup(uri: str, options: Mapping[str, str], oracle: bool = True) -> None:
    build_and_clean_up(uri, options)

    # (a) a new key commits, at the version the caller read (5) or at an older kept one (4)
    assert append(uri, options, 6, 5, "run-6").version == 6
    assert append(uri, options, 7, 4, "run-7").version == 7

    # (b) the key of a kept version: that version, nothing added, whatever the read version
    assert append(uri, options, 5, 7, "run-5").version == 5
    assert append(uri, options, 4, 7, "run-4").version == 4
    assert lance.dataset(uri, storage_options=options).version == 7
    assert ids(uri, options, oracle) == [1, 2, 3, 4, 5, 6, 7]

    search = lance.find_landed_version(lance.dataset(uri, storage_options=options).store, "run-3")
    assert (search.manifest, search.first, search.last, search.searched, search.cleaned_up) == (None, 1, 7, 4, True)
    assert "only 4 of them still exist" in search.describe()

    # (c) the key of a cleaned-up version is not recognised: the write lands again
    assert append(uri, options, 3, 7, "run-3").version == 8
    assert ids(uri, options, oracle) == [1, 2, 3, 3, 4, 5, 6, 7]
    if oracle:
        assert pylance.dataset(uri, storage_options=dict(options)).version == 8
        assert pylance.dataset(uri, version=4, storage_options=dict(options)).count_rows() == 4
