"""Vector index build benchmark: ``create_index`` ours vs pylance 14 on identical copies.

Usage: python bench/bench_vector_indices.py [--rows 1000000] [--dim 128] [--partitions 256]
       [--sub-vectors 16] [--types IVF_PQ,IVF_FLAT] [--reps 1] [--queries 100] [--nprobes 16] [--spark]
       [--dtype float32|float16|float64]

The source (Gaussian blobs, float32 unless ``--dtype``, 250k-row files) is written once by pylance and copied for every
run; runs alternate ours and pylance. Prints the best build time of each, the ratio ours / pylance
(target: <= 2) and recall@10 through each index at the same nprobes (exact neighbours by numpy).
``--spark`` adds the operator's Spark job plus commit as a third side (see bench_indices.py: the
Spark start-up is printed, not timed; the timed region holds both passes over the data, the
training on the driver, the one assembly task reading the staged parts back and writing the index
files).
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
from bench_indices import spark_create_index, spark_session


def _blobs(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(64, dim)) * 2
    return (centers[rng.integers(0, 64, n)] + rng.normal(size=(n, dim))).astype(np.float32)


def _recall(path: str, queries: np.ndarray, truth: np.ndarray, nprobes: int) -> float:
    ds = pylance.dataset(path)
    hits = 0
    for q, expected in zip(queries, truth):
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": nprobes}, columns=["id"])
        hits += len(np.intersect1d(got["id"].to_numpy(), expected))
    return hits / truth.size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--partitions", type=int, default=256)
    parser.add_argument("--sub-vectors", type=int, default=16)
    parser.add_argument("--types", default="IVF_PQ,IVF_FLAT")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--nprobes", type=int, default=16)
    parser.add_argument("--spark", action="store_true")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "float64"))
    parser.add_argument("--num-bits", type=int, default=8, choices=(4, 8))
    args = parser.parse_args()
    spark = spark_session() if args.spark else None
    vectors = _blobs(args.rows, args.dim, 0).astype(args.dtype)
    queries = _blobs(args.queries, args.dim, 1).astype(args.dtype)
    x, qs = vectors.astype(np.float64 if args.dtype == "float64" else np.float32), queries.astype(np.float64)
    norms = (x * x).sum(1)
    truth = np.concatenate([np.argsort(norms - 2 * (qs[i:i + 10] @ x.T), axis=1)[:, :10]
                            for i in range(0, len(queries), 10)])  # ten queries per block
    table = pa.table({"id": np.arange(args.rows),
                      "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), args.dim)})
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        source = str(work / "source")
        pylance.write_dataset(table, source, max_rows_per_file=250_000)
        for index_type in args.types.split(","):
            params = {"num_partitions": args.partitions}
            if index_type == "IVF_PQ":
                params["num_sub_vectors"] = args.sub_vectors
                if args.num_bits != 8:
                    params["num_bits"] = args.num_bits
            sides = [("ours", ours), ("pylance", pylance), *([("spark", None)] if spark else [])]
            best = {name: float("inf") for name, _ in sides}
            recall = {}
            for rep in range(args.reps):
                for name, lib in sides:
                    path = str(work / f"{name}-{rep}")
                    shutil.rmtree(path, ignore_errors=True)
                    shutil.copytree(source, path)
                    start = time.perf_counter()
                    if lib is None:
                        spark_create_index(spark, path, {"column": "vec", "index_type": index_type, **params})
                    else:
                        lib.dataset(path).create_index("vec", index_type, **params)
                    best[name] = min(best[name], time.perf_counter() - start)
                    recall[name] = _recall(path, queries, truth, args.nprobes)
            print(f"{index_type} {args.rows}x{args.dim} {args.dtype} {params}: ours {best['ours']:.2f} s, "
                  f"pylance {best['pylance']:.2f} s, ratio {best['ours'] / best['pylance']:.2f}; "
                  f"recall@10 nprobes={args.nprobes}: ours {recall['ours']:.3f}, pylance {recall['pylance']:.3f}"
                  + (f"; spark job + commit {best['spark']:.2f} s, ratio {best['spark'] / best['pylance']:.2f}, "
                     f"recall {recall['spark']:.3f}" if spark else ""))


if __name__ == "__main__":
    main()
