"""JSON columns: our reads and writes of pylance's JSONB against pylance 14's, same documents, one run.

Usage: python bench/bench_json.py [--rows 200000] [--reps 5]

``--rows`` documents of five keys (a string, a double, a nested array of strings, an integer and a
boolean), about 90 bytes of text each, in an ``arrow.json`` column beside an ``int64`` id:

* ``write``: ``write_dataset`` of the table (text parsed and encoded as JSONB), ours and pylance's;
* ``read``: ``to_table`` of the dataset pylance wrote (JSONB decoded to canonical text), ours with
  the compiled loops (``AIRFLOW_LANCE_KERNELS=numba``, the ``fast`` extra), ours with numpy, and
  pylance's.

Median of ``--reps`` after a warm-up run (which also compiles the loops once). Ratios > 1: ours is
slower.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import lance as pylance
import numpy as np
import pyarrow as pa
from bench_common import timed

import airflow_lance.core as lance
from airflow_lance.core.file.v21 import kernels


def documents(rows: int) -> pa.Table:
    rng = np.random.default_rng(1)
    scores = rng.normal(size=rows)
    texts = [json.dumps({"user": f"u{i}", "score": float(scores[i]), "tags": ["a", "b", str(i % 7)], "n": i,
                         "ok": bool(i % 2)}) for i in range(rows)]
    return pa.table({"id": pa.array(np.arange(rows)), "doc": pa.array(texts, pa.json_(pa.string()))})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    table = documents(args.rows)
    with tempfile.TemporaryDirectory(prefix="lance-json-bench-") as tmp:
        theirs, ours = str(pathlib.Path(tmp) / "theirs.lance"), str(pathlib.Path(tmp) / "ours.lance")
        seconds = {
            "write pylance": timed(lambda: pylance.write_dataset(table, theirs, mode="overwrite"), args.reps),
            "write ours": timed(lambda: lance.write_dataset(table, ours, mode="overwrite"), args.reps),
        }
        assert lance.dataset(ours).to_table().equals(pylance.dataset(theirs).to_table())
        assert pylance.dataset(ours).to_table().equals(pylance.dataset(theirs).to_table())
        seconds["read pylance"] = timed(lambda: pylance.dataset(theirs).to_table(), args.reps)
        for loops in ("numba", "numpy"):
            os.environ[kernels.ENV] = loops
            lance.dataset(theirs).to_table()  # warm-up: compiles the loops once per machine
            seconds[f"read ours ({loops})"] = timed(lambda: lance.dataset(theirs).to_table(), args.reps)
            assert lance.dataset(theirs).to_table().equals(pylance.dataset(theirs).to_table())
    mb = sum(len(t) for t in table.column("doc").cast(pa.string()).to_pylist()) / 1e6
    print(f"{args.rows:,} JSON documents ({mb:.1f} MB of text), median of {args.reps}")
    for case, value in seconds.items():
        print(f"{case:24s} {value:7.3f} s")
    print(f"ratio write ours / pylance        {seconds['write ours'] / seconds['write pylance']:6.2f}x")
    for loops in ("numba", "numpy"):
        print(f"ratio read ours ({loops}) / pylance  {seconds[f'read ours ({loops})'] / seconds['read pylance']:6.2f}x")


if __name__ == "__main__":
    main()
