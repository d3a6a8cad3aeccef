"""Every on-disk name of a Lance dataset, and the rules that build and parse them.

No other module spells these directory names or file-name patterns.
"""

from __future__ import annotations

import enum
import re
import secrets
import uuid as uuid_lib

#: ``writer_version.library`` of the manifests we write.
WRITER_LIBRARY = "airflow-lance"
DATA_DIR = "data"
#: pylance 14 keeps a data file's packed and dedicated blob v2 payloads in ``data/{stem}/{id}.blob``.
BLOB_SIDECAR_SUFFIX = ".blob"
VERSIONS_DIR = "_versions"
TRANSACTIONS_DIR = "_transactions"
DELETIONS_DIR = "_deletions"
INDICES_DIR = "_indices"
TAGS_DIR = "_refs/tags"
BRANCHES_DIR = "_refs/branches"
#: Scratch space of distributed (Spark) jobs, e.g. staged job results: ``_airflow_staging/...``.
#: Nothing in it is ever referenced by a manifest; cleanup reclaims it after the unverified-file
#: grace period (7 days, or ``delete_unverified``), like any other unreferenced file.
STAGING_DIR = "_airflow_staging"
#: Temporary files start with this: pylance's ``.tmpXXXXXX`` and our stores' ``.tmp-{name}-{uuid}``.
TEMP_FILE_PREFIX = ".tmp"
LATEST_VERSION_HINT = f"{VERSIONS_DIR}/latest_version_hint.json"

_U64_MAX = (1 << 64) - 1
_V2_NAME_LENGTH = 29  # 20 digits + ".manifest"
_DETACHED_BIT = 1 << 63


class ManifestNamingScheme(enum.Enum):
    """How manifest files are named in ``_versions/``.

    V1: ``{version}.manifest``. V2: ``{u64::MAX - version:020d}.manifest`` so
    that a lexical listing returns the newest version first.
    """

    V1 = "v1"
    V2 = "v2"


def manifest_path(version: int, scheme: ManifestNamingScheme) -> str:
    """Path of the manifest of ``version`` relative to the dataset root."""
    if scheme is ManifestNamingScheme.V2:
        return f"{VERSIONS_DIR}/{_U64_MAX - version:020d}.manifest"
    return f"{VERSIONS_DIR}/{version}.manifest"


def parse_manifest_name(name: str) -> tuple[int, ManifestNamingScheme] | None:
    """Return (version, scheme) for a committed manifest file name, else None.

    Staging names (``...manifest-{uuid}``), temporary files, detached versions
    (``d...``) and the hint file are not committed manifests.
    """
    if not name.endswith(".manifest") or name.startswith((".", "d")):
        return None
    stem = name[: -len(".manifest")]
    if not stem.isdigit():
        return None
    if len(name) == _V2_NAME_LENGTH:
        version = _U64_MAX - int(stem)
        if version & _DETACHED_BIT:
            return None
        return version, ManifestNamingScheme.V2
    return int(stem), ManifestNamingScheme.V1


def new_data_file_name() -> str:
    """A unique data file name in Lance's style: 24 bits as binary digits + 26 hex chars."""
    raw = uuid_lib.uuid4().bytes
    prefix = "".join(f"{byte:08b}" for byte in raw[:3])
    return f"{prefix}{raw[3:].hex()}.lance"


def data_file_path(name: str) -> str:
    """Path of a data file (``DataFile.path`` is relative to ``data/``)."""
    return f"{DATA_DIR}/{name}"


def transaction_file_name(read_version: int, transaction_uuid: str) -> str:
    """Transaction file name, as stored in ``Manifest.transaction_file``."""
    return f"{read_version}-{transaction_uuid}.txn"


def transaction_file_path(name: str) -> str:
    return f"{TRANSACTIONS_DIR}/{name}"


DELETION_SUFFIXES = {0: "arrow", 1: "bin"}


def deletion_file_path(fragment_id: int, read_version: int, file_id: int, file_type: int) -> str:
    """Path of a deletion file; ``file_type`` 0 = Arrow IPC, 1 = roaring bitmap."""
    return f"{DELETIONS_DIR}/{fragment_id}-{read_version}-{file_id}.{DELETION_SUFFIXES[file_type]}"


def new_deletion_file_id() -> int:
    """A random non-zero u64 id for a deletion file."""
    return secrets.randbits(64) or 1


_TAG_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def is_valid_tag_name(name: str) -> bool:
    """Tag names: letters, digits, ``_``, ``-``, ``.``; not starting with ``.``/``-``; no ``..``."""
    return bool(_TAG_NAME.match(name)) and ".." not in name and not name.endswith(".lock")


def tag_path(name: str) -> str:
    return f"{TAGS_DIR}/{name}.json"


def index_dir(index_uuid: str) -> str:
    return f"{INDICES_DIR}/{index_uuid}"


def staging_dir(job_id: str) -> str:
    """Scratch directory of one distributed write job (see :data:`STAGING_DIR`)."""
    return f"{STAGING_DIR}/{job_id}"


def is_temp_file_name(name: str) -> bool:
    """Whether a file name (no directory) is a writer's temporary file."""
    return name.startswith(TEMP_FILE_PREFIX)
