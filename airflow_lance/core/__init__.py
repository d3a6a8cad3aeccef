"""The Lance table format in pure Python (pyarrow + protobuf + pyroaring + fsspec).

Public surface with pylance's names. This package never imports Airflow or Spark.
"""

from airflow_lance.core.changes import Changes, changes_between
from airflow_lance.core.cleanup import CleanupStats, TaggedVersionsError, cleanup_old_versions
from airflow_lance.core.column_files import AddColumnsPlan
from airflow_lance.core.dataset import LanceDataset, LanceFragment, dataset, write_dataset
from airflow_lance.core.errors import (
    AmbiguousMergeInsertError,
    ColumnNotFoundError,
    CommitConflictError,
    CommitStateUnknownError,
    CorruptFileError,
    DataFileNotFoundError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    IncompatibleTransactionError,
    IndexExistsError,
    IndexNotFoundError,
    IndexParamsError,
    InvalidInputError,
    InvalidTypeError,
    InvalidTransformError,
    LanceError,
    SchemaEvolutionError,
    SchemaMismatchError,
    StorageError,
    StoragePermissionError,
    TagAlreadyExistsError,
    TagNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from airflow_lance.core.evolution import BatchUDF, BatchUDFCheckpoint, batch_udf
from airflow_lance.core.fragment import DataFile, DeletionFile, FragmentMetadata
from airflow_lance.core.history import DEFAULT_IDEMPOTENCY_LOOKBACK, LandedSearch, find_landed_version
from airflow_lance.core.indices import unindexed_rows
from airflow_lance.core.indices.plan import (
    CheckedIndex,
    build_index_uncommitted,
    builds_empty_index,
    check_index,
    decode_index,
    encode_index,
    index_uuid,
    missing_index_files,
)
from airflow_lance.core.kartothek import (
    KartothekError,
    KartothekImportPlan,
    KartothekImportResult,
    PartitionsWritten,
    commit_kartothek_import,
    find_kartothek_datasets,
    import_kartothek,
    open_kartothek_table,
    plan_kartothek_import,
    verify_kartothek_import,
    write_kartothek_partitions,
)
from airflow_lance.core.optimize import (
    Compaction,
    CompactionMetrics,
    CompactionOptions,
    CompactionPlan,
    CompactionTask,
    RewriteResult,
    compact_files,
)
from airflow_lance.core.merge_insert import MergeInsertBuilder
from airflow_lance.core.delete import delete_uncommitted
from airflow_lance.core.update import update_uncommitted
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.storage.factory import ensure_committable
from airflow_lance.core.tags import Tags
from airflow_lance.core.transaction import IDEMPOTENCY_KEY, LanceOperation, Transaction
from airflow_lance.core.write import write_fragments

__all__ = [
    "unindexed_rows",
    "CheckedIndex",
    "build_index_uncommitted",
    "builds_empty_index",
    "check_index",
    "decode_index",
    "encode_index",
    "index_uuid",
    "missing_index_files",
    "AddColumnsPlan",
    "AmbiguousMergeInsertError",
    "BatchUDF",
    "BatchUDFCheckpoint",
    "Changes",
    "CleanupStats",
    "ColumnNotFoundError",
    "CommitConflictError",
    "CommitStateUnknownError",
    "Compaction",
    "CompactionMetrics",
    "CompactionOptions",
    "CompactionPlan",
    "CompactionTask",
    "CorruptFileError",
    "DEFAULT_IDEMPOTENCY_LOOKBACK",
    "DataFileNotFoundError",
    "DataFile",
    "DatasetAlreadyExistsError",
    "DatasetNotFoundError",
    "DeletionFile",
    "FragmentMetadata",
    "IDEMPOTENCY_KEY",
    "IncompatibleTransactionError",
    "IndexExistsError",
    "IndexNotFoundError",
    "IndexParamsError",
    "InvalidInputError",
    "InvalidTypeError",
    "InvalidTransformError",
    "KartothekError",
    "KartothekImportPlan",
    "KartothekImportResult",
    "LandedSearch",
    "LanceDataset",
    "LanceError",
    "LanceFragment",
    "LanceOperation",
    "LanceSchema",
    "MergeInsertBuilder",
    "PartitionsWritten",
    "RewriteResult",
    "SchemaEvolutionError",
    "SchemaMismatchError",
    "StorageError",
    "StoragePermissionError",
    "TagAlreadyExistsError",
    "TagNotFoundError",
    "TaggedVersionsError",
    "Tags",
    "Transaction",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
    "batch_udf",
    "changes_between",
    "cleanup_old_versions",
    "commit_kartothek_import",
    "compact_files",
    "dataset",
    "ensure_committable",
    "find_kartothek_datasets",
    "find_landed_version",
    "import_kartothek",
    "open_kartothek_table",
    "plan_kartothek_import",
    "verify_kartothek_import",
    "write_dataset",
    "write_fragments",
    "delete_uncommitted",
    "update_uncommitted",
    "write_kartothek_partitions",
]
