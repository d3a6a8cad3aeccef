"""Vector index maintenance benchmark: ours vs pylance 14 on identical copies.

Usage: python bench/bench_vector_maintenance.py [--rows 200000] [--dim 128] [--partitions 64]
       [--sub-vectors 16] [--type IVF_PQ] [--reps 3]

The source is written by pylance (``--rows`` Gaussian blobs in 8 files), indexed by pylance,
a tenth of its rows deleted and a tenth appended (2 fragments). Each run copies it and times on
the copy, alternating ours and pylance: ``optimize_indices(num_indices_to_merge=0)`` (a delta
over the appended rows) and ``compact_files()`` of the optimized copy (the indexed fragments are
rewritten and both segments remapped). Prints the best time of each and the ratio ours / pylance
(compaction target: <= 1.5).
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


def _table(vectors: np.ndarray, start: int) -> pa.Table:
    n, dim = vectors.shape
    return pa.table({"id": np.arange(start, start + n, dtype=np.int64),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--sub-vectors", type=int, default=16)
    parser.add_argument("--type", default="IVF_PQ")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(64, args.dim)) * 2
    extra = args.rows // 10
    vectors = (centers[rng.integers(0, 64, args.rows + extra)]
               + rng.normal(size=(args.rows + extra, args.dim))).astype(np.float32)
    root = pathlib.Path(tempfile.mkdtemp(prefix="bench_vmaint_"))
    source = str(root / "source")
    pylance.write_dataset(_table(vectors[:args.rows], 0), source, max_rows_per_file=args.rows // 8)
    params = {"num_partitions": args.partitions}
    if args.type == "IVF_PQ":
        params["num_sub_vectors"] = args.sub_vectors
    pylance.dataset(source).create_index("vec", args.type, **params)
    pylance.dataset(source).delete("id % 10 = 3")
    for half in range(2):
        start = args.rows + half * extra // 2
        pylance.write_dataset(_table(vectors[start:start + extra // 2], start), source, mode="append")
    best: dict[tuple[str, str], float] = {}
    for rep in range(args.reps):
        for who in ("ours", "pylance") if rep % 2 == 0 else ("pylance", "ours"):
            copy = str(root / f"{who}{rep}")
            shutil.copytree(source, copy)
            opened = ours.dataset if who == "ours" else pylance.dataset
            t0 = time.perf_counter()
            opened(copy).optimize.optimize_indices(num_indices_to_merge=0)
            t1 = time.perf_counter()
            opened(copy).optimize.compact_files()
            t2 = time.perf_counter()
            for step, seconds in (("optimize_indices", t1 - t0), ("compact_files", t2 - t1)):
                best[(step, who)] = min(best.get((step, who), float("inf")), seconds)
            assert len(pylance.dataset(copy).list_indices()) == 2
            shutil.rmtree(copy)
    print(f"{args.type} {args.rows} x {args.dim}, {args.partitions} partitions, best of {args.reps}:")
    for step in ("optimize_indices", "compact_files"):
        mine, theirs = best[(step, "ours")], best[(step, "pylance")]
        print(f"  {step:17s} ours {mine:7.2f} s  pylance {theirs:7.2f} s  ratio {mine / theirs:5.2f}")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
