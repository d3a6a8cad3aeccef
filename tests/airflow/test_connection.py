"""The ``lance`` connection parsed into a dataset root and pylance storage options (pure: no Airflow)."""

from __future__ import annotations

import json

import pytest

from airflow_lance.connection import (
    CONN_FIELDS,
    UI_FIELD_BEHAVIOUR,
    LanceConnectionError,
    is_secret_option,
    legacy_ui_field_behaviour,
    parse_connection,
)


def test_s3_credentials_and_fields_use_pylance_key_names() -> None:
    config = parse_connection(
        "s3://bucket/prefix/", "AKIDEXAMPLE", "secret-key",
        json.dumps({"region": "eu-west-1", "endpoint": "http://127.0.0.1:9000", "session_token": "tok-9f2e",
                    "allow_http": True, "storage_options": '{"aws_virtual_hosted_style_request": "true"}'}),
    )
    assert config.root == "s3://bucket/prefix"
    assert config.storage_options == {
        "aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "secret-key", "aws_region": "eu-west-1",
        "aws_endpoint": "http://127.0.0.1:9000", "aws_session_token": "tok-9f2e", "allow_http": "true",
        "aws_virtual_hosted_style_request": "true",
    }
    assert sorted(config.secret_values) == ["secret-key", "tok-9f2e"]
    assert "secret-key" not in repr(config) and "tok-9f2e" not in repr(config)


@pytest.mark.parametrize(("host", "login", "password", "expected"), [
    ("az://container/p", "account", "key",
     {"azure_storage_account_name": "account", "azure_storage_account_key": "key"}),
    ("gs://bucket/p", None, "{json key}", {"google_service_account_key": "{json key}"}),
    ("file:///data/lance", None, None, {}),
])
def test_credentials_follow_the_root_scheme(host: str, login: str | None, password: str | None,
                                            expected: dict[str, str]) -> None:
    assert parse_connection(host, login, password).storage_options == expected


@pytest.mark.parametrize(("root", "name", "expected"), [
    ("file:///data/lance", "ds.lance", "file:///data/lance/ds.lance"),
    ("/data/lance", "ds.lance", "/data/lance/ds.lance"),
    ("s3://bucket", "a/ds.lance", "s3://bucket/a/ds.lance"),
    ("s3://bucket/prefix", "ds.lance", "s3://bucket/prefix/ds.lance"),
    ("s3://bucket/prefix", "gs://other/ds.lance", "gs://other/ds.lance"),
    ("s3://bucket/prefix", "/abs/ds.lance", "/abs/ds.lance"),
    ("s3://bucket/prefix", "lance+s3://b/k/ds.lance", "s3://b/k/ds.lance"),
    (None, "file:///x/ds.lance", "file:///x/ds.lance"),
])
def test_names_resolve_below_the_root_and_uris_stay(root: str | None, name: str, expected: str) -> None:
    assert parse_connection(root).resolve(name) == expected


def test_dynamodb_commit_table_turns_s3_into_s3_ddb() -> None:
    config = parse_connection("s3://bucket/prefix", extra={"dynamodb_table_name": "commits",
                                                           "dynamodb_endpoint": "http://localhost:8000"})
    assert config.resolve("ds.lance") == "s3+ddb://bucket/prefix/ds.lance?ddbTableName=commits"
    assert config.storage_options == {"dynamodb_endpoint": "http://localhost:8000"}


@pytest.mark.parametrize(("host", "login", "extra", "message"), [
    ("file:///data", "someone", None, "does not apply"),
    ("gs://bucket", None, {"region": "x"}, "does not apply"),
    ("s3://b", None, "{not json", "not JSON"),
    ("s3://b", None, {"storage_options": "[1, 2]"}, "JSON object"),
    ("s3://b", None, {"allow_http": "maybe"}, "boolean"),
    ("gs://b", None, {"dynamodb_table_name": "t"}, "s3://"),
])
def test_malformed_connections_raise_a_typed_error_naming_the_field(host: str, login: str | None, extra: object,
                                                                    message: str) -> None:
    with pytest.raises(LanceConnectionError, match=message):
        parse_connection(host, login, None, extra if not isinstance(extra, dict) else json.dumps(extra))


def test_relative_name_without_a_root_is_an_error() -> None:
    with pytest.raises(LanceConnectionError, match="no dataset root"):
        parse_connection(None).resolve("ds.lance")


def test_legacy_extra_keys_are_read() -> None:
    config = parse_connection("s3://b", extra={"extra__lance__region": "us-east-2"})
    assert config.storage_options == {"aws_region": "us-east-2"}


def test_secret_detection_and_form_metadata() -> None:
    assert is_secret_option("aws_secret_access_key") and is_secret_option("azure_storage_sas_token")
    assert not is_secret_option("aws_region") and not is_secret_option("allow_http")
    assert CONN_FIELDS["session_token"]["schema"]["format"] == "password"
    legacy = legacy_ui_field_behaviour()
    assert legacy["hidden_fields"] == UI_FIELD_BEHAVIOUR["hidden-fields"]
    assert legacy["relabeling"]["host"] == "Dataset root URI"
