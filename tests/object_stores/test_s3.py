"""S3 specifics: how servers say "exists", latest-version lookups, options, secrets."""

from __future__ import annotations

import errno
import logging

import pyarrow as pa
import pytest
from botocore.exceptions import ClientError

import airflow_lance.core as lance
from airflow_lance.core.errors import InvalidInputError, StorageError
from airflow_lance.core.manifest import latest_version
from airflow_lance.core.storage import open_store
from airflow_lance.core.storage.s3 import FIRST_PAGE, Outcome, S3Store, classify

from . import servers


def _client_error(code: str, status: int, condition: str | None = None) -> ClientError:
    error = {"Code": code, "Message": "m"}
    if condition:
        error["Condition"] = condition
    return ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


def _as_s3fs_raises(cause: BaseException, mapped: OSError) -> OSError:
    try:
        raise mapped from cause
    except OSError as exc:
        return exc


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (FileExistsError("k"), Outcome.EXISTS),  # AWS, moto: 412 with <Condition>If-None-Match</Condition>
        (_as_s3fs_raises(_client_error("PreconditionFailed", 412), OSError(errno.EINVAL, "pre")), Outcome.EXISTS),
        (_as_s3fs_raises(_client_error("Unknown", 412), OSError(errno.EIO, "x")), Outcome.EXISTS),
        (_as_s3fs_raises(_client_error("ConditionalRequestConflict", 409), OSError(errno.EIO, "x")), Outcome.RETRY),
        (_as_s3fs_raises(_client_error("AccessDenied", 403), PermissionError(errno.EACCES, "x")), Outcome.ERROR),
        (OSError(errno.EIO, "connection reset"), Outcome.ERROR),
    ],
)
def test_every_way_of_saying_exists_is_classified(exc, outcome):
    assert classify(exc) is outcome


def test_seaweedfs_says_exists_without_condition_element(s3_seaweedfs):
    """SeaweedFS's 412 has no <Condition>: s3fs raises OSError(EINVAL), which we map to a conflict."""
    store = open_store(s3_seaweedfs.new_uri("ds"), s3_seaweedfs.options)
    store.write("k", b"1")
    with pytest.raises(OSError) as raised:
        store.fs.pipe_file(f"{store.root}/k", b"2", mode="create")
    assert not isinstance(raised.value, FileExistsError)
    assert classify(raised.value) is Outcome.EXISTS
    assert store.put_if_not_exists("k", b"2") is False
    assert store.read("k") == b"1"


def test_moto_says_exists_with_file_exists_error(s3_moto):
    store = open_store(s3_moto.new_uri("ds"), s3_moto.options)
    store.write("k", b"1")
    with pytest.raises(FileExistsError):
        store.fs.pipe_file(f"{store.root}/k", b"2", mode="create")
    assert store.put_if_not_exists("k", b"2") is False


class _CountingS3Store(S3Store):
    """Records the S3 operations it sends (instrumentation of our own class, not a mock)."""

    calls: list[str]

    def _s3(self, path, method, **kwargs):
        self.__dict__.setdefault("calls", []).append(method)
        return super()._s3(path, method, **kwargs)


def test_latest_version_is_the_first_entry_of_one_small_listing(s3_seaweedfs):
    uri = s3_seaweedfs.new_uri("ds.lance")
    lance.write_dataset(pa.table({"id": [0]}), uri, storage_options=s3_seaweedfs.options)
    for n in range(1, FIRST_PAGE + 8):
        lance.write_dataset(pa.table({"id": [n]}), uri, mode="append", storage_options=s3_seaweedfs.options)
    store = _CountingS3Store(uri, uri, s3_seaweedfs.options)
    found = latest_version(store)
    assert found is not None and found[0] == FIRST_PAGE + 8
    assert store.calls == ["list_objects_v2"]
    ds = lance.dataset(uri, storage_options=s3_seaweedfs.options)
    assert ds.count_rows() == FIRST_PAGE + 8 and ds.latest_version == FIRST_PAGE + 8


def test_plain_http_endpoint_needs_allow_http(s3_moto):
    options = {k: v for k, v in s3_moto.options.items() if k != "allow_http"}
    with pytest.raises(InvalidInputError, match="allow_http"):
        open_store(s3_moto.new_uri("ds"), options)


def test_unknown_storage_option_is_rejected_by_name_only(s3_moto):
    with pytest.raises(InvalidInputError) as raised:
        open_store(s3_moto.new_uri("ds"), {**s3_moto.options, "aws_endpoit": "http://typo"})
    assert str(raised.value).startswith("unknown storage option 'aws_endpoit' (did you mean 'aws_endpoint'?)")
    assert "http://typo" not in str(raised.value)


def test_wrong_secret_is_a_storage_error_that_never_shows_the_secret(s3_seaweedfs, caplog):
    secret = "Sup3r-Secret-Value-That-Must-Not-Leak"
    options = {**s3_seaweedfs.options, "aws_secret_access_key": secret}
    caplog.set_level(logging.DEBUG)
    store = open_store(s3_seaweedfs.new_uri("ds"), options)
    with pytest.raises(StorageError) as raised:
        store.write("x", b"1")
    chain, current = [], raised.value
    while current is not None:
        chain.append(f"{current!r} {current}")
        current = current.__cause__ or current.__context__
    assert secret not in " ".join(chain)
    assert secret not in caplog.text
    assert secret not in repr(store)


def _keys_under(s3_seaweedfs, uri: str) -> list[str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    client = servers.botocore_client("s3", s3_seaweedfs.server.endpoint)
    return [item["Key"] for item in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


@pytest.mark.parametrize(("option", "value", "code"), [
    ("aws_secret_access_key", "Sup3r-Secret-Value-That-Must-Not-Leak", "SignatureDoesNotMatch"),
    ("aws_access_key_id", "NoSuchKeyId-7734", "InvalidAccessKeyId"),
])
def test_refused_credentials_name_the_dataset_and_the_cause_and_write_nothing(s3_seaweedfs, option, value, code):
    uri = s3_seaweedfs.new_uri("events.lance")
    options = {**s3_seaweedfs.options, option: value}
    for attempt in (lambda: lance.dataset(uri, storage_options=options),
                    lambda: lance.write_dataset(pa.table({"a": [1]}), uri, storage_options=options)):
        with pytest.raises(lance.StoragePermissionError) as raised:
            attempt()
        message = str(raised.value)
        assert message.startswith(f"{uri}: access denied (_versions): {code}: ")
        assert message.endswith("Check the credentials in the storage options "
                                "(aws_access_key_id, aws_secret_access_key, aws_session_token)")
        assert "Sup3r-Secret" not in message
        assert isinstance(raised.value, PermissionError) and isinstance(raised.value, StorageError)
    assert _keys_under(s3_seaweedfs, uri) == []


def test_missing_bucket_names_the_dataset_and_the_bucket(s3_seaweedfs):
    uri = "s3://no-such-bucket-3e8a/lake/events.lance"
    for attempt in (lambda: lance.dataset(uri, storage_options=s3_seaweedfs.options),
                    lambda: lance.write_dataset(pa.table({"a": [1]}), uri, storage_options=s3_seaweedfs.options)):
        with pytest.raises(StorageError) as raised:
            attempt()
        assert str(raised.value) == f"{uri}: bucket 'no-such-bucket-3e8a' does not exist"


def test_s3_express_buckets_are_not_treated_as_lexically_ordered(s3_moto):
    regular = open_store("s3://bucket/ds.lance", s3_moto.options)
    express = open_store("s3://bucket--usw2-az1--x-s3/ds.lance", s3_moto.options)
    flagged = open_store("s3://bucket/ds.lance", {**s3_moto.options, "aws_s3_express": "true"})
    assert regular.lexically_ordered and not regular.writes_version_hint
    assert not express.lexically_ordered and express.writes_version_hint
    assert not flagged.lexically_ordered


def test_unordered_listing_path_uses_the_hint_and_probing(s3_seaweedfs):
    options = {**s3_seaweedfs.options, "aws_s3_express": "true"}  # only changes how we find the latest
    uri = s3_seaweedfs.new_uri("ds.lance")
    lance.write_dataset(pa.table({"id": [0]}), uri, storage_options=options)
    for n in range(1, 4):
        lance.write_dataset(pa.table({"id": [n]}), uri, mode="append", storage_options=options)
    store = open_store(uri, options)
    assert store.read("_versions/latest_version_hint.json") == b'{"version":4}'
    store.write("_versions/latest_version_hint.json", b'{"version":2}')  # stale hint: probing goes on
    assert latest_version(store)[0] == 4
    assert lance.dataset(uri, storage_options=s3_seaweedfs.options).count_rows() == 4
