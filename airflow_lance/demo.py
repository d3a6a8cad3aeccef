"""`make demo`: an end-to-end run of the Lance core on a local dataset.

Creates a dataset, appends to it, prints the version history and row counts,
reads an old version back (time travel), and confirms that the official
``pylance`` package opens the result identically when it is installed.
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile

import numpy as np
import pyarrow as pa

import airflow_lance.core as lance


def sample_batch(start: int, rows: int, seed: int) -> pa.Table:
    """Sensor-style sample data with a small embedding per row."""
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "sensor": pa.array(rng.choice(["alpha", "beta", "gamma"], rows)),
            "reading": pa.array(rng.normal(20.0, 5.0, rows)),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 8, dtype=np.float32)), 8),
        }
    )


def run(root: pathlib.Path) -> None:
    uri = str(root / "readings.lance")
    print(f"dataset: {uri}")
    ds = lance.write_dataset(sample_batch(0, 10_000, 1), uri, max_rows_per_file=4_000, commit_message="initial load")
    print(f"created version {ds.version}: {ds.count_rows()} rows in {len(ds.get_fragments())} fragments")
    ds = lance.write_dataset(sample_batch(10_000, 2_500, 2), uri, mode="append", commit_message="hourly batch")
    print(f"appended -> version {ds.version}: {ds.count_rows()} rows in {len(ds.get_fragments())} fragments")
    ds.tags.create("initial", 1)
    print("tagged version 1 as 'initial'")
    print("version history:")
    for entry in ds.versions():
        meta = entry["metadata"]
        print(f"  v{entry['version']}  {entry['timestamp']:%Y-%m-%d %H:%M:%S}  rows={meta['total_rows']}"
              f"  fragments={meta['total_fragments']}  bytes={meta['total_files_size']}")
    initial = lance.dataset(uri, version="initial")
    print(f"time travel: tag 'initial' -> version {initial.version} with {initial.count_rows()} rows")
    table = ds.to_table(columns=["sensor", "reading"])
    means = table.group_by("sensor").aggregate([("reading", "mean")]).sort_by("sensor")
    for sensor, mean in zip(means.column("sensor").to_pylist(), means.column("reading_mean").to_pylist()):
        print(f"  mean reading of {sensor}: {mean:.2f}")
    try:
        import lance as pylance
    except ImportError:
        print("pylance is not installed: skipping the cross-check")
        return
    theirs = pylance.dataset(uri)
    same = theirs.to_table().equals(ds.to_table())
    print(f"pylance {pylance.__version__} opens version {theirs.version} with {theirs.count_rows()} rows; "
          f"identical contents: {same}")
    if not same:
        raise SystemExit("pylance disagrees with airflow-lance")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=pathlib.Path, help="directory for the demo dataset (default: a temp dir)")
    args = parser.parse_args()
    if args.root:
        args.root.mkdir(parents=True, exist_ok=True)
        run(args.root)
    else:
        with tempfile.TemporaryDirectory(prefix="airflow-lance-demo-") as tmp:
            run(pathlib.Path(tmp))


if __name__ == "__main__":
    main()
