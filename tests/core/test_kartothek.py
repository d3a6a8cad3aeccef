"""Kartothek reader and importer against fixtures made by kartothek 5.3 (our reader only)."""

from __future__ import annotations

import datetime
import json
import math
import os
import pathlib
import pickle

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import zstandard
from kartothek_fixtures import (
    STORE,
    TABLES,
    as_expected,
    copy_datasets,
    ground_truth,
    kartothek_read,
    load_json_metadata,
    save_json_metadata,
)

import airflow_lance.core as lance
from airflow_lance.core import kartothek as ktk
from airflow_lance.core.kartothek import importer


def _files_under(path: str | pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in pathlib.Path(path).rglob("*") if p.is_file())


# -- discovery and metadata --------------------------------------------------------------------------


def test_finds_every_dataset_of_a_store_location_with_its_metadata_format():
    found = {ref.dataset_uuid: ref.metadata_format for ref in ktk.find_kartothek_datasets(STORE)}
    assert found == {
        "empty_partition": "json", "header_only": "json", "multi_table": "json", "one_key": "json",
        "slash_value": "json", "two_keys": "msgpack", "updated": "json", "v3": "json",
    }
    assert ktk.find_kartothek_datasets(f"hfs://{STORE}") == ktk.find_kartothek_datasets(STORE)


def test_reads_json_and_msgpack_metadata_of_versions_3_and_4():
    store = lance_store(STORE)
    one = ktk.read_kartothek_metadata(store, "one_key")
    assert (one.metadata_version, one.metadata_format, one.partition_keys) == (4, "json", ("country",))
    assert len(one.partitions) == 14 and one.explicit_partitions
    assert one.metadata == {"creation_time": "2021-03-01T12:00:00", "owner": "fixtures", "purpose": "one partition key"}
    assert one.indices == {"id": "one_key/indices/id/2021-03-01T12%3A00%3A00.by-dataset-index.parquet"}
    two = ktk.read_kartothek_metadata(store, "two_keys")
    assert (two.metadata_version, two.metadata_format, two.partition_keys) == (4, "msgpack", ("day", "code"))
    assert len(two.partitions) == 12 and set(two.indices) == {"name"}
    assert ktk.read_kartothek_metadata(store, "v3").metadata_version == 3
    header = ktk.read_kartothek_metadata(store, "header_only")
    assert (header.explicit_partitions, header.partitions, header.partition_keys) == (False, {}, ())


def lance_store(path):
    from airflow_lance.core.storage import open_store

    return open_store(str(path))


def test_opens_a_table_with_typed_url_decoded_partition_values_and_its_indices():
    table = ktk.open_kartothek_table(STORE, "one_key")
    assert table.schema.names[:2] == ["country", "blob"]  # partition columns first, as Kartothek orders them
    assert table.schema.field("country").type == pa.string()
    assert table.schema.field("small").type == pa.int64()  # normalised in _common_metadata
    assert b"pandas" not in (table.schema.metadata or {})
    countries = {part.values[0][1].as_py() for part in table.partitions}
    assert countries == {"Côte d'Ivoire", "a b", "x%y", "a=b&c?d#e", "plus+sign", "~tilde.dot", "plain"}
    assert table.indices == (
        ktk.SecondaryIndexInfo("id", 21, 14, "one_key/indices/id/2021-03-01T12%3A00%3A00.by-dataset-index.parquet",
                               "int64"),
    )
    two = ktk.open_kartothek_table(STORE, "two_keys")
    values = {tuple(v.as_py() for _, v in part.values) for part in two.partitions}
    assert (datetime.date(2021, 2, 1), -3) in values and len(values) == 12
    assert [two.schema.field(k).type for k in ("day", "code")] == [pa.date32(), pa.int64()]
    assert ktk.open_kartothek_table(STORE, "multi_table", "helper").tables == ("core", "helper")


# -- import ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("uuid", "table"), TABLES)
def test_import_equals_what_the_generator_wrote_and_what_kartothek_reads(tmp_path, uuid, table):
    target = str(tmp_path / "out.lance")
    result = ktk.import_kartothek(STORE, uuid, table, target, max_rows_per_file=2)
    source = ktk.open_kartothek_table(STORE, uuid, table)
    ds = lance.dataset(target)
    assert result.version == ds.version == 1 and not result.already_imported
    assert ds.schema.remove_metadata().equals(source.schema.remove_metadata())
    data = ds.to_table()
    assert result.rows == data.num_rows
    assert result.fragments == len(ds.get_fragments())
    data_dir = pathlib.Path(target, "data")
    sizes = [os.path.getsize(p) for p in data_dir.iterdir()] if data_dir.exists() else []
    assert result.bytes_written == sum(sizes)
    written = ground_truth(uuid, table)
    if written is None:
        assert data.num_rows == 0 and result.partitions == 0
        return
    assert as_expected(data, ds.schema).equals(as_expected(written, ds.schema))
    assert as_expected(data, ds.schema).equals(as_expected(kartothek_read(uuid, table), ds.schema))


def test_each_partition_becomes_fragments_of_at_most_max_rows_per_file(tmp_path):
    target = str(tmp_path / "out.lance")
    result = ktk.import_kartothek(STORE, "one_key", target_uri=target, max_rows_per_file=1)
    source = ktk.open_kartothek_table(STORE, "one_key")
    sizes = [pq.ParquetFile(STORE / part.key).metadata.num_rows for part in source.partitions]
    assert result.fragments == sum(sizes) == 21
    target = str(tmp_path / "other.lance")
    result = ktk.import_kartothek(STORE, "one_key", target_uri=target, max_rows_per_file=2)
    assert result.fragments == sum(math.ceil(n / 2) for n in sizes)
    for fragment in lance.dataset(target).get_fragments():
        assert len(pc.unique(fragment.to_table(columns=["country"]).column("country"))) == 1
    assert result.partitions == 14 and result.empty_partitions == 0


def test_empty_partition_makes_no_fragment(tmp_path):
    result = ktk.import_kartothek(STORE, "empty_partition", target_uri=str(tmp_path / "t"))
    assert (result.partitions, result.empty_partitions, result.fragments, result.rows) == (3, 1, 2, 5)


def test_partition_columns_can_be_dropped(tmp_path):
    target = str(tmp_path / "t")
    result = ktk.import_kartothek(STORE, "two_keys", target_uri=target, partition_columns="drop")
    ds = lance.dataset(target)
    assert ds.schema.names == ["amount", "id", "kind", "name"]
    assert as_expected(ds.to_table(), ds.schema).equals(as_expected(ground_truth("two_keys", "table"), ds.schema))
    assert result.partition_columns == "drop"


def test_source_is_recorded_in_schema_metadata_and_transaction_properties(tmp_path):
    target = str(tmp_path / "t")
    result = ktk.import_kartothek(STORE, "two_keys", target_uri=target)
    ds = lance.dataset(target)
    meta = {k.decode(): v.decode() for k, v in ds.schema.metadata.items()}
    assert meta["kartothek.dataset_uuid"] == "two_keys"
    assert meta["kartothek.table"] == "table"
    assert meta["kartothek.metadata_version"] == "4"
    assert meta["kartothek.metadata_format"] == "msgpack"
    assert meta["kartothek.creation_time"] == "2021-03-01T12:00:00"
    assert json.loads(meta["kartothek.partition_keys"]) == ["day", "code"]
    landed = importer._find_landed(ds.store, result.idempotency_key)
    assert landed is not None
    props = landed[1].transaction_properties
    assert props["kartothek.dataset_uuid"] == "two_keys" and props["kartothek.source_uri"] == str(STORE)
    assert json.loads(props["kartothek.import_stats"])["secondary_indices"][0]["column"] == "name"
    assert props[lance.IDEMPOTENCY_KEY] == result.idempotency_key


@pytest.mark.parametrize("mode", ["create", "overwrite"])
def test_reimport_is_a_no_op(tmp_path, mode):
    target = str(tmp_path / "t")
    first = ktk.import_kartothek(STORE, "updated", target_uri=target)
    files = _files_under(target)
    again = ktk.import_kartothek(STORE, "updated", target_uri=target, mode=mode)
    assert again.already_imported and again.version == first.version == 1
    assert (again.rows, again.fragments, again.partitions, again.secondary_indices) == (
        first.rows, first.fragments, first.partitions, first.secondary_indices)
    assert _files_under(target) == files
    assert len(lance.dataset(target).versions()) == 1


def test_an_updated_source_is_a_new_import(tmp_path):
    store = copy_datasets(tmp_path / "src", "updated")
    target = str(tmp_path / "t")
    ktk.import_kartothek(store, "updated", target_uri=target)
    document = load_json_metadata(store, "updated")
    document["partitions"].pop(next(iter(document["partitions"])))  # year=2020, 3 rows
    save_json_metadata(store, "updated", document)
    with pytest.raises(lance.DatasetAlreadyExistsError):
        ktk.import_kartothek(store, "updated", target_uri=target)
    result = ktk.import_kartothek(store, "updated", target_uri=target, mode="overwrite")
    assert (result.version, result.rows, result.already_imported) == (2, 5, False)


def test_create_refuses_an_existing_dataset_and_writes_nothing(tmp_path):
    target = str(tmp_path / "t")
    lance.write_dataset(pa.table({"a": [1]}), target)
    files = _files_under(target)
    with pytest.raises(lance.DatasetAlreadyExistsError):
        ktk.import_kartothek(STORE, "v3", target_uri=target)
    assert _files_under(target) == files


def test_plan_write_commit_in_parts_is_one_commit_and_idempotent(tmp_path):
    target = str(tmp_path / "t")
    plan = ktk.plan_kartothek_import(STORE, "one_key", target_uri=target, max_rows_per_file=2)
    labels = [p.label for p in plan.source.partitions]
    shipped = pickle.loads(pickle.dumps(plan))  # as an engine ships it to its workers
    parts = [ktk.write_kartothek_partitions(plan, labels[:5]), ktk.write_kartothek_partitions(shipped, labels[5:])]
    result = ktk.commit_kartothek_import(plan, ktk.PartitionsWritten.combine(parts))
    assert (result.version, result.rows, result.partitions) == (1, 21, 14)
    # A second executor run of the same plan commits nothing and leaves no files behind.
    files = _files_under(target)
    late = ktk.commit_kartothek_import(plan, ktk.write_kartothek_partitions(plan))
    assert late.already_imported and late.version == 1
    assert _files_under(target) == files
    with pytest.raises(lance.InvalidInputError, match="unknown partition labels"):
        ktk.write_kartothek_partitions(plan, ["nope"])


def test_failure_while_writing_removes_the_data_files(tmp_path, monkeypatch):
    target = tmp_path / "t"
    calls = []
    real = importer.read_partition

    def failing(store, partition, schema, **kwargs):
        calls.append(partition.label)
        for batch in real(store, partition, schema, **kwargs):
            yield batch
            if len(calls) == 3:  # fails after the first file of the third partition was completed
                raise ktk.KartothekFileError(partition.key, "boom")

    monkeypatch.setattr(importer, "read_partition", failing)
    with pytest.raises(ktk.KartothekFileError, match="boom"):
        ktk.import_kartothek(STORE, "one_key", target_uri=str(target), max_rows_per_file=1)
    assert len(calls) == 3
    assert _files_under(target) == []


def test_source_through_fsspec_with_storage_options(tmp_path):
    fs = fsspec.filesystem("memory")
    for path in STORE.rglob("*"):
        if path.is_file() and path.relative_to(STORE).parts[0].startswith("v3"):
            fs.pipe_file(f"/ktk-src/{path.relative_to(STORE)}", path.read_bytes())
    try:
        result = ktk.import_kartothek("memory://ktk-src", "v3", target_uri=str(tmp_path / "t"), storage_options={},
                                      target_storage_options={}, verify=True)
    finally:
        fs.rm("/ktk-src", recursive=True)
    assert (result.rows, result.verification.ok) == (6, True)


# -- errors: typed, listing what is wrong, nothing written -------------------------------------------


def _assert_nothing_written(target: pathlib.Path) -> None:
    assert not target.exists() or _files_under(target) == []


def test_missing_payload_file_is_a_validation_error(tmp_path):
    store = copy_datasets(tmp_path / "src", "two_keys")
    victims = sorted((store / "two_keys" / "table").rglob("*.parquet"))[:2]
    for victim in victims:
        victim.unlink()
    target = tmp_path / "t"
    with pytest.raises(ktk.KartothekValidationError) as caught:
        ktk.import_kartothek(store, "two_keys", target_uri=str(target))
    assert len(caught.value.problems) == 2
    for victim in victims:
        assert str(victim.relative_to(store)) in str(caught.value)
    _assert_nothing_written(target)


def test_missing_schema_and_index_files_are_listed(tmp_path):
    store = copy_datasets(tmp_path / "src", "one_key")
    (store / "one_key" / "table" / "_common_metadata").unlink()
    next((store / "one_key" / "indices").rglob("*.parquet")).unlink()
    with pytest.raises(ktk.KartothekValidationError) as caught:
        ktk.import_kartothek(store, "one_key", target_uri=str(tmp_path / "t"))
    text = "\n".join(caught.value.problems)
    assert "_common_metadata is missing" in text and "index 'id'" in text
    _assert_nothing_written(tmp_path / "t")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a map"),
        (json.dumps({"dataset_metadata_version": "4", "dataset_uuid": "v3", "partitions": []}).encode(),
         "dataset_metadata_version must be an integer"),
        (json.dumps({"dataset_metadata_version": 4, "dataset_uuid": "other", "partitions": {"p": {"files": 3}},
                     "partition_keys": "region"}).encode(), "'files' must be a map"),
    ],
)
def test_malformed_json_metadata_is_a_metadata_error(tmp_path, content, needle):
    store = copy_datasets(tmp_path / "src", "v3")
    (store / "v3.by-dataset-metadata.json").write_bytes(content)
    with pytest.raises(ktk.KartothekMetadataError, match=needle) as caught:
        ktk.import_kartothek(store, "v3", target_uri=str(tmp_path / "t"))
    assert isinstance(caught.value, lance.CorruptFileError)
    assert caught.value.path == "v3.by-dataset-metadata.json"
    _assert_nothing_written(tmp_path / "t")


def test_malformed_metadata_lists_every_problem(tmp_path):
    store = copy_datasets(tmp_path / "src", "v3")
    document = {"dataset_metadata_version": 4, "dataset_uuid": "other", "partitions": {"p": {"files": 3}},
                "partition_keys": "region", "indices": {"x": 5}}
    save_json_metadata(store, "v3", document)
    with pytest.raises(ktk.KartothekMetadataError) as caught:
        ktk.open_kartothek_table(store, "v3")
    assert len(caught.value.problems) == 4


def test_truncated_or_garbled_msgpack_metadata_is_a_metadata_error(tmp_path):
    store = copy_datasets(tmp_path / "src", "two_keys")
    path = store / "two_keys.by-dataset-metadata.msgpack.zstd"
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ktk.KartothekMetadataError, match="zstd"):
        ktk.import_kartothek(store, "two_keys", target_uri=str(tmp_path / "t"))
    path.write_bytes(zstandard.ZstdCompressor().compress(b"\xc1\xc1 not msgpack"))
    with pytest.raises(ktk.KartothekMetadataError, match="msgpack"):
        ktk.import_kartothek(store, "two_keys", target_uri=str(tmp_path / "t"))
    _assert_nothing_written(tmp_path / "t")


def test_unknown_dataset_and_unsupported_version(tmp_path):
    with pytest.raises(ktk.KartothekDatasetNotFoundError, match="nope.by-dataset-metadata.msgpack.zstd"):
        ktk.import_kartothek(STORE, "nope", target_uri=str(tmp_path / "t"))
    store = copy_datasets(tmp_path / "src", "v3")
    document = load_json_metadata(store, "v3")
    document["dataset_metadata_version"] = 5
    save_json_metadata(store, "v3", document)
    with pytest.raises(ktk.KartothekUnsupportedError, match="dataset_metadata_version 5"):
        ktk.import_kartothek(store, "v3", target_uri=str(tmp_path / "t"))
    _assert_nothing_written(tmp_path / "t")


def test_unknown_table(tmp_path):
    with pytest.raises(ktk.KartothekValidationError, match=r"table 'nope' is not in the dataset.*core"):
        ktk.import_kartothek(STORE, "multi_table", "nope", target_uri=str(tmp_path / "t"))


def test_a_slash_in_a_partition_value_is_imported_whole(tmp_path):
    # kartothek leaves '/' unencoded (the value 'a/b' is the directories 'p=a/b') and its own
    # reader truncates the value to 'a'; we import what was written.
    assert sorted(kartothek_read("slash_value", "table").column("p").to_pylist()) != ["a/b", "c"]
    expected = ground_truth("slash_value", "table")
    assert sorted(expected.column("p").to_pylist()) == ["a/b", "c"]
    result = ktk.import_kartothek(STORE, "slash_value", target_uri=str(tmp_path / "t"), verify=True)
    imported = lance.dataset(str(tmp_path / "t")).to_table()
    assert imported.sort_by("p").select(expected.schema.names).equals(
        expected.sort_by("p").cast(imported.select(expected.schema.names).schema))
    assert result is not None


def test_partitions_must_have_the_same_tables(tmp_path):
    store = copy_datasets(tmp_path / "src", "multi_table")
    document = load_json_metadata(store, "multi_table")
    next(iter(document["partitions"].values()))["files"].pop("helper")
    save_json_metadata(store, "multi_table", document)
    with pytest.raises(ktk.KartothekValidationError, match=r"lacks tables \['helper'\]"):
        ktk.import_kartothek(store, "multi_table", "core", target_uri=str(tmp_path / "t"))


def test_names_outside_the_allowed_characters_are_refused(tmp_path):
    store = copy_datasets(tmp_path / "src", "v3")
    document = load_json_metadata(store, "v3")
    label, partition = next(iter(document["partitions"].items()))
    old = partition["files"]["table"]
    new = old.replace("0000000000000000000000000000000a.parquet", "bad.name.parquet")
    (store / old).rename(store / new)
    partition["files"]["table"] = new
    save_json_metadata(store, "v3", document)
    with pytest.raises(ktk.KartothekValidationError, match="file name 'bad.name.parquet' has characters"):
        ktk.import_kartothek(store, "v3", target_uri=str(tmp_path / "t"))


def test_payload_files_must_match_the_table_schema(tmp_path):
    store = copy_datasets(tmp_path / "src", "v3")
    victim = next((store / "v3" / "table").rglob("*.parquet"))
    data = pq.read_table(victim)
    pq.write_table(data.drop_columns(["q"]).append_column("extra", pa.array(["x"] * data.num_rows)), victim)
    other = next(p for p in (store / "v3" / "table").rglob("*.parquet") if p != victim)
    data = pq.read_table(other)
    pq.write_table(data.set_column(data.schema.get_field_index("id"), "id", data.column("id").cast(pa.string())),
                   other)
    with pytest.raises(ktk.KartothekValidationError) as caught:
        ktk.import_kartothek(store, "v3", target_uri=str(tmp_path / "t"))
    text = "\n".join(caught.value.problems)
    assert "lacks columns ['q']" in text and "has columns ['extra']" in text and "column 'id' is string" in text
    (store / "v3" / "table" / "region=east").rename(store / "v3" / "table" / "gone")
    other.write_bytes(b"PAR1 garbage")
    with pytest.raises(ktk.KartothekValidationError) as caught:
        ktk.import_kartothek(store, "v3", target_uri=str(tmp_path / "t"))
    assert any("is missing" in p for p in caught.value.problems)
    _assert_nothing_written(tmp_path / "t")


def test_version_3_types_untyped_partition_columns_as_strings_version_4_refuses(tmp_path):
    store = copy_datasets(tmp_path / "src", "v3")
    schema_file = store / "v3" / "table" / "_common_metadata"
    schema = pq.read_schema(schema_file)
    pq.write_table(schema.remove(schema.get_field_index("region")).empty_table(), schema_file)
    result = ktk.import_kartothek(store, "v3", target_uri=str(tmp_path / "t"), verify=True)
    ds = lance.dataset(str(tmp_path / "t"))
    assert ds.schema.field("region").type == pa.string() and ds.schema.names[0] == "region"
    assert result.verification.ok
    document = load_json_metadata(store, "v3")
    document["dataset_metadata_version"] = 4
    save_json_metadata(store, "v3", document)
    with pytest.raises(ktk.KartothekValidationError, match="partition column 'region' has no type"):
        ktk.open_kartothek_table(store, "v3")


def test_partition_value_that_does_not_parse_as_its_type(tmp_path):
    store = copy_datasets(tmp_path / "src", "updated")
    document = load_json_metadata(store, "updated")
    label, partition = next(iter(document["partitions"].items()))
    old = partition["files"]["table"]
    new = old.replace("year=2020", "year=twenty")
    (store / new).parent.mkdir(parents=True)
    (store / old).rename(store / new)
    partition["files"]["table"] = new
    save_json_metadata(store, "updated", document)
    with pytest.raises(ktk.KartothekValidationError, match="'twenty' is not a int64 value"):
        ktk.open_kartothek_table(store, "updated")


# -- verification ----------------------------------------------------------------------------------


def test_verification_passes_on_a_faithful_import(tmp_path):
    target = str(tmp_path / "t")
    result = ktk.import_kartothek(STORE, "two_keys", target_uri=target, verify=True, max_rows_per_file=3)
    report = result.verification
    assert report.ok and report.groups == 12 and report.source_rows == report.lance_rows == 24
    assert report.group_columns == ("day", "code")
    assert report.columns == ("day", "code", "amount", "id", "kind", "name")
    dropped = ktk.import_kartothek(STORE, "two_keys", target_uri=str(tmp_path / "d"), partition_columns="drop",
                                   verify=True)
    assert dropped.verification.ok and dropped.verification.groups == 1


def test_verification_catches_deleted_rows(tmp_path):
    target = str(tmp_path / "t")
    ktk.import_kartothek(STORE, "one_key", target_uri=target)
    lance.dataset(target).delete("id = 6")  # country 'plain'
    with pytest.raises(ktk.KartothekVerificationError) as caught:
        ktk.verify_kartothek_import(STORE, "one_key", target)
    text = "\n".join(caught.value.differences)
    assert "partition country='plain': 3 rows in Kartothek, 2 in Lance" in text
    assert "partition country='a b'" not in text


def test_verification_catches_a_changed_value_and_names_column_and_partition(tmp_path):
    target = str(tmp_path / "t")
    ktk.import_kartothek(STORE, "two_keys", target_uri=target)
    data = lance.dataset(target).to_table()
    index = data.column("id").to_pylist().index(5)
    amounts = data.column("amount").to_pylist()
    amounts[index] += 1.0
    tampered = data.set_column(data.schema.get_field_index("amount"), data.schema.field("amount"),
                               pa.array(amounts, pa.float64()))
    lance.write_dataset(tampered, target, mode="overwrite")
    report = ktk.verify_kartothek_import(STORE, "two_keys", target, raise_on_difference=False)
    assert not report.ok and report.version == 2
    assert len(report.differences) == 1
    assert "day=datetime.date(2021, 2, 3), code=-1: column 'amount' differs" in report.differences[0]
    assert ktk.verify_kartothek_import(STORE, "two_keys", target, version=1).ok


def test_verification_catches_missing_and_extra_columns_and_groups(tmp_path):
    target = str(tmp_path / "t")
    ktk.import_kartothek(STORE, "updated", target_uri=target)
    data = lance.dataset(target).to_table()
    changed = data.drop_columns(["v"]).append_column("w", pa.array([1] * data.num_rows))
    changed = changed.set_column(0, "year", pc.if_else(pc.equal(changed.column("year"), 2022), 1999,
                                                       changed.column("year")))
    lance.write_dataset(changed, target, mode="overwrite")
    with pytest.raises(ktk.KartothekVerificationError) as caught:
        ktk.verify_kartothek_import(STORE, "updated", target)
    text = "\n".join(caught.value.differences)
    assert "columns ['v'] of the Kartothek table are not in the Lance dataset" in text
    assert "columns ['w'] of the Lance dataset are not in the Kartothek table" in text
    assert "partition year=2022: 2 rows in Kartothek, none in Lance" in text
    assert "partition year=1999: 2 rows in Lance, none in Kartothek" in text


# -- checksums -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "array",
    [
        pa.array([1, None, 3, 4], pa.int8()),
        pa.array(["a", "bc", None, ""]),
        pa.array([b"x", None, b"", b"yy"], pa.large_binary()),
        pa.array([[1, 2], [], None, [3]]),
        pa.array([1.5, float("nan"), None, -0.0]),
        pa.array([True, False, None, True]),
        pa.array([{"a": 1, "b": "x"}, None, {"a": 2, "b": None}, {"a": 3, "b": "z"}]),
        pa.array([datetime.date(2020, 1, 1), None, datetime.date(1970, 1, 1), datetime.date(2020, 1, 2)]),
        pa.array(["a", "b", "a", None]).dictionary_encode(),
        pa.array([None] * 4),
        pa.array([[["a"]], [], [None], None]),
    ],
    ids=lambda a: str(a.type),
)
def test_checksum_ignores_order_and_chunking_and_sees_changes(array):
    total = ktk.checksum(array)
    assert ktk.checksum(array.take(pa.array([3, 2, 1, 0]))) == total
    assert ktk.checksum(pa.chunked_array([array.slice(0, 1), array.slice(1, 3)])) == total
    assert list(ktk.row_hashes(array.slice(1, 2))) == list(ktk.row_hashes(array)[1:3])
    if not pa.types.is_null(array.type):
        assert ktk.checksum(array.slice(0, 3)) != total


def test_checksum_distinguishes_nearby_values():
    assert ktk.checksum(pa.array(["ab", "c"])) != ktk.checksum(pa.array(["a", "bc"]))
    assert ktk.checksum(pa.array([[1, 2]])) != ktk.checksum(pa.array([[2, 1]]))
    assert ktk.checksum(pa.array(["a", None])) != ktk.checksum(pa.array(["a", ""]))
    assert ktk.checksum(pa.array([0, 1])) != ktk.checksum(pa.array([1, 0, 0]))


# -- partition values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoded", "arrow_type", "expected"),
    [
        ("C%C3%B4te%20d%27Ivoire", pa.string(), "Côte d'Ivoire"),
        ("plus+sign", pa.string(), "plus+sign"),  # '+' is not a space
        ("-3", pa.int64(), -3),
        ("18446744073709551615", pa.uint64(), 2**64 - 1),
        ("1.5", pa.float64(), 1.5),
        ("True", pa.bool_(), True),
        ("False", pa.bool_(), False),  # kartothek 5.3 itself reads this back as True
        ("2021-02-03", pa.date32(), datetime.date(2021, 2, 3)),
        ("2021-01-01%2012%3A30%3A00", pa.timestamp("ns"), datetime.datetime(2021, 1, 1, 12, 30)),
        ("2021-01-01%2000%3A00%3A00%2B01%3A00", pa.timestamp("us", tz="UTC"),
         datetime.datetime(2020, 12, 31, 23, 0, tzinfo=datetime.UTC)),
        ("%00%FF", pa.binary(), b"\x00\xff"),
    ],
)
def test_partition_values_are_url_decoded_and_typed(encoded, arrow_type, expected):
    from airflow_lance.core.kartothek.partitions import partition_column, partition_scalar

    value = partition_scalar(encoded, arrow_type)
    assert value.type == arrow_type and value.as_py() == expected
    column = partition_column(value, arrow_type, 3)
    assert column.type == arrow_type and column.to_pylist() == [expected] * 3


@pytest.mark.parametrize(
    ("encoded", "arrow_type", "needle"),
    [("x%zzy", pa.string(), "not a percent-encoded byte"), ("%FF", pa.string(), "UTF-8"),
     ("abc", pa.int64(), "not a int64 value"), ("a", pa.list_(pa.int64()), "cannot be of type")],
)
def test_bad_partition_values(encoded, arrow_type, needle):
    from airflow_lance.core.kartothek.partitions import partition_scalar

    with pytest.raises(ValueError, match=needle):
        partition_scalar(encoded, arrow_type)


def test_result_is_json_ready(tmp_path):
    result = ktk.import_kartothek(STORE, "one_key", target_uri=str(tmp_path / "t"), verify=True)
    document = json.loads(json.dumps(result.to_dict()))
    assert document["secondary_indices"][0]["column"] == "id" and document["verification"]["ok"] is True
    assert (document["partitions"], document["rows"], document["version"]) == (14, 21, 1)


def test_reimport_and_a_new_import_after_cleanup_of_the_earlier_imports(tmp_path):
    store = copy_datasets(tmp_path / "src", "updated")
    target = str(tmp_path / "t")
    ktk.import_kartothek(store, "updated", target_uri=target)
    document = load_json_metadata(store, "updated")
    partitions = list(document["partitions"])
    document["partitions"].pop(partitions[0])
    save_json_metadata(store, "updated", document)
    second = ktk.import_kartothek(store, "updated", target_uri=target, mode="overwrite")
    lance.cleanup_old_versions(target, retain_versions=1)  # the first import's version is gone
    again = ktk.import_kartothek(store, "updated", target_uri=target, mode="overwrite")
    assert (again.version, again.rows, again.already_imported) == (2, second.rows, True)
    document["partitions"].pop(partitions[1])
    save_json_metadata(store, "updated", document)
    third = ktk.import_kartothek(store, "updated", target_uri=target, mode="overwrite")
    assert (third.version, third.already_imported) == (3, False) and third.rows < second.rows
    assert lance.dataset(target).count_rows() == third.rows
