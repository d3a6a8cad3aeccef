"""SIGKILL a writer at random points: the dataset always opens at a committed version.

`make test` runs a short version; `make stress` runs 200 trials.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import airflow_lance.core as ours

from .check import check_consistent, referenced_files
from .workers import batch

WORKER = str(pathlib.Path(__file__).with_name("workers.py"))
ROOT = pathlib.Path(__file__).resolve().parents[2]
ROWS = 5_000
ALLOWED_LEFTOVER_DIRS = ("data/", "_transactions/", "_deletions/", "_versions/.tmp")


def _trial(uri: str, trial: int, rng: random.Random) -> None:
    with subprocess.Popen(
        [sys.executable, WORKER, "ours", uri, str((trial + 1) * 10_000_000), "1000", str(ROWS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0, 0.08))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    counts = check_consistent(uri)
    # Only whole batches are visible, in commit order, none lost.
    assert counts == [ROWS * (i + 1) for i in range(len(counts))]
    blocks = ours.dataset(uri).to_table(columns=["id"]).column("id").to_numpy().reshape(-1, ROWS)
    assert (np.diff(blocks, axis=1) == 1).all() and (blocks[:, 0] % ROWS == 0).all()


def _leftovers_are_unreferenced_only(uri: str) -> None:
    referenced = referenced_files(uri)
    for root, _dirs, files in os.walk(uri):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), uri)
            if rel in referenced or rel == "_versions/latest_version_hint.json":
                continue
            assert rel.startswith(ALLOWED_LEFTOVER_DIRS) or "/.tmp" in rel, f"unexpected leftover {rel}"
            assert not rel.endswith(".manifest"), f"uncommitted manifest {rel}"


def _run(uri: str, trials: int) -> None:
    rng = random.Random(1234)
    ours.write_dataset(batch(0, ROWS), uri)
    for trial in range(trials):
        _trial(uri, trial, rng)
    _leftovers_are_unreferenced_only(uri)


def test_crash_safety_short(uri):
    _run(uri, 15)


@pytest.mark.slow
def test_crash_safety_200_trials(uri):
    _run(uri, 200)
