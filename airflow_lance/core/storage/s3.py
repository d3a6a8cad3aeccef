"""S3 (and S3-compatible servers) through s3fs, with create-only writes.

A manifest is created with ``PutObject`` + ``If-None-Match: *``. Servers say
"already exists" in several ways, all mapped here (:func:`classify`):

* ``FileExistsError``: s3fs's mapping when the 412 body names the
  ``If-None-Match`` condition (AWS, moto, LocalStack);
* an ``OSError`` caused by a botocore ``PreconditionFailed`` / HTTP 412 without
  a ``Condition`` element (SeaweedFS, Ceph);
* AWS's ``409 ConditionalRequestConflict``: a concurrent conditional write to
  the same key was in flight. Nothing was written; the request is retried and
  then gets a definite 200 or 412.

Listing is lexically ordered (ListObjectsV2), so the latest V2 manifest is the
first entry of ``_versions/`` and one small page answers "which is latest".
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Iterator
from typing import Any

import fsspec

from airflow_lance.core.errors import InvalidInputError, StorageError, UnsupportedFeatureError
from airflow_lance.core.storage import options as opts
from airflow_lance.core.storage.fsspec_store import FsspecStore

#: Attempts of one create when the server keeps answering 409 ConditionalRequestConflict.
CONFLICT_ATTEMPTS = 6
#: Page sizes of ordered listings. The newest V2 manifest is normally the very first key of
#: ``_versions/``, and a listing's cost grows with its page (SeaweedFS: 1 key 4.7 ms, 32 keys 11 ms,
#: 1,000 keys 21 ms), so the first page holds one key; later pages, if needed, 1,000.
FIRST_PAGE, NEXT_PAGE = 1, 1000


class Outcome(enum.Enum):
    """What a failed conditional PutObject means."""

    EXISTS = "exists"  # the key exists (412): a commit conflict, unless the object is ours
    RETRY = "retry"  # 409 ConditionalRequestConflict: nothing written, try again
    ERROR = "error"  # anything else


def _client_error_info(exc: BaseException) -> tuple[str, int] | None:
    """(error code, HTTP status) of the botocore ClientError in ``exc``'s cause chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict) and "Error" in response:
            code = str(response.get("Error", {}).get("Code", ""))
            status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            return code, status
        current = current.__cause__ or current.__context__
    return None


def classify(exc: BaseException) -> Outcome:
    """Map an exception from a create-only PutObject to an :class:`Outcome`."""
    if isinstance(exc, FileExistsError):
        return Outcome.EXISTS
    info = _client_error_info(exc)
    if info is None:
        return Outcome.ERROR
    code, status = info
    if code == "ConditionalRequestConflict" or (status == 409 and "Conditional" in code):
        return Outcome.RETRY
    if code in ("PreconditionFailed", "412") or status == 412:
        return Outcome.EXISTS
    return Outcome.ERROR


def split_bucket(target: str) -> tuple[str, str]:
    """``s3://bucket/key/prefix`` -> (bucket, key/prefix)."""
    rest = target.split("://", 1)[-1]
    bucket, _, key = rest.partition("/")
    return bucket, key.strip("/")


class S3Store(FsspecStore):
    """A dataset under ``s3://bucket/prefix`` (s3fs)."""

    conditional_put = True
    lexically_ordered = True

    def _validate(self) -> None:
        resolved = opts.resolve("s3", self._options)
        self._kwargs = opts.s3_kwargs(resolved)
        self._bucket, self._prefix = split_bucket(self._target)
        if not self._bucket:
            raise InvalidInputError(f"{self.uri!r} names no bucket")
        if self._bucket.endswith("--x-s3") or resolved.flag("aws_s3_express"):
            # S3 Express One Zone lists in no particular order: use the hint file and probing, as Lance does.
            self.lexically_ordered = False
            self.writes_version_hint = True

    def _make_fs(self) -> tuple[fsspec.AbstractFileSystem, str]:
        try:
            import s3fs
        except ImportError:
            raise UnsupportedFeatureError("s3:// needs s3fs: pip install 'airflow-lance[s3]'") from None
        root = f"{self._bucket}/{self._prefix}" if self._prefix else self._bucket
        return s3fs.S3FileSystem(**self._kwargs), root

    def _backend_errors(self) -> tuple[type[BaseException], ...]:
        from botocore.exceptions import BotoCoreError, ClientError

        return (OSError, ValueError, BotoCoreError, ClientError)

    def _credential_hint(self) -> str:
        return "aws_access_key_id, aws_secret_access_key, aws_session_token"

    def _cause(self, exc: BaseException) -> str:
        info = _client_error_info(exc)  # S3's error code says more than s3fs's exception class
        return f"{info[0]}: {exc}" if info and info[0] else super()._cause(exc)

    def _key(self, path: str) -> str:
        return f"{self._prefix}/{path}" if self._prefix else path

    def _s3(self, path: str, method: str, **kwargs: Any) -> Any:
        return self._call(path, self.fs.call_s3, method, Bucket=self._bucket, **kwargs)

    # One request each: s3fs's cat_file() sends a HEAD before the GET, and its info() may add a
    # listing per miss.
    def read(self, path: str) -> bytes:
        return self._call(path, self.fs.cat_file, self._abs(path), max_concurrency=1)

    def size(self, path: str) -> int:
        return int(self._s3(path, "head_object", Key=self._key(path))["ContentLength"])

    def copy(self, source: str, target: str) -> None:
        self._s3(
            source, "copy_object", Key=self._key(target), CopySource={"Bucket": self._bucket, "Key": self._key(source)}
        )

    def _create(self, abs_path: str, data: bytes) -> None:
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                self.fs.pipe_file(abs_path, data, mode="create")
                return
            except Exception as exc:
                outcome = classify(exc)
                if outcome is Outcome.EXISTS:
                    raise FileExistsError(abs_path) from exc
                if outcome is Outcome.ERROR:
                    raise
                time.sleep(random.uniform(0, 0.02 * 2**attempt))
        raise StorageError(f"{abs_path}: kept getting 409 ConditionalRequestConflict; nothing was written")

    def iter_sorted_names(self, prefix: str) -> Iterator[str]:
        base = self._key(prefix.strip("/")) + "/"
        kwargs: dict[str, Any] = {"Prefix": base, "Delimiter": "/", "MaxKeys": FIRST_PAGE}
        while True:
            try:
                page = self._s3(prefix, "list_objects_v2", **kwargs)
            except FileNotFoundError as exc:  # a missing prefix lists empty: this is the bucket
                raise StorageError(f"{self.uri}: bucket {self._bucket!r} does not exist") from exc
            for item in page.get("Contents", []):
                yield item["Key"][len(base):]
            if not page.get("IsTruncated"):
                return
            kwargs.update(ContinuationToken=page["NextContinuationToken"], MaxKeys=NEXT_PAGE)

