"""Direct file ingest (``reader="direct"``/``"auto"``) equals the Spark-row path (``reader="spark"``).

One real ``spark-submit`` ``local[2]`` runs the write job's ``run`` (from the shipped zip) for every
case with both readers; each result is committed and pylance reads both datasets: same rows, same
schema. Cases: Parquet in hive-style partitions with several row groups, nested types, nulls,
timestamps and a fixed-size list; CSV with a header, quoting and Spark's schema inference
(FAILFAST) or an explicit schema, split in byte ranges (``spark.sql.files.maxPartitionBytes=8k``);
JSON lines with nested values; Arrow IPC files (read directly only: Spark has no reader for them).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import lance as pylance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import airflow_lance.core as lance
from airflow_lance.operators._spark_code import build_code_zip
from airflow_lance.spark.spec import SourceSpec, WriteJobResult, WriteJobSpec, staging_location

DRIVER = '''
import json, sys
from pyspark.sql import SparkSession
from airflow_lance.spark.job import run
from airflow_lance.spark.spec import WriteJobSpec

spark = SparkSession.builder.getOrCreate()
for path in json.load(open(sys.argv[1])):
    spec = WriteJobSpec.from_json(open(path).read())
    print(f"CASE {spec.uri}", flush=True)
    try:
        run(spark, spec)
    except Exception as exc:
        print(f"FAILED {spec.uri}: {type(exc).__name__}: {exc}", flush=True)
spark.stop()
'''

CSV_SCHEMA = "id long, name string, score double, flag boolean"


def _sources(root: pathlib.Path) -> dict[str, tuple[str, str, dict[str, str], dict[str, Any]]]:
    parquet = root / "parquet"
    for k, region in enumerate(["eu", "us west"]):  # Spark escapes the space in the directory name
        folder = parquet / f"year={2020 + k}" / f"region={region}"
        folder.mkdir(parents=True)
        n = 900
        pq.write_table(pa.table({
            "id": pa.array(range(k * n, k * n + n), pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f"n{i}" for i in range(n)]),
            "score": pa.array([None if i % 5 == 0 else i / 3 for i in range(n)], pa.float32()),
            "tags": pa.array([[f"t{i % 3}", None] if i % 4 else None for i in range(n)], pa.list_(pa.string())),
            "vec": pa.array([[float(i), i + 0.5] for i in range(n)], pa.list_(pa.float64())),
            "s": pa.array([{"a": i, "b": None if i % 2 else "x"} for i in range(n)]),
            "ts": pa.array([i * 1_000_000 for i in range(n)], pa.timestamp("us", "UTC")),
            "d": pa.array(list(range(n)), pa.date32()),
        }), folder / "part-0.parquet", row_group_size=250)
    named = root / "named" / "k=1"  # a file given by name: its directory is no partition (Spark's reading)
    named.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([0, 1, 2], pa.int64()), "k": pa.array([7, 8, 9], pa.int64())}),
                   named / "a.parquet")
    csv = root / "csv"
    csv.mkdir()
    lines = ['id,name,score,flag', '1,"a, b",1.5,true', '2,,2.0,false', '3,"",,TRUE', '4,"say, hi",4.5,false']
    lines += [f'{i},"q{i}",{i}.25,{"true" if i % 2 else "false"}' for i in range(5, 1500)]
    (csv / "a.csv").write_text("\n".join(lines[:800]) + "\n")
    (csv / "b.csv").write_text("\n".join([lines[0], *lines[800:]]) + "\n")
    js = root / "json"
    js.mkdir()
    (js / "a.json").write_text("\n".join(json.dumps(
        {"id": i, "name": None if i % 3 == 0 else f"n{i}", "x": i / 2 if i % 4 else i, "l": [i, i + 1],
         "st": {"z": i, "a": None if i % 5 == 0 else "q"}}) for i in range(1500)) + "\n")
    ipc = root / "ipc"
    ipc.mkdir()
    for k in range(2):
        table = pa.table({"id": pa.array(range(k * 100, k * 100 + 100), pa.int64()),
                          "v": pa.array([[i, i] for i in range(100)], pa.list_(pa.float32(), 2))})
        with pa.ipc.new_file(ipc / f"p{k}.arrow", table.schema) as writer:
            writer.write_table(table, max_chunksize=30)
    return {
        "parquet": ("parquet", str(parquet), {}, {"fixed_size_lists": {"vec": 2}, "cast": {"score": "float64"}}),
        "parquet_named": ("parquet", str(named / "a.parquet"), {}, {}),
        "csv_inferred": ("csv", str(csv), {"header": "true", "inferSchema": "true", "mode": "FAILFAST"}, {}),
        "csv_schema": ("csv", str(csv), {"header": "true", "schema": CSV_SCHEMA}, {}),
        "json": ("json", str(js), {}, {}),
    }


#: (case, reader) pairs of the default suite (one short spark-submit); the slow tests run them all
SHORT = {("parquet", "direct"), ("parquet", "spark"), ("csv_inferred", "direct"), ("csv_inferred", "spark"),
         ("json", "direct"), ("json", "spark"), ("parquet_named", "direct"), ("parquet_named", "spark")}


@pytest.fixture(scope="module")
def ingest_short(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _ingest(tmp_path_factory.mktemp("direct-ingest-short"), SHORT)


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _ingest(tmp_path_factory.mktemp("direct-ingest"), None)


def _ingest(work: pathlib.Path, only: set[tuple[str, str]] | None) -> dict[str, Any]:
    cases = _sources(work / "src")
    specs: dict[tuple[str, str], WriteJobSpec] = {}
    for case, (fmt, path, options, extra) in cases.items():
        for reader in ("direct", "spark", "auto"):
            if only is not None and (case, reader) not in only:
                continue
            uri = str(work / f"{case}-{reader}.lance")
            root, name = staging_location(uri, "k")
            specs[case, reader] = WriteJobSpec(uri=uri, mode="create", read_version=0, staging_root=root,
                                               staging_name=name, reader=reader,
                                               source=SourceSpec.from_fields(path=path, format=fmt, options=options),
                                               **extra)
    uri = str(work / "ipc-auto.lance")
    root, name = staging_location(uri, "k")
    specs["ipc", "auto"] = WriteJobSpec(uri=uri, mode="create", read_version=0, staging_root=root, staging_name=name,
                                        source=SourceSpec.from_fields(path=str(work / "src" / "ipc"), format="arrow"))
    files = []
    for index, spec in enumerate(specs.values()):
        files.append(str(work / f"spec{index}.json"))
        pathlib.Path(files[-1]).write_text(spec.to_json())
    (work / "specs.json").write_text(json.dumps(files))
    (work / "driver.py").write_text(DRIVER)
    command = [shutil.which("spark-submit") or "spark-submit", "--master", "local[2]",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN",
               "--conf", f"spark.sql.files.maxPartitionBytes={16 if only else 8}k", "--conf", "spark.sql.session.timeZone=UTC",
               "--py-files", str(build_code_zip(work)), str(work / "driver.py"), str(work / "specs.json")]
    process = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=900, check=False,
                             env={**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", shutil.which(
                                 "python") or "python")})
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    logs = {spec.uri: "" for spec in specs.values()}
    current = None
    for line in process.stdout.splitlines():
        if line.startswith("CASE "):
            current = line[5:]
        elif current is not None:
            logs[current] += line + "\n"
    tables = {}
    for key, spec in specs.items():
        assert "FAILED" not in logs[spec.uri], logs[spec.uri]
        result = WriteJobResult.load(spec.staging_root, spec.staging_name, {})
        assert result is not None and result.schema is not None, logs[spec.uri]
        lance.LanceDataset.commit(spec.uri, lance.LanceOperation.Overwrite(result.schema, list(result.fragments)), 0)
        tables[key] = pylance.dataset(spec.uri).to_table()
    return {"tables": tables, "logs": {key: logs[spec.uri] for key, spec in specs.items()}}


@pytest.mark.parametrize("case", ["parquet", "parquet_named", "csv_inferred", "json"])
def test_direct_ingest_equals_the_spark_row_path(ingest_short: dict[str, Any], case: str) -> None:
    _check_equal(ingest_short, case)


@pytest.mark.slow
def test_direct_ingest_equals_the_spark_row_path_all_cases(ingest: dict[str, Any]) -> None:
    for case in ("parquet", "parquet_named", "csv_inferred", "csv_schema", "json"):
        _check_equal(ingest, case)


def _check_equal(ingest: dict[str, Any], case: str) -> None:
    direct, spark = ingest["tables"][case, "direct"], ingest["tables"][case, "spark"]
    assert "reading directly with pyarrow" in ingest["logs"][case, "direct"]
    assert "reading through Spark rows (reader='spark')" in ingest["logs"][case, "spark"]
    assert direct.num_rows == spark.num_rows > 0
    assert direct.schema == spark.schema
    assert direct.sort_by("id").equals(spark.sort_by("id"))


def test_what_pylance_reads(ingest_short: dict[str, Any]) -> None:
    ingest = ingest_short
    parquet = ingest["tables"]["parquet", "direct"].sort_by("id")
    assert parquet.num_rows == 1800
    assert parquet.schema.field("vec").type.list_size == 2
    assert parquet.schema.field("score").type == pa.float64()
    assert parquet.column("year").to_pylist() == [2020] * 900 + [2021] * 900
    assert parquet.column("region").to_pylist() == ["eu"] * 900 + ["us west"] * 900
    assert parquet.column("name").null_count == 2 * 129
    named = ingest["tables"]["parquet_named", "direct"].sort_by("id")
    assert named.column("k").to_pylist() == [7, 8, 9]  # the file's column, not the directory's k=1
    csv = ingest["tables"]["csv_inferred", "direct"].sort_by("id")
    assert csv.column("id").to_pylist() == list(range(1, 1500))
    assert csv.column("name").to_pylist()[:4] == ["a, b", None, None, "say, hi"]
    assert csv.schema.field("flag").type == pa.bool_()
    json_table = ingest["tables"]["json", "direct"].sort_by("id")
    assert json_table.column("st").to_pylist()[:2] == [{"a": None, "z": 0}, {"a": "q", "z": 1}]


@pytest.mark.slow
def test_arrow_ipc_is_read_directly(ingest: dict[str, Any]) -> None:
    ipc = ingest["tables"]["ipc", "auto"].sort_by("id")
    assert ipc.column("id").to_pylist() == list(range(200))
    assert ipc.schema.field("v").type == pa.list_(pa.float32(), 2)


@pytest.mark.slow
def test_auto_reads_directly_only_where_exact(ingest: dict[str, Any]) -> None:
    logs = ingest["logs"]
    assert "reading directly with pyarrow (parquet" in logs["parquet", "auto"]
    assert "reading directly with pyarrow (csv" in logs["csv_inferred", "auto"]  # mode=FAILFAST
    assert "reading through Spark rows (reader='auto': csv mode 'PERMISSIVE'" in logs["csv_schema", "auto"]
    assert "reading through Spark rows (reader='auto': json mode 'PERMISSIVE'" in logs["json", "auto"]
    assert "reading directly with pyarrow (ipc" in logs["ipc", "auto"]
    for case in ("parquet", "csv_inferred", "csv_schema", "json"):
        assert ingest["tables"][case, "auto"].sort_by("id").equals(ingest["tables"][case, "spark"].sort_by("id"))
