"""Data evolution benchmark: ``add_columns`` of a SQL expression and of a batch UDF, ours vs
pylance, on identical copies of the 2M-row wide and narrow anchor tables.

Usage: python bench/bench_evolution.py [--rows 2000000] [--reps 3]

The source is written once by pylance (format 2.2, 1M-row files, 1% of rows deleted) and copied
for every run. Prints median times and ratios ours / pylance (target: <= 1.5), and checks that
pylance reads the same new column from both copies.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import lance as pylance  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

import airflow_lance.core as ours  # noqa: E402
from anchor_data import anchor_table  # noqa: E402


def _udf(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.record_batch([pc.multiply(pc.add(batch.column("id"), 1), 3)], names=["u"])


UDF_SCHEMA = pa.schema([("u", pa.int64())])
CASES: dict[str, Callable[[object, object], None]] = {
    "add_columns SQL": lambda ds, lib: ds.add_columns({"s2": "score * 2 + id"}),
    "add_columns batch UDF": lambda ds, lib: ds.add_columns(lib.batch_udf(output_schema=UDF_SCHEMA)(_udf),
                                                             read_columns=["id"]),
}


def _run(source: str, work: pathlib.Path, reps: int, lib: object, case: Callable) -> tuple[float, str]:
    times, path = [], ""
    for rep in range(reps):
        path = str(work / f"{lib.__name__}-{rep}")
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(source, path)
        ds = lib.dataset(path)
        start = time.perf_counter()
        case(ds, lib)
        times.append(time.perf_counter() - start)
    return statistics.median(times), path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        for wide in (False, True):
            label = "wide" if wide else "narrow"
            source = str(tmp / f"src-{label}")
            pylance.write_dataset(anchor_table(args.rows, wide), source, data_storage_version="2.2")
            pylance.dataset(source).delete("id % 100 = 7")
            for name, case in CASES.items():
                theirs, their_path = _run(source, tmp, args.reps, pylance, case)
                mine, my_path = _run(source, tmp, args.reps, ours, case)
                column = pylance.dataset(their_path).schema.names[-1]
                same = pylance.dataset(my_path).to_table(columns=[column]).equals(
                    pylance.dataset(their_path).to_table(columns=[column]))
                print(f"{label:6s} {name:22s} ours {mine:7.3f}s  pylance {theirs:7.3f}s  "
                      f"ratio {mine / theirs:5.2f}  same={same}", flush=True)
                assert same
                for path in (their_path, my_path):
                    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
