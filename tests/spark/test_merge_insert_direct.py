"""The merge insert's key-broadcast plan on a Parquet source read directly with pyarrow equals
pylance's ``merge_insert`` on an identical copy (counts, rows, row ids where stable).

One real ``spark-submit`` ``local[2]`` runs ``run_merge_insert`` (from the shipped zip) for every
case; the test commits each staged ``Update`` as the operator does. Cases: an upsert on a dataset
without stable row ids (matching, deletion vectors and writing fused into one Spark job), the same
upsert on one with stable row ids and deletions (match first, then the writers: updated rows keep
their ids), insert-only and update-only, a two-column key, and an upsert into a JSON column (pylance's
JSONB) from the text Spark holds (canonical JSON after the merge, as pylance's from JSON values). The same job checks that
``direct.load_parquet`` gives the schema and rows Spark's own inference gives, for every type it
takes (and ``direct.plain_parquet_plan`` the direct plan of that DataFrame, from the footers
alone), and that both decline the types they do not take.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import airflow_lance.core as lance
from airflow_lance.operators._spark_code import build_code_zip
from airflow_lance.spark.merge_insert_spec import MergeInsertJobResult, MergeInsertJobSpec
from airflow_lance.spark.spec import SourceSpec

DRIVER = '''
import json, sys
from pyspark.sql import SparkSession
from airflow_lance.spark.direct import load_parquet, plain_parquet_plan, plan_direct
from airflow_lance.spark.merge_insert import run_merge_insert
from airflow_lance.spark.merge_insert_spec import MergeInsertJobSpec
from airflow_lance.spark.spec import SourceSpec

spark = SparkSession.builder.getOrCreate()
work = json.load(open(sys.argv[1]))
for path in work["specs"]:
    spec = MergeInsertJobSpec.from_dict(json.load(open(path)))
    print(f"CASE {spec.uri}", flush=True)
    try:
        run_merge_insert(spark, spec)
    except Exception as exc:
        print(f"FAILED {spec.uri}: {type(exc).__name__}: {exc}", flush=True)
schemas = {}
for name, path in work["schemas"].items():
    source = SourceSpec.from_fields(path=path)
    ours = load_parquet(spark, source)
    plan = plain_parquet_plan(spark, source)
    theirs = spark.read.parquet(path)
    schemas[name] = (None if plan is None else "a plan without a DataFrame") if ours is None else {
        "schema": ours.schema == theirs.schema,
        "rows": sorted(map(repr, ours.collect())) == sorted(map(repr, theirs.collect())),
        "plan": plan == plan_direct(spark, source, "auto", 2, df=ours)}
print("SCHEMAS " + json.dumps(schemas), flush=True)
spark.stop()
'''

N = 3000


def _target(stable: bool, with_json: bool = False) -> pa.Table:
    ids = np.arange(N)
    table = pa.table({
        "id": pa.array(ids, pa.int64()),
        "label": pa.array([f"t{i % 7}" for i in ids]),
        "price": pa.array(ids * 0.5),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 4).astype(np.float32)), 4),
    })
    if with_json:  # a JSON column (pylance stores JSONB)
        table = table.append_column("doc", pa.array([None if i % 11 == 0 else json.dumps({"i": int(i), "t": [int(i) % 3]})
                                                     for i in ids], pa.json_(pa.string())))
    return table


def _source(with_json: bool = False) -> pa.Table:
    ids = [*range(2500, 3500), *range(0, 600, 3), None]
    table = pa.table({
        "id": pa.array(ids, pa.int64()),
        "label": pa.array([f"t{(i or 0) % 7}" if (i or 0) % 2 else "s" for i in ids]),
        "price": pa.array([1000.0 + (i or 0) for i in ids]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat([i or 0 for i in ids], 4), pa.float32()), 4),
    })
    if with_json:  # Spark holds JSON as text: keys unsorted, spaces, nested, unicode
        table = table.append_column("doc", pa.array(
            [None if (i or 0) % 7 == 0 else f'{{"z": {i}, "a": [1.5, "ü", {{"k": null}}], "i": -{i}}}' for i in ids]))
    return table


#: case -> (stable row ids, on, when_matched_update_all, when_not_matched_insert_all)
CASES = {
    "fused": (False, ("id",), True, True),
    "stable": (True, ("id",), True, True),
    "insert_only": (False, ("id",), False, True),
    "update_only": (True, ("id",), True, False),
    "two_keys": (False, ("id", "label"), True, True),
    "json": (False, ("id",), True, True),  # a JSON column, updated and inserted from text
}


def _typed_sources(root: pathlib.Path) -> dict[str, str]:
    """Parquet files whose Spark schema ``load_parquet`` computes (``plain``) or declines."""
    n = 50
    plain = pa.table({
        "i8": pa.array(range(n), pa.int8()), "i16": pa.array(range(n), pa.int16()),
        "i32": pa.array(range(n), pa.int32()), "i64": pa.array([None, *range(1, n)], pa.int64()),
        "f32": pa.array([i / 4 for i in range(n)], pa.float32()), "f64": pa.array([i / 3 for i in range(n)]),
        "b": pa.array([i % 2 == 0 for i in range(n)]), "s": pa.array([f"s{i}" for i in range(n)]),
        "ls": pa.array([f"l{i}" for i in range(n)], pa.large_string()),
        "bin": pa.array([bytes([i]) for i in range(n)], pa.binary()),
        "d": pa.array([dt.date(2024, 1, 1 + i % 28) for i in range(n)], pa.date32()),
        "l": pa.array([[i, None] for i in range(n)], pa.list_(pa.int32())),
        "fsl": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(2 * n, dtype=np.float32)), 2),
        "st": pa.array([{"a": i, "b": [f"x{i}"]} for i in range(n)]),
    })
    paths = {}
    for name, table in {"plain": plain,
                        "unsigned": pa.table({"u": pa.array(range(n), pa.uint32())}),
                        "timestamp": pa.table({"t": pa.array(range(n), pa.timestamp("us", "UTC"))}),
                        "decimal": pa.table({"x": pa.array([1] * n, pa.decimal128(10, 2))})}.items():
        paths[name] = str(root / f"{name}.parquet")
        pq.write_table(table, paths[name])
    return paths


@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("merge-insert-direct")
    specs = {}
    for case, (stable, on, update, insert) in CASES.items():
        source = work / f"source-{case}.parquet"
        pq.write_table(_source(case == "json"), source, row_group_size=600)  # three row groups: three splits
        for side in ("ours", "oracle"):
            ds = pylance.write_dataset(_target(stable, case == "json"), str(work / side / f"{case}.lance"),
                                       max_rows_per_file=1000, enable_stable_row_ids=stable)
            ds.delete("id IN (5, 2600)")
        uri = str(work / "ours" / f"{case}.lance")
        specs[case] = MergeInsertJobSpec(
            uri=uri, read_version=2, source=SourceSpec.from_fields(path=str(source)), on=on,
            staging_root=uri, staging_name=f"_airflow_staging/{case}.json", when_matched_update_all=update,
            when_not_matched_insert_all=insert)
    files = []
    for case, spec in specs.items():
        files.append(str(work / f"{case}.json"))
        pathlib.Path(files[-1]).write_text(spec.to_json())
    (work / "work.json").write_text(json.dumps({"specs": files, "schemas": _typed_sources(work)}))
    (work / "driver.py").write_text(DRIVER)
    command = [shutil.which("spark-submit") or "spark-submit", "--master", "local[2]",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN",
               "--py-files", str(build_code_zip(work)), str(work / "driver.py"), str(work / "work.json")]
    process = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=900, check=False,
                             env={**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", shutil.which(
                                 "python") or "python")})
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    logs = {spec.uri: "" for spec in specs.values()}
    current, schemas = None, None
    for line in process.stdout.splitlines():
        if line.startswith("CASE "):
            current = line[5:]
        elif line.startswith("SCHEMAS "):
            schemas = json.loads(line[8:])
        elif current is not None:
            logs[current] += line + "\n"
    results = {}
    for case, spec in specs.items():
        assert "FAILED" not in logs[spec.uri], logs[spec.uri]
        result = MergeInsertJobResult.load(spec.staging_root, spec.staging_name, {})
        assert result is not None, logs[spec.uri]
        lance.LanceDataset.commit(spec.uri, lance.LanceOperation.Update(
            removed_fragment_ids=list(result.removed_fragment_ids), updated_fragments=list(result.updated_fragments),
            new_fragments=list(result.new_fragments),
            fields_for_preserving_frag_bitmap=list(result.fields_for_preserving_frag_bitmap)), spec.read_version)
        results[case] = result
    return {"work": work, "results": results, "logs": {case: logs[spec.uri] for case, spec in specs.items()},
            "schemas": schemas}


def _rows(ds: pylance.LanceDataset) -> pa.Table:
    return ds.to_table().sort_by([("id", "ascending"), ("label", "ascending")])


@pytest.mark.parametrize("case", list(CASES))
def test_direct_merge_insert_equals_pylance(merged: dict[str, Any], case: str) -> None:
    stable, on, update, insert = CASES[case]
    oracle = pylance.dataset(str(merged["work"] / "oracle" / f"{case}.lance"))
    builder = oracle.merge_insert(list(on))
    if update:
        builder = builder.when_matched_update_all()
    if insert:
        builder = builder.when_not_matched_insert_all()
    source = _source(case == "json")
    if case == "json":  # pylance takes JSON as JSON, not as text
        source = source.set_column(4, "doc", source.column("doc").cast(pa.json_(pa.string())))
    expected = builder.execute(source)
    result = merged["results"][case]
    assert result.counts == {k: expected[k] for k in result.counts}
    assert expected["num_inserted_rows"] + expected["num_updated_rows"] > 0
    ours = pylance.dataset(str(merged["work"] / "ours" / f"{case}.lance"))
    assert ours.version == oracle.version == 3
    assert ours.schema == oracle.schema
    assert _rows(ours).equals(_rows(oracle))
    log = merged["logs"][case]
    assert "reading the source directly with pyarrow (parquet, 3 splits)" in log
    assert ("in the same job" in log) == (update and insert and not stable)
    if stable:  # updated rows kept their row ids
        def ids(ds: pylance.LanceDataset) -> dict[int, int]:
            table = ds.to_table(columns=["id"], with_row_id=True, filter=f"id < {N}")
            return dict(zip(table.column("id").to_pylist(), table.column("_rowid").to_pylist(), strict=True))

        assert ids(ours) == ids(oracle)


def test_load_parquet_gives_sparks_inferred_schema_or_declines(merged: dict[str, Any]) -> None:
    # and the direct plan made from the footers alone is the one made from that DataFrame
    assert merged["schemas"] == {"plain": {"schema": True, "rows": True, "plan": True},
                                 "unsigned": None, "timestamp": None, "decimal": None}
