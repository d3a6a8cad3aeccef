"""Scalar index build benchmark: ``create_scalar_index`` ours vs pylance 14 on identical copies.

Usage: python bench/bench_indices.py [--rows 10000000] [--reps 3]

The source (an int64 column with ~rows/10 distinct values, a low-cardinality int32 column, 1M-row
files, format 2.2) is written once by pylance and copied for every run; runs alternate ours and
pylance. Prints the best time of each and the ratio ours / pylance (target: <= 2), and checks that
pylance answers the same query through both indices.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import tempfile
import time

import lance as pylance
import numpy as np
import pyarrow as pa

import airflow_lance.core as ours

CASES = [("v", "BTREE"), ("c", "BITMAP")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    table = pa.table({"v": rng.integers(0, max(1, args.rows // 10), args.rows),
                      "c": rng.integers(0, 100, args.rows).astype(np.int32)})
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        source = str(work / "source")
        pylance.write_dataset(table, source, max_rows_per_file=1_000_000)
        for column, index_type in CASES:
            best = {"ours": float("inf"), "pylance": float("inf")}
            for rep in range(args.reps):
                for name, lib in (("ours", ours), ("pylance", pylance)):
                    path = str(work / f"{name}-{rep}")
                    shutil.rmtree(path, ignore_errors=True)
                    shutil.copytree(source, path)
                    ds = lib.dataset(path)
                    start = time.perf_counter()
                    ds.create_scalar_index(column, index_type)
                    best[name] = min(best[name], time.perf_counter() - start)
                    flt = f"{column} = 7"
                    count = pylance.dataset(path).count_rows(flt)
                    assert count == pylance.dataset(source).count_rows(flt), (name, count)
            print(f"{index_type} on {args.rows} rows: ours {best['ours']:.2f} s, pylance {best['pylance']:.2f} s, "
                  f"ratio {best['ours'] / best['pylance']:.2f}")


if __name__ == "__main__":
    main()
