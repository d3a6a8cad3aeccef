"""The job spec and staged result: validation with typed errors, JSON round trips, digests, staging."""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.spark.spec import (
    JobSpecError,
    SourceSpec,
    WriteJobResult,
    WriteJobSpec,
    parse_type,
    staging_location,
)


def _spec(**overrides: object) -> WriteJobSpec:
    fields: dict[str, object] = {
        "uri": "s3://bucket/ds.lance", "mode": "append", "source": SourceSpec.from_fields(path="s3://in/x.parquet"),
        "read_version": 4, "staging_root": "s3://bucket/ds.lance", "staging_name": "_airflow_staging/k.json",
        "storage_options": {"aws_secret_access_key": "shh-1234"},
    }
    fields.update(overrides)
    return WriteJobSpec(**fields)  # type: ignore[arg-type]


def test_json_round_trip_and_secret_free_repr() -> None:
    spec = _spec(source=SourceSpec.from_fields(path=["a.csv", "b.csv"], format="csv", options={"header": True}),
                 num_partitions=8, max_rows_per_file=1000, data_storage_version="2.0",
                 fixed_size_lists={"embedding": "768"})
    assert spec.fixed_size_lists == {"embedding": 768}  # a rendered template gives a digit string
    assert WriteJobSpec.from_json(spec.to_json()) == spec
    assert "shh-1234" not in repr(spec)
    assert spec.source.options == {"header": "True"}
    assert "header" in spec.source.describe() and "True" not in spec.source.describe()


def test_casts_parse_pyarrow_names_and_list_types() -> None:
    assert parse_type("float32") == pa.float32() and parse_type(" double ") == pa.float64()
    assert parse_type("timestamp[us]") == pa.timestamp("us")
    assert parse_type("fixed_size_list<float32>[64]") == pa.list_(pa.float32(), 64)
    assert parse_type("large_list<fixed_size_list<float16>[3]>") == pa.large_list(pa.list_(pa.float16(), 3))
    spec = _spec(fixed_size_lists={"a": 4, "b": (64, "float32"), "c": ["8", "float64"]}, cast={"p": "int32"})
    assert spec.fixed_size_lists == {"a": 4}
    assert spec.cast == {"p": "int32", "b": "fixed_size_list<float32>[64]", "c": "fixed_size_list<float64>[8]"}
    assert WriteJobSpec.from_json(spec.to_json()) == spec
    assert _spec(cast={"p": "int32"}).digest() != _spec().digest()
    assert "cast" not in _spec(cast={}).to_dict()


def test_digest_ignores_credentials_and_staging_but_not_the_write() -> None:
    base = _spec()
    assert _spec(storage_options={"aws_secret_access_key": "other"}, staging_name="x.json").digest() == base.digest()
    assert _spec(read_version=5).digest() != base.digest()
    assert _spec(data_storage_version="2.0").digest() != base.digest()
    assert _spec(source=SourceSpec.from_fields(sql="SELECT 1")).digest() != base.digest()
    assert _spec(fixed_size_lists={"v": 4}).digest() != base.digest()
    # specs without vectors keep the digest they had before the field existed (a retry across an upgrade)
    assert "fixed_size_lists" not in base.to_dict() and _spec(fixed_size_lists={}).digest() == base.digest()


@pytest.mark.parametrize(("fields", "message"), [
    ({}, "exactly one of"),
    ({"path": "x", "sql": "SELECT 1"}, "exactly one of"),
    ({"sql": "SELECT 1", "format": "csv"}, "source_path only"),
    ({"callable": "no_colon"}, "package.module:function"),
    ({"path": ["ok", ""]}, "list of paths"),
])
def test_bad_sources_raise_a_typed_error(fields: dict[str, object], message: str) -> None:
    with pytest.raises(JobSpecError, match=message):
        SourceSpec.from_fields(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"mode": "upsert"}, "mode must be one of"),
    ({"read_version": -1}, "read_version"),
    ({"max_rows_per_file": 0}, "max_rows_per_file"),
    ({"num_partitions": 0}, "num_partitions"),
    ({"fixed_size_lists": {"v": 0}}, r"fixed_size_lists\['v'\] must be a positive integer"),
    ({"fixed_size_lists": {"v": "wide"}}, "positive integer"),
    ({"fixed_size_lists": {"v": True}}, "positive integer"),
    ({"fixed_size_lists": ["v"]}, "mapping of column names to sizes"),
    ({"fixed_size_lists": {"v": (64,)}}, r"fixed_size_lists\['v'\] must be a size or \(size, element type\)"),
    ({"fixed_size_lists": {"v": (0, "float32")}}, r"fixed_size_lists\['v'\] must be a positive integer"),
    ({"fixed_size_lists": {"v": (64, "flaot32")}}, r"fixed_size_lists\['v'\]: unknown type 'flaot32'"),
    ({"cast": {"v": "vector"}}, r"cast\['v'\]: unknown type 'vector' \(e.g. float32"),
    ({"cast": {"v": "fixed_size_list<float32>"}}, "fixed_size_list needs a positive size"),
    ({"cast": {"v": "list<float32>[3]"}}, "only fixed_size_list takes a size"),
    ({"cast": {"v": 32}}, "must be a type name"),
    ({"cast": ["v"]}, "cast must be a mapping"),
    ({"cast": {"v": "float32"}, "fixed_size_lists": {"v": 4}}, r"\['v'\] named in both fixed_size_lists and cast"),
])
def test_bad_specs_raise_a_typed_error(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(JobSpecError, match=message):
        _spec(**overrides)


def test_spec_from_another_version_or_garbage_is_refused() -> None:
    assert issubclass(JobSpecError, lance.InvalidInputError)
    with pytest.raises(JobSpecError, match="not JSON"):
        WriteJobSpec.from_json("{")
    with pytest.raises(JobSpecError, match="operator and job differ"):
        WriteJobSpec.from_json('{"spec_version": 99}')
    with pytest.raises(JobSpecError, match="lacks 'uri'"):
        WriteJobSpec.from_json('{"spec_version": 1}')


def test_staging_location_is_keyed_by_the_idempotency_key() -> None:
    root, name = staging_location("s3://b/ds.lance", "dag/run/task/-1")
    assert root == "s3://b/ds.lance" and name.startswith("_airflow_staging/") and name.endswith(".json")
    assert staging_location("s3://b/ds.lance", "dag/run/task/-1") == (root, name)
    assert staging_location("s3://b/ds.lance", "dag/run/task/0")[1] != name
    assert staging_location("s3://b/ds.lance", "k", "s3://b/staging")[0] == "s3://b/staging"


def test_staged_result_save_load_missing_files_and_discard(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "ds.lance")
    table = pa.table({"id": pa.array(range(10), pa.int64())})
    fragments = tuple(lance.write_fragments(table, uri, max_rows_per_file=4))
    result = WriteJobResult("digest", fragments, 10, sum(f.files[0].file_size_bytes or 0 for f in fragments),
                            table.schema, 1.5)
    assert WriteJobResult.load(uri, "_airflow_staging/r.json", {}) is None
    result.save(uri, "_airflow_staging/r.json", {})
    loaded = WriteJobResult.load(uri, "_airflow_staging/r.json", {})
    assert loaded == result and loaded.missing_files(uri, {}) == []
    (tmp_path / "ds.lance" / "data" / fragments[0].files[0].path).unlink()
    assert loaded.missing_files(uri, {}) == [f"data/{fragments[0].files[0].path}"]
    WriteJobResult.discard(uri, "_airflow_staging/r.json", {})
    assert WriteJobResult.load(uri, "_airflow_staging/r.json", {}) is None
    (tmp_path / "bad.json").write_text('{"spec_digest": "x"}')
    with pytest.raises(JobSpecError, match="malformed"):
        WriteJobResult.load(str(tmp_path), "bad.json", {})
