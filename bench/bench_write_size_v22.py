"""Format 2.2 write: file size and write time, ours (this tree and a baseline tree) vs pylance, in one run.

Usage: python bench/bench_write_size_v22.py [--rows N] [--rounds 3] [--reps 2] [--variants wide,narrow]
                                            [--baseline DIR]

``--baseline DIR``: a directory holding an older ``airflow_lance`` package
(e.g. ``git archive <commit> airflow_lance | tar -x -C DIR``) to compare
"before" with "after". Every (variant, writer) is timed in its own child
process (so both versions of the package can run), rounds interleave the
writers, each child takes the best of ``--reps`` writes; the reported time is
the best over the rounds (with the process CPU time of that write: pylance's spans its threads).
Each write starts after ``os.sync()``. Sizes are the dataset's bytes on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def child(writer: str, variant: str, rows: int, reps: int, out: str) -> None:
    sys.path.insert(0, str(HERE))
    from anchor_data import anchor_table
    from bench_common import timed_writes

    table = anchor_table(rows, wide=(variant == "wide"))
    if writer == "pylance":
        import lance

        def write(path: str) -> None:
            lance.write_dataset(table, path, data_storage_version="2.2")
    else:
        import airflow_lance.core as ours

        def write(path: str) -> None:
            ours.write_dataset(table, path, data_storage_version="2.2")
    best, best_cpu, size = timed_writes(write, out, reps)
    if writer != "pylance":  # the oracle reads what we wrote
        import lance

        assert lance.dataset(out).to_table().equals(table), "pylance does not read our 2.2 dataset back"
    print(json.dumps({"seconds": best, "cpu": best_cpu, "bytes": size}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--variants", default="wide,narrow")
    parser.add_argument("--baseline", type=pathlib.Path)
    parser.add_argument("--child", nargs=4, metavar=("WRITER", "VARIANT", "ROWS", "REPS"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        writer, variant, rows, reps = args.child
        child(writer, variant, int(rows), int(reps), args.out)
        return
    trees = {"ours": str(HERE.parent), "pylance": str(HERE.parent)}
    if args.baseline:
        trees = {"ours (baseline)": str(args.baseline.resolve()), **trees}
    print(f"rows={args.rows:,}, best of {args.rounds} rounds x {args.reps} writes, "
          f"load average {os.getloadavg()[0]:.2f}")
    results: dict[tuple[str, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="lance-bench-size-") as tmp:
        for variant in args.variants.split(","):
            for _ in range(args.rounds):
                for writer, tree in trees.items():
                    env = {**os.environ, "PYTHONPATH": tree}
                    out = os.path.join(tmp, "out")
                    done = subprocess.run(
                        [sys.executable, __file__, "--child", "pylance" if writer == "pylance" else "ours",
                         variant, str(args.rows), str(args.reps), "--out", out],
                        env=env, check=True, capture_output=True, text=True)
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    shutil.rmtree(out, ignore_errors=True)
                    best = results.setdefault((variant, writer), row)
                    if row["seconds"] < best["seconds"]:
                        best.update(seconds=row["seconds"], cpu=row["cpu"])
            pl = results[(variant, "pylance")]
            for writer in trees:
                row = results[(variant, writer)]
                print(f"{variant:7s} {writer:16s} {row['bytes'] / 1e6:8.1f} MB ({row['bytes'] / pl['bytes']:5.3f}x "
                      f"pylance)  write {row['seconds']:6.3f} s ({pl['seconds'] / row['seconds']:4.2f}x faster "
                      f"than pylance), CPU {row['cpu']:6.3f} s")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
