"""Issue 17's benchmark in one run: ours vs pylance on identical copies of the narrow and wide
anchor tables (bench/anchor_data.py).

Operations: add_columns of a SQL expression and of a batch UDF (bench_evolution.CASES),
update of 10% of the rows and merge_insert of 10% changed + 5% new rows (bench_dml.dml_cases),
take of 10,000 random rows, and a filtered scan with a limit. The source of each table is
written once by pylance (format 2.2, 1% of the rows deleted); every run of a writing operation
gets a fresh copy. The reads run on the source's version 1 (before the deletions): pylance
14's ``take`` by position on a dataset with deletions costs time proportional to the table per
call (35 s for 10,000 rows of a 200k-row table, measured), which would dominate the run.
Each result is checked against pylance's.

Usage: python bench/bench_semantics.py [--rows 2000000] [--reps 3] [--tables narrow,wide]
Prints median seconds and the ratio ours / pylance (target <= 1.5) per operation and table.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Callable

BENCH = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

import lance as pylance  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import airflow_lance.core as ours  # noqa: E402
from anchor_data import anchor_table  # noqa: E402
from bench_common import timed  # noqa: E402
from bench_dml import dml_cases  # noqa: E402
from bench_evolution import CASES as EVOLUTION_CASES  # noqa: E402

TAKE_ROWS = 10_000
SCAN_FILTER = "category = 'category_03' AND score > 55"
SCAN_LIMIT = 10_000
LIBS = (("pylance", pylance), ("ours", ours))


def _read_cases(live_rows: int) -> dict[str, Callable[[object, object], pa.Table]]:
    indices = np.sort(np.random.default_rng(11).choice(live_rows, TAKE_ROWS, replace=False))
    return {
        "take 10k random": lambda ds, lib: ds.take(indices),
        "filtered scan limit": lambda ds, lib: ds.to_table(filter=SCAN_FILTER, limit=SCAN_LIMIT),
    }


def _same_result(name: str, theirs: object, mine: object, their_path: str, my_path: str) -> bool:
    if isinstance(theirs, pa.Table):
        return mine.equals(theirs)
    if isinstance(theirs, dict):
        if theirs != mine:
            return False
    # a write: pylance reads the same rows from both copies
    a = pylance.dataset(their_path).to_table().sort_by("id")
    b = pylance.dataset(my_path).to_table().sort_by("id")
    return a.equals(b)


def _writing(name: str, case: Callable, source: str, tmp: pathlib.Path, reps: int) -> tuple[dict, bool]:
    times, results, paths = {}, {}, {}
    for label, lib in LIBS:
        path = str(tmp / f"{label}-work")
        handle: dict[str, object] = {}

        def setup(lib=lib, path=path, handle=handle) -> None:
            shutil.rmtree(path, ignore_errors=True)
            shutil.copytree(source, path)
            handle["ds"] = lib.dataset(path)

        def run(lib=lib, handle=handle) -> None:
            results[label] = case(handle["ds"], lib)

        times[label] = timed(run, reps, setup)
        final = str(tmp / f"{label}-final")
        shutil.rmtree(final, ignore_errors=True)
        shutil.move(path, final)
        paths[label] = final
    same = _same_result(name, results["pylance"], results["ours"], paths["pylance"], paths["ours"])
    for path in paths.values():
        shutil.rmtree(path, ignore_errors=True)
    return times, same


def _reading(case: Callable, source: str, reps: int) -> tuple[dict, bool]:
    times, results = {}, {}
    for label, lib in LIBS:
        ds = lib.dataset(source, version=1)

        def run(lib=lib, ds=ds, label=label) -> None:
            results[label] = case(ds, lib)

        times[label] = timed(run, reps)
    return times, results["ours"].equals(results["pylance"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--tables", default="narrow,wide")
    args = parser.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        for label in args.tables.split(","):
            table = anchor_table(args.rows, label == "wide")
            source = str(tmp / f"src-{label}")
            pylance.write_dataset(table, source, data_storage_version="2.2")
            pylance.dataset(source).delete("id % 100 = 7")
            live = pylance.dataset(source, version=1).count_rows()
            work = [(n, c, True) for n, c in {**EVOLUTION_CASES, **dml_cases(table)}.items()]
            work += [(n, c, False) for n, c in _read_cases(live).items()]
            del table
            for name, case, writes in work:
                times, same = (_writing(name, case, source, tmp, args.reps) if writes
                               else _reading(case, source, args.reps))
                line = (f"| {label:6s} | {name:22s} | {times['ours']:8.3f} | {times['pylance']:8.3f} | "
                        f"{times['ours'] / times['pylance']:5.2f} | {'yes' if same else 'NO'} |")
                print(line, flush=True)
                lines.append(line)
            shutil.rmtree(source, ignore_errors=True)
    print(f"\nrows={args.rows} reps={args.reps} (median seconds)")
    print("| table  | operation              | ours (s) | pylance (s) | ratio | same result |")
    print("|--------|------------------------|----------|-------------|-------|-------------|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
