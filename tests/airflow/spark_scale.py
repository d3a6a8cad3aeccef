"""A large write through ``LanceSparkWriteOperator`` with its memory measured: the source (ids and
256-float32 embeddings, computed by Spark: no input on disk), Spark's own Parquet write of the same
DataFrame (``scale_parquet_job.py``, run by spark-submit with the same settings), and the peak RSS
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


def source_sql(rows: int, partitions: int) -> str:
    """``rows`` rows in ``partitions`` Spark partitions: ``id`` and ``embedding`` (256 floats from a
    32-bit hash of (id, i): as incompressible as random numbers, and the same in every run)."""
    return (f"SELECT id, transform(sequence(0, {DIM - 1}), i -> CAST(hash(id, i) / 2147483648.0D AS FLOAT)) "
            f"AS embedding FROM range(0, {rows}, 1, {partitions})")


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


def _rotl(x, r):  # type: ignore[no-untyped-def]
    return (x << r) | (x >> (32 - r))


def _mix(h1, k1):  # type: ignore[no-untyped-def]
    import numpy as np

    k1 = _rotl(k1 * np.uint32(0xCC9E2D51), np.uint32(15)) * np.uint32(0x1B873593)
    return _rotl(h1 ^ k1, np.uint32(13)) * np.uint32(5) + np.uint32(0xE6546B64)


def _fmix(h1, length: int):  # type: ignore[no-untyped-def]
    import numpy as np

    h1 = h1 ^ np.uint32(length)
    h1 = (h1 ^ (h1 >> np.uint32(16))) * np.uint32(0x85EBCA6B)
    h1 = (h1 ^ (h1 >> np.uint32(13))) * np.uint32(0xC2B2AE35)
    return h1 ^ (h1 >> np.uint32(16))


def expected_embeddings(ids):  # type: ignore[no-untyped-def]
    """The embeddings :func:`source_sql` gives ``ids`` (numpy int64), computed here: Spark's
    ``hash`` (Murmur3 x86_32, seed 42, the long ``id`` then the int ``i``), vectorised."""
    import numpy as np

    with np.errstate(over="ignore"):
        ids = np.asarray(ids, dtype=np.int64).view(np.uint64)
        low, high = (ids & np.uint64(0xFFFFFFFF)).astype(np.uint32), (ids >> np.uint64(32)).astype(np.uint32)
        h = _fmix(_mix(_mix(np.full(len(ids), 42, np.uint32), low), high), 8)
        i = np.arange(DIM, dtype=np.uint32)
        hashed = _fmix(_mix(h[:, None], i[None, :]), 4).view(np.int32)
    return (hashed.astype(np.float64) / 2147483648.0).astype(np.float32)
