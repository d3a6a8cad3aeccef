"""Errors of the Kartothek reader and importer (all are :class:`LanceError`\\ s).

Each error that is about several problems carries them in ``problems`` (a list
of one-line descriptions) and names them in its message.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_lance.core.errors import CorruptFileError, LanceError, UnsupportedFeatureError

#: How many problems an error message spells out (``problems`` always holds all of them).
MESSAGE_PROBLEMS = 20


def _listing(problems: Sequence[str]) -> str:
    shown = [f"  - {p}" for p in problems[:MESSAGE_PROBLEMS]]
    if len(problems) > MESSAGE_PROBLEMS:
        shown.append(f"  ... and {len(problems) - MESSAGE_PROBLEMS} more")
    return "\n".join(shown)


class KartothekError(LanceError):
    """Base class of the Kartothek reader's errors."""


class KartothekDatasetNotFoundError(KartothekError, FileNotFoundError):
    """No ``<uuid>.by-dataset-metadata.{json,msgpack.zstd}`` exists in the store location."""

    def __init__(self, dataset_uuid: str, store_uri: str, tried: Sequence[str]) -> None:
        super().__init__(
            f"Kartothek dataset {dataset_uuid!r} not found in {store_uri!r} (tried {', '.join(tried)})"
        )
        self.dataset_uuid = dataset_uuid
        self.store_uri = store_uri
        self.tried = list(tried)


class KartothekMetadataError(KartothekError, CorruptFileError):
    """The dataset metadata file is malformed: undecodable, or not shaped as the specification says."""

    def __init__(self, path: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        CorruptFileError.__init__(self, path, "malformed Kartothek metadata:\n" + _listing(self.problems))


class KartothekFileError(KartothekError, CorruptFileError):
    """A file of the dataset (payload Parquet, ``_common_metadata``, index) cannot be read."""


class KartothekValidationError(KartothekError, ValueError):
    """The dataset breaks the specification: missing files, bad names, inconsistent partitions or types."""

    def __init__(self, dataset_uuid: str, problems: Sequence[str]) -> None:
        self.dataset_uuid = dataset_uuid
        self.problems = list(problems)
        super().__init__(
            f"Kartothek dataset {dataset_uuid!r} is not valid ({len(self.problems)} problem"
            f"{'s' if len(self.problems) != 1 else ''}):\n{_listing(self.problems)}"
        )


class KartothekUnsupportedError(KartothekError, UnsupportedFeatureError):
    """The dataset uses something this reader does not read (metadata version, file format)."""


class KartothekVerificationError(KartothekError):
    """Verification found differences between the Kartothek source and the Lance dataset."""

    def __init__(self, message: str, differences: Sequence[str]) -> None:
        self.differences = list(differences)
        super().__init__(f"{message} ({len(self.differences)} difference"
                         f"{'s' if len(self.differences) != 1 else ''}):\n{_listing(self.differences)}")
