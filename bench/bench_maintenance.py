"""Maintenance benchmark: compaction and version cleanup, ours vs pylance on identical datasets.

Usage: python bench/bench_maintenance.py [--fragments 200] [--rows-per-fragment 1000] [--reps 3] [--indexed-only]

* compact_files: 200 fragments of 1,000 rows (wide and narrow anchor tables) -> 1 fragment.
  The source is written once by pylance (format 2.0) and copied for every run, so both
  engines compact byte-identical datasets.
* compact_files of an indexed dataset: the narrow table with pylance's BTREE on ``id``, BITMAP
  on ``category`` and LABEL_LIST on ``tags``, 5% of the rows deleted; both engines remap the
  three indices (ours and pylance interleaved, best of --reps). Checks both end with the same
  index coverage and that pylance's indexed queries on ours equal full scans.
* cleanup_old_versions(older_than=0): a dataset of 1 + 200 appends of 1,000 rows compacted
  by pylance (203 versions), so 202 old manifests, 200 data files and 202 transaction files go.
  Also checks that both leave exactly the same files behind.

Prints median times (of --reps runs; best of for the indexed compaction) and ratios ours / pylance
(targets: compaction <= 1.5, also of an indexed dataset, cleanup <= 2).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import lance as pylance  # noqa: E402

import airflow_lance.core as ours  # noqa: E402
from anchor_data import anchor_table  # noqa: E402


def files(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), path) for d, _, names in os.walk(path) for n in names}


def timed_on_copies(source: str, work: pathlib.Path, reps: int, run: Callable[[str], object]) -> tuple[float, str]:
    """Median time of ``run`` on fresh copies of ``source``; returns it and the last copy's path."""
    times, path = [], ""
    for rep in range(reps):
        path = str(work / f"run-{rep}")
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(source, path)
        start = time.perf_counter()
        run(path)
        times.append(time.perf_counter() - start)
        if rep < reps - 1:
            shutil.rmtree(path)
    return statistics.median(times), path


def compaction(tmp: pathlib.Path, wide: bool, fragments: int, rows: int, reps: int) -> None:
    label = "wide" if wide else "narrow"
    source = str(tmp / f"compact-src-{label}")
    table = anchor_table(fragments * rows, wide)
    pylance.write_dataset(table, source, max_rows_per_file=rows, data_storage_version="2.0")
    expected = pylance.dataset(source).to_table()
    mine, mine_path = timed_on_copies(source, tmp / f"ours-{label}", reps, lambda p: ours.compact_files(p))
    theirs, theirs_path = timed_on_copies(
        source, tmp / f"pylance-{label}", reps, lambda p: pylance.dataset(p).optimize.compact_files()
    )
    assert len(pylance.dataset(mine_path).get_fragments()) == len(pylance.dataset(theirs_path).get_fragments()) == 1
    assert pylance.dataset(mine_path).to_table().equals(expected)
    mb = table.nbytes / 1e6
    print(f"compact_files {fragments} x {rows:,} rows ({label}, {mb:.0f} MB Arrow): "
          f"ours {mine * 1e3:7.1f} ms ({mb / mine:6.1f} MB/s), pylance {theirs * 1e3:7.1f} ms "
          f"({mb / theirs:6.1f} MB/s), ratio ours/pylance {mine / theirs:.2f}")


def indexed_compaction(tmp: pathlib.Path, fragments: int, rows: int, reps: int) -> None:
    source = str(tmp / "compact-src-indexed")
    table = anchor_table(fragments * rows, False)
    pylance.write_dataset(table, source, max_rows_per_file=rows, data_storage_version="2.0")
    ds = pylance.dataset(source)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("category", "BITMAP")
    ds.create_scalar_index("tags", "LABEL_LIST")
    pylance.dataset(source).delete("id % 20 = 7")
    times: dict[str, list[float]] = {"ours": [], "pylance": []}
    runs = {"ours": lambda p: ours.compact_files(p), "pylance": lambda p: pylance.dataset(p).optimize.compact_files()}
    for rep in range(reps):  # interleaved
        for name, run in runs.items():
            path = str(tmp / f"{name}-indexed-{rep}")
            shutil.copytree(source, path)
            start = time.perf_counter()
            run(path)
            times[name].append(time.perf_counter() - start)
    mine_path, theirs_path = str(tmp / f"ours-indexed-{reps - 1}"), str(tmp / f"pylance-indexed-{reps - 1}")
    a, b = pylance.dataset(mine_path), pylance.dataset(theirs_path)
    assert len(a.get_fragments()) == len(b.get_fragments()) == 1
    assert [(i["name"], i["fragment_ids"]) for i in a.list_indices()] == [
        (i["name"], i["fragment_ids"]) for i in b.list_indices()]
    for query in ("id = 1234", "id < 500", "category = 'category_03'", "array_has_any(tags, ['tag_17'])"):
        assert "ScalarIndexQuery" in a.scanner(filter=query).explain_plan(), query
        assert a.to_table(filter=query).sort_by("id").equals(
            a.to_table(filter=query, use_scalar_index=False).sort_by("id")), query
    mine, theirs = min(times["ours"]), min(times["pylance"])
    print(f"compact_files indexed {fragments} x {rows:,} rows (BTREE+BITMAP+LABEL_LIST remapped): "
          f"ours {mine * 1e3:7.1f} ms, pylance {theirs * 1e3:7.1f} ms (best of {reps}), "
          f"ratio ours/pylance {mine / theirs:.2f}")


def cleanup(tmp: pathlib.Path, wide: bool, appends: int, rows: int, reps: int) -> None:
    label = "wide" if wide else "narrow"
    source = str(tmp / f"cleanup-src-{label}")
    table = anchor_table(rows * (appends + 1), wide)
    pylance.write_dataset(table.slice(0, rows), source, data_storage_version="2.0")
    for i in range(1, appends + 1):
        pylance.write_dataset(table.slice(i * rows, rows), source, mode="append")
    pylance.dataset(source).optimize.compact_files()
    zero = dt.timedelta(0)
    stats = {}

    def run_ours(path: str) -> None:
        stats["ours"] = ours.cleanup_old_versions(path, older_than=zero)

    def run_pylance(path: str) -> None:
        stats["pylance"] = pylance.dataset(path).cleanup_old_versions(older_than=zero)

    mine, mine_path = timed_on_copies(source, tmp / f"ours-clean-{label}", reps, run_ours)
    theirs, theirs_path = timed_on_copies(source, tmp / f"pylance-clean-{label}", reps, run_pylance)
    assert files(mine_path) == files(theirs_path), "ours and pylance left different files"
    s, t = stats["ours"], stats["pylance"]
    assert (s.old_versions, s.data_files_removed, s.bytes_removed) == (
        t.old_versions, t.data_files_removed, t.bytes_removed)
    print(f"cleanup_old_versions ({s.old_versions} old versions, {s.files_removed} files, "
          f"{s.bytes_removed / 1e6:.1f} MB, {label}): ours {mine * 1e3:6.1f} ms, pylance {theirs * 1e3:6.1f} ms, "
          f"ratio ours/pylance {mine / theirs:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fragments", type=int, default=200)
    parser.add_argument("--rows-per-fragment", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--indexed-only", action="store_true", help="only the indexed compaction")
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lance-maintenance-bench-"))
    try:
        indexed_compaction(tmp, args.fragments, args.rows_per_fragment, args.reps)
        if args.indexed_only:
            return
        for wide in (False, True):
            compaction(tmp, wide, args.fragments, args.rows_per_fragment, args.reps)
        for wide in (False, True):
            cleanup(tmp, wide, args.fragments, args.rows_per_fragment, args.reps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
