"""A writer process doing random operations on a shared dataset (run as ``python mixed_workers.py ...``).

Used by ``test_mixed_concurrency.py``: several of these, some on our core and some on pylance, change
one dataset at the same time. Each logs every operation that committed, as one JSON line, so the
test can compute what the dataset must hold at the end whatever order the commits landed in:

* rows ``0 <= id < SHARED`` are shared: any worker deletes ranges of them or adds 1 to their ``v``
  (deletes and increments commute, so the end state depends only on which operations committed);
* each worker owns the ids from ``(worker + 1) * OWN_SPAN``: only it appends, deletes, updates or
  upserts them, in its own order;
* a column added (``id * factor``) holds that for every row the add saw and every row upserted after,
  null for rows appended after;
* compaction, index builds (BTREE on ``id``, IVF_PQ on ``e``, full-text on ``s``), index
  optimisation, cleanup and tags change no row (a tagged version must survive every cleanup).

Conflicts the engines report (pylance's retryable-conflict errors, our ``CommitConflictError``) make
the worker retry the operation on the latest version; any other error ends the worker with a
traceback, which fails the test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import pathlib
import random
import sys
import time

import numpy as np
import pyarrow as pa

SHARED = 2_000
OWN_SPAN = 1_000_000
#: How long one operation may keep conflicting before the worker gives up. A Merge (``add_columns``)
#: conflicts with every concurrent commit, in both engines, so under six writers it may only land when
#: the others pause or finish.
RETRY_FOR = 600.0
#: Versions (and unreferenced files) older than this go in a cleanup: longer than any one attempt of an
#: operation takes, else a cleanup could remove the files of a commit in flight (as with pylance alone).
CLEANUP_AFTER = dt.timedelta(seconds=8)


DIM = 8


def rows(ids: np.ndarray, bump: int = 0) -> pa.Table:
    """Rows whose every column but ``v`` is a function of ``id``."""
    ids = np.asarray(ids, dtype=np.int64)
    vectors = ((ids[:, None] * np.arange(1, DIM + 1)) % 97 / 97).astype(np.float32)
    return pa.table({
        "id": ids,
        "v": ids * 1000 + bump,
        "s": pa.array(np.char.add("s", ids.astype(str))),
        "e": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM),
    })


def initial() -> pa.Table:
    return rows(np.arange(SHARED))


def _is_conflict(engine: str, exc: BaseException) -> bool:
    if engine == "ours":
        from airflow_lance.core.errors import CommitConflictError

        return isinstance(exc, CommitConflictError)
    text = str(exc).lower()
    return "conflict" in text or "retryable" in text or "concurrent" in text


class Worker:
    def __init__(self, engine: str, uri: str, worker: int, seed: int, log_path: str,
                 storage_options: dict[str, str] | None = None) -> None:
        if engine == "ours":
            import airflow_lance.core as lance
        else:
            import lance  # type: ignore[no-redef]
        self.lance, self.engine, self.uri, self.worker = lance, engine, uri, worker
        self.rng = random.Random(seed)
        self.jitter = random.Random(seed + 1)  # backoff, apart from the operations' draws
        self.next_id = (worker + 1) * OWN_SPAN
        self.own: list[int] = []  # ids this worker has inserted (present or deleted)
        self.columns_added = 0
        self.log_path = log_path
        self.options = {"storage_options": storage_options} if storage_options else {}

    def dataset(self):  # the latest version
        return self.lance.dataset(self.uri, **self.options)

    def _fresh(self, n: int) -> np.ndarray:
        ids = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        self.next_id += n
        self.own.extend(ids.tolist())
        return ids

    def _range(self, shared: bool) -> tuple[int, int]:
        if shared or not self.own:
            a = self.rng.randrange(SHARED)
            return a, min(SHARED, a + self.rng.randrange(1, 60))
        a = self.rng.choice(self.own)
        return a, a + self.rng.randrange(1, 40)

    # -- operations: each returns the log entry of what committed --------------------------------

    def append(self) -> dict:
        ids = self._fresh(self.rng.randrange(1, 80))
        self.lance.write_dataset(rows(ids), self.uri, mode="append", **self.options)
        return {"op": "insert", "ids": [int(ids[0]), int(ids[-1]) + 1]}

    def delete(self) -> dict:
        a, b = self._range(shared=self.rng.random() < 0.6)
        self.dataset().delete(f"id >= {a} AND id < {b}")
        return {"op": "delete", "range": [a, b]}

    def update(self) -> dict:
        a, b = self._range(shared=self.rng.random() < 0.7)
        self.dataset().update({"v": "v + 1"}, where=f"id >= {a} AND id < {b}")
        return {"op": "increment", "range": [a, b]}

    def upsert(self) -> dict:
        known = self.rng.sample(self.own, min(len(self.own), self.rng.randrange(0, 30)))
        fresh = self._fresh(self.rng.randrange(0, 30))
        ids = np.array(sorted(known) + fresh.tolist(), dtype=np.int64)
        if not len(ids):
            ids = self._fresh(1)
        ds = self.dataset()
        source = rows(ids, bump=500)
        # Full rows: the columns added so far too (``c<worker>_<factor>`` holds ``id * factor``). With a
        # subset of the columns pylance 14 rewrites them in place (an Update naming the fields it changed),
        # which takes the fragment out of the vector index's bitmap while the index keeps its rows; once
        # that fragment leaves the dataset, pylance's own searches return fewer than k rows (pylance alone
        # does this), which would hide what the vector checks look for.
        for field in ds.schema:
            if field.name not in source.column_names:
                source = source.append_column(field, pa.array(ids * int(field.name.rsplit("_", 1)[1]), field.type))
        builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
        if self.engine == "pylance":
            # pylance retries a lost commit with this same source on the latest version: after a concurrent
            # add_column that is a subset of the columns again, updated in place. The worker's own retry
            # builds the source anew.
            builder = builder.conflict_retries(0)
        builder.execute(source.select(ds.schema.names))
        return {"op": "upsert", "ids": ids.tolist()}

    def compact(self) -> dict:
        self.dataset().optimize.compact_files(target_rows_per_fragment=self.rng.choice([200, 1000, 5000]))
        return {"op": "compact"}

    def index(self) -> dict:
        """Build a missing index (pylance alone builds the full-text one), else optimise them all."""
        ds = self.dataset()
        names = {i.name for i in ds.describe_indices()}
        missing = [n for n in ("id_idx", "e_idx", "s_idx") if n not in names and (n != "s_idx" or self.engine == "pylance")]
        if not missing or (names and self.rng.random() < 0.6):
            ds.optimize.optimize_indices()
            return {"op": "optimize_indices"}
        name = self.rng.choice(missing)
        if name == "id_idx":
            ds.create_scalar_index("id", "BTREE", name=name, replace=True)
        elif name == "e_idx":
            ds.create_index("e", "IVF_PQ", name=name, num_partitions=2, num_sub_vectors=2, replace=True)
        else:
            ds.create_scalar_index("s", "INVERTED", name=name, replace=True)
        return {"op": "create_index", "name": name}

    def cleanup(self) -> dict:
        self.dataset().cleanup_old_versions(older_than=CLEANUP_AFTER, error_if_tagged_old_versions=False)
        return {"op": "cleanup"}

    def add_column(self) -> dict:
        """A column computed from ``id`` by a SQL expression: ``id * factor``."""
        factor = self.rng.randrange(2, 1000)
        name = f"c{self.worker}_{factor}"
        ds = self.dataset()
        if name in ds.schema.names or self.columns_added >= 2 or ds.data_storage_version in ("0.1", "legacy"):
            return {"op": "noop"}  # legacy files: appends without the column would be refused (both engines)
        ds.add_columns({name: f"id * {factor}"})
        self.columns_added += 1
        return {"op": "add_column", "column": name, "factor": factor}

    def tag(self) -> dict:
        ds = self.dataset()
        name = f"w{self.worker}-{self.next_id}-{self.rng.randrange(10**9)}"
        ds.tags.create(name, ds.version)
        return {"op": "tag", "tag": name, "version": ds.version}

    OPERATIONS = (("append", 5), ("delete", 3), ("update", 4), ("upsert", 3), ("compact", 2), ("index", 1),
                  ("cleanup", 1), ("tag", 1), ("add_column", 1))

    def run(self, count: int, only: frozenset[str] | None = None, stop: pathlib.Path | None = None,
            pause: float = 0.0) -> None:
        """``count`` operations drawn by weight among ``OPERATIONS`` (those named in ``only``, if given),
        or fewer: none starts once ``stop`` exists. Between two operations the worker waits up to
        ``pause`` seconds (uniformly drawn)."""
        chosen = [(name, weight) for name, weight in self.OPERATIONS if only is None or name in only]
        names = [name for name, _ in chosen]
        weights = [weight for _, weight in chosen]
        for _ in range(count):
            if stop is not None and stop.exists():
                break
            name = self.rng.choices(names, weights)[0]
            state = (self.next_id, list(self.own), self.rng.getstate())
            deadline = time.monotonic() + RETRY_FOR
            for attempt in itertools.count():
                try:
                    entry = getattr(self, name)()
                    break
                except Exception as exc:  # only conflicts are retried, the rest re-raised
                    if not _is_conflict(self.engine, exc):
                        raise
                    # redo the same operation: same ids, same ranges
                    self.next_id, self.own = state[0], list(state[1])
                    self.rng.setstate(state[2])
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{self.engine} worker {self.worker}: {name} conflicted "
                                           f"{attempt + 1} times in {RETRY_FOR:.0f} s") from exc
                    time.sleep(min(0.5, 0.01 * (attempt + 1)) * self.jitter.random())
            entry.update(worker=self.worker, engine=self.engine, time=round(time.time(), 3))
            with open(self.log_path, "a", encoding="utf-8") as log:  # one line, appended whole
                log.write(json.dumps(entry) + "\n")
            if pause:
                time.sleep(pause * self.jitter.random())


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=["ours", "pylance"])
    parser.add_argument("uri")
    parser.add_argument("worker", type=int)
    parser.add_argument("seed", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("log")
    parser.add_argument("--storage-options-file", help="a file holding the storage options as JSON")
    parser.add_argument("--operations", help="comma-separated names of the operations to draw (default: all)")
    parser.add_argument("--stop-file", type=pathlib.Path, help="start no operation once this file exists")
    parser.add_argument("--pause", type=float, default=0.0, help="wait up to this many seconds between operations")
    args = parser.parse_args(argv)
    storage = json.loads(pathlib.Path(args.storage_options_file).read_text()) if args.storage_options_file else None
    only = frozenset(args.operations.split(",")) if args.operations else None
    unknown = (only or frozenset()) - {name for name, _ in Worker.OPERATIONS}
    if unknown:
        parser.error(f"unknown operations: {sorted(unknown)}")
    Worker(args.engine, args.uri, args.worker, args.seed, args.log, storage).run(
        args.count, only, args.stop_file, args.pause)


if __name__ == "__main__":
    main(sys.argv[1:])
