"""A class-data-sharing archive for the test session's Spark JVMs (test speed only).

Every ``spark-submit`` of the suite starts a JVM that loads and compiles the same ~20,000 Spark
classes, which costs more than most tests' work. Once per machine (cached by :func:`cached_archive`), :func:`build_archive` runs this
file under ``spark-submit`` with ``-XX:ArchiveClassesAtExit`` (a small job touching what the
tests' jobs touch: Parquet, CSV and JSON sources, ``mapInArrow``, a shuffle, a Parquet write), and
:func:`java_options` gives the options every later ``spark-submit`` runs with (through
``SPARK_SUBMIT_OPTS``, which Spark's launcher adds to the driver JVM only). A JVM whose class path
differs from the archive's ignores it, with a warning, and runs as without it; nothing the tests
check depends on the archive.

Measured on the 2-core test machine: a 200-row JSON write job's spark-submit went from about
20 s to 12 s.

Where the archive is missing (a fresh machine), the test session builds it in the background
(:func:`start_build`: one builder per machine, an exclusive lock keeps other sessions and pytest
workers from building it too) and runs its tests meanwhile; spark-submits started after it is
ready use it (:func:`java_options`). Building it first cost every worker about 90 s of waiting.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

try:
    import fcntl
except ImportError:  # not POSIX: no lock (two sessions may both build it)
    fcntl = None  # type: ignore[assignment]

#: The JIT's first tier only: the tests' jobs are short, C2 compilations never pay back there.
FAST_START_OPTIONS = ("-XX:TieredStopAtLevel=1",)


def cache_key(spark_submit: str) -> str:
    """What the archive depends on: the Java runtime and Spark's jars (names, sizes, times)."""
    java = os.path.realpath(shutil.which("java") or "java")
    digest = hashlib.sha256(f"{java}:{os.stat(java).st_mtime_ns}:{os.path.realpath(spark_submit)}".encode())
    spec = importlib.util.find_spec("pyspark")
    jars = pathlib.Path(spec.origin).parent / "jars" if spec and spec.origin else None
    for jar in sorted(jars.glob("*.jar")) if jars else ():
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    digest.update(pathlib.Path(__file__).read_bytes())
    return digest.hexdigest()[:16]


def archive_path(spark_submit: str) -> pathlib.Path:
    """Where the archive for this Java and Spark lives (the user's cache directory); it may not exist."""
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "airflow-lance-tests"
    return cache / f"spark-classes-{cache_key(spark_submit)}.jsa"


def cached_archive(spark_submit: str) -> pathlib.Path | None:
    """The archive for this Java and Spark, built first if missing (about a minute, once per
    machine and Spark release); None if it could not be built, or another process is building it."""
    archive = archive_path(spark_submit)
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.with_suffix(".lock"), "w") as lock:
        if fcntl is not None:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another process builds it
                return None
        if archive.is_file():  # built while we opened the lock
            return archive
        with tempfile.TemporaryDirectory(dir=archive.parent) as folder:
            built = build_archive(pathlib.Path(folder), spark_submit)
            if built is None:
                return None
            os.replace(built, archive)  # readers see the whole archive or none
    return archive


def start_build(spark_submit: str) -> subprocess.Popen[bytes]:
    """:func:`cached_archive` in a background process (it returns at once if another builds)."""
    code = f"import sys; sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r}); " \
           "from spark_class_cache import cached_archive; cached_archive(sys.argv[1])"
    return subprocess.Popen([sys.executable, "-c", code, spark_submit], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def build_archive(folder: pathlib.Path, spark_submit: str) -> pathlib.Path | None:
    """Run the training job with ``-XX:ArchiveClassesAtExit``; the archive's path, or None if Java
    or spark-submit could not make one (the tests then run without it)."""
    archive = folder / "spark-classes.jsa"
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={archive}",
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    command = [spark_submit, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=2", __file__, str(folder / "training")]
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0 or not archive.is_file():
        return None
    return archive


def java_options(archive: pathlib.Path | None) -> str:
    return " ".join([*(([f"-XX:SharedArchiveFile={archive}"]) if archive else []), *FAST_START_OPTIONS])


def spark_submit_binary() -> str | None:
    return shutil.which("spark-submit", path=os.path.dirname(sys.executable)) if shutil.which("java") else None


def _train(folder: str) -> None:
    import pyarrow as pa
    import pyarrow.csv
    import pyarrow.json  # noqa: F401 - the modules the jobs import on the executors
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    root = pathlib.Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": list(range(100)), "name": [f"n{i}" for i in range(100)],
                      "vec": [[float(i)] * 4 for i in range(100)]})
    pq.write_table(table, root / "t.parquet")
    pa.csv.write_csv(table.select(["id", "name"]), root / "t.csv")
    (root / "t.json").write_text("".join(f'{{"id": {i}, "name": "n{i}", "vec": [{i}.5]}}\n' for i in range(100)))

    def passthrough(batches):
        yield from batches

    spark = SparkSession.builder.getOrCreate()
    try:
        frames = [spark.read.parquet(str(root / "t.parquet")),
                  spark.read.option("header", "true").option("inferSchema", "true").csv(str(root / "t.csv")),
                  spark.read.json(str(root / "t.json"))]
        for frame in frames:
            frame.mapInArrow(passthrough, frame.schema).collect()
            frame.groupBy((F.col("id") % 3).alias("k")).count().collect()
        spark.range(0, 4, 1, 2).mapInArrow(passthrough, "id long").collect()
        frames[0].write.mode("overwrite").parquet(str(root / "out.parquet"))
    finally:
        spark.stop()


if __name__ == "__main__":
    _train(sys.argv[1])
