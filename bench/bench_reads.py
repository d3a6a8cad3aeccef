"""Random-access reads vs pylance in one run: ``take``, filtered scans with ``limit``, full scans.

Usage: python bench/bench_reads.py [--rows N] [--reps 3] [--variants wide,narrow] [--writer pylance,ours]
                                   [--cases take,limit,filter_limit,late_limit,scan,projection] [--json out.json]

For each anchor table (bench/anchor_data.py) and writer, one 2.2 dataset
(the default format) is written; then every case runs on that same dataset
by us and by pylance; results are checked equal. Cases:

* ``take``: ``ds.take(10,000 random positions)`` (all columns);
* ``limit``: ``ds.to_table(limit=100, offset=1,000,000)`` (no filter);
* ``filter_limit``: ``ds.to_table(filter="category = 'category_03'", limit=100)``;
* ``late_limit``: ``ds.to_table(filter="id >= 1,900,000", limit=100)`` (matches only in the last fragment);
* ``scan``/``projection``: full scan, ``[id, score]`` projection.

Medians of --reps runs. Ratio = our time / pylance's ("x slower" > 1 means we are slower).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import lance as pylance  # noqa: E402  (the oracle: bench-only)

import airflow_lance.core as ours  # noqa: E402
from anchor_data import anchor_table  # noqa: E402
from bench_common import timed  # noqa: E402

TAKE = 10_000
CASES = ("take", "limit", "filter_limit", "late_limit", "scan", "projection")


def case_calls(rows: int, seed: int = 7) -> dict[str, tuple]:
    """case -> (callable on a dataset object, args description)."""
    positions = np.sort(np.random.default_rng(seed).choice(rows, size=min(TAKE, rows), replace=False))
    late = max(0, rows - rows // 20)
    return {
        "take": lambda ds: ds.take(positions),
        "limit": lambda ds: ds.to_table(limit=100, offset=rows // 2),
        "filter_limit": lambda ds: ds.to_table(filter="category = 'category_03'", limit=100),
        "late_limit": lambda ds: ds.to_table(filter=f"id >= {late}", limit=100),
        "scan": lambda ds: ds.to_table(),
        "projection": lambda ds: ds.to_table(columns=["id", "score"]),
    }


def bench_variant(name: str, writer: str, rows: int, reps: int, cases: list[str], tmp: pathlib.Path) -> list[dict]:
    table = anchor_table(rows, wide=(name == "wide"))
    path = str(tmp / f"{name}-{writer}-2.2")
    if writer == "pylance":
        pylance.write_dataset(table, path, data_storage_version="2.2")
    else:
        ours.write_dataset(table, path, data_storage_version="2.2")
    del table
    calls = case_calls(rows)
    results = []
    for case in cases:
        fn = calls[case]
        mine, theirs = fn(ours.dataset(path)), fn(pylance.dataset(path))
        if case != "filter_limit" or True:
            assert mine.equals(theirs), f"{case}: our result differs from pylance's"
        del mine, theirs
        t_ours = timed(lambda: fn(ours.dataset(path)), reps)
        t_pl = timed(lambda: fn(pylance.dataset(path)), reps)
        results.append({"variant": name, "writer": writer, "case": case, "ours_s": t_ours, "pylance_s": t_pl,
                        "ratio": t_ours / t_pl})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--variants", default="wide,narrow")
    parser.add_argument("--writer", default="pylance,ours")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    cases = args.cases.split(",")
    print(f"pylance {pylance.__version__}, rows={args.rows:,}, median of {args.reps}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'variant':7s} {'writer':8s} {'case':13s} {'ours s':>9s} {'pylance s':>9s} {'x slower':>9s}")
    all_results = []
    with tempfile.TemporaryDirectory(prefix="lance-bench-reads-") as tmp:
        for variant in args.variants.split(","):
            for writer in args.writer.split(","):
                for row in bench_variant(variant, writer, args.rows, args.reps, cases, pathlib.Path(tmp)):
                    all_results.append(row)
                    print(f"{variant:7s} {writer:8s} {row['case']:13s} {row['ours_s']:9.4f} {row['pylance_s']:9.4f} "
                          f"{row['ratio']:9.2f}", flush=True)
                shutil.rmtree(tmp, ignore_errors=True)
                pathlib.Path(tmp).mkdir(exist_ok=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(all_results, indent=2))


if __name__ == "__main__":
    main()
