"""Kartothek imports read by pylance (the oracle) equal the Kartothek data read with plain pyarrow."""

from __future__ import annotations

import json
import pathlib

import lance as pylance
import pyarrow as pa
import pytest
from kartothek_fixtures import (
    STORE,
    TABLES,
    as_expected,
    common_metadata_schema,
    copy_datasets,
    ground_truth,
    read_with_pyarrow,
)

from airflow_lance.core import kartothek as ktk

PARTITION_KEYS = {"one_key": ["country"], "two_keys": ["day", "code"], "multi_table": ["part"], "updated": ["year"],
                  "empty_partition": [], "header_only": [], "v3": ["region"]}


@pytest.mark.parametrize(("uuid", "table"), TABLES)
def test_pylance_reads_the_import_equal_to_the_kartothek_data_read_with_pyarrow(tmp_path, uuid, table):
    target = str(tmp_path / "t.lance")
    result = ktk.import_kartothek(STORE, uuid, table, target, max_rows_per_file=3)
    ds = pylance.dataset(target)
    expected_schema = common_metadata_schema(STORE, uuid, table)
    # Partition columns restored first with the types of _common_metadata; payload types as there.
    assert ds.schema.remove_metadata().equals(expected_schema.remove_metadata())
    assert (ds.version, ds.count_rows(), len(ds.get_fragments())) == (result.version, result.rows, result.fragments)
    data = ds.to_table()
    kartothek_data = read_with_pyarrow(STORE, uuid, table, PARTITION_KEYS[uuid])
    if kartothek_data.num_rows == 0:
        assert data.num_rows == 0
        return
    assert as_expected(data, ds.schema).equals(as_expected(kartothek_data, ds.schema))
    assert as_expected(data, ds.schema).equals(as_expected(ground_truth(uuid, table), ds.schema))


def test_pylance_sees_the_recorded_source_and_one_fragment_group_per_partition(tmp_path):
    target = str(tmp_path / "t.lance")
    ktk.import_kartothek(STORE, "one_key", target_uri=target, max_rows_per_file=2)
    ds = pylance.dataset(target)
    meta = {k.decode(): v.decode() for k, v in ds.schema.metadata.items()}
    assert meta["kartothek.dataset_uuid"] == "one_key" and meta["kartothek.metadata_version"] == "4"
    assert json.loads(meta["kartothek.metadata"])["owner"] == "fixtures"
    for fragment in ds.get_fragments():
        assert fragment.count_rows() <= 2
        assert len(set(fragment.to_table(columns=["country"]).column("country").to_pylist())) == 1
    assert ds.to_table(filter="country = 'a=b&c?d#e'").num_rows == 3


def test_reimport_is_a_no_op_for_pylance(tmp_path):
    target = str(tmp_path / "t.lance")
    ktk.import_kartothek(STORE, "two_keys", target_uri=target)
    files = sorted(p.name for p in pathlib.Path(target, "data").iterdir())
    again = ktk.import_kartothek(STORE, "two_keys", target_uri=target, mode="overwrite")
    ds = pylance.dataset(target)
    assert again.already_imported and len(ds.versions()) == 1 and ds.count_rows() == 24
    assert sorted(p.name for p in pathlib.Path(target, "data").iterdir()) == files


@pytest.mark.parametrize("breakage", ["missing file", "malformed metadata"])
def test_broken_source_writes_nothing(tmp_path, breakage):
    store = copy_datasets(tmp_path / "src", "updated")
    if breakage == "missing file":
        next((store / "updated" / "table" / "year=2021").iterdir()).unlink()
        expected = ktk.KartothekValidationError
    else:
        path = store / "updated.by-dataset-metadata.json"
        path.write_text(path.read_text()[:-20])
        expected = ktk.KartothekMetadataError
    target = tmp_path / "t.lance"
    with pytest.raises(expected):
        ktk.import_kartothek(store, "updated", target_uri=str(target))
    assert not target.exists()
    with pytest.raises(ValueError):
        pylance.dataset(str(target))


def test_verification_catches_a_dataset_tampered_with_by_pylance(tmp_path):
    target = str(tmp_path / "t.lance")
    result = ktk.import_kartothek(STORE, "two_keys", target_uri=target, verify=True)
    assert result.verification.ok
    ds = pylance.dataset(target)
    ds.update({"name": "'tampered'"}, where="id = 4")
    with pytest.raises(ktk.KartothekVerificationError) as caught:
        ktk.verify_kartothek_import(STORE, "two_keys", target)
    assert len(caught.value.differences) == 1
    assert "column 'name' differs" in caught.value.differences[0]
    pylance.dataset(target).delete("code = 2")
    report = ktk.verify_kartothek_import(STORE, "two_keys", target, raise_on_difference=False)
    assert sum("rows in Kartothek, none in Lance" in d for d in report.differences) == 3
    # The untouched version still verifies.
    assert ktk.verify_kartothek_import(STORE, "two_keys", target, version=1).ok


def test_import_over_a_pylance_dataset(tmp_path):
    target = str(tmp_path / "t.lance")
    pylance.write_dataset(pa.table({"x": [1, 2]}), target)
    with pytest.raises(FileExistsError):
        ktk.import_kartothek(STORE, "v3", target_uri=target)
    result = ktk.import_kartothek(STORE, "v3", target_uri=target, mode="overwrite", verify=True)
    ds = pylance.dataset(target)
    assert (result.version, ds.version, ds.count_rows(), result.verification.ok) == (2, 2, 6, True)
    assert ds.schema.names == ["region", "id", "q"]
