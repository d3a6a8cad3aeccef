"""Many OS processes appending to one dataset on a real S3 server (SeaweedFS), ours and pylance's."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import lance as pylance
import pyarrow.compute as pc
import pytest
from stress.workers import batch  # tests/ is on sys.path (rootdir)

import airflow_lance.core as lance
from airflow_lance.core.manifest import list_versions

WORKER = str(pathlib.Path(__file__).parents[1] / "stress" / "workers.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]
ROWS = 2


def _run_writers(uri: str, options: dict, engines: list[str], appends: int, tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "storage_options.json"  # credentials in a file only the user reads, not on command lines
    secret.touch(mode=0o600)
    secret.write_text(json.dumps(options))
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, engine, uri, str((n + 1) * 1_000_000), str(appends), str(ROWS), str(secret)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )
        for n, engine in enumerate(engines)
    ]
    results = [proc.communicate(timeout=1200) for proc in procs]
    for proc, (_out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err[-3000:]


def _check(uri: str, options: dict, writers: int, appends: int) -> None:
    """Contiguous versions, each one batch bigger; every batch exactly once; pylance agrees."""
    ds = lance.dataset(uri, storage_options=options)
    commits = writers * appends
    assert sorted(list_versions(ds.store)) == list(range(1, commits + 2))
    for version in (1, commits // 2, commits + 1):
        assert lance.dataset(uri, version=version, storage_options=options).count_rows() == ROWS * version
    ids = ds.to_table(columns=["id"]).column("id")
    expected = {i for n in range(writers) for i in range((n + 1) * 1_000_000, (n + 1) * 1_000_000 + appends * ROWS)}
    assert len(ids) == ROWS * (commits + 1) and pc.count_distinct(ids).as_py() == len(ids)
    assert set(ids.to_pylist()) == expected | set(range(ROWS))
    theirs = pylance.dataset(uri, storage_options=options)
    assert theirs.version == commits + 1 and theirs.count_rows() == len(ids)


def test_eight_processes_25_appends_each_on_seaweedfs(s3_seaweedfs, tmp_path):
    uri = s3_seaweedfs.new_uri("ds.lance")
    lance.write_dataset(batch(0, ROWS), uri, storage_options=s3_seaweedfs.options)
    _run_writers(uri, s3_seaweedfs.options, ["ours"] * 8, 25, tmp_path)
    _check(uri, s3_seaweedfs.options, 8, 25)


@pytest.mark.slow
def test_four_pylance_and_four_of_ours_on_seaweedfs(s3_seaweedfs, tmp_path):
    uri = s3_seaweedfs.new_uri("ds.lance")
    pylance.write_dataset(batch(0, ROWS), uri, storage_options=s3_seaweedfs.options, data_storage_version="2.0")
    _run_writers(uri, s3_seaweedfs.options, ["ours", "pylance"] * 4, 25, tmp_path)
    _check(uri, s3_seaweedfs.options, 8, 25)


def test_two_pylance_and_two_of_ours_through_dynamodb(ddb, tmp_path):
    uri = ddb.new_uri("ds.lance")
    pylance.write_dataset(batch(0, ROWS), uri, storage_options=ddb.options, data_storage_version="2.0")
    _run_writers(uri, ddb.options, ["ours", "pylance"] * 2, 10, tmp_path)
    _check(uri, ddb.options, 4, 10)
