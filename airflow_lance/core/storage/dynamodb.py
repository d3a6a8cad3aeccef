"""The DynamoDB external manifest store of ``s3+ddb://bucket/path?ddbTableName=T``.

Wire-compatible with pylance (Lance's ``DynamoDBExternalManifestStore``):

* table keys: HASH ``base_uri`` (S), RANGE ``version`` (N), checked once per
  process and table (DescribeTable);
* ``base_uri`` is the dataset path without scheme and bucket
  (``some/prefix/ds.lance``); ``path`` is likewise bucket-relative
  (``some/prefix/ds.lance/_versions/...manifest[-uuid]``); ``committer`` and
  ``size`` (N) complete the item;
* insert: ``attribute_not_exists(base_uri) AND attribute_not_exists(version)``;
  finalize: ``attribute_exists(base_uri) AND attribute_exists(version)``;
* reads are consistent; the latest row is a reverse Query with ``Limit 1``.

Uses botocore directly (already installed with s3fs), created lazily per
process, so the store pickles.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

from airflow_lance.core.errors import CommitStateUnknownError, InvalidInputError, StorageError
from airflow_lance.core.storage import options as opts
from airflow_lance.core.storage.external import ExternalManifestStore, ManifestEntry

COMMITTER = "lancedb"  # what pylance writes; nobody reads it
#: Attempts of the conditional insert when the outcome of the previous one is unknown.
PUT_ATTEMPTS = 4

#: Outcomes after which a PutItem may or may not have been applied (connection errors have no code).
_MAYBE_APPLIED = {"", "InternalServerError", "ServiceUnavailable", "InternalFailure"}

_CHECKED_TABLES: set[tuple[str | None, str]] = set()
_CHECK_LOCK = threading.Lock()


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


class DynamoDBManifestStore(ExternalManifestStore):
    """Rows of one dataset (``base_uri``) in a DynamoDB table."""

    def __init__(self, table: str, base_uri: str, options: Mapping[str, Any] | None = None) -> None:
        if not table:
            raise InvalidInputError("s3+ddb:// needs a non-empty ddbTableName")
        if not base_uri:
            raise InvalidInputError("s3+ddb:// datasets cannot live at the bucket root (DynamoDB keys are non-empty)")
        self.table = table
        self.base_uri = base_uri
        resolved = opts.resolve("s3", options)
        self._endpoint = resolved.get("dynamodb_endpoint") or os.environ.get("DYNAMODB_ENDPOINT") or None
        self._client_kwargs = {
            "region_name": resolved.get("aws_region"),
            "endpoint_url": self._endpoint,
            "aws_access_key_id": resolved.get("aws_access_key_id"),
            "aws_secret_access_key": resolved.get("aws_secret_access_key"),
            "aws_session_token": resolved.get("aws_session_token"),
        }
        self._secrets = opts.secret_values(options)
        self._client: Any = None
        self._pid = 0

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_pid": 0}

    def __repr__(self) -> str:
        return f"DynamoDBManifestStore(table={self.table!r}, base_uri={self.base_uri!r})"

    # -- client -----------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None or self._pid != os.getpid():
            import botocore.session
            from botocore.config import Config

            session = botocore.session.get_session()
            kwargs = {k: v for k, v in self._client_kwargs.items() if v}
            kwargs.setdefault("region_name", session.get_config_variable("region") or "us-east-1")
            config = Config(retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=32)
            self._client = session.create_client("dynamodb", config=config, **kwargs)
            self._pid = os.getpid()
            self._check_table()
        return self._client

    def _request(self, operation: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, operation)(TableName=self.table, **kwargs)
        except (BotoCoreError, ClientError) as exc:
            message = opts.redact(f"DynamoDB {operation} on table {self.table!r}: {exc}", self._secrets)
            error = StorageError(message)
            error.code = _error_code(exc)  # type: ignore[attr-defined]
            raise error from None

    def _check_table(self) -> None:
        key = (self._endpoint, self.table)
        with _CHECK_LOCK:
            if key in _CHECKED_TABLES:
                return
        try:
            table = self._request("describe_table")["Table"]
        except StorageError as exc:
            if getattr(exc, "code", "") == "ResourceNotFoundException":
                raise InvalidInputError(f"DynamoDB table {self.table!r} does not exist") from None
            raise
        schema = {(k["AttributeName"], k["KeyType"]) for k in table.get("KeySchema", [])}
        if schema != {("base_uri", "HASH"), ("version", "RANGE")}:
            raise InvalidInputError(
                f"DynamoDB table {self.table!r} must have HASH key 'base_uri' (S) and RANGE key 'version' (N)"
            )
        with _CHECK_LOCK:
            _CHECKED_TABLES.add(key)

    # -- rows ---------------------------------------------------------------------------
    def _full(self, path: str) -> str:
        return f"{self.base_uri}/{path}"

    def _entry(self, item: Mapping[str, Any]) -> ManifestEntry:
        try:
            version = int(item["version"]["N"])
            path = item["path"]["S"]
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"DynamoDB table {self.table!r}: malformed row for {self.base_uri!r}") from None
        prefix = self.base_uri + "/"
        if not path.startswith(prefix):
            raise StorageError(f"DynamoDB row {self.base_uri!r}@{version} points outside the dataset: {path!r}")
        size = item.get("size", {}).get("N")
        return ManifestEntry(version, path[len(prefix):], int(size) if size is not None else None)

    def _key(self, version: int) -> dict[str, Any]:
        return {"base_uri": {"S": self.base_uri}, "version": {"N": str(version)}}

    def get(self, version: int) -> ManifestEntry | None:
        item = self._request("get_item", Key=self._key(version), ConsistentRead=True).get("Item")
        return self._entry(item) if item else None

    def latest(self) -> ManifestEntry | None:
        items = self._request(
            "query",
            KeyConditionExpression="base_uri = :base_uri",
            ExpressionAttributeValues={":base_uri": {"S": self.base_uri}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        ).get("Items", [])
        return self._entry(items[0]) if items else None

    def _item(self, entry: ManifestEntry) -> dict[str, Any]:
        item = {**self._key(entry.version), "path": {"S": self._full(entry.path)}, "committer": {"S": COMMITTER}}
        if entry.size is not None:
            item["size"] = {"N": str(entry.size)}
        return item

    def put_if_not_exists(self, entry: ManifestEntry) -> bool:
        """Conditional insert. After a failure, a consistent read decides: a row with our staging
        path means our (retried) request landed; an unreadable outcome is retried, and if it stays
        unknown the commit state is unknown (the staging object must then stay)."""
        for attempt in range(PUT_ATTEMPTS):
            try:
                self._request(
                    "put_item",
                    Item=self._item(entry),
                    ConditionExpression="attribute_not_exists(base_uri) AND attribute_not_exists(version)",
                )
                return True
            except StorageError as exc:
                failure = exc
            try:
                existing = self.get(entry.version)
            except StorageError:
                existing, refused = None, False  # cannot tell yet
            else:
                if existing is not None:
                    return existing.path == entry.path
                refused = getattr(failure, "code", "") not in _MAYBE_APPLIED
            if refused:
                raise failure  # the service refused the request and nothing is there: nothing was written
            time.sleep(random.uniform(0, 0.05 * 2**attempt))
        raise CommitStateUnknownError(
            f"could not tell whether version {entry.version} of {self.base_uri!r} was committed "
            f"to DynamoDB table {self.table!r}"
        )

    def put_if_exists(self, entry: ManifestEntry) -> None:
        self._request(
            "put_item",
            Item=self._item(entry),
            ConditionExpression="attribute_exists(base_uri) AND attribute_exists(version)",
        )
