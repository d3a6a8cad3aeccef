"""Many OS processes appending to one local dataset as fast as they can."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import lance as pylance
import pyarrow.compute as pc

import airflow_lance.core as ours

from .check import check_consistent
from .workers import batch

WORKER = str(pathlib.Path(__file__).with_name("workers.py"))
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run_writers(uri: str, engines: list[str], appends: int, rows: int) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, engine, uri, str((n + 1) * 1_000_000), str(appends), str(rows)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )
        for n, engine in enumerate(engines)
    ]
    results = [proc.communicate(timeout=600) for proc in procs]
    for proc, (_out, err) in zip(procs, results):
        assert proc.returncode == 0, err[-3000:]


def _assert_every_batch_exactly_once(uri: str, writers: int, appends: int, rows: int) -> None:
    ids = ours.dataset(uri).to_table(columns=["id"]).column("id")
    assert len(ids) == rows + writers * appends * rows
    assert pc.count_distinct(ids).as_py() == len(ids)
    expected = {i for n in range(writers) for i in range((n + 1) * 1_000_000, (n + 1) * 1_000_000 + appends * rows)}
    assert set(ids.to_pylist()) == expected | set(range(rows))


def test_eight_processes_fifty_appends_each(uri):
    ours.write_dataset(batch(0, 2), uri)
    _run_writers(uri, ["ours"] * 8, 50, 2)
    counts = check_consistent(uri)
    assert counts == [2 + 2 * i for i in range(401)]
    _assert_every_batch_exactly_once(uri, 8, 50, 2)


def test_four_pylance_and_four_of_ours(uri):
    pylance.write_dataset(batch(0, 2), uri, data_storage_version="2.0")
    _run_writers(uri, ["ours", "pylance"] * 4, 25, 2)
    counts = check_consistent(uri)
    assert counts == [2 + 2 * i for i in range(201)]
    _assert_every_batch_exactly_once(uri, 8, 25, 2)
