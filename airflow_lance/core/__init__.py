"""The Lance table format in pure Python (pyarrow + protobuf + pyroaring + fsspec).

Public surface with pylance's names. This package never imports Airflow or Spark.
"""

from airflow_lance.core.dataset import LanceDataset, LanceFragment, dataset, write_dataset
from airflow_lance.core.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptFileError,
    DatasetAlreadyExistsError,
    DatasetNotFoundError,
    IncompatibleTransactionError,
    InvalidInputError,
    LanceError,
    SchemaMismatchError,
    StorageError,
    TagAlreadyExistsError,
    TagNotFoundError,
    UnsupportedFeatureError,
    VersionNotFoundError,
)
from airflow_lance.core.fragment import DataFile, DeletionFile, FragmentMetadata
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.tags import Tags
from airflow_lance.core.transaction import LanceOperation, Transaction
from airflow_lance.core.write import write_fragments

__all__ = [
    "CommitConflictError",
    "CommitStateUnknownError",
    "CorruptFileError",
    "DataFile",
    "DatasetAlreadyExistsError",
    "DatasetNotFoundError",
    "DeletionFile",
    "FragmentMetadata",
    "IncompatibleTransactionError",
    "InvalidInputError",
    "LanceDataset",
    "LanceError",
    "LanceFragment",
    "LanceOperation",
    "LanceSchema",
    "SchemaMismatchError",
    "StorageError",
    "TagAlreadyExistsError",
    "TagNotFoundError",
    "Tags",
    "Transaction",
    "UnsupportedFeatureError",
    "VersionNotFoundError",
    "dataset",
    "write_dataset",
    "write_fragments",
]
