"""Import one table of a Kartothek dataset as a Lance dataset, in one atomic commit.

The import is split so that engines can spread the work:

1. :func:`plan_kartothek_import` (driver): read and validate the source, check
   whether this very import already landed in the target, build the target
   schema and the transaction properties. Nothing is written.
2. :func:`write_kartothek_partitions` (anywhere, e.g. Spark executors): turn
   some partitions into Lance data files (one or more fragments each, cut at
   ``max_rows_per_file``); returns the uncommitted fragments and counts.
3. :func:`commit_kartothek_import` (driver): one ``Overwrite`` commit of all
   fragments, with an idempotency key derived from the source's state.

:func:`import_kartothek` runs the three in process. Re-running an import that
landed (same dataset state, table and ``partition_columns``) is a no-op that
returns the landed version. On a failure before the commit, the data files
written so far are deleted again (never after an unknown commit outcome).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from airflow_lance.core import layout
from airflow_lance.core.commit import commit_transaction
from airflow_lance.core.errors import (
    CommitStateUnknownError,
    DatasetAlreadyExistsError,
    InvalidInputError,
)
from airflow_lance.core.fragment import FragmentMetadata
from airflow_lance.core.history import DEFAULT_IDEMPOTENCY_LOOKBACK, find_landed_version
from airflow_lance.core.kartothek.metadata import open_source_store, read_raw_metadata
from airflow_lance.core.kartothek.read import DEFAULT_BATCH_ROWS, read_partition
from airflow_lance.core.kartothek.validate import KartothekTable, SecondaryIndexInfo, open_kartothek_table
from airflow_lance.core.kartothek.verify import VerificationReport, verify_kartothek_import
from airflow_lance.core.manifest import ManifestFile, latest_version
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage import ObjectStore, open_store
from airflow_lance.core.transaction import (
    LanceOperation,
    Transaction,
    build_properties,
)
from airflow_lance.core.write import MAX_BYTES_PER_FILE, MAX_ROWS_PER_FILE, write_data_files

log = logging.getLogger(__name__)

ImportMode = Literal["create", "overwrite"]
PartitionColumns = Literal["restore", "drop"]

#: Prefix of the keys this importer records in schema metadata and transaction properties.
PREFIX = "kartothek."
_STATS_KEY = PREFIX + "import_stats"


@dataclasses.dataclass(frozen=True)
class PartitionsWritten:
    """What writing some partitions produced (uncommitted)."""

    fragments: tuple[FragmentMetadata, ...]
    partitions: int
    empty_partitions: int
    rows: int
    bytes_written: int

    @staticmethod
    def combine(parts: Iterable[PartitionsWritten]) -> PartitionsWritten:
        parts = list(parts)
        return PartitionsWritten(
            fragments=tuple(f for p in parts for f in p.fragments),
            partitions=sum(p.partitions for p in parts),
            empty_partitions=sum(p.empty_partitions for p in parts),
            rows=sum(p.rows for p in parts),
            bytes_written=sum(p.bytes_written for p in parts),
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible (fragments in pylance's JSON form): hands results of engines back."""
        return {
            "fragments": [f.to_json() for f in self.fragments],
            "partitions": self.partitions,
            "empty_partitions": self.empty_partitions,
            "rows": self.rows,
            "bytes_written": self.bytes_written,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionsWritten:
        """Inverse of :meth:`to_json`; InvalidInputError when malformed."""
        try:
            fragments = data["fragments"]
            if not isinstance(fragments, list):
                raise TypeError("fragments is not a list")
            return cls(
                fragments=tuple(FragmentMetadata.from_json(f) for f in fragments),
                partitions=int(data["partitions"]),
                empty_partitions=int(data["empty_partitions"]),
                rows=int(data["rows"]),
                bytes_written=int(data["bytes_written"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"malformed partitions-written JSON: {exc!r}") from None


@dataclasses.dataclass(frozen=True)
class KartothekImportResult:
    """The outcome of an import (also of a re-run that found it already landed)."""

    dataset_uuid: str
    table: str
    source_uri: str
    target_uri: str
    #: The Lance version holding the import.
    version: int
    metadata_version: int
    partition_keys: tuple[str, ...]
    partition_columns: str
    partitions: int
    empty_partitions: int
    rows: int
    fragments: int
    bytes_written: int
    secondary_indices: tuple[SecondaryIndexInfo, ...]
    idempotency_key: str
    #: True when this call found the import already committed and wrote nothing.
    already_imported: bool = False
    verification: VerificationReport | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible (for XCom)."""
        result = dataclasses.asdict(self)
        result["partition_keys"] = list(self.partition_keys)
        result["secondary_indices"] = [index.to_dict() for index in self.secondary_indices]
        result["verification"] = self.verification.to_dict() if self.verification else None
        return result


@dataclasses.dataclass(frozen=True)
class KartothekImportPlan:
    """A validated import, ready to write and commit (picklable)."""

    source: KartothekTable
    target_uri: str
    target_storage_options: Mapping[str, str] | None
    mode: str
    partition_columns: str
    #: The Lance dataset's Arrow schema, with the source recorded in its metadata.
    schema: pa.Schema
    idempotency_key: str
    max_rows_per_file: int
    max_bytes_per_file: int

    @property
    def lance_schema(self) -> LanceSchema:
        return LanceSchema.from_arrow(self.schema)

    def open_target(self) -> ObjectStore:
        return open_store(self.target_uri, self.target_storage_options)


def idempotency_key(dataset_uuid: str, table: str, metadata_sha256: str, partition_columns: str) -> str:
    """The key of importing this state of the dataset's table (the metadata file's hash names the state)."""
    digest = hashlib.sha256(f"{dataset_uuid}\n{table}\n{metadata_sha256}\n{partition_columns}".encode()).hexdigest()
    return f"kartothek-import-{digest[:40]}"


def _find_landed(store: ObjectStore, key: str, lookback: int = DEFAULT_IDEMPOTENCY_LOOKBACK) -> (
        tuple[ManifestFile, Transaction] | None):
    """The version (among the latest ``lookback`` that cleanup left) committed with idempotency key ``key``."""
    found = find_landed_version(store, key, lookback=lookback)
    log.debug("%s", found.describe())
    if found.manifest is None or found.transaction is None:
        return None
    return found.manifest, found.transaction


def _source_properties(source: KartothekTable, partition_columns: str) -> dict[str, str]:
    meta = source.meta
    return {
        PREFIX + "source_uri": source.store_uri,
        PREFIX + "dataset_uuid": meta.dataset_uuid,
        PREFIX + "table": source.table,
        PREFIX + "metadata_version": str(meta.metadata_version),
        PREFIX + "metadata_format": meta.metadata_format,
        PREFIX + "metadata_sha256": meta.metadata_sha256,
        PREFIX + "creation_time": meta.creation_time or "",
        PREFIX + "partition_keys": json.dumps(list(source.partition_keys)),
        PREFIX + "partition_columns": partition_columns,
    }


def _target_schema(source: KartothekTable, partition_columns: str) -> pa.Schema:
    fields = [f for f in source.schema if partition_columns == "restore" or f.name not in source.partition_keys]
    metadata = dict(_source_properties(source, partition_columns))
    metadata[PREFIX + "metadata"] = json.dumps(source.meta.metadata, sort_keys=True, default=str)
    return pa.schema(fields, metadata={k: v.encode() for k, v in metadata.items()})


def _check_arguments(mode: str, partition_columns: str, max_rows_per_file: int) -> None:
    if mode not in ("create", "overwrite"):
        raise InvalidInputError(f"mode must be 'create' or 'overwrite', not {mode!r}")
    if partition_columns not in ("restore", "drop"):
        raise InvalidInputError(f"partition_columns must be 'restore' or 'drop', not {partition_columns!r}")
    if isinstance(max_rows_per_file, bool) or not isinstance(max_rows_per_file, int) or max_rows_per_file <= 0:
        raise InvalidInputError(f"max_rows_per_file must be a positive integer, not {max_rows_per_file!r}")


def _landed_result(
    landed: tuple[ManifestFile, Transaction], source_uri: str, target_uri: str, key: str
) -> KartothekImportResult:
    manifest, transaction = landed
    props = transaction.transaction_properties
    stats = json.loads(props.get(_STATS_KEY, "{}"))
    fragments = manifest.manifest.fragments
    return KartothekImportResult(
        dataset_uuid=props.get(PREFIX + "dataset_uuid", ""),
        table=props.get(PREFIX + "table", ""),
        source_uri=source_uri,
        target_uri=target_uri,
        version=manifest.version,
        metadata_version=int(props.get(PREFIX + "metadata_version", "0")),
        partition_keys=tuple(json.loads(props.get(PREFIX + "partition_keys", "[]"))),
        partition_columns=props.get(PREFIX + "partition_columns", ""),
        partitions=int(stats.get("partitions", 0)),
        empty_partitions=int(stats.get("empty_partitions", 0)),
        rows=sum(f.physical_rows for f in fragments),
        fragments=len(fragments),
        bytes_written=sum(d.file_size_bytes for f in fragments for d in f.files),
        secondary_indices=tuple(SecondaryIndexInfo(**index) for index in stats.get("secondary_indices", [])),
        idempotency_key=key,
        already_imported=True,
    )


def plan_kartothek_import(
    store_uri: str | os.PathLike[str],
    dataset_uuid: str,
    table: str = "table",
    target_uri: str | os.PathLike[str] | None = None,
    *,
    mode: ImportMode = "create",
    partition_columns: PartitionColumns = "restore",
    max_rows_per_file: int = MAX_ROWS_PER_FILE,
    max_bytes_per_file: int = MAX_BYTES_PER_FILE,
    storage_options: Mapping[str, str] | None = None,
    target_storage_options: Mapping[str, str] | None = None,
) -> KartothekImportPlan | KartothekImportResult:
    """Validate the source and the target; return the plan, or the result of the
    identical import that already landed (then there is nothing to do).

    Raises DatasetAlreadyExistsError for ``mode="create"`` when the target
    exists (and does not hold this import), UnsupportedFeatureError when
    commits to the target's store could not be atomic, and the Kartothek
    errors of :func:`open_kartothek_table`.
    """
    if target_uri is None:
        raise InvalidInputError("target_uri is required")
    _check_arguments(mode, partition_columns, max_rows_per_file)
    target_options = target_storage_options if target_storage_options is not None else storage_options
    source_store = open_source_store(store_uri, storage_options)
    _fmt, _path, raw = read_raw_metadata(source_store, dataset_uuid)
    state = hashlib.sha256(raw).hexdigest()
    key = idempotency_key(dataset_uuid, table, state, partition_columns)
    target_store = open_store(target_uri, target_options)
    landed = _find_landed(target_store, key)
    if landed is not None:
        log.info("Kartothek dataset %s table %s is already imported as version %d of %s",
                 dataset_uuid, table, landed[0].version, target_store.uri)
        return _landed_result(landed, os.fspath(store_uri), target_store.uri, key)
    target_store.ensure_committable()  # fail before writing anything when commits could not be atomic
    if mode == "create" and latest_version(target_store) is not None:
        raise DatasetAlreadyExistsError(
            f"dataset {target_store.uri} already exists (use mode='overwrite' to replace it)"
        )
    source = open_kartothek_table(store_uri, dataset_uuid, table, storage_options=storage_options)
    if source.meta.metadata_sha256 != state:  # changed since: import (and key) the state validated
        key = idempotency_key(dataset_uuid, table, source.meta.metadata_sha256, partition_columns)
    schema = _target_schema(source, partition_columns)
    LanceSchema.from_arrow(schema)  # fails early on what Lance cannot store (validation reported it already)
    return KartothekImportPlan(
        source=source,
        target_uri=target_store.uri,
        target_storage_options=dict(target_options) if target_options else None,
        mode=mode,
        partition_columns=partition_columns,
        schema=schema,
        idempotency_key=key,
        max_rows_per_file=max_rows_per_file,
        max_bytes_per_file=max_bytes_per_file,
    )


def delete_fragments(store: ObjectStore, fragments: Iterable[FragmentMetadata]) -> None:
    """Best-effort removal of the data files of uncommitted fragments."""
    for fragment in fragments:
        for data_file in fragment.files:
            with contextlib.suppress(Exception):
                store.delete(layout.data_file_path(data_file.path))


def _stop_on_failure(batches: Iterator[pa.RecordBatch], failure: list[BaseException]) -> Iterator[pa.RecordBatch]:
    """End the stream on a read failure (noted in ``failure``), so that the writer returns
    the fragments it completed and they can be deleted."""
    try:
        yield from batches
    except Exception as exc:  # noqa: BLE001 - re-raised by the caller
        failure.append(exc)


def write_kartothek_partitions(
    plan: KartothekImportPlan, labels: Sequence[str] | None = None, *, batch_rows: int = DEFAULT_BATCH_ROWS
) -> PartitionsWritten:
    """Write the partitions named by ``labels`` (all when None) as uncommitted fragments.

    On failure the data files written by this call are deleted again.
    """
    wanted = None if labels is None else set(labels)
    partitions = [p for p in plan.source.partitions if wanted is None or p.label in wanted]
    if wanted is not None and len(partitions) != len(wanted):
        unknown = sorted(wanted - {p.label for p in partitions})
        raise InvalidInputError(f"unknown partition labels: {unknown}")
    source_store = plan.source.open_store()
    target_store = plan.open_target()
    lance_schema = plan.lance_schema
    fragments: list[FragmentMetadata] = []
    rows = empty = 0
    batch_rows = max(1, min(batch_rows, plan.max_rows_per_file))
    try:
        for partition in partitions:
            failure: list[BaseException] = []
            written = write_data_files(
                target_store,
                _stop_on_failure(read_partition(source_store, partition, plan.schema, batch_rows=batch_rows),
                                 failure),
                lance_schema,
                max_rows_per_file=plan.max_rows_per_file,
                max_bytes_per_file=plan.max_bytes_per_file,
            )
            fragments.extend(written)
            if failure:
                raise failure[0]
            count = sum(f.physical_rows for f in written)
            rows += count
            empty += count == 0
    except BaseException:
        delete_fragments(target_store, fragments)
        raise
    return PartitionsWritten(
        fragments=tuple(fragments),
        partitions=len(partitions),
        empty_partitions=empty,
        rows=rows,
        bytes_written=sum(d.file_size_bytes or 0 for f in fragments for d in f.files),
    )


def commit_kartothek_import(plan: KartothekImportPlan, written: PartitionsWritten) -> KartothekImportResult:
    """Commit the written fragments as one Overwrite (creating the dataset for ``mode="create"``).

    Idempotent: if this import landed meanwhile, its version is returned and
    the fragments are deleted. Fragments are deleted on any failure whose
    outcome is known.
    """
    store = plan.open_target()
    source = plan.source
    stats = {
        "partitions": written.partitions,
        "empty_partitions": written.empty_partitions,
        "rows": written.rows,
        "secondary_indices": [index.to_dict() for index in source.indices],
    }
    properties = _source_properties(source, plan.partition_columns)
    properties[_STATS_KEY] = json.dumps(stats, sort_keys=True)
    found = latest_version(store)
    transaction = Transaction(
        read_version=found[0] if found else 0,
        operation=LanceOperation.Overwrite(plan.lance_schema, list(written.fragments)),
        transaction_properties=build_properties(
            f"import Kartothek dataset {source.dataset_uuid} table {source.table}", properties, plan.idempotency_key
        ),
    )
    try:
        manifest = commit_transaction(store, transaction, create_only=plan.mode == "create")
    except CommitStateUnknownError:
        raise
    except DatasetAlreadyExistsError:
        landed = _find_landed(store, plan.idempotency_key)
        delete_fragments(store, written.fragments)
        if landed is None:
            raise
        return _landed_result(landed, source.store_uri, store.uri, plan.idempotency_key)
    except BaseException:
        delete_fragments(store, written.fragments)
        raise
    landed_elsewhere = manifest.manifest.transaction_file != transaction.file_name
    if landed_elsewhere:  # the idempotent commit found an earlier landing of this import
        delete_fragments(store, written.fragments)
        landed = _find_landed(store, plan.idempotency_key)
        if landed is not None:
            return _landed_result(landed, source.store_uri, store.uri, plan.idempotency_key)
    fragments = manifest.manifest.fragments
    return KartothekImportResult(
        dataset_uuid=source.dataset_uuid,
        table=source.table,
        source_uri=source.store_uri,
        target_uri=store.uri,
        version=manifest.version,
        metadata_version=source.meta.metadata_version,
        partition_keys=source.partition_keys,
        partition_columns=plan.partition_columns,
        partitions=written.partitions,
        empty_partitions=written.empty_partitions,
        rows=written.rows,
        fragments=len(fragments),
        bytes_written=written.bytes_written,
        secondary_indices=source.indices,
        idempotency_key=plan.idempotency_key,
    )


def import_kartothek(
    store_uri: str | os.PathLike[str],
    dataset_uuid: str,
    table: str = "table",
    target_uri: str | os.PathLike[str] | None = None,
    *,
    mode: ImportMode = "create",
    partition_columns: PartitionColumns = "restore",
    max_rows_per_file: int = MAX_ROWS_PER_FILE,
    max_bytes_per_file: int = MAX_BYTES_PER_FILE,
    storage_options: Mapping[str, str] | None = None,
    target_storage_options: Mapping[str, str] | None = None,
    verify: bool = False,
) -> KartothekImportResult:
    """Import ``table`` of Kartothek dataset ``dataset_uuid`` (in the storage location
    ``store_uri``) as the Lance dataset ``target_uri``, in one atomic commit.

    * ``mode``: ``"create"`` (the target must not exist) or ``"overwrite"``
      (a new version replacing whatever the target holds).
    * ``partition_columns``: ``"restore"`` rebuilds the partition columns
      from the paths with the schema's types; ``"drop"`` leaves them out.
    * Each Kartothek partition becomes one or more fragments of at most
      ``max_rows_per_file`` rows; empty partitions produce none.
    * The source (store, uuid, table, metadata version and hash, creation
      time, partition keys, user metadata) is recorded in the Lance schema
      metadata and the transaction properties (keys ``kartothek.*``).
    * Idempotent: re-running an import of the same dataset state that landed
      (within the last 100 versions) writes nothing and returns it with
      ``already_imported=True``.
    * ``verify``: afterwards compare per partition value the row counts and
      column checksums of source and target; raise
      :class:`KartothekVerificationError` on a difference (the commit stays).

    ``storage_options`` apply to the source and, unless
    ``target_storage_options`` is given, to the target.
    """
    plan = plan_kartothek_import(
        store_uri,
        dataset_uuid,
        table,
        target_uri,
        mode=mode,
        partition_columns=partition_columns,
        max_rows_per_file=max_rows_per_file,
        max_bytes_per_file=max_bytes_per_file,
        storage_options=storage_options,
        target_storage_options=target_storage_options,
    )
    if isinstance(plan, KartothekImportResult):
        result = plan
    else:
        result = commit_kartothek_import(plan, write_kartothek_partitions(plan))
    if verify:
        report = verify_kartothek_import(
            store_uri,
            dataset_uuid,
            result.target_uri,
            table,
            version=result.version,
            storage_options=storage_options,
            target_storage_options=target_storage_options if target_storage_options is not None else storage_options,
        )
        result = dataclasses.replace(result, verification=report)
    return result
