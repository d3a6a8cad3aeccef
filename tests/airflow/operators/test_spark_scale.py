"""Scale with bounded memory: ids and 256-float32 embeddings (Parquet files generated with numpy,
tests/airflow/spark_scale.py) written through ``LanceSparkWriteOperator`` (``dag.test()``, the
reader it picks by default) while the peak RSS of every process of the job is sampled from /proc
every 0.5 s. The peak of each process kind stays under :data:`spark_scale.RSS_BOUNDS_MIB` whatever
the size: 100 MB on local[2] here, 8 GB on local[2] and on the standalone cluster in ``make
stress``, where Spark's own Parquet write of the same files (``spark.read.parquet(...).write.parquet``)
runs in the same test for comparison (bench/bench_spark_scale.py prints the same)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, task_logs_to
from spark_cluster import SPARK_HOME, SparkCluster, spark_cluster
from spark_scale import (
    DIM,
    PARQUET_JOB,
    ROW_BYTES,
    RSS_BOUNDS_MIB,
    RssSampler,
    embeddings,
    over_bound,
    write_source,
)

SAMPLE = 2000  # rows whose embeddings are checked against the values recomputed here


def _size(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _check_sample(ds: Any, rows: int) -> None:
    """Every id once; a sample of rows (first, last, random) holds exactly the source's embeddings."""
    ids = ds.to_table(columns=["id"])["id"].to_numpy()
    assert len(ids) == rows and np.array_equal(np.sort(ids), np.arange(rows))
    picked = np.unique(np.concatenate([[0, rows - 1], np.random.default_rng(7).integers(0, rows, SAMPLE)]))
    table = ds.to_table(columns=["id", "embedding"], filter=pa_ds.field("id").isin(pa.array(picked)))
    table = table.sort_by("id")
    assert table["id"].to_numpy().tolist() == picked.tolist()
    got = table["embedding"].combine_chunks()
    assert got.type == pa.list_(pa.float32(), DIM)
    assert np.array_equal(got.values.to_numpy().reshape(-1, DIM), embeddings(picked))


def run_lance_write(root: pathlib.Path, source: pathlib.Path, cluster: SparkCluster | None) -> dict[str, Any]:
    """The operator's write of the files in ``source``; its times, reader, size and peak RSS per process kind."""
    root.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_SCALE_ROOT", str(root))
        mp.setenv("LANCE_SCALE_SOURCE", str(source))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        if cluster is not None:
            mp.setenv("LANCE_SCALE_SPARK_CONN", "spark_cluster")
            mp.setenv(*connection_env("spark_cluster", conn_type="spark", host="spark://127.0.0.1",
                                      port=cluster.port))
        os.sync()
        roots = [os.getpid(), *([p.pid for p in cluster.processes] if cluster is not None else [])]
        start = time.monotonic()
        with RssSampler(roots) as sampler, task_logs_to(root / "task-log.txt"):
            dag_run = load_dag("lance_test_spark_scale.py", "lance_test_spark_scale").test()
        seconds = time.monotonic() - start
    assert task_instances(dag_run)["write"].state == "success", (root / "task-log.txt").read_text()[-5000:]
    log = (root / "task-log.txt").read_text(errors="replace")
    job = float(re.search(r"Spark job ([0-9.]+) s: ", log).group(1))  # spark-submit start to exit
    reader = re.search(r"airflow-lance job: reading ([^(\n]*\([^)\n]*\))", log).group(1)
    dataset = root / "scale.lance"
    return {"reader": reader, "bytes": _size(dataset), "job_seconds": job, "task_seconds": round(seconds, 2),
            "rss": sampler.report(), "samples": sampler.samples, "dataset": dataset}


def run_parquet_write(root: pathlib.Path, source: pathlib.Path, cluster: SparkCluster | None) -> dict[str, Any]:
    """Spark's own Parquet write of the same files, spark-submit with the same settings."""
    out = root / "scale.parquet"
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.executor.memory": "512m",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0", "spark.log.level": "WARN"}
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master",
               cluster.master_url if cluster is not None else "local[2]",
               *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
               str(PARQUET_JOB), str(source), str(out)]
    os.sync()
    roots = [os.getpid(), *([p.pid for p in cluster.processes] if cluster is not None else [])]
    start = time.monotonic()
    with RssSampler(roots) as sampler:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"job_seconds": round(seconds, 2), "bytes": _size(out), "rss": sampler.report(), "path": out}


def _lance_case(root: pathlib.Path, source: pathlib.Path, rows: int, cluster: SparkCluster | None) -> dict[str, Any]:
    """The operator's write of ``source`` into ``root``/scale.lance, checked (every id, a sample of
    embeddings), then deleted."""
    run = run_lance_write(root, source, cluster)
    ds = pylance.dataset(str(run.pop("dataset")))
    assert ds.version == 1 and ds.count_rows() == rows
    _check_sample(ds, rows)
    shutil.rmtree(root / "scale.lance")
    return run


def scale_case(root: pathlib.Path, rows: int, files: int, cluster: SparkCluster | None,
               compare_files: int = 0) -> dict[str, Any]:
    """``rows`` rows generated into ``files`` Parquet files and the Lance write of them; then, with
    ``compare_files``, the first that many files (hard links: the same bytes) written by both the
    operator and Spark's own Parquet write, one after the other (Spark's Parquet write of nested
    arrays is so much slower than the Lance write, README "Memory at scale", that at 8 GB it alone
    would take most of an hour on 2 cores). Every file is deleted afterwards. Returns the numbers."""
    try:
        source = root / "source"
        start = time.monotonic()
        paths = write_source(source, rows, files)
        generated = {"rows": rows, "files": files, "arrow_bytes": rows * ROW_BYTES, "bytes": _size(source),
                     "seconds": round(time.monotonic() - start, 2)}
        result: dict[str, Any] = {"where": "cluster" if cluster is not None else "local[2]", "source": generated,
                                  "lance": _lance_case(root, source, rows, cluster)}
        if compare_files:
            subset = root / "compare-source"
            subset.mkdir()
            for path in paths[:compare_files]:
                os.link(path, subset / path.name)
            sub_rows = pa_ds.dataset(str(subset), format="parquet").count_rows()
            lance_run = _lance_case(root / "compare", subset, sub_rows, cluster)
            parquet_run = run_parquet_write(root / "compare", subset, cluster)
            parquet_run.pop("path")
            result["compare"] = {"files": compare_files, "rows": sub_rows, "arrow_bytes": sub_rows * ROW_BYTES,
                                 "lance": lance_run, "parquet": parquet_run,
                                 "lance_speedup_vs_parquet": round(parquet_run["job_seconds"] / lance_run["job_seconds"], 2)}
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=1), file=sys.stderr)
    target = os.environ.get("LANCE_SCALE_REPORT")
    if target:
        with open(target, "a") as handle:
            handle.write(json.dumps(result) + "\n")


def _fmix32(h: int) -> int:
    """murmur3's 32-bit finaliser, in Python integers (the reference of the vectorised generator)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def test_the_generated_embeddings_are_murmur3_of_a_counter_and_the_files_hold_them(tmp_path: pathlib.Path) -> None:
    ids = np.array([0, 1, 4095, 4096, 65535, 65536, 99_999, (1 << 24) - 1])
    got = embeddings(ids)
    want = [[(_fmix32(r * DIM + i) >> 8) / (1 << 24) for i in range(DIM)] for r in ids.tolist()]
    assert got.dtype == np.float32 and np.array_equal(got, np.array(want, dtype=np.float32))
    assert len(np.unique(got)) > 0.99 * got.size  # no repeats: as incompressible as random floats
    paths = write_source(tmp_path / "source", 10_000, 3, group_rows=2048)
    table = pa_ds.dataset([str(p) for p in paths], format="parquet").to_table()
    assert [pq.ParquetFile(p).metadata.num_row_groups for p in paths] == [2, 2, 2]
    assert table["id"].to_numpy().tolist() == list(range(10_000))
    values = table["embedding"].combine_chunks().values.to_numpy().reshape(-1, DIM)
    assert np.array_equal(values, embeddings(np.arange(10_000)))


def test_a_100_mb_write_on_local_stays_under_the_memory_bound(tmp_path: pathlib.Path) -> None:
    rows = 100 * 1000 * 1000 // ROW_BYTES  # ~100 MB of Arrow data, 4 files of ~25 MB (make test's budget)
    result = scale_case(tmp_path / "scale", rows, 4, None)
    report(result)
    rss = result["lance"]["rss"]
    assert result["lance"]["reader"].startswith("directly with pyarrow (parquet"), result["lance"]["reader"]
    assert {"driver JVM", "Python driver", "Python worker"} <= set(rss), rss
    assert result["lance"]["samples"] >= 4
    assert over_bound(rss) == {}, (rss, RSS_BOUNDS_MIB)


# -- make stress: 8 GB, local[2] and the cluster, against Spark's Parquet write -----------------------
SCALE_GB = float(os.environ.get("LANCE_SCALE_GB", "8"))
SCALE_FILES = int(os.environ.get("LANCE_SCALE_FILES", "32"))
#: The size of the Lance-vs-Spark-Parquet comparison (the first files of the source).
COMPARE_GB = float(os.environ.get("LANCE_SCALE_COMPARE_GB", "1"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster-scale")) as running:
        yield running


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "cluster"])
def test_an_8_gb_write_stays_under_the_memory_bound_and_beats_spark_parquet(
        where: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest) -> None:
    free = shutil.disk_usage(tmp_path).free
    arrow_bytes = int(SCALE_GB * 1e9)
    assert free > 2.5 * arrow_bytes, f"{free / 1e9:.1f} GB free: not enough for {SCALE_GB} GB (source, Lance)"
    cluster = request.getfixturevalue("cluster") if where == "cluster" else None
    result = scale_case(tmp_path / "scale", arrow_bytes // ROW_BYTES, SCALE_FILES, cluster,
                        compare_files=max(1, round(SCALE_FILES * min(COMPARE_GB / SCALE_GB, 1))))
    report(result)
    rss = result["lance"]["rss"]
    assert over_bound(rss) == {}, (rss, RSS_BOUNDS_MIB)
    if cluster is not None:
        assert rss["executor JVM"]["processes"] == 2, rss
    assert result["lance"]["reader"].startswith("directly with pyarrow (parquet"), result["lance"]["reader"]
    assert result["lance"]["bytes"] >= 0.95 * result["source"]["arrow_bytes"]
    assert over_bound(result["compare"]["lance"]["rss"]) == {}, result["compare"]
    assert result["compare"]["lance_speedup_vs_parquet"] > 1.0, result["compare"]
