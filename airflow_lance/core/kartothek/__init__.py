"""Read Kartothek datasets and import them as Lance datasets (no kartothek dependency).

Kartothek (archived in 2021) stored Parquet datasets described by one metadata
file per dataset. This package reads that layout with pyarrow, msgpack and
zstandard:

* :func:`find_kartothek_datasets` lists the datasets of a storage location;
* :func:`open_kartothek_table` reads and validates one table (typed errors
  listing every problem);
* :func:`import_kartothek` writes it as a Lance dataset in one atomic,
  idempotent commit; :func:`plan_kartothek_import`,
  :func:`write_kartothek_partitions` and :func:`commit_kartothek_import` are
  its steps, for engines that write partitions in parallel;
* :func:`verify_kartothek_import` compares row counts and column checksums
  per partition value between source and target.
"""

from airflow_lance.core.kartothek.checksum import checksum, row_hashes
from airflow_lance.core.kartothek.errors import (
    KartothekDatasetNotFoundError,
    KartothekError,
    KartothekFileError,
    KartothekMetadataError,
    KartothekUnsupportedError,
    KartothekValidationError,
    KartothekVerificationError,
)
from airflow_lance.core.kartothek.importer import (
    KartothekImportPlan,
    KartothekImportResult,
    PartitionsWritten,
    commit_kartothek_import,
    import_kartothek,
    plan_kartothek_import,
    write_kartothek_partitions,
)
from airflow_lance.core.kartothek.metadata import (
    KartothekDatasetRef,
    KartothekMetadata,
    find_kartothek_datasets,
    read_kartothek_metadata,
)
from airflow_lance.core.kartothek.read import read_partition
from airflow_lance.core.kartothek.validate import (
    KartothekTable,
    PartitionSource,
    SecondaryIndexInfo,
    open_kartothek_table,
)
from airflow_lance.core.kartothek.verify import VerificationReport, verify_kartothek_import

__all__ = [
    "KartothekDatasetNotFoundError",
    "KartothekDatasetRef",
    "KartothekError",
    "KartothekFileError",
    "KartothekImportPlan",
    "KartothekImportResult",
    "KartothekMetadata",
    "KartothekMetadataError",
    "KartothekTable",
    "KartothekUnsupportedError",
    "KartothekValidationError",
    "KartothekVerificationError",
    "PartitionSource",
    "PartitionsWritten",
    "SecondaryIndexInfo",
    "VerificationReport",
    "checksum",
    "commit_kartothek_import",
    "find_kartothek_datasets",
    "import_kartothek",
    "open_kartothek_table",
    "plan_kartothek_import",
    "read_kartothek_metadata",
    "read_partition",
    "row_hashes",
    "verify_kartothek_import",
    "write_kartothek_partitions",
]
