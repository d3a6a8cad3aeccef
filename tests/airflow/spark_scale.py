"""A large write through ``LanceSparkWriteOperator`` with its memory measured: the source (Parquet
files of ids and 256-float32 embeddings, generated here with numpy: :func:`write_source`), Spark's
own Parquet write of the same files (``scale_parquet_job.py``, run by spark-submit with the same
settings), and the peak RSS
of every process of the job, sampled from /proc every 0.5 s and grouped by kind: the spark-submit
JVM (the driver; in ``local`` mode the executors run in it), the PySpark driver, executor JVMs
(``CoarseGrainedExecutorBackend``, on a cluster) and Python workers (``pyspark.daemon`` and the
workers it forks)."""

from __future__ import annotations

import dataclasses
import pathlib
import threading
import time

import psutil

DIM = 256
ROW_BYTES = 8 + 4 * DIM  # id int64 + fixed_size_list<float32>[256], Arrow bytes
PARQUET_JOB = pathlib.Path(__file__).resolve().parent / "scale_parquet_job.py"
MIB = 1 << 20


def embeddings(ids):  # type: ignore[no-untyped-def]
    """The embeddings of rows ``ids`` (int64, < 2**24), shape (len(ids), DIM): element i of row r
    is the top 24 bits of murmur3's 32-bit finaliser of the counter r * DIM + i, scaled to [0, 1):
    every mantissa bit random (as incompressible as random floats), the same in every run, and
    computable for any row alone (the tests recompute a sample). Vectorised, in place."""
    import numpy as np

    ids = np.asarray(ids, dtype=np.int64)
    h = np.empty((len(ids), DIM), np.uint32)
    np.add((ids.astype(np.uint32) * np.uint32(DIM))[:, None], np.arange(DIM, dtype=np.uint32), out=h)
    t = np.empty_like(h)
    with np.errstate(over="ignore"):
        for shift, multiplier in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
            np.right_shift(h, shift, out=t)
            h ^= t
            h *= np.uint32(multiplier)
        np.right_shift(h, 16, out=t)
        h ^= t
    h >>= np.uint32(8)
    out = h.astype(np.float32)
    out *= np.float32(2.0**-24)
    return out


def write_source(directory: pathlib.Path, rows: int, files: int, group_rows: int = 65536) -> list[pathlib.Path]:
    """``rows`` rows (``id`` 0..rows-1, ``embedding`` list<float32> of DIM) in ``files`` Parquet
    files of row groups of at most ``group_rows`` rows (uncompressed, no dictionary: quick to write;
    Spark and the direct reader split them by row group), generated 4096 rows at a time."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    assert rows <= 1 << 24, "the counter r * DIM + i is 32 bits"
    directory.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("id", pa.int64()), ("embedding", pa.list_(pa.float32()))])
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    paths = []
    for index, (first, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        path = directory / f"part-{index:05d}.parquet"
        with pq.ParquetWriter(path, schema, compression="none", use_dictionary=False,
                              write_statistics=["id"]) as writer:
            for group in range(first, stop, group_rows):
                batches = []
                for chunk in range(group, min(group + group_rows, stop), 4096):
                    ids = np.arange(chunk, min(chunk + 4096, stop, group + group_rows), dtype=np.int64)
                    values = pa.array(embeddings(ids).reshape(-1), type=pa.float32())  # typed: zero-copy
                    offsets = pa.array(np.arange(0, len(ids) * DIM + 1, DIM, dtype=np.int32), type=pa.int32())
                    batches.append(pa.RecordBatch.from_arrays(
                        [pa.array(ids, type=pa.int64()), pa.ListArray.from_arrays(offsets, values)], schema=schema))
                writer.write_table(pa.Table.from_batches(batches, schema=schema), row_group_size=group_rows)
        paths.append(path)
    return paths


def kind_of(cmdline: list[str]) -> str | None:
    """The kind of a process of a Spark job, or None for anything else (the bash wrappers
    ``spark-submit`` / ``spark-class`` before they exec Java included)."""
    program = pathlib.Path(cmdline[0]).name if cmdline else ""
    text = " ".join(cmdline)
    if program.startswith("java"):
        if "CoarseGrainedExecutorBackend" in text:
            return "executor JVM"
        if "org.apache.spark.deploy.SparkSubmit" in text:
            return "driver JVM"
    elif program.startswith("python"):
        if "pyspark.daemon" in text or "pyspark.worker" in text:
            return "Python worker"
        if "airflow_lance_job.py" in text or PARQUET_JOB.name in text:
            return "Python driver"
    return None


@dataclasses.dataclass
class RssSampler:
    """Samples the process trees under ``roots`` every ``interval`` seconds (a thread) and keeps
    the peak RSS of one process of each kind (:func:`kind_of`) and how many of each it saw."""

    roots: list[int]
    interval: float = 0.5
    peaks: dict[str, int] = dataclasses.field(default_factory=dict)
    seen: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    samples: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample(self) -> None:
        for root in self.roots:
            try:
                processes = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
            except psutil.Error:
                continue
            for process in processes:
                try:
                    kind = kind_of(process.cmdline())  # read each time: spark-class execs Java in its process
                    if kind is None:
                        continue
                    rss = process.memory_info().rss
                except psutil.Error:
                    continue
                self.peaks[kind] = max(self.peaks.get(kind, 0), rss)
                self.seen.setdefault(kind, set()).add(process.pid)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def report(self) -> dict[str, dict[str, int]]:
        """``{kind: {"peak_rss_mib", "processes"}}``."""
        return {kind: {"peak_rss_mib": round(self.peaks[kind] / MIB), "processes": len(self.seen[kind])}
                for kind in sorted(self.peaks)}


#: The documented bound: the peak RSS of one process of each kind, whatever the data's size
#: (partitions are streamed: a Python worker holds about one Arrow batch and one data file's pages).
RSS_BOUNDS_MIB = {"Python worker": 768, "Python driver": 512, "executor JVM": 1536, "driver JVM": 2048}


def over_bound(report: dict[str, dict[str, int]]) -> dict[str, int]:
    """Kinds whose peak RSS exceeds :data:`RSS_BOUNDS_MIB`."""
    return {kind: r["peak_rss_mib"] for kind, r in report.items() if r["peak_rss_mib"] > RSS_BOUNDS_MIB[kind]}
