"""2.2 string compression options: write time, file size and full-scan read time, vs pylance, in one run.

Usage: python bench/bench_string_compression_v22.py [--rows N] [--rounds 3] [--reps 2]
                                                    [--variants narrow,wide] [--options zstd,fsst,lz4,none]

Each option is our writer's default string compression
(``core.file.v21.write.STRING_COMPRESSION``) set for the whole write; "pylance"
is pylance's own 2.2 write. Every (variant, option) runs in its own child
process; rounds interleave the options; each child takes the best of ``--reps``
writes (each after ``os.sync()``) and then the best of ``--reps`` full scans
of the written dataset by our reader and by pylance's. Reported: best over the
rounds (write: wall time, and the process CPU time of that write, all threads), sizes on disk,
ratios to pylance's size and to the uncompressed ("none") write.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent


def _best(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
        del result
    return best


def child(option: str, variant: str, rows: int, reps: int, out: str) -> None:
    sys.path.insert(0, str(HERE))
    import lance

    import airflow_lance.core as ours
    from airflow_lance.core.file.v21 import write as v21_write
    from anchor_data import anchor_table
    from bench_common import timed_writes

    table = anchor_table(rows, wide=(variant == "wide"))
    if option == "pylance":
        def write(path: str) -> None:
            lance.write_dataset(table, path, data_storage_version="2.2")
    else:
        v21_write.STRING_COMPRESSION = option

        def write(path: str) -> None:
            ours.write_dataset(table, path, data_storage_version="2.2")
    best, best_cpu, size = timed_writes(write, out, reps)
    assert lance.dataset(out).to_table().equals(table), "pylance does not read the dataset back"
    assert ours.dataset(out).to_table().equals(table), "we do not read the dataset back"
    read_ours = _best(lambda: ours.dataset(out).to_table(), reps)
    read_pl = _best(lambda: lance.dataset(out).to_table(), reps)
    print(json.dumps({"write": best, "cpu": best_cpu, "bytes": size, "read_ours": read_ours, "read_pylance": read_pl}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--variants", default="narrow,wide")
    parser.add_argument("--options", default="zstd,fsst,lz4,none")
    parser.add_argument("--child", nargs=4, metavar=("OPTION", "VARIANT", "ROWS", "REPS"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        option, variant, rows, reps = args.child
        child(option, variant, int(rows), int(reps), args.out)
        return
    options = [*args.options.split(","), "pylance"]
    print(f"rows={args.rows:,}, best of {args.rounds} rounds x {args.reps}, load average {os.getloadavg()[0]:.2f}")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    with tempfile.TemporaryDirectory(prefix="lance-bench-strings-") as tmp:
        for variant in args.variants.split(","):
            results: dict[str, dict] = {}
            for _ in range(args.rounds):
                for option in options:
                    out = os.path.join(tmp, "out")
                    done = subprocess.run(
                        [sys.executable, __file__, "--child", option, variant, str(args.rows), str(args.reps),
                         "--out", out], env=env, check=True, capture_output=True, text=True)
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    shutil.rmtree(out, ignore_errors=True)
                    best = results.setdefault(option, row)
                    if row["write"] < best["write"]:
                        best.update(write=row["write"], cpu=row["cpu"])
                    for key in ("read_ours", "read_pylance"):
                        best[key] = min(best[key], row[key])
            pl, raw = results["pylance"], results.get("none")
            for option in options:
                row = results[option]
                vs_none = f" = {row['write'] / raw['write']:4.2f}x none" if raw else ""
                cpu_none = f" = {row['cpu'] / raw['cpu']:4.2f}x none" if raw else ""
                print(f"{variant:6s} {option:8s} {row['bytes'] / 1e6:8.1f} MB ({row['bytes'] / pl['bytes']:5.3f}x "
                      f"pylance)  write {row['write']:6.3f} s{vs_none}, CPU {row['cpu']:6.3f} s{cpu_none}  scan: ours {row['read_ours']:6.3f} s, "
                      f"pylance {row['read_pylance']:6.3f} s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
