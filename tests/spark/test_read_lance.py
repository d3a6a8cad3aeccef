"""``read_lance`` under real ``spark-submit`` ``local[2]`` against pylance as the oracle.

Datasets are written by pylance (file formats 2.0 and 2.2, several fragments, deletions, a tag);
one Spark application reads every case with ``read_lance`` and stores what Spark returned as
Arrow files; each test compares one case with pylance's ``to_table`` of the same version,
projection, filter and ``_rowaddr`` (types as Spark holds them: ``spark_arrow_schema``).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import lance as pylance
import numpy as np
import pyarrow as pa
import pytest

import sys

from airflow_lance.core import InvalidInputError, TagNotFoundError, VersionNotFoundError
from airflow_lance.operators._spark_code import build_code_zip
from airflow_lance.spark.read import plan_read, spark_arrow_schema

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from change_cases import history, oracle  # noqa: E402

SECRET = "do-not-print-this-secret-value"

SCRIPT = '''
import json, sys
import pyarrow as pa
from pyspark.sql import SparkSession
from airflow_lance.spark import read_lance

cases = json.load(open(sys.argv[1]))
out = sys.argv[2]
spark = SparkSession.builder.getOrCreate()
for name, case in cases.items():
    df = read_lance(spark, case.pop("uri"), **case)
    table = df.toArrow()
    with pa.OSFile(f"{out}/{name}.arrow", "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    plan = df._jdf.queryExecution().toString()
    meta = {"partitions": df.rdd.getNumPartitions(), "plan_has_secret": "''' + SECRET + '''" in plan}
    open(f"{out}/{name}.json", "w").write(json.dumps(meta))
    print("case", name, table.num_rows, flush=True)
spark.stop()
'''


def _table(start: int, count: int) -> pa.Table:
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table({
        "id": ids,
        "name": pa.array([f"n{i}" for i in ids]),
        "score": (ids * 0.5).astype(np.float64),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 4).astype(np.float32) / 7), 4),
        "tags": pa.array([[f"t{i % 3}", f"u{i % 5}"][: i % 3] for i in ids], pa.list_(pa.string())),
        "small": pa.array((ids % 200).astype(np.uint32)),
        "huge": pa.array(ids.astype(np.uint64) + np.uint64(2**63)),  # decimal(20,0) in Spark, exact
        "point": pa.StructArray.from_arrays([pa.array(ids % 7), pa.array([None if i % 4 == 0 else f"p{i}" for i in ids])],
                                            names=["x", "label"]),
    })


def _write(uri: str, version: str) -> None:
    """Versions: 1 create (3 fragments), 2 append, 3 delete, 4 append; tag ``before_delete`` = 2."""
    pylance.write_dataset(_table(0, 900), uri, max_rows_per_file=300, data_storage_version=version)
    pylance.write_dataset(_table(900, 500), uri, mode="append", max_rows_per_file=300)
    ds = pylance.dataset(uri)
    ds.tags.create("before_delete", 2)
    ds.delete("id % 7 = 3 OR (id >= 300 AND id < 600)")  # a whole fragment goes, others get deletion vectors
    pylance.write_dataset(_table(1400, 250), uri, mode="append", max_rows_per_file=300)


CASES: dict[str, dict[str, Any]] = {
    "full": {},
    "version_number": {"version": 2},
    "version_tag": {"version": "before_delete"},
    "after_delete": {"version": 3},
    "projection": {"columns": ["name", "id", "vec"]},
    "filter": {"filter": "id % 3 = 0 AND score > 100"},
    "filter_outside_projection": {"columns": ["name"], "filter": "small < 50 AND point.x = 2"},
    "row_address": {"columns": ["id"], "with_row_address": True},
    "row_address_filtered": {"columns": ["id", "tags"], "filter": "id > 1000", "with_row_address": True},
    "nothing_matches": {"columns": ["id"], "filter": "id < 0"},
    "split_fragments": {"rows_per_partition": 120, "with_row_address": True},
    "packed_fragments": {"rows_per_partition": 1000, "filter": "id % 5 <> 1"},
    "row_ids": {"columns": ["id"], "with_row_id": True, "filter": "id % 2 = 0"},
    "sql_projection": {"columns": {"id": "id", "twice": "score * 2", "big": "id > 1000"}, "filter": "small < 100"},
    "secret_options": {"columns": ["id"], "storage_options": {"aws_secret_access_key": SECRET}},
}


#: Cases read from a shallow clone (pylance's ``shallow_clone``) of the 2.2 dataset's version 3.
CLONE_CASES = ("full", "filter", "split_fragments", "row_address_filtered")


#: ``since_version`` reads of histories with updates, deletes and compactions in between:
#: (base, version or None for the latest, filter)
SINCE_CASES: dict[str, tuple[int, int | None, str | None]] = {
    "since_1": (1, None, None),
    "since_2_to_7": (2, 7, None),
    "since_5": (5, None, None),
    "since_5_filtered": (5, None, "id >= 300"),
    "since_latest": (-1, None, None),
    "since_2_split": (2, None, None),
}
SINCE_HISTORIES = {"addresses": False, "stable_row_ids": True}


def _since_case(uri: str, name: str) -> dict[str, Any]:
    base, version, filter = SINCE_CASES[name]
    latest = pylance.dataset(uri).version
    split = {"rows_per_partition": 17} if name.endswith("_split") else {}
    return {"uri": uri, "since_version": latest if base < 0 else base, "version": version, "filter": filter,
            "columns": ["id", "v", "s"], **split}


def _expected(uri: str, case: dict[str, Any]) -> pa.Table:
    ds = pylance.dataset(uri, version=case.get("version"))
    table = ds.to_table(columns=case.get("columns"), filter=case.get("filter"),
                        with_row_address=case.get("with_row_address", False),
                        with_row_id=case.get("with_row_id", False))
    return table.cast(spark_arrow_schema(table.schema))


@pytest.fixture(scope="module")
def spark_reads(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, str], str]:
    work = tmp_path_factory.mktemp("read-lance")
    uris = {fmt: str(work / f"ds{fmt.replace('.', '')}.lance") for fmt in ("2.0", "2.2")}
    for fmt, uri in uris.items():
        _write(uri, fmt)
    cases = {f"{case}@{fmt}": {"uri": uri, **kwargs} for fmt, uri in uris.items() for case, kwargs in CASES.items()}
    uris["clone"] = str(work / "clone.lance")  # every file in the source's base path
    pylance.dataset(uris["2.2"]).shallow_clone(uris["clone"], 3)
    cases.update({f"{case}@clone": {"uri": uris["clone"], **CASES[case]} for case in CLONE_CASES})
    uris["blobs"] = str(work / "blobs.lance")  # pylance 14's blob v2: inline, packed and dedicated values
    field = pylance.blob_field("img", inline_size_threshold=64, dedicated_size_threshold=3000)
    payloads = [None if i % 9 == 4 else bytes([i % 251]) * ((i * 397) % 5000) for i in range(120)]
    documents = pa.array([None if i % 7 == 2 else f'{{"n": {i}, "tags": ["t{i % 3}"]}}' for i in range(120)],
                         pa.json_())  # JSON: pylance stores JSONB, Spark gets the text
    pylance.write_dataset(pa.table({"id": pa.array(range(120), pa.int64()), "img": pylance.blob_array(payloads),
                                    "doc": documents},
                                   schema=pa.schema([pa.field("id", pa.int64()), field, pa.field("doc", pa.json_())])),
                          uris["blobs"], max_rows_per_file=50)
    cases.update({"full@blobs": {"uri": uris["blobs"]},
                  "split@blobs": {"uri": uris["blobs"], "filter": "id % 2 = 0", "rows_per_partition": 20}})
    for kind, stable in SINCE_HISTORIES.items():
        uris[kind] = str(work / f"history-{kind}.lance")
        history(uris[kind], stable=stable, compact_with="pylance")
        cases.update({f"{name}@{kind}": _since_case(uris[kind], name) for name in SINCE_CASES})
    (work / "cases.json").write_text(json.dumps(cases))
    (work / "read.py").write_text(SCRIPT)
    out = work / "out"
    out.mkdir()
    command = [shutil.which("spark-submit") or "spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.log.level=WARN", "--py-files", str(build_code_zip(work)), str(work / "read.py"),
               str(work / "cases.json"), str(out)]
    process = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=work,
                             env={**os.environ})
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-5000:]
    return out, uris, process.stdout + process.stderr


def _spark_result(out: pathlib.Path, name: str) -> tuple[pa.Table, dict[str, Any]]:
    with pa.OSFile(str(out / f"{name}.arrow"), "rb") as source:
        table = pa.ipc.open_file(source).read_all()
    return table, json.loads((out / f"{name}.json").read_text())


@pytest.mark.parametrize("fmt", ["2.0", "2.2"])
@pytest.mark.parametrize("case", list(CASES))
def test_read_lance_equals_pylance(spark_reads, case: str, fmt: str) -> None:
    out, uris, _ = spark_reads
    got, meta = _spark_result(out, f"{case}@{fmt}")
    expected = _expected(uris[fmt], CASES[case])
    assert got.num_rows == expected.num_rows
    assert got.schema.names == expected.schema.names
    # Spark hands back its own Arrow representation (timestamps, list child names): compare values
    assert got.to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("case", CLONE_CASES)
def test_read_lance_of_a_shallow_clone_equals_pylance(spark_reads, case: str) -> None:
    """Executors read the data and deletion files through the clone's base path (the source)."""
    out, uris, _ = spark_reads
    got, _ = _spark_result(out, f"{case}@clone")
    expected = _expected(uris["clone"], CASES[case])
    assert got.num_rows == expected.num_rows > 0
    assert got.to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("case", ["full", "split"])
def test_read_lance_of_blob_v2_and_json_columns(spark_reads, case: str) -> None:
    """Blob v2 values reach Spark as the logical struct: the bytes (read by executors from the data
    files and their sidecars) in ``data``, as pylance's ``take_blobs`` gives them; JSON values (stored
    as JSONB) as the text pylance reads."""
    out, uris, _ = spark_reads
    got, _ = _spark_result(out, f"{case}@blobs")
    ds = pylance.dataset(uris["blobs"])
    expected = {i: None if b is None else b.read() for i, b in zip(
        ds.to_table(columns=["id"]).column("id").to_pylist(), ds.take_blobs("img", indices=list(range(120))))}
    rows = {r["id"]: r["img"] and r["img"]["data"] for r in got.to_pylist()}
    assert rows == {i: b for i, b in expected.items() if case == "full" or i % 2 == 0}
    assert any(b and len(b) > 3000 for b in rows.values()) and any(b and 64 < len(b) <= 3000 for b in rows.values())
    table = ds.to_table(columns=["id", "doc"])
    documents = dict(zip(table.column("id").to_pylist(), table.column("doc").to_pylist()))
    assert {r["id"]: r["doc"] for r in got.to_pylist()} == {i: d for i, d in documents.items()
                                                           if case == "full" or i % 2 == 0}
    assert documents[0] == '{"n":0,"tags":["t0"]}' and documents[2] is None


def test_unsigned_columns_reach_spark_exactly(spark_reads) -> None:
    out, uris, _ = spark_reads
    got, _ = _spark_result(out, "full@2.2")
    assert got.schema.field("small").type == pa.int64() and got.schema.field("huge").type == pa.decimal128(20, 0)
    expected = pylance.dataset(uris["2.2"]).to_table(columns=["huge"]).column("huge").to_pylist()
    assert [int(v) for v in got.column("huge").to_pylist()] == expected and min(expected) >= 2**63


def test_row_metadata_stays_bigint_and_uint64_becomes_decimal() -> None:
    schema = spark_arrow_schema(pa.schema([("_rowaddr", pa.uint64()), ("_rowid", pa.uint64()), ("u", pa.uint64()),
                                           ("l", pa.list_(pa.uint64())), ("u8", pa.uint8())]))
    assert schema.types == [pa.int64(), pa.int64(), pa.decimal128(20, 0), pa.list_(pa.decimal128(20, 0)),
                            pa.int16()]


@pytest.mark.parametrize("kind", list(SINCE_HISTORIES))
@pytest.mark.parametrize("case", list(SINCE_CASES))
def test_since_version_equals_pylance_difference(spark_reads, case: str, kind: str) -> None:
    out, uris, _ = spark_reads
    got, meta = _spark_result(out, f"{case}@{kind}")
    kwargs = _since_case(uris[kind], case)
    version = kwargs["version"] or pylance.dataset(uris[kind]).version
    rows, inserted, updated, _ = oracle(uris[kind], kwargs["since_version"], version, SINCE_HISTORIES[kind])
    if kwargs["filter"]:
        rows = [r for r in rows if r["id"] >= 300]
    else:
        assert len(rows) == inserted + updated
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == rows
    if case.endswith("_split"):  # selected rows of a fragment split into tasks of 17
        assert meta["partitions"] > len(plan_read(uris[kind], since_version=kwargs["since_version"]).tasks)
    if case != "since_latest":
        assert rows  # the case reads something


def test_one_partition_per_fragment_and_split_ranges(spark_reads) -> None:
    out, uris, _ = spark_reads
    ds = pylance.dataset(uris["2.0"])
    live_fragments = [f for f in ds.get_fragments() if f.count_rows() > 0]
    assert _spark_result(out, "full@2.0")[1]["partitions"] == len(live_fragments)
    split = sum(-(-f.metadata.physical_rows // 120) for f in live_fragments)
    assert _spark_result(out, "split_fragments@2.0")[1]["partitions"] == split > len(live_fragments)
    packed = plan_read(uris["2.0"], rows_per_partition=1000).partitions
    assert [[t.fragment for t in group] for group in packed] == [[0, 2, 3], [4, 5]]  # 300+300+300, 200+250 rows
    assert _spark_result(out, "packed_fragments@2.0")[1]["partitions"] == 2


def test_storage_options_stay_out_of_plans_and_logs(spark_reads) -> None:
    out, _, logs = spark_reads
    assert not _spark_result(out, "secret_options@2.0")[1]["plan_has_secret"]
    assert SECRET not in logs


def test_bad_reads_fail_on_the_driver_with_typed_errors(tmp_path) -> None:
    uri = str(tmp_path / "ds.lance")
    _write(uri, "2.0")
    with pytest.raises(VersionNotFoundError):
        plan_read(uri, version=99)
    with pytest.raises(TagNotFoundError):
        plan_read(uri, version="no-such-tag")
    with pytest.raises(InvalidInputError, match="nope"):
        plan_read(uri, columns=["id", "nope"])
    with pytest.raises(InvalidInputError):
        plan_read(uri, filter="id >>> 3")
    with pytest.raises(InvalidInputError, match="rows_per_partition"):
        plan_read(uri, rows_per_partition=0)
    planned = plan_read(uri, columns=["id"], with_row_address=True)
    assert planned.version == 4 and planned.schema == pa.schema([("id", pa.int64()), ("_rowaddr", pa.int64())])
