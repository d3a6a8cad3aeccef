"""Azure Blob Storage through adlfs, with ``If-None-Match: *`` creates.

``upload_blob(overwrite=False)`` sends ``If-None-Match: *`` (also on the final
Put Block List of a chunked upload); Azure answers 409 BlobAlreadyExists,
which adlfs raises as ``FileExistsError``. Blob listings are lexically
ordered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fsspec
from fsspec.asyn import sync

from airflow_lance.core.errors import UnsupportedFeatureError
from airflow_lance.core.storage import options as opts
from airflow_lance.core.storage.fsspec_store import FsspecStore
from airflow_lance.core.storage.s3 import FIRST_PAGE, NEXT_PAGE


class AzureStore(FsspecStore):
    """A dataset under ``az://container/prefix`` (or ``abfs[s]://container@account.../prefix``)."""

    conditional_put = True
    lexically_ordered = True

    def _validate(self) -> None:
        self._kwargs = opts.azure_kwargs(opts.resolve("azure", self._options))

    def _make_fs(self) -> tuple[fsspec.AbstractFileSystem, str]:
        try:
            import adlfs  # noqa: F401  (registers az://, abfs://)
        except ImportError:
            raise UnsupportedFeatureError("az:// needs adlfs: pip install 'airflow-lance[azure]'") from None
        return fsspec.core.url_to_fs(self._target, **self._kwargs)

    def _credential_hint(self) -> str:
        return "azure_storage_account_name with azure_storage_account_key or azure_storage_sas_key"

    def _backend_errors(self) -> tuple[type[BaseException], ...]:
        from azure.core.exceptions import AzureError

        return (OSError, ValueError, AzureError)

    def _create(self, abs_path: str, data: bytes) -> None:
        self.fs.pipe_file(abs_path, data, mode="create")

    def iter_sorted_names(self, prefix: str) -> Iterator[str]:
        container, _, key = self._abs(prefix.strip("/")).partition("/")
        base = f"{key}/"
        token: str | None = None
        size = FIRST_PAGE
        while True:
            names, token = self._call(prefix, sync, self.fs.loop, self._page, container, base, size, token)
            yield from (name[len(base):] for name in names)
            if not token:
                return
            size = NEXT_PAGE

    async def _page(self, container: str, base: str, size: int, token: str | None) -> tuple[list[str], str | None]:
        from azure.storage.blob.aio import BlobPrefix

        client = self.fs.service_client.get_container_client(container)
        pages: Any = client.walk_blobs(name_starts_with=base, delimiter="/", results_per_page=size).by_page(
            continuation_token=token
        )
        names: list[str] = []
        async for page in pages:
            async for item in page:
                if not isinstance(item, BlobPrefix):
                    names.append(item.name)
            return names, pages.continuation_token
        return names, None
