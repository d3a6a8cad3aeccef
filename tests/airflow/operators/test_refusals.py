"""Writes refused before any Spark job runs, through ``dag.test()`` with a recording ``spark-submit``
that would run a real job: a plain-HTTP dataset (a real ``http.server``), an http:// root with S3
credentials, a misspelt connection key, and a wrong secret on SeaweedFS. Each failure is the
message a user sees; spark-submit is never called and nothing is written."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from lance_airflow_testing import SparkSubmitSpy, connection_env, load_dag, task_instances
from object_stores import servers  # tests/ is on sys.path (rootdir)

BUCKET = "refusals"
SECRET = "Wr0ng-Secret-Value-9b1e77-never-shown"


@pytest.fixture(scope="module")
def http_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, pathlib.Path]]:
    """A real HTTP server (Python's http.server) serving an empty ``lake`` directory."""
    served = tmp_path_factory.mktemp("served")
    (served / "lake").mkdir()
    port = servers.free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(served)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/lake/", timeout=2).close()  # noqa: S310
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "http.server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/lake", served / "lake"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Server]:
    try:
        server = servers.start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    except servers.ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        servers.create_bucket(server.endpoint, BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy,
        http_root: tuple[str, pathlib.Path], seaweedfs: servers.Server) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("refusals")
    prefix = uuid.uuid4().hex[:8]
    s3_extra = {"region": "us-east-1", "endpoint": seaweedfs.endpoint, "allow_http": True}
    connections = {
        "http": {"host": http_root[0]},
        "http_s3_credentials": {"host": http_root[0], "extra": json.dumps(
            {"aws_access_key_id": servers.S3_KEY, "aws_secret_access_key": SECRET})},
        "typo": {"host": f"s3://{BUCKET}/{prefix}/typo", "login": servers.S3_KEY, "password": servers.S3_SECRET,
                 "extra": json.dumps({"region": "us-east-1", "endpont": seaweedfs.endpoint, "allow_http": True})},
        "wrong_secret": {"host": f"s3://{BUCKET}/{prefix}/secret", "login": servers.S3_KEY, "password": SECRET,
                         "extra": json.dumps(s3_extra)},
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_TEST_ROOT", str(root))
        for case, fields in connections.items():
            mp.setenv(*connection_env(f"lance_refuse_{case}", conn_type="lance", **fields))
        dag_run = load_dag("lance_test_refusals.py", "lance_test_refusals").test()
    tis = task_instances(dag_run)
    failures = {task_id: json.loads((root / "failures" / f"{task_id}.json").read_text())
                for task_id, ti in tis.items() if ti.state == "failed"}
    return {"tis": tis, "failures": failures, "prefix": prefix, "spy": spark_submit_spy, "http": http_root,
            "seaweedfs": seaweedfs}


def test_every_write_failed_and_spark_submit_never_ran(run: dict[str, Any]) -> None:
    assert {task_id: ti.state for task_id, ti in run["tis"].items()} == {
        "write_http": "failed", "write_http_s3_credentials": "failed", "write_typo": "failed",
        "write_wrong_secret": "failed", "compact_http": "failed"}
    assert run["spy"].calls() == []


def test_http_dataset_is_refused_naming_the_scheme_and_the_stores_that_work(run: dict[str, Any]) -> None:
    uri = f"{run['http'][0]}/events.lance"
    for task_id in ("write_http", "compact_http"):
        failure = run["failures"][task_id]
        assert failure["mro"][:2] == ["UnsupportedFeatureError", "LanceError"]
        assert failure["message"].startswith(
            f"cannot commit to {uri!r}: fsspec protocol 'http' has no atomic put-if-not-exists")
        assert "s3://, gs://, az://" in failure["message"] and "allow_unsafe_commit" in failure["message"]
    assert list(run["http"][1].iterdir()) == []


def test_http_root_with_s3_credentials_is_a_typed_error_without_the_secret(run: dict[str, Any]) -> None:
    failure = run["failures"]["write_http_s3_credentials"]
    assert failure["mro"][:2] == ["InvalidInputError", "LanceError"]
    assert failure["message"] == (
        f"{run['http'][0]}/events.lance: storage option(s) ['aws_access_key_id', 'aws_secret_access_key'] are S3 "
        "options and do not apply to the http:// dataset; S3 datasets have s3://, s3a://, s3+ddb:// URIs. For an "
        "S3-compatible server use s3://BUCKET/path with aws_endpoint='http://HOST:PORT' and allow_http='true'."
    )


def test_misspelt_connection_key_is_refused_with_the_nearest_valid_key(run: dict[str, Any]) -> None:
    failure = run["failures"]["write_typo"]
    assert failure["mro"][:2] == ["LanceConnectionError", "ValueError"]
    assert failure["message"].startswith(
        "connection 'lance_refuse_typo': unknown key 'endpont' (did you mean 'endpoint'?) in the connection extra")


def test_wrong_secret_names_the_dataset_and_the_cause_never_the_secret(run: dict[str, Any]) -> None:
    failure = run["failures"]["write_wrong_secret"]
    uri = f"s3://{BUCKET}/{run['prefix']}/secret/events.lance"
    assert failure["mro"][:3] == ["StoragePermissionError", "StorageError", "LanceError"]
    assert failure["message"].startswith(f"{uri}: access denied (_versions): SignatureDoesNotMatch: ")
    assert failure["message"].endswith(
        "Check the credentials in the storage options (aws_access_key_id, aws_secret_access_key, aws_session_token)")
    assert SECRET not in json.dumps(run["failures"])


def test_nothing_was_written_to_the_bucket(run: dict[str, Any]) -> None:
    client: Any = servers.botocore_client("s3", run["seaweedfs"].endpoint)
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=run["prefix"])
    assert listed.get("KeyCount", 0) == 0
