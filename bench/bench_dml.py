"""update of 10% of the rows and merge_insert of 10% changed + 5% new rows, ours vs pylance.

Both run on identical copies of the anchor table (written by pylance); times are medians of
``--repeat`` runs, each on a fresh copy. Usage: ``python bench/bench_dml.py --rows 2000000 [--wide]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/bench_dml.py` from anywhere

import lance as pylance  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

import airflow_lance.core as ours  # noqa: E402
from bench.anchor_data import anchor_table  # noqa: E402


def _source(table: pa.Table) -> pa.Table:
    rows = table.num_rows
    rng = np.random.default_rng(7)
    changed = table.take(pa.array(rng.choice(rows, rows // 10, replace=False)))
    changed = changed.set_column(changed.schema.get_field_index("score"), "score",
                                 pc.add(changed["score"], 1.0))
    new = table.slice(0, rows // 20)
    new = new.set_column(0, "id", pc.add(new["id"], rows))
    return pa.concat_tables([changed, new])


def dml_cases(table: pa.Table) -> dict[str, Callable[[object, object], object]]:
    """The DML operations as ``case(dataset, lib)`` (also run by bench_semantics.py)."""
    source = _source(table)
    return {
        "update 10%": lambda ds, lib: ds.update({"score": "score + 1", "category": "'x'"}, where="id % 10 = 3"),
        "merge_insert 10%+5%": lambda ds, lib: ds.merge_insert("id").when_matched_update_all()
        .when_not_matched_insert_all().execute(source),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--wide", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    table = anchor_table(args.rows, args.wide)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.lance"
        pylance.write_dataset(table, base)
        work = {name: (lambda case: lambda lib, uri: case(lib.dataset(uri), lib))(case)
                for name, case in dml_cases(table).items()}
        for name, run in work.items():
            times: dict[str, list[float]] = {"pylance": [], "ours": []}
            for _ in range(args.repeat):
                for label, lib in (("pylance", pylance), ("ours", ours)):
                    uri = Path(tmp) / label
                    shutil.rmtree(uri, ignore_errors=True)
                    shutil.copytree(base, uri)
                    start = time.perf_counter()
                    result = run(lib, str(uri))
                    times[label].append(time.perf_counter() - start)
            theirs, mine = statistics.median(times["pylance"]), statistics.median(times["ours"])
            print(f"{name:22s} rows={args.rows} wide={args.wide} pylance={theirs:.2f}s ours={mine:.2f}s "
                  f"ratio={mine / theirs:.2f} {result}")


if __name__ == "__main__":
    main()
