"""The ``lance`` source kind of the write job spec: JSON round trip, validation before anything
runs, storage options out of the description and the digest, and the job loading it (through
``read_lance``; the Spark run is tests/airflow/test_example_incremental_embeddings.py)."""

from __future__ import annotations

import pytest

from airflow_lance.spark.spec import JobSpecError, LanceSourceSpec, SourceSpec, WriteJobSpec

SECRET = "s3cr3t-value"


def _spec(**lance: object) -> WriteJobSpec:
    source = SourceSpec.from_fields(lance=LanceSourceSpec(**{"uri": "/data/docs.lance", **lance}))
    return WriteJobSpec(uri="/data/out.lance", mode="append", source=source, read_version=3,
                        staging_root="/data/out.lance", staging_name="_airflow_staging/x.json",
                        transform="pkg.model:embed")


def test_round_trip_keeps_every_field() -> None:
    spec = _spec(version=7, columns=["id", "text"], filter="id > 3", since_version="nightly",
                 storage_options={"aws_secret_access_key": SECRET})
    again = WriteJobSpec.from_json(spec.to_json())
    assert again == spec
    assert again.source.lance.storage_options == {"aws_secret_access_key": SECRET}
    assert again.source.lance.columns == ("id", "text") and again.transform == "pkg.model:embed"


def test_storage_options_stay_out_of_description_repr_and_digest() -> None:
    spec = _spec(version=7, storage_options={"aws_secret_access_key": SECRET})
    assert SECRET not in spec.source.describe() and "aws_secret_access_key" in spec.source.describe()
    assert SECRET not in repr(spec)
    assert spec.digest() == _spec(version=7, storage_options={"aws_secret_access_key": "other"}).digest()
    assert spec.digest() != _spec(version=8).digest()


@pytest.mark.parametrize(("fields", "message"), [
    ({"uri": ""}, "source_lance_uri"),
    ({"version": 1.5}, "source_lance_version"),
    ({"since_version": True}, "source_lance_since_version"),
    ({"columns": "id"}, "source_lance_columns"),
    ({"filter": 3}, "source_lance_filter"),
])
def test_bad_fields_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(JobSpecError, match=message):
        LanceSourceSpec(**{"uri": "/data/docs.lance", **fields})


def test_one_source_only_and_a_well_formed_transform() -> None:
    with pytest.raises(JobSpecError, match="exactly one"):
        SourceSpec.from_fields(sql="SELECT 1", lance=LanceSourceSpec(uri="/data/docs.lance"))
    with pytest.raises(JobSpecError, match="transform"):
        WriteJobSpec(uri="/o", mode="append", source=SourceSpec.from_fields(sql="SELECT 1"), read_version=0,
                     staging_root="/o", staging_name="x.json", transform="no-colon")
