"""``LanceHook``: a ``lance`` connection turned into dataset handles of the Lance core.

The connection holds the dataset root and pylance ``storage_options``
(:mod:`airflow_lance.connection`); the hook resolves dataset names against the root,
opens ``LanceDataset`` handles, commits operations, lists versions and checks for new
versions. Credential values are registered with Airflow's secrets masker as soon as the
connection is read, and never logged.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseHook, mask_secret

import airflow_lance.core as lance
from airflow_lance.connection import (
    CONN_FIELDS,
    CONN_TYPE,
    DEFAULT_CONN_ID,
    HOOK_NAME,
    LanceConnectionConfig,
    LanceConnectionError,
    legacy_ui_field_behaviour,
    parse_connection,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Connection

#: Operations that rewrite or annotate a dataset without changing its rows.
NON_DATA_OPERATIONS = frozenset({"rewrite", "reserve_fragments", "update_config", "create_index"})
#: How many recent versions a retried task searches for its own landed commit (the core's default).
IDEMPOTENCY_LOOKBACK = lance.DEFAULT_IDEMPOTENCY_LOOKBACK


class LanceHook(BaseHook):
    """Access Lance datasets through a ``lance`` connection.

    :param lance_conn_id: the connection holding the dataset root and storage options;
        ``None`` means no connection (absolute URIs only, no storage options).
    """

    conn_name_attr = "lance_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = HOOK_NAME

    def __init__(self, lance_conn_id: str | None = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lance_conn_id = lance_conn_id
        self._config: LanceConnectionConfig | None = None

    # -- connection form (Airflow < 3.2 reads these; newer ones read provider info) --------
    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hidden, relabelled and placeholder fields of the connection form."""
        return legacy_ui_field_behaviour()

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The extra fields of the connection form, built from the declarative ``CONN_FIELDS``."""
        from flask_appbuilder.fieldwidgets import BS3PasswordFieldWidget, BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import BooleanField, PasswordField, StringField

        widgets: dict[str, Any] = {}
        for name, spec in CONN_FIELDS.items():
            schema, label = spec["schema"], lazy_gettext(spec["label"])
            if "boolean" in schema["type"]:
                widgets[name] = BooleanField(label, description=spec["description"], default=schema.get("default"))
            elif schema.get("format") == "password":
                widgets[name] = PasswordField(label, widget=BS3PasswordFieldWidget(), description=spec["description"])
            else:
                widgets[name] = StringField(label, widget=BS3TextFieldWidget(), description=spec["description"])
        return widgets

    # -- configuration ------------------------------------------------------------------
    @classmethod
    def from_connection(cls, conn: Connection | None) -> LanceHook:
        """A hook on an already fetched connection (triggers fetch it with ``aget_connection``)."""
        hook = cls(lance_conn_id=conn.conn_id if conn is not None else None)
        hook._config = cls._parse(conn)
        return hook

    @staticmethod
    def _parse(conn: Connection | None) -> LanceConnectionConfig:
        if conn is None:
            return LanceConnectionConfig(None, {})
        try:
            config = parse_connection(conn.host, conn.login, conn.password, conn.extra)
        except LanceConnectionError as exc:
            raise LanceConnectionError(f"connection {conn.conn_id!r}: {exc}") from None
        for secret in config.secret_values:
            mask_secret(secret)
        return config

    @property
    def config(self) -> LanceConnectionConfig:
        """The parsed connection (read once)."""
        if self._config is None:
            conn = self.get_connection(self.lance_conn_id) if self.lance_conn_id else None
            self._config = self._parse(conn)
        return self._config

    def get_conn(self) -> LanceConnectionConfig:
        """The dataset root and storage options of the connection."""
        return self.config

    @property
    def storage_options(self) -> dict[str, str]:
        """pylance storage options (a copy; contains credentials: never log it)."""
        return dict(self.config.storage_options)

    def resolve_uri(self, uri: str | os.PathLike[str]) -> str:
        """The full URI of a dataset given as a URI, a local path, an asset URI or a name below the root."""
        return self.config.resolve(os.fspath(uri))

    def check_writable(self, uri: str | os.PathLike[str]) -> str:
        """The full URI of ``uri`` once its store is known to commit atomically; writing operators
        call it before anything runs (a Spark job, a data file).

        Raises the core's ``UnsupportedFeatureError`` for stores without an atomic commit
        (``ftp://``, ``http(s)://``, ``hdfs://``, ..., unless storage option ``allow_unsafe_commit``)
        naming the scheme and the stores that work, and ``InvalidInputError`` for storage options
        the store cannot take (S3 credentials with an ``http://`` URI, a misspelt option). Decided
        from the URI and the options: no request is sent.
        """
        full = self.resolve_uri(uri)
        lance.ensure_committable(full, self.storage_options)
        return full

    # -- datasets -----------------------------------------------------------------------
    def get_dataset(self, uri: str, version: int | str | None = None) -> lance.LanceDataset:
        """Open ``uri`` at its latest version, a version number or a tag."""
        return lance.dataset(self.resolve_uri(uri), version, storage_options=self.storage_options)

    def dataset_or_none(self, uri: str) -> lance.LanceDataset | None:
        """The latest version of ``uri``, or None when no dataset exists there yet."""
        try:
            return self.get_dataset(uri)
        except lance.DatasetNotFoundError:
            return None

    def latest_version(self, uri: str) -> int | None:
        """The newest version number, or None when the dataset does not exist."""
        ds = self.dataset_or_none(uri)
        return ds.version if ds is not None else None

    def list_versions(self, uri: str) -> list[dict[str, Any]]:
        """Every version: ``version``, ``timestamp``, ``metadata`` (row and file counts)."""
        return self.get_dataset(uri).versions()

    def commit(
        self,
        uri: str,
        operation: lance.LanceOperation.BaseOperation,
        read_version: int | None,
        *,
        idempotency_key: str | None = None,
        transaction_properties: Mapping[str, str] | None = None,
        commit_message: str | None = None,
        create_only: bool = False,
    ) -> lance.LanceDataset:
        """Commit ``operation`` planned on ``read_version``; with ``idempotency_key``, a version
        already committed with that key is returned instead of committing again; with
        ``create_only``, the commit must create the dataset (``DatasetAlreadyExistsError``)."""
        return lance.LanceDataset.commit(
            self.resolve_uri(uri),
            operation,
            read_version,
            storage_options=self.storage_options,
            idempotency_key=idempotency_key,
            transaction_properties=transaction_properties,
            commit_message=commit_message,
            create_only=create_only,
        )

    def find_idempotent_commit(
        self, uri: str, idempotency_key: str, *, lookback: int = IDEMPOTENCY_LOOKBACK
    ) -> lance.LanceDataset | None:
        """The version committed with ``idempotency_key`` among the last ``lookback`` versions, if any.

        Versions removed by cleanup are skipped (the core's :func:`~airflow_lance.core.find_landed_version`,
        which the commit itself uses too); when the key is not found and cleanup removed versions
        of the window, a warning says that a commit with this key in one of them cannot be recognised.
        """
        ds = self.dataset_or_none(uri)
        if ds is None:
            return None
        found = lance.find_landed_version(ds.store, idempotency_key, lookback=lookback, latest_known=ds.manifest_file)
        if found.manifest is None:
            log = self.log.warning if found.cleaned_up else self.log.info
            log("%s: %s", ds.uri, found.describe())
            return None
        return ds if found.manifest.version == ds.version else lance.LanceDataset(ds.store, found.manifest)

    # -- new versions -------------------------------------------------------------------
    def check_version(
        self,
        uri: str,
        *,
        baseline_version: int | None,
        data_changes_only: bool = False,
        tag: str | None = None,
    ) -> dict[str, Any] | None:
        """Version info if the condition holds, else None.

        Without ``tag``: the dataset has a version newer than ``baseline_version`` (0 or
        None: any version), made by a data-changing operation when ``data_changes_only``
        (compaction's ``rewrite`` and other :data:`NON_DATA_OPERATIONS` do not count). A
        version number lower than the baseline means the dataset was recreated, which counts.
        With ``tag``: the tag exists and points at a version other than ``baseline_version``.
        """
        ds = self.dataset_or_none(uri)
        if ds is None:
            return None
        if tag is not None:
            try:
                version = ds.tags.get_version(tag)
            except lance.TagNotFoundError:
                return None
            if version == baseline_version:
                return None
            return self._version_info(ds.checkout_version(version), baseline_version, tag=tag)
        baseline = baseline_version or 0
        if ds.version == baseline:
            return None
        if ds.version < baseline:
            return self._version_info(ds, baseline_version, recreated=True)
        data_version = None
        if data_changes_only:
            data_version = self._newest_data_change(ds, baseline)
            if data_version is None:
                return None
        return self._version_info(ds, baseline_version, data_version=data_version)

    @staticmethod
    def _newest_data_change(ds: lance.LanceDataset, baseline: int) -> int | None:
        for version in range(ds.version, baseline, -1):
            try:
                txn = ds.read_transaction(version)
            except lance.VersionNotFoundError:  # cleaned up: assume it changed data
                return version
            if txn is None or txn.kind not in NON_DATA_OPERATIONS:
                return version
        return None

    @staticmethod
    def _version_info(
        ds: lance.LanceDataset,
        baseline_version: int | None,
        *,
        tag: str | None = None,
        recreated: bool = False,
        data_version: int | None = None,
    ) -> dict[str, Any]:
        txn = ds.read_transaction()
        info: dict[str, Any] = {
            "uri": ds.uri,
            "version": ds.version,
            "baseline_version": baseline_version,
            "operation": txn.kind if txn is not None else None,
            "timestamp": ds.timestamp.replace(tzinfo=dt.UTC).isoformat(),
        }
        if tag is not None:
            info["tag"] = tag
        if recreated:
            info["recreated"] = True
        if data_version is not None:
            info["data_version"] = data_version
        if not recreated and baseline_version is not None and baseline_version <= ds.version:
            info.update(LanceHook._change_counts(ds, baseline_version))
        return info

    @staticmethod
    def _change_counts(ds: lance.LanceDataset, baseline_version: int) -> dict[str, Any]:
        """``version_range`` and the rows inserted, updated and deleted since the baseline
        (``airflow_lance.core.changes``); ``changes_error`` instead when they cannot be known
        (versions in between cleaned up)."""
        info: dict[str, Any] = {"version_range": [baseline_version, ds.version]}
        try:
            changes = lance.changes_between(ds, baseline_version)
        except (lance.VersionNotFoundError, lance.CorruptFileError) as exc:
            info["changes_error"] = f"{type(exc).__name__}: {exc}"
            return info
        info.update(rows_inserted=changes.inserted, rows_updated=changes.updated, rows_deleted=changes.deleted)
        return info

    # -- connection test ----------------------------------------------------------------
    def test_connection(self) -> tuple[bool, str]:
        """Check that the dataset root is reachable with the connection's credentials."""
        try:
            root = self.config.root
        except ValueError as exc:
            return False, str(exc)
        if root is None:
            return False, "the connection has no dataset root (host)"
        if root.startswith("file://") or "://" not in root:
            path = root.removeprefix("file://")
            if not os.path.isdir(path):
                return False, f"dataset root {root} is not a directory"
        try:
            ds = lance.dataset(root, storage_options=self.storage_options)
        except lance.DatasetNotFoundError:
            return True, f"connected to {root}"
        except (lance.LanceError, OSError) as exc:
            return False, f"cannot reach {root}: {type(exc).__name__}: {exc}"
        return True, f"connected to {root} (a Lance dataset at version {ds.version})"
