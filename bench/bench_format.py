"""Format-core benchmark: our write/scan vs pylance on the anchor tables, in one run.

Usage: python bench/bench_format.py [--rows N] [--reps 3] [--variants wide,narrow] [--json out.json]

Writes are timed against pylance 2.0 and pylance's default (2.2); scans
(full, and the [id, score] projection) against pylance 2.0 reading its own
2.0 dataset. Medians of --reps runs; every result is freed (and gc run)
before the next repetition. Ratios > 1 mean we are faster.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import lance as pylance  # noqa: E402  (the oracle: bench-only)

import airflow_lance.core as ours  # noqa: E402
from anchor_data import anchor_table  # noqa: E402
from bench_common import timed  # noqa: E402


def bench_variant(name: str, rows: int, reps: int, tmp: pathlib.Path) -> list[dict]:
    table = anchor_table(rows, wide=(name == "wide"))
    mb = table.nbytes / 1e6
    results = []

    def write_case(label: str, fn: Callable[[str], object]) -> float:
        path = tmp / f"{name}-{label}"
        seconds = timed(lambda: fn(str(path)), reps, setup=lambda: shutil.rmtree(path, ignore_errors=True))
        results.append({"variant": name, "case": f"write {label}", "seconds": seconds, "mb_s": mb / seconds})
        return seconds

    ours_w = write_case("ours 2.0", lambda p: ours.write_dataset(table, p, data_storage_version="2.0"))
    pl20_w = write_case("pylance 2.0", lambda p: pylance.write_dataset(table, p, data_storage_version="2.0"))
    pldef_w = write_case("pylance default", lambda p: pylance.write_dataset(table, p))

    ours_path, pl_path = str(tmp / f"{name}-ours 2.0"), str(tmp / f"{name}-pylance 2.0")
    assert ours.dataset(ours_path).to_table().equals(table), "our dataset does not round-trip"

    def scan_case(label: str, fn: Callable[[], object], nbytes: float) -> float:
        seconds = timed(fn, reps)
        results.append({"variant": name, "case": label, "seconds": seconds, "mb_s": nbytes / seconds})
        return seconds

    proj_mb = table.select(["id", "score"]).nbytes / 1e6
    ours_scan = scan_case("scan ours", lambda: ours.dataset(ours_path).to_table(), mb)
    ours_scan_pl = scan_case("scan ours (pylance's file)", lambda: ours.dataset(pl_path).to_table(), mb)
    pl_scan = scan_case("scan pylance 2.0", lambda: pylance.dataset(pl_path).to_table(), mb)
    ours_proj = scan_case("projection ours", lambda: ours.dataset(ours_path).to_table(columns=["id", "score"]), proj_mb)
    pl_proj = scan_case(
        "projection pylance 2.0", lambda: pylance.dataset(pl_path).to_table(columns=["id", "score"]), proj_mb
    )
    ratios = {
        "write vs pylance 2.0 (x faster)": pl20_w / ours_w,
        "write vs pylance default (x faster)": pldef_w / ours_w,
        "full scan time vs pylance 2.0 (x slower)": ours_scan / pl_scan,
        "full scan of pylance's file vs pylance 2.0 (x slower)": ours_scan_pl / pl_scan,
        "projection time vs pylance 2.0 (x slower)": ours_proj / pl_proj,
    }
    for key, value in ratios.items():
        results.append({"variant": name, "case": f"ratio: {key}", "ratio": value})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--variants", default="wide,narrow")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    print(f"pylance {pylance.__version__}, rows={args.rows:,}, median of {args.reps}")
    all_results = []
    with tempfile.TemporaryDirectory(prefix="lance-bench-") as tmp:
        for variant in args.variants.split(","):
            results = bench_variant(variant, args.rows, args.reps, pathlib.Path(tmp))
            all_results += results
            for row in results:
                if "ratio" in row:
                    print(f"{variant:7s} {row['case']:62s} {row['ratio']:8.2f}")
                else:
                    print(f"{variant:7s} {row['case']:62s} {row['seconds']:8.3f} s {row['mb_s']:9.1f} MB/s")
            shutil.rmtree(tmp, ignore_errors=True)
            pathlib.Path(tmp).mkdir(exist_ok=True)
    if args.json:
        args.json.write_text(json.dumps(all_results, indent=2))


if __name__ == "__main__":
    main()
