"""End to end on S3: an Airflow DAG (``dag.test()``) runs ``spark-submit`` on ``local[2]``; Spark
executors write Lance data files to SeaweedFS, the operator commits with S3 conditional writes or
through a DynamoDB table (dynalite); pylance reads the results with the same storage options.

The DynamoDB write runs in make test; the conditional-write create and append (which the daily
pipeline on S3 also runs every day, tests/airflow/test_daily_pipeline.py) in make stress."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import lance as pylance
import pytest
from lance_airflow_testing import connection_env, load_dag, task_instances, xcom_value
from object_stores import servers  # tests/ is on sys.path (rootdir)

import airflow_lance.core as lance
from airflow_lance.connection import parse_connection

BUCKET, TABLE = "airflow", "lance-commits"


@pytest.fixture(scope="module")
def s3_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[servers.Server, servers.Server]]:
    work = tmp_path_factory.mktemp("s3-servers")
    try:
        seaweedfs = servers.start_seaweedfs(work)
    except servers.ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        try:
            dynalite = servers.start_dynalite(work)
        except servers.ServerUnavailable as exc:
            pytest.skip(str(exc))
        try:
            servers.create_bucket(seaweedfs.endpoint, BUCKET)
            servers.create_lance_table(dynalite.endpoint, TABLE)
            yield seaweedfs, dynalite
        finally:
            dynalite.stop()
    finally:
        seaweedfs.stop()


def _connection(root: str, seaweedfs: servers.Server, **extra: Any) -> dict[str, Any]:
    fields = {"region": "us-east-1", "endpoint": seaweedfs.endpoint, "allow_http": True, **extra}
    return {"conn_type": "lance", "host": root, "login": servers.S3_KEY, "password": servers.S3_SECRET,
            "extra": json.dumps(fields)}


def _run(s3_servers: tuple[servers.Server, servers.Server], dag_id: str) -> dict[str, Any]:
    seaweedfs, dynalite = s3_servers
    prefix = uuid.uuid4().hex[:8]
    plain = _connection(f"s3://{BUCKET}/{prefix}/plain", seaweedfs)
    ddb = _connection(f"s3://{BUCKET}/{prefix}/ddb", seaweedfs, dynamodb_table_name=TABLE,
                      dynamodb_endpoint=dynalite.endpoint)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_s3", **plain))
        mp.setenv(*connection_env("lance_s3_ddb", **ddb))
        dag_run = load_dag("lance_test_spark_write_s3.py", dag_id).test()
    configs = {name: parse_connection(c["host"], c["login"], c["password"], c["extra"])
               for name, c in (("plain", plain), ("ddb", ddb))}
    return {"dag_run": dag_run, "tis": task_instances(dag_run), "configs": configs, "dynalite": dynalite}


@pytest.fixture(scope="module")
def run(s3_servers: tuple[servers.Server, servers.Server]) -> dict[str, Any]:
    return _run(s3_servers, "lance_test_spark_write_s3")


@pytest.fixture(scope="module")
def slow_run(s3_servers: tuple[servers.Server, servers.Server]) -> dict[str, Any]:
    return _run(s3_servers, "lance_test_spark_write_s3_slow")


def test_every_task_succeeded(run: dict[str, Any]) -> None:
    assert {task: ti.state for task, ti in run["tis"].items()} == {"create_through_dynamodb": "success"}


@pytest.mark.slow
def test_spark_writes_on_s3_are_committed_once_and_read_by_pylance(slow_run: dict[str, Any]) -> None:
    run = slow_run
    assert {task: ti.state for task, ti in run["tis"].items()} == {"create_on_s3": "success",
                                                                   "append_on_s3": "success"}
    config = run["configs"]["plain"]
    uri = config.resolve("events.lance")
    assert uri.startswith("s3://")
    assert xcom_value(run["dag_run"], "append_on_s3")["version"] == 2
    ours = lance.dataset(uri, storage_options=config.storage_options)
    theirs = pylance.dataset(uri, storage_options=config.storage_options)
    assert ours.version == theirs.version == 2
    assert sorted(theirs.to_table()["id"].to_pylist()) == list(range(800))
    assert len(ours.checkout_version(1).get_fragments()) >= 3  # max_rows_per_file=200 over 500 rows
    store = ours.store
    assert not [i.path for i in store.list("_airflow_staging") if not i.path.endswith(".landed.json")]


def test_spark_write_through_the_dynamodb_table(run: dict[str, Any]) -> None:
    config = run["configs"]["ddb"]
    uri = config.resolve("events.lance")
    assert uri.startswith("s3+ddb://") and uri.endswith(f"?ddbTableName={TABLE}")
    theirs = pylance.dataset(uri, storage_options=config.storage_options)
    assert theirs.version == 1 and theirs.count_rows() == 300
    client = servers.botocore_client("dynamodb", run["dynalite"].endpoint)
    items = client.scan(TableName=TABLE)["Items"]  # type: ignore[attr-defined]
    base_uri = uri.split("?")[0].split(f"s3+ddb://{BUCKET}/", 1)[1]
    assert [(i["base_uri"]["S"], i["version"]["N"]) for i in items if i["base_uri"]["S"] == base_uri] == [
        (base_uri, "1")
    ]
