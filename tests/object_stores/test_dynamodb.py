"""``s3+ddb://``: the DynamoDB external manifest store (dynalite) with S3 on SeaweedFS, with pylance."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import uuid
from concurrent.futures import ProcessPoolExecutor

import lance as pylance
import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core import layout
from airflow_lance.core.errors import InvalidInputError, StorageError
from airflow_lance.core.storage import external, open_store
from airflow_lance.core.storage.dynamodb import DynamoDBManifestStore
from airflow_lance.core.storage.external import ManifestEntry

from . import servers
from .conftest import BUCKET, DDB_TABLE


def _rows(endpoint: str, base_uri: str) -> list[dict]:
    client = servers.botocore_client("dynamodb", endpoint)
    items = client.query(  # type: ignore[attr-defined]
        TableName=DDB_TABLE, KeyConditionExpression="base_uri = :b",
        ExpressionAttributeValues={":b": {"S": base_uri}}, ConsistentRead=True,
    )["Items"]
    return sorted(items, key=lambda item: int(item["version"]["N"]))


def _base_uri(uri: str) -> str:
    return uri.split("?")[0][len(f"s3+ddb://{BUCKET}/"):]


def _table(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def test_rows_are_what_pylance_writes(ddb):
    uri = ddb.new_uri("ds.lance")
    lance.write_dataset(_table(3), uri, storage_options=ddb.options)
    lance.write_dataset(_table(2, 3), uri, mode="append", storage_options=ddb.options)
    base = _base_uri(uri)
    rows = _rows(ddb.server.endpoint, base)
    store = lance.dataset(uri, storage_options=ddb.options).store
    for version, row in enumerate(rows, start=1):
        final = layout.manifest_path(version, layout.ManifestNamingScheme.V2)
        assert set(row) == {"base_uri", "version", "path", "committer", "size"}
        assert row["base_uri"] == {"S": base} and row["version"] == {"N": str(version)}
        assert row["path"] == {"S": f"{base}/{final}"} and row["committer"] == {"S": "lancedb"}
        assert row["size"] == {"N": str(store.size(final))}
    assert sorted(store.list_names("_versions")) == sorted(
        layout.manifest_path(v, layout.ManifestNamingScheme.V2).split("/")[1] for v in (1, 2)
    )  # no staging object left behind


def test_pylance_and_we_commit_through_the_same_table(ddb):
    uri = ddb.new_uri("ds.lance")
    pylance.write_dataset(_table(2), uri, storage_options=ddb.options, data_storage_version="2.0")
    for round_ in range(3):
        lance.write_dataset(_table(2, 100 + 10 * round_), uri, mode="append", storage_options=ddb.options)
        assert pylance.dataset(uri, storage_options=ddb.options).count_rows() == 4 + 4 * round_
        pylance.write_dataset(_table(2, 200 + 10 * round_), uri, mode="append", storage_options=ddb.options)
        assert lance.dataset(uri, storage_options=ddb.options).count_rows() == 6 + 4 * round_
    ours = lance.dataset(uri, storage_options=ddb.options)
    theirs = pylance.dataset(uri, storage_options=ddb.options)
    assert ours.version == theirs.version == 7
    assert sorted(ours.to_table()["id"].to_pylist()) == sorted(theirs.to_table()["id"].to_pylist())
    assert [int(r["version"]["N"]) for r in _rows(ddb.server.endpoint, _base_uri(uri))] == list(range(1, 8))


def _commit_and_die_after_table_insert(uri: str, options: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Append, but 'crash' right after the DynamoDB insert (the commit point)."""
    original = external.finalize

    def crash(store, table, entry):
        if entry.path.endswith(".manifest"):
            return original(store, table, entry)  # finalized rows of earlier versions
        raise StorageError("simulated crash after the table insert")

    with monkeypatch.context() as patch:
        patch.setattr(external, "finalize", crash)
        lance.write_dataset(_table(1, 99), uri, mode="append", storage_options=options)


@pytest.mark.parametrize("reader", ["ours", "pylance"])
def test_readers_finish_a_half_done_commit(ddb, monkeypatch, reader):
    uri = ddb.new_uri("ds.lance")
    lance.write_dataset(_table(2), uri, storage_options=ddb.options)
    _commit_and_die_after_table_insert(uri, ddb.options, monkeypatch)
    store = open_store(uri, ddb.options)
    final = layout.manifest_path(2, layout.ManifestNamingScheme.V2)
    row = _rows(ddb.server.endpoint, _base_uri(uri))[-1]
    assert row["path"]["S"].startswith(f"{_base_uri(uri)}/{final}-") and not store.exists(final)
    if reader == "ours":
        assert lance.dataset(uri, storage_options=ddb.options).count_rows() == 3
    else:
        assert pylance.dataset(uri, storage_options=ddb.options).count_rows() == 3
        assert lance.dataset(uri, storage_options=ddb.options).version == 2
    assert store.exists(final)
    assert _rows(ddb.server.endpoint, _base_uri(uri))[-1]["path"]["S"] == f"{_base_uri(uri)}/{final}"
    assert not [n for n in store.list_names("_versions") if "-" in n]  # staging object deleted


def test_next_writer_commits_after_a_half_done_commit(ddb, monkeypatch):
    uri = ddb.new_uri("ds.lance")
    lance.write_dataset(_table(2), uri, storage_options=ddb.options)
    _commit_and_die_after_table_insert(uri, ddb.options, monkeypatch)
    pylance.write_dataset(_table(1, 50), uri, mode="append", storage_options=ddb.options)
    lance.write_dataset(_table(1, 60), uri, mode="append", storage_options=ddb.options)
    assert sorted(lance.dataset(uri, storage_options=ddb.options).to_table()["id"].to_pylist()) == [0, 1, 50, 60, 99]


def test_dataset_committed_without_the_table_continues_through_it(ddb, s3_seaweedfs):
    key = f"{uuid.uuid4().hex[:12]}/ds.lance"
    lance.write_dataset(_table(2), f"s3://{BUCKET}/{key}", storage_options=s3_seaweedfs.options)
    uri = f"s3+ddb://{BUCKET}/{key}?ddbTableName={DDB_TABLE}"
    assert lance.dataset(uri, storage_options=ddb.options).version == 1
    lance.write_dataset(_table(1, 9), uri, mode="append", storage_options=ddb.options)
    assert [int(r["version"]["N"]) for r in _rows(ddb.server.endpoint, key)] == [2]
    assert pylance.dataset(uri, storage_options=ddb.options).count_rows() == 3


def test_table_insert_race_has_exactly_one_winner(ddb):
    table = DynamoDBManifestStore(DDB_TABLE, f"race-{uuid.uuid4().hex[:8]}/ds.lance", ddb.options)
    threads, rounds = 16, 100
    barrier = threading.Barrier(threads)
    wins = [[False] * threads for _ in range(rounds)]

    def contender(n: int) -> None:
        for version in range(1, rounds + 1):
            barrier.wait(timeout=60)
            entry = ManifestEntry(version, f"_versions/v{version}.manifest-{uuid.uuid4()}", 10)
            wins[version - 1][n] = table.put_if_not_exists(entry)

    workers = [threading.Thread(target=contender, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert [sum(row) for row in wins] == [1] * rounds


def test_concurrent_appends_through_the_table_all_land(ddb):
    uri = ddb.new_uri("ds.lance")
    lance.write_dataset(_table(1), uri, storage_options=ddb.options)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(4):
                lance.write_dataset(_table(1, 1000 * (n + 1) + i), uri, mode="append", storage_options=ddb.options)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[:2]
    ds = lance.dataset(uri, storage_options=ddb.options)
    assert ds.version == 17 and ds.count_rows() == 17
    assert pylance.dataset(uri, storage_options=ddb.options).count_rows() == 17


def test_table_with_other_keys_is_rejected(ddb):
    client = servers.botocore_client("dynamodb", ddb.server.endpoint)
    name = f"wrong-{uuid.uuid4().hex[:6]}"
    client.create_table(  # type: ignore[attr-defined]
        TableName=name, KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
    )
    with pytest.raises(InvalidInputError, match="base_uri"):
        lance.write_dataset(_table(1), f"s3+ddb://{BUCKET}/x/ds.lance?ddbTableName={name}", storage_options=ddb.options)
    with pytest.raises(InvalidInputError, match="does not exist"):
        lance.dataset(f"s3+ddb://{BUCKET}/x/ds.lance?ddbTableName=missing-table", storage_options=ddb.options)


def _latest_in_child(pickled: bytes) -> tuple[int, int]:
    from airflow_lance.core.manifest import read_latest_manifest

    store = pickle.loads(pickled)
    manifest = read_latest_manifest(store)
    return manifest.version, len(manifest.manifest.fragments)


def test_store_with_its_table_pickles_into_another_process(ddb):
    uri = ddb.new_uri("ds.lance")
    lance.write_dataset(_table(3), uri, storage_options=ddb.options)
    lance.write_dataset(_table(1, 3), uri, mode="append", storage_options=ddb.options)
    store = lance.dataset(uri, storage_options=ddb.options).store
    assert store.external_manifests is not None
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(_latest_in_child, pickle.dumps(store)).result(timeout=120) == (2, 2)


def test_a_retried_insert_that_already_landed_is_recognised_as_ours(ddb):
    table = DynamoDBManifestStore(DDB_TABLE, f"retry-{uuid.uuid4().hex[:8]}/ds.lance", ddb.options)
    mine = ManifestEntry(1, f"_versions/v1.manifest-{uuid.uuid4()}", 10)
    assert table.put_if_not_exists(mine)
    assert table.put_if_not_exists(mine)  # e.g. botocore resent it after a lost response
    assert not table.put_if_not_exists(ManifestEntry(1, f"_versions/v1.manifest-{uuid.uuid4()}", 10))
    assert table.latest() == mine and table.get(2) is None
