"""Consistency checks shared by the concurrency and crash tests."""

from __future__ import annotations

import os

import lance as pylance

import airflow_lance.core as ours
from airflow_lance.core import layout
from airflow_lance.core.deletion import deletion_path
from airflow_lance.core.manifest import list_versions, read_manifest
from airflow_lance.core.fragment import FragmentMetadata


def referenced_files(uri: str) -> set[str]:
    """Every file some committed manifest references (relative paths)."""
    store = ours.dataset(uri).store
    found: set[str] = set()
    for version, scheme in list_versions(store).items():
        manifest = read_manifest(store, version, scheme)
        found.add(manifest.path)
        if manifest.manifest.transaction_file:
            found.add(layout.transaction_file_path(manifest.manifest.transaction_file))
        for pb in manifest.manifest.fragments:
            fragment = FragmentMetadata.from_pb(pb)
            found.update(layout.data_file_path(f.path) for f in fragment.files)
            if fragment.deletion_file is not None:
                found.add(deletion_path(fragment.id, fragment.deletion_file))
    return found


def check_consistent(uri: str) -> list[int]:
    """Versions are contiguous, every referenced file exists, both engines open every version.

    Returns the row count of each version (index 0 = version 1).
    """
    store = ours.dataset(uri).store
    versions = sorted(list_versions(store))
    assert versions == list(range(1, len(versions) + 1)), f"versions not contiguous: {versions}"
    missing = [p for p in referenced_files(uri) if not os.path.exists(os.path.join(uri, p))]
    assert not missing, f"manifests reference missing files: {missing}"
    counts = []
    for version in versions:
        mine = ours.dataset(uri, version=version)
        theirs = pylance.dataset(uri, version=version)
        assert mine.count_rows() == theirs.count_rows()
        counts.append(mine.count_rows())
    return counts
