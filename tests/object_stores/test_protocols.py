"""Stores without atomic create refuse to commit unless the user opts in; option translation."""

from __future__ import annotations

import json
import logging

import fsspec
import pyarrow as pa
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import airflow_lance.core as lance
from airflow_lance.core.errors import InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.storage import open_store
from airflow_lance.core.storage import options as opts


class PlainMemoryFileSystem(MemoryFileSystem):
    """An fsspec protocol we know nothing about (shares memory://'s store, but no lock of ours)."""

    protocol = ("plainmem",)
    root_marker = "/"


fsspec.register_implementation("plainmem", PlainMemoryFileSystem, clobber=True)


def test_other_protocols_refuse_to_commit_and_name_the_options(tmp_path):
    uri = "plainmem://refused/ds.lance"
    with pytest.raises(UnsupportedFeatureError) as raised:
        lance.write_dataset(pa.table({"a": [1]}), uri)
    message = str(raised.value)
    assert "plainmem" in message and "s3+ddb://" in message and "allow_unsafe_commit" in message
    assert not open_store(uri).list("")  # refused before writing any data file


def test_unsafe_opt_in_commits_and_logs_a_warning(caplog):
    uri = "plainmem://unsafe/ds.lance"
    options = {"allow_unsafe_commit": "true"}
    with caplog.at_level(logging.WARNING, logger="airflow_lance.core.storage"):
        lance.write_dataset(pa.table({"a": [1]}), uri, storage_options=options)
        lance.write_dataset(pa.table({"a": [2]}), uri, mode="append", storage_options=options)
    assert lance.dataset(uri, storage_options=options).count_rows() == 2
    assert any("WITHOUT an atomic put-if-not-exists" in r.getMessage() for r in caplog.records)


def test_unknown_protocol_is_invalid_input():
    with pytest.raises(InvalidInputError):
        open_store("nosuchprotocol://x/ds.lance")


@pytest.mark.parametrize(
    "uri", ["s3+ddb://b/ds", "s3+ddb://b/ds?ddbTableName=T&x=1", "s3+ddb://b/ds?table=T", "s3+ddb://b?ddbTableName=T"]
)
def test_s3_ddb_uri_needs_exactly_ddb_table_name(uri):
    with pytest.raises(InvalidInputError):
        open_store(uri, {"aws_region": "us-east-1"})


def test_pylance_s3_keys_translate_to_s3fs():
    resolved = opts.resolve("s3", {
        "AWS_ACCESS_KEY_ID": "ak", "aws_secret_access_key": "sk", "session_token": "tok", "region": "eu-west-1",
        "aws_endpoint": "https://s3.example", "aws_virtual_hosted_style_request": "true",
        "aws_server_side_encryption": "aws:kms", "aws_sse_kms_key_id": "kid", "timeout": "30s",
        "client_max_retries": "3", "azure_storage_account_name": "ignored-for-s3",
    })
    kwargs = opts.s3_kwargs(resolved)
    assert kwargs["key"] == "ak" and kwargs["secret"] == "sk" and kwargs["token"] == "tok"
    assert kwargs["endpoint_url"] == "https://s3.example"
    assert kwargs["client_kwargs"] == {"region_name": "eu-west-1"}
    assert kwargs["config_kwargs"] == {"s3": {"addressing_style": "virtual"}, "read_timeout": 30.0}
    assert kwargs["s3_additional_kwargs"] == {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "kid"}
    assert kwargs["retries"] == 3 and kwargs["use_listings_cache"] is False


def test_pylance_azure_keys_translate_to_adlfs():
    kwargs = opts.azure_kwargs(opts.resolve("azure", {
        "azure_storage_account_name": "acct", "azure_storage_account_key": "key", "azure_client_id": "cid",
    }))
    assert kwargs["account_name"] == "acct" and kwargs["account_key"] == "key" and kwargs["client_id"] == "cid"
    emulator = opts.azure_kwargs(opts.resolve("azure", {"azure_storage_use_emulator": "true"}))
    assert "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1" in emulator["connection_string"]


def test_pylance_gcs_keys_translate_to_gcsfs(tmp_path):
    account = {"type": "service_account", "client_email": "a@b", "private_key": "k", "private_key_id": "i"}
    path = tmp_path / "sa.json"
    path.write_text(json.dumps(account))
    assert opts.gcs_kwargs(opts.resolve("gcs", {"google_service_account": str(path)}))["token"] == account
    emulator = {"gcs_base_url": "http://127.0.0.1:1", "disable_oauth": True}
    kwargs = opts.gcs_kwargs(opts.resolve("gcs", {"service_account_key": json.dumps(emulator), "allow_http": "1"}))
    assert kwargs["endpoint_url"] == "http://127.0.0.1:1" and kwargs["token"] == "anon"


def test_secrets_are_scrubbed_from_messages():
    options = {"aws_secret_access_key": "s3cr3t-value", "azure_storage_sas_key": "sv=1&sig=abcd"}
    text = "failed https://acct.blob/x?sv=1&sig=zzzz with s3cr3t-value"
    assert opts.redact(text, opts.secret_values(options)) == "failed https://acct.blob/x?sv=1&sig=*** with ***"


def test_http_dataset_with_s3_credentials_is_invalid_input_not_a_type_error():
    """The S3 credentials used to reach aiohttp as arguments: TypeError from ClientSession._request."""
    options = {"aws_access_key_id": "a", "aws_secret_access_key": "bbbb-secret"}
    for attempt in (lambda: lance.dataset("http://127.0.0.1:1/x.lance", storage_options=options),
                    lambda: lance.write_dataset(pa.table({"a": [1]}), "http://127.0.0.1:1/x.lance",
                                                storage_options=options)):
        with pytest.raises(InvalidInputError) as raised:
            attempt()
        assert str(raised.value) == (
            "http://127.0.0.1:1/x.lance: storage option(s) ['aws_access_key_id', 'aws_secret_access_key'] are S3 "
            "options and do not apply to the http:// dataset; S3 datasets have s3://, s3a://, s3+ddb:// URIs. For "
            "an S3-compatible server use s3://BUCKET/path with aws_endpoint='http://HOST:PORT' and allow_http='true'."
        )


def test_generic_stores_get_only_the_options_pylance_does_not_know():
    """pylance's common options (allow_http, timeout, ...) are never fsspec arguments; others pass through."""
    assert opts.fsspec_passthrough({"allow_http": "true", "timeout": "5s", "block_size": 10, "username": "u"}) == {
        "username": "u"}
    store = open_store("memory://passthrough/ds.lance", {"allow_http": "true", "aws_region": "eu-west-1"})
    store.write("k", b"v")  # memory:// ignores cloud options, as a local path does
    assert store.read("k") == b"v"


def test_unknown_options_get_the_nearest_name_the_store_takes():
    """``regoin`` is near S3's ``region``, which an Azure store ignores: no suggestion there."""
    with pytest.raises(InvalidInputError, match=r"^unknown storage option 'azure_storage_acount_name' \(did you mean "
                                                r"'azure_storage_account_name'\?\); unknown storage option 'regoin': "
                                                r"use pylance's names"):
        opts.resolve("azure", {"regoin": "x", "azure_storage_acount_name": "y"})
