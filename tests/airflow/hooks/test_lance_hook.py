"""LanceHook against connections built from ``AIRFLOW_CONN_*`` JSON: URI resolution, datasets,
commits, idempotent-commit lookup, version checks, secret masking and ``test_connection``."""

from __future__ import annotations

import pathlib

import pyarrow as pa
import pytest
from lance_airflow_testing import connection_env

import airflow_lance.core as lance
from airflow_lance.connection import LanceConnectionError
from airflow_lance.hooks.lance import LanceHook

SECRET = "hook-secret-3c1b9e77"


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> pathlib.Path:
    monkeypatch.setenv(*connection_env("lance_local", conn_type="lance", host=f"file://{tmp_path}"))
    return tmp_path


def _table(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def test_hook_reads_the_connection_from_environment_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(*connection_env(
        "lance_s3", conn_type="lance", host="s3://bucket/prefix", login="AKID", password=SECRET,
        extra={"region": "eu-central-1", "endpoint": "http://127.0.0.1:9000", "allow_http": True},
    ))
    hook = LanceHook(lance_conn_id="lance_s3")
    assert hook.resolve_uri("ds.lance") == "s3://bucket/prefix/ds.lance"
    assert hook.storage_options == {"aws_access_key_id": "AKID", "aws_secret_access_key": SECRET,
                                    "aws_region": "eu-central-1", "aws_endpoint": "http://127.0.0.1:9000",
                                    "allow_http": "true"}
    assert (LanceHook.conn_type, LanceHook.conn_name_attr, LanceHook.default_conn_name, LanceHook.hook_name) == (
        "lance", "lance_conn_id", "lance_default", "Lance")


def test_secrets_are_registered_with_the_masker(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.common.compat.sdk import redact

    monkeypatch.setenv(*connection_env("lance_masked", conn_type="lance", host="s3://bucket",
                                       extra={"storage_options": {"aws_session_token": SECRET + "-token"}}))
    hook = LanceHook(lance_conn_id="lance_masked")
    assert hook.storage_options["aws_session_token"] == SECRET + "-token"
    assert SECRET not in str(redact(f"token is {SECRET}-token"))
    assert SECRET not in repr(hook.config)


def test_datasets_commits_and_versions_through_the_hook(root: pathlib.Path) -> None:
    hook = LanceHook(lance_conn_id="lance_local")
    assert hook.dataset_or_none("ds.lance") is None and hook.latest_version("ds.lance") is None
    lance.write_dataset(_table([1, 2]), str(root / "ds.lance"))
    fragments = lance.write_fragments(_table([3]), str(root / "ds.lance"))
    ds = hook.commit("ds.lance", lance.LanceOperation.Append(fragments), 1, idempotency_key="run-1/task",
                     transaction_properties={"airflow.task_id": "task"}, commit_message="hello")
    assert (ds.version, ds.count_rows()) == (2, 3)
    assert [v["version"] for v in hook.list_versions("ds.lance")] == [1, 2]
    assert hook.get_dataset("ds.lance", 1).count_rows() == 2
    assert hook.find_idempotent_commit("ds.lance", "run-1/task").version == 2
    assert hook.find_idempotent_commit("ds.lance", "another-run/task") is None
    again = hook.commit("ds.lance", lance.LanceOperation.Append(fragments), 1, idempotency_key="run-1/task")
    assert again.version == 2  # the same key never commits twice


def test_create_only_commit_through_the_hook_never_replaces_a_dataset(root: pathlib.Path) -> None:
    hook = LanceHook(lance_conn_id="lance_local")
    ours = lance.write_fragments(_table([1, 2]), str(root / "ds.lance"), mode="create")
    lance.write_dataset(_table([9]), str(root / "ds.lance"))  # created by another writer meanwhile
    with pytest.raises(lance.DatasetAlreadyExistsError):
        hook.commit("ds.lance", lance.LanceOperation.Overwrite(_table([]).schema, ours), 0, create_only=True)
    ds = hook.get_dataset("ds.lance")
    assert (ds.version, ds.to_table().column("id").to_pylist()) == (1, [9])


def test_check_version_baseline_recreation_data_changes_and_tags(root: pathlib.Path) -> None:
    hook = LanceHook(lance_conn_id="lance_local")
    assert hook.check_version("ds.lance", baseline_version=None) is None  # no dataset yet
    lance.write_dataset(_table([1]), str(root / "ds.lance"))
    info = hook.check_version("ds.lance", baseline_version=None)
    assert (info["version"], info["operation"]) == (1, "overwrite")
    assert hook.check_version("ds.lance", baseline_version=1) is None
    assert hook.check_version("ds.lance", baseline_version=5)["recreated"] is True
    ds = lance.dataset(str(root / "ds.lance"))
    new = lance.write_fragments(ds.to_table(), str(root / "ds.lance"))
    rewrite = lance.LanceOperation.Rewrite([lance.LanceOperation.RewriteGroup([ds.get_fragments()[0].metadata], new)])
    lance.LanceDataset.commit(str(root / "ds.lance"), rewrite, 1)
    assert hook.check_version("ds.lance", baseline_version=1)["operation"] == "rewrite"
    assert hook.check_version("ds.lance", baseline_version=1, data_changes_only=True) is None
    assert hook.check_version("ds.lance", baseline_version=None, tag="gold") is None
    ds.tags.create("gold", 2)
    assert hook.check_version("ds.lance", baseline_version=None, tag="gold")["version"] == 2
    assert hook.check_version("ds.lance", baseline_version=2, tag="gold") is None  # not moved


def test_test_connection(root: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message = LanceHook(lance_conn_id="lance_local").test_connection()
    assert ok, message
    monkeypatch.setenv(*connection_env("lance_missing", conn_type="lance", host=str(root / "nope")))
    missing = LanceHook(lance_conn_id="lance_missing").test_connection()
    assert missing == (False, f"dataset root {root / 'nope'} is not a directory")
    monkeypatch.setenv(*connection_env("lance_bad", conn_type="lance", host=str(root), login="someone"))
    ok, message = LanceHook(lance_conn_id="lance_bad").test_connection()
    assert not ok and "does not apply" in message


def test_malformed_connection_raises_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(*connection_env("lance_broken", conn_type="lance", host="s3://b",
                                       extra={"allow_http": "perhaps"}))
    with pytest.raises(LanceConnectionError, match="allow_http"):
        LanceHook(lance_conn_id="lance_broken").resolve_uri("x")


def test_no_connection_means_absolute_uris_only(tmp_path: pathlib.Path) -> None:
    hook = LanceHook(lance_conn_id=None)
    assert hook.resolve_uri(str(tmp_path / "x.lance")) == str(tmp_path / "x.lance")
    with pytest.raises(LanceConnectionError):
        hook.resolve_uri("x.lance")


def test_legacy_form_methods_match_the_declarative_fields() -> None:
    assert LanceHook.get_ui_field_behaviour()["relabeling"]["host"] == "Dataset root URI"
    pytest.importorskip("wtforms", reason="wtforms/flask-appbuilder (Airflow 2 UI) are not installed")
    widgets = LanceHook.get_connection_form_widgets()
    assert set(widgets) == {"region", "endpoint", "session_token", "allow_http", "dynamodb_table_name",
                            "dynamodb_endpoint", "storage_options"}


@pytest.mark.parametrize("host", ["ftp://127.0.0.1:1/lake", "hdfs://127.0.0.1:1/lake", "https://127.0.0.1:1/lake",
                                  "http://127.0.0.1:1/lake"])
def test_check_writable_refuses_stores_without_atomic_commit_without_contacting_them(
        monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    """Nothing listens on port 1 and there is no JVM for hdfs: the refusal comes from the URI alone
    (before, an ftp:// or hdfs:// store connected while it was checked and failed with a StorageError)."""
    monkeypatch.setenv(*connection_env("lance_other", conn_type="lance", host=host))
    scheme = host.split("://")[0]
    with pytest.raises(lance.UnsupportedFeatureError) as raised:
        LanceHook(lance_conn_id="lance_other").check_writable("events.lance")
    assert str(raised.value).startswith(
        f"cannot commit to '{host}/events.lance': fsspec protocol '{scheme}' has no atomic put-if-not-exists")
    assert "(a local path, s3://, gs://, az://)" in str(raised.value)


def test_check_writable_returns_the_uri_of_stores_that_commit(root: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                                              ) -> None:
    assert LanceHook(lance_conn_id="lance_local").check_writable("ds.lance") == f"file://{root}/ds.lance"
    monkeypatch.setenv(*connection_env("lance_s3w", conn_type="lance", host="s3://bucket/p", login="AKID",
                                       password=SECRET, extra={"endpoint": "http://127.0.0.1:1", "allow_http": True}))
    assert LanceHook(lance_conn_id="lance_s3w").check_writable("ds.lance") == "s3://bucket/p/ds.lance"
    assert LanceHook(lance_conn_id="lance_s3w").check_writable("memory://x/ds.lance") == "memory://x/ds.lance"
    monkeypatch.setenv(*connection_env("lance_unsafe", conn_type="lance", host="ftp://127.0.0.1:1/lake",
                                       extra={"allow_unsafe_commit": "true"}))
    assert LanceHook(lance_conn_id="lance_unsafe").check_writable("ds.lance") == "ftp://127.0.0.1:1/lake/ds.lance"


def test_http_dataset_with_s3_credentials_is_invalid_input_not_a_type_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(*connection_env("lance_http", conn_type="lance", host="http://127.0.0.1:1/lake",
                                       extra={"aws_access_key_id": "AKID", "aws_secret_access_key": SECRET}))
    hook = LanceHook(lance_conn_id="lance_http")
    for call in (lambda: hook.get_dataset("ds.lance"), lambda: hook.check_writable("ds.lance")):
        with pytest.raises(lance.InvalidInputError) as raised:
            call()
        assert str(raised.value).startswith("http://127.0.0.1:1/lake/ds.lance: storage option(s) "
                                            "['aws_access_key_id', 'aws_secret_access_key'] are S3 options")
        assert SECRET not in str(raised.value)


def test_connection_errors_name_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(*connection_env("lance_typo", conn_type="lance", host="s3://bucket",
                                       extra={"regoin": "eu-west-1"}))
    with pytest.raises(LanceConnectionError) as raised:
        LanceHook(lance_conn_id="lance_typo").resolve_uri("ds.lance")
    assert str(raised.value).startswith(
        "connection 'lance_typo': unknown key 'regoin' (did you mean 'region'?) in the connection extra")



def _log_lines(capsys: pytest.CaptureFixture[str], needle: str) -> list[str]:
    """Lines of Airflow's (structlog) console log that contain ``needle``."""
    return [line for line in capsys.readouterr().out.splitlines() if needle in line]


def test_find_idempotent_commit_after_cleanup(root: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    hook = LanceHook(lance_conn_id="lance_local")
    lance.write_dataset(_table([1]), str(root / "ds.lance"))
    for version in range(2, 6):
        fragments = lance.write_fragments(_table([version]), str(root / "ds.lance"))
        hook.commit("ds.lance", lance.LanceOperation.Append(fragments), version - 1, idempotency_key=f"run-{version}")
    hook.get_dataset("ds.lance").tags.create("keep", 2)
    lance.cleanup_old_versions(str(root / "ds.lance"), retain_versions=2, error_if_tagged_old_versions=False)
    assert [v["version"] for v in hook.list_versions("ds.lance")] == [2, 4, 5]

    kept = hook.find_idempotent_commit("ds.lance", "run-4")
    assert kept is not None and (kept.version, kept.count_rows()) == (4, 4)
    tagged = hook.find_idempotent_commit("ds.lance", "run-2")  # behind the cleaned-up version 3
    assert tagged is not None and (tagged.version, tagged.count_rows()) == (2, 2)
    capsys.readouterr()
    assert hook.find_idempotent_commit("ds.lance", "run-3") is None
    [line] = _log_lines(capsys, "run-3")
    assert "[warning" in line and (
        f"file://{root / 'ds.lance'}: idempotency key 'run-3' not found in versions 1..5 (only 3 of them still "
        "exist: cleanup removed the others, and a commit with this key in one of those cannot be recognised)"
    ) in line
    fragments = lance.write_fragments(_table([6]), str(root / "ds.lance"))
    assert hook.commit("ds.lance", lance.LanceOperation.Append(fragments), 5, idempotency_key="run-6").version == 6
    assert hook.find_idempotent_commit("ds.lance", "run-7", lookback=1) is None  # nothing was cleaned in 6..6
    [line] = _log_lines(capsys, "run-7")
    assert "[info" in line and "not found in versions 6..6" in line
