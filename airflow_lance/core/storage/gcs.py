"""Google Cloud Storage through gcsfs, with ``ifGenerationMatch=0`` creates.

A manifest is created in ONE request (a multipart "simple" upload) carrying
``ifGenerationMatch=0``; GCS answers 412 if the object exists, which gcsfs
raises as ``FileExistsError``. Resumable uploads are avoided on purpose:
fake-gcs-server ignores the precondition on them (real GCS honours it on the
initiating request), so tests could not prove them safe.

We use gcsfs's classic ``gcsfs.core.GCSFileSystem`` (JSON API) rather than the
2026 ``ExtendedGcsFileSystem``, which probes the bucket type over gRPC first
(60 s against emulators).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fsspec

from airflow_lance.core.errors import InvalidInputError, UnsupportedFeatureError
from airflow_lance.core.storage import options as opts
from airflow_lance.core.storage.fsspec_store import FsspecStore
from airflow_lance.core.storage.s3 import FIRST_PAGE, NEXT_PAGE, split_bucket

#: gcsfs switches to a resumable upload at this size; manifests stay below it by passing a larger chunk size.
_GCSFS_CHUNK = 50 * 2**20


class GcsStore(FsspecStore):
    """A dataset under ``gs://bucket/prefix``."""

    conditional_put = True
    lexically_ordered = True

    def _validate(self) -> None:
        self._kwargs = opts.gcs_kwargs(opts.resolve("gcs", self._options))
        self._bucket, self._prefix = split_bucket(self._target)
        if not self._bucket:
            raise InvalidInputError(f"{self.uri!r} names no bucket")

    def _make_fs(self) -> tuple[fsspec.AbstractFileSystem, str]:
        try:
            from gcsfs.core import GCSFileSystem
        except ImportError:
            raise UnsupportedFeatureError("gs:// needs gcsfs: pip install 'airflow-lance[gcs]'") from None
        root = f"{self._bucket}/{self._prefix}" if self._prefix else self._bucket
        return GCSFileSystem(**self._kwargs), root

    def _credential_hint(self) -> str:
        return "google_service_account, google_service_account_key or google_storage_token"

    def _backend_errors(self) -> tuple[type[BaseException], ...]:
        from gcsfs.retry import HttpError
        from google.auth.exceptions import GoogleAuthError

        return (OSError, ValueError, HttpError, GoogleAuthError)

    def _create(self, abs_path: str, data: bytes) -> None:
        self.fs.pipe_file(abs_path, data, mode="create", chunksize=max(_GCSFS_CHUNK, len(data) + 1))

    def iter_sorted_names(self, prefix: str) -> Iterator[str]:
        base = f"{self._prefix}/{prefix.strip('/')}/" if self._prefix else f"{prefix.strip('/')}/"
        kwargs: dict[str, Any] = {"prefix": base, "delimiter": "/", "maxResults": FIRST_PAGE}
        while True:
            page = self._call(prefix, self.fs.call, "GET", "b/{}/o", self._bucket, json_out=True, **kwargs)
            for item in page.get("items", []):
                yield item["name"][len(base):]
            token = page.get("nextPageToken")
            if not token:
                return
            kwargs.update(pageToken=token, maxResults=NEXT_PAGE)
