"""Our core and pylance doing every kind of operation at once on one dataset on a real S3 server.

The processes and checks of ``stress/test_mixed_concurrency.py`` (append, delete, update, upsert,
compact, BTREE and IVF_PQ builds and optimisation, cleanup, tags), on SeaweedFS, whose conditional
writes are the commit protocol there.
"""

from __future__ import annotations

import pytest
from stress.test_mixed_concurrency import check_end_state, run_workers, start_dataset  # tests/ is on sys.path


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable_row_ids"])
def test_two_of_ours_and_two_pylance_doing_everything_at_once_on_seaweedfs(s3_seaweedfs, tmp_path, stable):
    uri, log = s3_seaweedfs.new_uri("ds.lance"), tmp_path / "log.jsonl"
    start_dataset(uri, stable, "ours" if stable else "pylance", s3_seaweedfs.options)
    run_workers(uri, ["ours", "pylance", "ours", "pylance"], 10, log, seed=3 + stable, options=s3_seaweedfs.options)
    entries = check_end_state(uri, log, s3_seaweedfs.options)
    assert {e["engine"] for e in entries} == {"ours", "pylance"}


@pytest.mark.slow
def test_six_writers_doing_everything_at_once_for_a_while_on_seaweedfs(s3_seaweedfs, tmp_path):
    uri, log = s3_seaweedfs.new_uri("ds.lance"), tmp_path / "log.jsonl"
    start_dataset(uri, False, "pylance", s3_seaweedfs.options)
    run_workers(uri, ["ours", "pylance"] * 3, 50, log, seed=21, options=s3_seaweedfs.options)
    check_end_state(uri, log, s3_seaweedfs.options)
