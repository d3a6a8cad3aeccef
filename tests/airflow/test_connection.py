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


@pytest.mark.parametrize(("extra", "message"), [
    ({"endpont": "http://127.0.0.1:9000"}, "unknown key 'endpont' (did you mean 'endpoint'?) in the connection extra"),
    ({"regoin": "eu-west-1"}, "unknown key 'regoin' (did you mean 'region'?) in the connection extra"),
    ({"aws_endpoit": "http://x"}, "unknown key 'aws_endpoit' (did you mean 'aws_endpoint'?) in the connection extra"),
    ({"extra__lance__regoin": "x"}, "unknown key 'regoin' (did you mean 'region'?) in the connection extra"),
    ({"storage_options": {"aws_regoin": "x"}},
     "unknown storage option 'aws_regoin' (did you mean 'aws_region'?) in the connection field 'storage_options'"),
    ({"colour": "blue"}, "unknown key 'colour' in the connection extra: use a form field (region, endpoint, "),
])
def test_unknown_extra_keys_are_refused_naming_the_nearest_valid_key(extra: dict[str, object], message: str) -> None:
    with pytest.raises(LanceConnectionError) as raised:
        parse_connection("s3://bucket/prefix", "AKIDEXAMPLE", "secret-key", json.dumps(extra))
    assert str(raised.value).startswith(message)
    assert "secret-key" not in str(raised.value) and "http://x" not in str(raised.value)


def test_pylance_option_names_are_accepted_as_top_level_extra_keys() -> None:
    extra = {"aws_endpoint": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1", "aws_access_key_id": "AKID",
             "aws_secret_access_key": "top-secret", "aws_session_token": "tok-1", "allow_http": True,
             "aws_virtual_hosted_style_request": False, "azure_storage_account_name": "acct", "timeout": "30s",
             "extra__lance__client_max_retries": 3, "aws_sse_kms_key_id": ""}
    config = parse_connection("s3://bucket", extra=json.dumps(extra))
    assert config.storage_options == {
        "allow_http": "true", "aws_endpoint": "http://127.0.0.1:9000", "aws_region": "eu-west-1",
        "aws_access_key_id": "AKID", "aws_secret_access_key": "top-secret", "aws_session_token": "tok-1",
        "aws_virtual_hosted_style_request": "false", "azure_storage_account_name": "acct", "timeout": "30s",
        "client_max_retries": "3",
    }
    assert sorted(config.secret_values) == ["tok-1", "top-secret"]


def test_one_option_given_twice_with_different_values_is_refused() -> None:
    with pytest.raises(LanceConnectionError, match=r"'aws_region' twice with different values \(as 'aws_region' "
                                                   r"and as 'aws_default_region'\)"):
        parse_connection("s3://b", extra={"region": "eu-west-1", "aws_default_region": "us-east-1"})
    with pytest.raises(LanceConnectionError, match="'aws_secret_access_key' twice"):
        parse_connection("s3://b", "AKID", "one", {"storage_options": {"secret_access_key": "two"}})
    same = parse_connection("s3://b", extra={"region": "eu-west-1", "aws_region": "eu-west-1"})
    assert same.storage_options == {"aws_region": "eu-west-1"}


def test_every_placeholder_names_a_form_field_and_every_example_is_a_placeholder() -> None:
    standard = {"host", "login", "password", "schema", "port"}
    assert set(UI_FIELD_BEHAVIOUR["placeholders"]) <= standard | set(CONN_FIELDS)
    for name, field in CONN_FIELDS.items():
        examples = field["schema"].get("examples")
        if examples:
            assert UI_FIELD_BEHAVIOUR["placeholders"][name] == examples[0]
            assert field["description"].endswith(f"Example: {examples[0]}")
    example_extra = {name: field["schema"]["examples"][0] for name, field in CONN_FIELDS.items()
                     if "examples" in field["schema"]}
    parse_connection("s3://bucket", extra=example_extra)  # the examples form a valid connection


def test_the_readme_documents_every_extra_key() -> None:
    """The README's connection tables name every key the extra accepts (fields and pylance names)."""
    import pathlib
    import re

    from airflow_lance.core.storage.options import KNOWN_OPTIONS

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### The `lance` connection"):readme.index("### `LanceSparkWriteOperator`")]
    documented = set(re.findall(r"`([a-z0-9_]+)`", section))
    assert set(CONN_FIELDS) | KNOWN_OPTIONS <= documented, sorted(set(CONN_FIELDS) | KNOWN_OPTIONS - documented)
