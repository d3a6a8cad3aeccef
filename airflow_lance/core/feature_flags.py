"""Reader and writer feature flags of a manifest (bitmaps in fields 9 and 10).

The format requires refusing to read a dataset whose reader flags contain a
bit we do not implement, and refusing to write when the writer flags do.
"""

from __future__ import annotations

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import UnsupportedFeatureError

DELETION_FILES = 1
STABLE_ROW_IDS = 2
USE_V2_FORMAT_DEPRECATED = 4
TABLE_CONFIG = 8
BASE_PATHS = 16
DISABLE_TRANSACTION_FILE = 32
COVERED_INDEX_METADATA = 128

_NAMES = {
    DELETION_FILES: "deletion files",
    STABLE_ROW_IDS: "stable row ids",
    USE_V2_FORMAT_DEPRECATED: "v2 format (deprecated flag)",
    TABLE_CONFIG: "table config",
    BASE_PATHS: "base paths",
    DISABLE_TRANSACTION_FILE: "inline-only transactions",
    COVERED_INDEX_METADATA: "covered index metadata",
}

READABLE = (DELETION_FILES | STABLE_ROW_IDS | USE_V2_FORMAT_DEPRECATED | TABLE_CONFIG | BASE_PATHS
            | COVERED_INDEX_METADATA)
WRITABLE = READABLE
# Flags we keep as found because they describe content we copy forward untouched.
_PRESERVED = USE_V2_FORMAT_DEPRECATED | COVERED_INDEX_METADATA


def _describe(bits: int) -> str:
    names = [_NAMES.get(1 << i, f"bit {1 << i}") for i in range(64) if bits >> i & 1]
    return ", ".join(names)


def check_readable(manifest: table_pb2.Manifest, uri: str) -> None:
    """Raise UnsupportedFeatureError if the version needs features we cannot read."""
    unknown = manifest.reader_feature_flags & ~READABLE
    if unknown:
        raise UnsupportedFeatureError(
            f"{uri} version {manifest.version} requires reader features not supported here: {_describe(unknown)}"
        )


def check_writable(manifest: table_pb2.Manifest, uri: str) -> None:
    """Raise UnsupportedFeatureError if committing on top of this version is unsafe for us."""
    unknown = manifest.writer_feature_flags & ~WRITABLE
    if unknown:
        raise UnsupportedFeatureError(
            f"{uri} version {manifest.version} uses writer features not supported here: {_describe(unknown)}; "
            "refusing to write"
        )


def apply_feature_flags(manifest: table_pb2.Manifest, previous_reader: int = 0, previous_writer: int = 0) -> None:
    """Recompute the flags from the manifest's contents, as Lance does on every commit."""
    reader = previous_reader & _PRESERVED
    writer = previous_writer & _PRESERVED
    if any(fragment.HasField("deletion_file") for fragment in manifest.fragments):
        reader |= DELETION_FILES
        writer |= DELETION_FILES
    if previous_reader & STABLE_ROW_IDS:
        reader |= STABLE_ROW_IDS
        writer |= STABLE_ROW_IDS
    if manifest.config:
        writer |= TABLE_CONFIG
    if manifest.base_paths:
        reader |= BASE_PATHS
        writer |= BASE_PATHS
    manifest.reader_feature_flags = reader
    manifest.writer_feature_flags = writer
